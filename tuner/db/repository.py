"""Reading and writing tuner's tables. Every method is one short transaction.

The repository speaks domain types and frozen rows (:mod:`tuner.db.rows`); ORM objects never
leave it. Database errors come out as :class:`StorageError` (see
:func:`tuner.db.session.session_scope`); naming a study that does not exist, or creating one
that does, is a :class:`UsageError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, delete, func, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from tuner.db import codec
from tuner.db.convert import (
    apply_result,
    frozen_row,
    reset_trial,
    storable_text,
    study_row,
    trial_row,
)
from tuner.db.models import ComparisonModel, LaunchModel, StudyModel, TrialModel, TrialRequestsModel
from tuner.db.rows import (
    FREE,
    RUN_FAILURE,
    ComparisonRow,
    LaunchRow,
    StudyRow,
    StudyStatus,
    TrialPhase,
    TrialRow,
    budget_free,
)
from tuner.db.session import session_scope, sqlite_file, storage_error
from tuner.domain import (
    FailureClass,
    Provenance,
    RequestRecord,
    ServingConfig,
    TrialResult,
    TrialStatus,
)
from tuner.errors import StorageError, UsageError

_NAME_MAX = 255
# The key, in a study's stored spec, of the queue worker that runs it (host, pid and start:
# tuner.study.sharing.worker_identity); StudySpec.from_dict ignores it, as it does plan_record.
QUEUE_WORKER = "queue_worker"
# The process that runs a study now (any, the command line's included), by the spec key: a
# resume on its host refuses while it lives. Unlike QUEUE_WORKER, never taken over.
RUN_OWNER = "run_owner"
_PLAN = "plan_record"  # the key, in a study's stored spec, of its lever plan
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}  # where a URL names none
_NUL = "\x00"  # PostgreSQL's text type cannot hold it: refused in names, replaced in free text


class Repository:
    """tuner's tables in the database behind ``engine`` (migrated to head by the caller)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def database(self) -> str:
        """Which database this is, one name whatever the URL's spelling: a SQLite file's
        absolute path; else backend://user@host:port/database (no driver, password or query;
        the host in lower case, the backend's default port where none is given)."""
        url = self._engine.url
        path = sqlite_file(url)
        if path is not None:
            return str(path.resolve())
        backend = url.get_backend_name()
        port = url.port or _DEFAULT_PORTS.get(backend)
        host = (url.host or "").lower() + (f":{port}" if port else "")
        user = f"{url.username}@" if url.username else ""
        return f"{backend}://{user}{host}/{url.database or ''}"

    # -- studies -------------------------------------------------------------------------

    def create_study(
        self,
        name: str,
        optuna_study_name: str,
        model: str,
        model_source: str | None,
        gpu: str,
        workload: str,
        objective: str,
        slo: Mapping[str, Any],
        spec: Mapping[str, Any],
        emulated: bool,
        vllm_version: str | None,
        n_trials_requested: int | None,
        *,
        notes: str = "",
        status: StudyStatus | str = StudyStatus.QUEUED,
    ) -> StudyRow:
        """Record a new study. Raises UsageError when ``name`` is empty, too long, holds a NUL
        character or is taken."""
        if not name.strip() or len(name) > _NAME_MAX or _NUL in name:
            raise UsageError(
                f"study name {name!r} must be 1 to {_NAME_MAX} characters, none of them NUL",
                hint="pass another --study name",
            )
        now = time.time()
        row = StudyModel(
            name=name,
            optuna_study_name=optuna_study_name,
            created_at=now,
            updated_at=now,
            status=StudyStatus(status).value,
            model=model,
            model_source=model_source,
            gpu=gpu,
            workload=workload,
            objective=objective,
            slo=codec.encode(slo),
            spec=codec.encode(spec),
            emulated=emulated,
            vllm_version=vllm_version,
            notes=storable_text(notes),
            n_trials_requested=n_trials_requested,
        )
        with session_scope(self._engine) as s:
            if s.scalar(select(StudyModel.id).where(StudyModel.name == name)) is not None:
                raise _name_taken(name)
            s.add(row)
            try:
                s.flush()
            except sa_exc.IntegrityError as e:  # another process took the name just now
                raise _name_taken(name) from e
            return study_row(row, {})

    def get_study(self, name: str) -> StudyRow | None:
        if _NUL in name:
            return None  # never created; and PostgreSQL refuses NUL even in a query
        with session_scope(self._engine) as s:
            row = s.scalar(select(StudyModel).where(StudyModel.name == name))
            return None if row is None else _counted(s, [row])[0]

    def list_studies(self) -> list[StudyRow]:
        """All studies, newest first, each with its trial counts by status."""
        with session_scope(self._engine) as s:
            rows = s.scalars(
                select(StudyModel).order_by(StudyModel.created_at.desc(), StudyModel.id.desc())
            ).all()
            return _counted(s, rows)

    def change_marker(self) -> tuple[int, int | None, float | None, float | None]:
        """A cheap value that changes whenever a study or one of its trials is written
        (every such write moves the study's ``updated_at``): (studies, highest id, latest and
        summed ``updated_at``). The sum catches a study touched with a clock behind the
        latest one. For read caches, such as the API's."""
        query = select(
            func.count(StudyModel.id),
            func.max(StudyModel.id),
            func.max(StudyModel.updated_at),
            func.sum(StudyModel.updated_at),
        )
        # A plain connection, not a session: a quarter of the cost, and this runs per request.
        try:
            with self._engine.connect() as connection:
                n, top, latest, total = connection.execute(query).one()
        except sa_exc.SQLAlchemyError as e:
            raise storage_error(e, self._engine.url) from e
        return int(n), top, latest, total

    def set_study_status(self, name: str, status: StudyStatus | str) -> None:
        self._update_study(name, status=StudyStatus(status).value)

    def set_study_failed(self, name: str, message: str, hint: str = "") -> None:
        """Mark the study failed and store why with it (:data:`RUN_FAILURE` in its spec, what
        :attr:`StudyRow.failure` reads back), in one transaction."""
        failure = {"message": storable_text(message), "hint": storable_text(hint)}
        self._update_study(
            name, {RUN_FAILURE: failure}, into_empty=True, status=StudyStatus.FAILED.value
        )

    def set_trials_requested(self, name: str, n_trials: int) -> None:
        """Record the trial count a resumed study now runs to (``--resume --trials N``), in its
        row and in the spec stored with it (what the next resume continues)."""
        self._update_study(name, {"trials": n_trials}, n_trials_requested=n_trials)

    def set_study_plan(self, name: str, plan: Mapping[str, Any]) -> None:
        """Store the lever plan (:mod:`tuner.study.plan`) with the study, in its spec's
        ``plan_record`` (what a resume or another worker continues; the spec's own fields are
        untouched). Through the codec: an effect is infinite where a leave-one-out trial
        failed, and PostgreSQL's JSON refuses ``Infinity``; :meth:`study_plan` reads it back."""
        self._update_study(name, {_PLAN: codec.encode(dict(plan))}, into_empty=True)

    def study_plan(self, name: str) -> dict[str, Any] | None:
        """The plan record stored with study ``name``, its numbers as they were given to
        :meth:`set_study_plan` (None: none yet, or not a planned study)."""
        row = self.get_study(name)
        record = (row.spec or {}).get(_PLAN) if row is not None else None
        return plan_back(record) if isinstance(record, dict) else None

    def _update_study(
        self,
        name: str,
        spec_changes: Mapping[str, Any] | None = None,
        *,
        into_empty: bool = False,
        **values: Any,
    ) -> None:
        """Set ``values``' columns and merge ``spec_changes`` into the study's stored spec (an
        empty spec stays empty unless ``into_empty``), in one transaction."""
        with session_scope(self._engine) as s:
            study_id = _study_id(s, name)
            if spec_changes:
                spec = _locked_spec(s, StudyModel.id == study_id) or {}
                values["spec"] = {**spec, **spec_changes} if spec or into_empty else spec
            s.execute(
                update(StudyModel)
                .where(StudyModel.id == study_id)
                .values(**values, updated_at=time.time())
            )

    def claim_queued_study(self, worker: Mapping[str, Any] | None = None) -> StudyRow | None:
        """Atomically take the oldest queued study for this worker (status -> running; its
        spec's :data:`QUEUE_WORKER` record -> ``worker``).

        A compare-and-set on the status, so two workers sharing the database (PostgreSQL, or
        SQLite on one host) never take the same study. None when nothing is queued.
        """
        queued = StudyModel.status == StudyStatus.QUEUED.value
        while True:
            with session_scope(self._engine) as s:
                study_id = s.scalar(
                    select(StudyModel.id)
                    .where(queued)
                    .order_by(StudyModel.created_at, StudyModel.id)
                    .limit(1)
                )
                if study_id is None:
                    return None
                # {}: another worker took it meanwhile, and the update below matches nothing
                spec = _locked_spec(s, StudyModel.id == study_id, queued) or {}
                taken = s.execute(
                    update(StudyModel)
                    .where(StudyModel.id == study_id, queued)
                    .values(
                        status=StudyStatus.RUNNING.value,
                        spec=spec if worker is None else {**spec, QUEUE_WORKER: dict(worker)},
                        updated_at=time.time(),
                    )
                )
                if (row := _taken(s, taken, study_id)) is not None:
                    return row
            # Another worker won the race for that one: look again.

    def take_over_study(
        self, gone: Callable[[Mapping[str, Any], float], bool], worker: Mapping[str, Any]
    ) -> StudyRow | None:
        """Atomically take a study that a worker took from the queue and still runs (running
        or confirming) when ``gone`` says that worker is gone (``gone(its QUEUE_WORKER
        record, the study's updated_at)``): the record -> ``worker``, the least recently
        updated study first. None when there is none. The compare-and-set is on the study's
        ``updated_at``, which every write (and :meth:`touch_study`) moves, so one taker wins."""
        live = (StudyStatus.RUNNING.value, StudyStatus.CONFIRMING.value)
        with session_scope(self._engine) as s:
            held = s.execute(
                select(StudyModel.id, StudyModel.spec, StudyModel.updated_at)
                .where(StudyModel.status.in_(live))
                .order_by(StudyModel.updated_at, StudyModel.id)
            ).all()
        for study_id, spec, updated in held:
            owner = (spec or {}).get(QUEUE_WORKER)
            if not isinstance(owner, Mapping) or not gone(owner, updated):
                continue
            unchanged = (
                StudyModel.id == study_id,
                StudyModel.updated_at == updated,
                StudyModel.status.in_(live),
            )
            with session_scope(self._engine) as s:
                # {}: written meanwhile, and the update below matches nothing
                spec = _locked_spec(s, *unchanged) or {}
                taken = s.execute(
                    update(StudyModel)
                    .where(*unchanged)
                    .values(spec={**spec, QUEUE_WORKER: dict(worker)}, updated_at=time.time())
                )
                if (row := _taken(s, taken, study_id)) is not None:
                    return row
        return None

    def touch_study(self, name: str, worker: Mapping[str, Any]) -> bool:
        """Move the study's ``updated_at`` to now, if ``worker`` is still its queue worker
        (its heartbeat); False once another worker has taken the study over."""
        with session_scope(self._engine) as s:
            spec = _locked_spec(s, StudyModel.name == name)
            if (spec or {}).get(QUEUE_WORKER) != dict(worker):
                return False
            s.execute(
                update(StudyModel).where(StudyModel.name == name).values(updated_at=time.time())
            )
        return True

    def set_study_worker(self, name: str, worker: Mapping[str, Any] | None) -> None:
        """Record which queue worker runs the study (None: none that another worker should
        take over when it is gone, as for a study run from the command line; a spec that
        names no worker is then left as it is)."""
        if worker is None:
            study = self.get_study(name)
            if study is None or not study.spec.get(QUEUE_WORKER):
                return
        self._update_study(name, {QUEUE_WORKER: None if worker is None else dict(worker)})

    def set_up_queued(
        self,
        name: str,
        *,
        vllm_version: str,
        model_source: str | None,
        emulated: bool,
        spec: Mapping[str, Any],
    ) -> None:
        """Record what a queued study learns on the worker that sets it up: the vLLM it
        measures with, the model it serves (the weights or the dummy directory that a ready
        `vllm serve` line names), whether its GPU is emulated, and ``spec``'s entries in its
        stored spec (the fingerprint of the requests it sends)."""
        self._update_study(
            name, spec, vllm_version=vllm_version, model_source=model_source, emulated=emulated
        )

    def set_study_runner(self, name: str, runner: Mapping[str, Any] | None) -> None:
        """Record the process that runs the study now (:data:`RUN_OWNER`; None when it ends)."""
        self._update_study(name, {RUN_OWNER: None if runner is None else dict(runner)})

    def claim_queued(self, name: str) -> bool:
        """Take the queued study ``name`` to set it up (queued -> running): of several
        processes, exactly one gets True; False when it is not queued (any more)."""
        others = [s for s in StudyStatus if s is not StudyStatus.QUEUED]
        return self.claim_study_step(name, StudyStatus.RUNNING, unless=others)

    def claim_study_step(
        self,
        name: str,
        to: StudyStatus,
        *,
        unless: Collection[str],
        runner: Mapping[str, Any] | None = None,
    ) -> bool:
        """Compare-and-set of the status: of several workers, exactly one gets True.

        ``runner``: the process that takes the step, recorded in the same transaction as the
        study's :data:`RUN_OWNER` and, in a study that a queue worker runs, as its
        :data:`QUEUE_WORKER` (whose heartbeat it then beats): a worker that joined the study
        and takes its confirmation runs the study from then on, and no resume or takeover
        may start a confirmation beside it."""
        with session_scope(self._engine) as s:
            study_id = _study_id(s, name)
            values: dict[str, Any] = {}
            if runner is not None:
                spec = _locked_spec(s, StudyModel.id == study_id) or {}
                owned = {RUN_OWNER: dict(runner)}
                if spec.get(QUEUE_WORKER):
                    owned[QUEUE_WORKER] = dict(runner)
                values["spec"] = {**spec, **owned}
            taken = s.execute(
                update(StudyModel)
                .where(StudyModel.id == study_id, StudyModel.status.not_in(list(unless)))
                .values(status=StudyStatus(to).value, updated_at=time.time(), **values)
            )
            return getattr(taken, "rowcount", 0) == 1

    def delete_study(self, name: str, *, status: StudyStatus | None = None) -> bool:
        """Delete a study and its trials (its comparisons stay, unlinked); with ``status``, only
        while it has that status (a queued study no worker has claimed: the claim is one
        UPDATE, so the two cannot both happen). False if absent or not in that status."""
        if _NUL in name:
            return False
        when = [] if status is None else [StudyModel.status == StudyStatus(status).value]
        with session_scope(self._engine) as s:
            result = s.execute(delete(StudyModel).where(StudyModel.name == name, *when))
            return bool(getattr(result, "rowcount", 0))

    # -- trials --------------------------------------------------------------------------

    def start_trial(
        self,
        study_name: str,
        number: int,
        config: ServingConfig,
        phase: TrialPhase | str = TrialPhase.SEARCH,
        is_baseline: bool = False,
    ) -> int:
        """Record trial ``number`` as RUNNING and return its id.

        A row left RUNNING (or marked interrupted) by a crashed run is replaced; a row that
        finished otherwise is kept and StorageError raised, since numbers come from Optuna
        and are never reused.
        """
        phase_value = TrialPhase(phase).value
        now = time.time()
        with session_scope(self._engine) as s:
            study_id = _study_id(s, study_name)
            row = s.scalar(_trials_of(study_id).where(TrialModel.number == number))
            if row is None:
                row = TrialModel(study_id=study_id, number=number)
                s.add(row)
            elif not replaceable(row):
                raise StorageError(
                    f"trial {number} of study {study_name!r} already finished ({row.status})",
                    hint="trial numbers come from Optuna; is another tuner running this study?",
                )
            reset_trial(row, config, phase_value, is_baseline, now)
            _touch(s, study_id, now)
            s.flush()
            return row.id

    def finish_trial(
        self,
        trial_id: int,
        result: TrialResult,
        score: float | None,
        objective_values: Sequence[float] | None,
    ) -> TrialRow:
        """Store the outcome of a RUNNING trial: JSON columns, provenance columns, score; the
        row as stored is returned (the study loop adds it to the rows it read)."""
        if not result.status.is_finished():
            raise ValueError("finish_trial needs a finished result, not a RUNNING one")
        with session_scope(self._engine) as s:
            row = s.get(TrialModel, trial_id)
            if row is None:
                raise StorageError(f"no trial with id {trial_id}", hint="start_trial first")
            if row.status != TrialStatus.RUNNING.value:
                raise StorageError(
                    f"trial {row.number} already finished ({row.status})",
                    hint="was it marked interrupted by a resume in another process?",
                )
            now = time.time()
            apply_result(row, result, now)
            if result.requests:
                s.merge(
                    TrialRequestsModel(
                        trial_id=trial_id, windows=codec.encode_requests(result.requests)
                    )
                )
            row.score = None if score is None or math.isnan(score) else float(score)
            row.objective_values = (
                None if objective_values is None else codec.encode(list(objective_values))
            )
            _touch(s, row.study_id, now)
            s.flush()
            name = s.scalar(select(StudyModel.name).where(StudyModel.id == row.study_id))
            return trial_row(row, str(name))

    def trial_requests(self, trial_id: int) -> tuple[tuple[RequestRecord, ...], ...]:
        """The per-request records of a trial, one tuple per window; empty when none were
        kept (a failed trial, a fake runner, or rows written before tuner kept them)."""
        with session_scope(self._engine) as s:
            row = s.get(TrialRequestsModel, trial_id)
            return codec.decode_requests(row.windows) if row is not None else ()

    def list_trials(
        self,
        study_name: str,
        status: TrialStatus | None = None,
        phase: TrialPhase | str | None = None,
        limit: int | None = 100,
        offset: int = 0,
    ) -> list[TrialRow]:
        """Trials of a study by number; ``limit=None`` for all of them."""
        if (limit is not None and limit < 0) or offset < 0:
            raise UsageError(f"limit ({limit}) and offset ({offset}) must not be negative")
        with session_scope(self._engine) as s:
            query = _trials_of(_study_id(s, study_name), status, phase)
            query = query.order_by(TrialModel.number).offset(offset).limit(limit)
            return [trial_row(r, study_name) for r in s.scalars(query)]

    def count_trials(
        self,
        study_name: str,
        status: TrialStatus | None = None,
        phase: TrialPhase | str | None = None,
    ) -> int:
        with session_scope(self._engine) as s:
            query = _trials_of(_study_id(s, study_name), status, phase)
            return int(s.scalar(select(func.count()).select_from(query.subquery())) or 0)

    def get_trial(self, study_name: str, number: int) -> TrialRow | None:
        with session_scope(self._engine) as s:
            query = _trials_of(_study_id(s, study_name)).where(TrialModel.number == number)
            row = s.scalar(query)
            return None if row is None else trial_row(row, study_name)

    def mark_running_as_interrupted(
        self, study_name: str, numbers: Collection[int] | None = None
    ) -> int:
        """RUNNING trials (of ``numbers`` only, if given) -> FAILED/interrupted; how many."""
        now = time.time()
        with session_scope(self._engine) as s:
            study_id = _study_id(s, study_name)
            which = [TrialModel.study_id == study_id, TrialModel.status == "running"]
            if numbers is not None:
                which.append(TrialModel.number.in_(list(numbers)))
            result = s.execute(
                update(TrialModel)
                .where(*which)
                .values(
                    status=TrialStatus.FAILED.value,
                    failure_class=FailureClass.INTERRUPTED.value,
                    failure_detail="the tuner stopped while this trial was running",
                    finished_at=now,
                )
            )
            return int(getattr(result, "rowcount", 0))

    def failed_configs(self, study_name: str) -> list[tuple[ServingConfig, FailureClass]]:
        """Configs of FAILED and PRUNED trials with their failure class, by trial number."""
        with session_scope(self._engine) as s:
            query = (
                select(TrialModel.config, TrialModel.failure_class)
                .where(
                    TrialModel.study_id == _study_id(s, study_name),
                    TrialModel.status.in_([TrialStatus.FAILED.value, TrialStatus.PRUNED.value]),
                    TrialModel.failure_class.is_not(None),
                )
                .order_by(TrialModel.number)
            )
            return [
                (ServingConfig.from_dict(config), FailureClass(failure))
                for config, failure in s.execute(query)
            ]

    def add_comparison(
        self,
        *,
        model: str,
        gpu: str,
        workload: str,
        a_config: ServingConfig,
        b_config: ServingConfig,
        repeats: int,
        results: Any,
        verdicts: Any,
        provenance: Provenance | None = None,
        study_name: str | None = None,
    ) -> ComparisonRow:
        """Record an A/B comparison; ``results`` and ``verdicts`` may hold domain records."""
        row = ComparisonModel(
            created_at=time.time(),
            model=model,
            gpu=gpu,
            workload=workload,
            a_config=a_config.to_dict(),
            b_config=b_config.to_dict(),
            repeats=repeats,
            results=codec.encode(results),
            verdicts=codec.encode(verdicts),
            provenance=codec.encode(provenance),
        )
        with session_scope(self._engine) as s:
            row.study_id = None if study_name is None else _study_id(s, study_name)
            s.add(row)
            s.flush()
            return frozen_row(row, ComparisonRow)

    def list_comparisons(self, study_name: str | None = None) -> list[ComparisonRow]:
        """Comparisons in creation order; only those of ``study_name`` when given."""
        with session_scope(self._engine) as s:
            query = select(ComparisonModel).order_by(ComparisonModel.id)
            if study_name is not None:
                query = query.where(ComparisonModel.study_id == _study_id(s, study_name))
            return [frozen_row(r, ComparisonRow) for r in s.scalars(query)]

    def get_comparison(self, comparison_id: int) -> ComparisonRow | None:
        with session_scope(self._engine) as s:
            row = s.get(ComparisonModel, comparison_id)
            return None if row is None else frozen_row(row, ComparisonRow)

    # -- launch summaries (noise profiles) -------------------------------------------------

    def add_launch(
        self,
        *,
        key: Mapping[str, Any],
        config: ServingConfig,
        is_defaults: bool,
        source: str,
        run: str,
        values: Mapping[str, Sequence[float]],
        wall_s: float | None = None,
        startup_s: float | None = None,
    ) -> LaunchRow:
        """Record one launch's summary. ``key``: host, gpu, vllm_version, model, workload,
        windows (a launch's count of measurement windows) and placement (default "off");
        ``values``: per metric, the logs of its window values (finite numbers only)."""
        clean = {
            str(name): [float(v) for v in vs if math.isfinite(v)] for name, vs in values.items()
        }
        row = LaunchModel(
            created_at=time.time(),
            **_stored_key(key),
            config_label=storable_text(config.label()),
            config=config.to_dict(),
            is_defaults=is_defaults,
            source=source[:32],
            run=storable_text(run)[:_NAME_MAX],
            values=clean,
            wall_s=wall_s,
            startup_s=startup_s,
        )
        with session_scope(self._engine) as s:
            s.add(row)
            s.flush()
            return frozen_row(row, LaunchRow)

    def list_launches(
        self, key: Mapping[str, Any], *, exclude_run: str | None = None
    ) -> list[LaunchRow]:
        """The stored launches of ``key`` (see :meth:`add_launch`) in the order stored, without
        those of ``exclude_run``."""
        with session_scope(self._engine) as s:
            query = select(LaunchModel).filter_by(**_stored_key(key)).order_by(LaunchModel.id)
            if exclude_run is not None:  # as stored: cut where a long one was cut
                query = query.where(LaunchModel.run != storable_text(exclude_run)[:_NAME_MAX])
            return [frozen_row(r, LaunchRow) for r in s.scalars(query)]


# A launch's key as stored (each text cut to its column): what add_launch writes and
# list_launches looks for, so that a long workload name is found again.
_KEY_TEXTS = {"host": _NAME_MAX, "gpu": _NAME_MAX, "vllm_version": 64, "model": 512,
              "workload": _NAME_MAX}  # fmt: skip


def _stored_key(key: Mapping[str, Any]) -> dict[str, Any]:
    texts = {name: storable_text(str(key[name]))[:n] for name, n in _KEY_TEXTS.items()}
    return {**texts, "windows": int(key["windows"]),
            "placement": str(key.get("placement", "off"))[:16]}  # fmt: skip


def _name_taken(name: str) -> UsageError:
    return UsageError(
        f"a study named {name!r} already exists",
        hint="add --resume to continue it, or pick another --study name",
    )


def _taken(s: Session, result: Any, study_id: int) -> StudyRow | None:
    """The study row a compare-and-set update (``result``) took; None when it lost."""
    if getattr(result, "rowcount", 0) != 1:
        return None
    s.flush()
    row = s.get(StudyModel, study_id)
    assert row is not None
    return study_row(row, {})


def plan_back(record: Mapping[str, Any]) -> dict[str, Any]:
    """A stored plan record with the strings :func:`codec.encode` wrote for non-finite numbers
    made floats again where the plan holds numbers: its margin and recipe, each effect (keyed
    by knob) and each figure of its diagnosis."""
    effects = record.get("effects") or {}
    figures = (record.get("diagnosis") or {}).get("figures") or {}
    return dict(codec.numbers_back(record, {"margin", "recipe", *effects, *figures}))


def _study_id(s: Session, name: str) -> int:
    study_id = (
        None if _NUL in name else s.scalar(select(StudyModel.id).where(StudyModel.name == name))
    )
    if study_id is None:
        raise UsageError(f"no study named {name!r}", hint="`tuner studies` lists the studies")
    return study_id


def _locked_spec(s: Session, *where: ColumnElement[bool]) -> dict[str, Any] | None:
    """The stored spec of the study ``where`` picks (None when none does), its row locked until
    the session's transaction ends, so that a spec merged from it and written back in that
    transaction loses no other process's write, nor has its own lost: SELECT ... FOR NO KEY
    UPDATE on PostgreSQL (the lock the UPDATE takes anyway, so that inserting a trial that
    references the study does not wait on it). SQLite has no row locks, and its driver reads
    outside a transaction until the first write, so there a write that changes nothing takes
    the database's write lock first."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(update(StudyModel).where(*where).values(updated_at=StudyModel.updated_at))
    locked = select(StudyModel.spec).where(*where).with_for_update(key_share=True)
    found = s.execute(locked).first()
    return None if found is None else dict(found[0] or {})


def _touch(s: Session, study_id: int, now: float) -> None:
    s.execute(update(StudyModel).where(StudyModel.id == study_id).values(updated_at=now))


def _counted(s: Session, studies: Sequence[StudyModel]) -> list[StudyRow]:
    """The rows of ``studies``, each with its trials per phase, then per status, and its free
    search trials."""
    ids = [r.id for r in studies]
    counts: dict[int, dict[str, dict[str, int]]] = {}
    query = (
        select(TrialModel.study_id, TrialModel.phase, TrialModel.status, func.count())
        .where(TrialModel.study_id.in_(ids))
        .group_by(TrialModel.study_id, TrialModel.phase, TrialModel.status)
    )
    for study_id, phase, status, n in s.execute(query):
        counts.setdefault(study_id, {}).setdefault(phase, {})[status] = int(n)
    free = _free(s, ids)
    return [study_row(r, counts.get(r.id, {}), free[r.id]) for r in studies]


def _free(s: Session, study_ids: list[int]) -> dict[int, dict[FailureClass, int]]:
    """Per study id: its search trials that used no place in its budget (:func:`budget_free`)."""
    query = select(TrialModel).where(
        TrialModel.study_id.in_(study_ids),
        TrialModel.phase == TrialPhase.SEARCH.value,
        TrialModel.failure_class.in_([f.value for f in FREE]),
    )
    rows: dict[int, list[TrialRow]] = {i: [] for i in study_ids}
    for row in s.scalars(query):
        rows[row.study_id].append(trial_row(row, ""))
    return {i: budget_free(r) for i, r in rows.items()}


def _trials_of(
    study_id: int, status: TrialStatus | None = None, phase: TrialPhase | str | None = None
) -> Select[TrialModel]:
    query = select(TrialModel).where(TrialModel.study_id == study_id)
    if status is not None:
        query = query.where(TrialModel.status == TrialStatus(status).value)
    if phase is not None:
        query = query.where(TrialModel.phase == TrialPhase(phase).value)
    return query


def replaceable(row: TrialModel) -> bool:
    return row.status == TrialStatus.RUNNING.value or (
        row.failure_class == FailureClass.INTERRUPTED.value
    )
