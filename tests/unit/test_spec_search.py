"""``[space] search`` in spec files and ``--search FLAG=V1,V2`` on the command line; the SLO a
workload preset recommends; the heavy workloads."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tuner.compose import extra_knobs, resolve_slo
from tuner.domain import Slo
from tuner.errors import SpecError, UsageError
from tuner.load.curve import slo_margins
from tuner.load.workloads import WORKLOADS, recommended_slo
from tuner.spec.configs import parse_search
from tuner.spec.study import StudySpec, check_flags, load_spec
from tuner.vllm.flags import shipped


def spec_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_search_takes_a_table_of_values_or_a_list_of_levers(tmp_path: Path) -> None:
    table = load_spec(
        spec_file(
            tmp_path,
            """\
            [space]
            params = []
            search = { stream-interval = [1, 8], "compilation_config.cudagraph_mode" = ["FULL"] }
            """,
        )
    )
    assert table.search == {
        "stream_interval": (1, 8),
        "compilation_config.cudagraph_mode": ("FULL",),
    }
    names = load_spec(spec_file(tmp_path, '[space]\nsearch = ["stream_interval", "-asc"]\n'))
    assert names.search == {"stream_interval": (), "-asc": ()}
    assert extra_knobs(names) == ["stream_interval", "-asc"]
    # A spec stored with a queued study reads back.
    assert StudySpec.from_dict(table.to_dict()) == table


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[space]\nsearch = "stream_interval"\n', 2, "search must be a table"),
        ("[space]\nsearch = { 1stream = [1] }\n", 2, "unknown serving knob"),
        ("[space]\nsearch = { stream_interval = [[1]] }\n", 2, "must be numbers"),
        ("[space]\nsearch = { stream_interval = [1], stream-interval = [8] }\n", 2, "twice"),
    ],
)
def test_bad_search_tables_name_their_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(spec_file(tmp_path, text))
    assert caught.value.line == line and words in caught.value.message


def test_a_misspelt_flag_in_a_file_is_refused_at_its_line(tmp_path: Path) -> None:
    path = spec_file(
        tmp_path, "[study]\ntrials = 2\n\n[space]\nsearch = { stream-intervall = [8] }\n"
    )
    catalog = shipped("0.32.0")
    assert catalog is not None
    with pytest.raises(SpecError) as caught:
        check_flags(load_spec(path), catalog)
    assert caught.value.line == 5
    assert "vLLM 0.32.0 has no flag 'stream_intervall' (in search)" in caught.value.message
    assert "--stream-interval" in caught.value.hint
    check_flags(
        load_spec(spec_file(tmp_path, "[space]\nsearch = { block-size = [16] }\n")), catalog
    )


def test_a_misspelt_flag_from_the_command_line_is_blamed_on_search(tmp_path: Path) -> None:
    """--search foo=1,2 was reported at the spec file (the embedded default one, too), which
    does not name foo."""
    catalog = shipped("0.32.0")
    assert catalog is not None
    path = spec_file(tmp_path, "[study]\ntrials = 2\n")
    spec = load_spec(path).with_overrides(search={"foo": (1, 2)})
    with pytest.raises(SpecError) as caught:
        check_flags(spec, catalog)
    assert caught.value.path == "--search" and caught.value.line is None
    assert "has no flag 'foo' (in search)" in caught.value.message
    # A quoted key of the file's own is the file's, at its line.
    quoted = spec_file(tmp_path, '[space]\nparams = []\nsearch = { "max-num-seqz" = [8, 16] }\n')
    with pytest.raises(SpecError) as caught:
        check_flags(load_spec(quoted), catalog)
    assert caught.value.path == str(quoted) and caught.value.line == 3


def test_the_command_line_search_option() -> None:
    assert parse_search(["stream_interval=1,8", "--block-size=16", "async-scheduling"]) == {
        "stream_interval": (1, 8),
        "block_size": (16,),
        "async_scheduling": (),
    }
    # A JSON object keeps its commas; true/false and names are typed as elsewhere.
    parsed = parse_search(['speculative_config={"method":"ngram","num_speculative_tokens":3},{}'])
    assert parsed == {"speculative_config": ('{"method":"ngram","num_speculative_tokens":3}', "{}")}
    assert parse_search(["enforce_eager=true,false", "kv_cache_dtype=fp8"]) == {
        "enforce_eager": (True, False),
        "kv_cache_dtype": ("fp8",),
    }
    for bad in ["=8", "stream interval=8", "stream_interval=1,,8", "stream_interval="]:
        with pytest.raises(UsageError, match="--search: cannot read"):
            parse_search([bad])
    with pytest.raises(UsageError, match="given twice"):
        parse_search(["stream_interval=1", "stream-interval=8"])


def test_the_command_line_adds_to_the_file_flag_by_flag() -> None:
    spec = StudySpec(search={"stream_interval": (1, 8), "block_size": (16,)})
    merged = spec.with_overrides(search={"stream_interval": (4,), "async_scheduling": ()})
    assert merged.search == {"stream_interval": (4,), "block_size": (16,), "async_scheduling": ()}


def test_a_workload_may_recommend_an_slo_which_a_spec_overrides_or_turns_off() -> None:
    assert resolve_slo(StudySpec(workload="chat-heavy")) == Slo(ttft_p99_ms=1000.0, itl_p99_ms=50.0)
    assert resolve_slo(StudySpec(workload="chat-heavy", slo="e2e_p99=9s")) == Slo(e2e_p99_ms=9000.0)
    assert resolve_slo(StudySpec(workload="chat-heavy", slo="none")) == Slo()
    assert resolve_slo(StudySpec(workload="chat")) == Slo()
    assert recommended_slo("smoke") == ""


def test_the_heavy_workloads() -> None:
    heavy = WORKLOADS["throughput-256"]
    assert heavy.concurrency == 256 and heavy.request_rate is None
    assert (heavy.prompt_tokens, heavy.output_tokens) == (512, 256)
    assert heavy.requests_per_window >= 4 * heavy.concurrency
    chat = WORKLOADS["chat-heavy"]
    assert chat.request_rate is not None and chat.request_rate >= 50
    assert chat.concurrency >= 256  # a cap on requests in flight, above what the rate needs
    slo = resolve_slo(StudySpec(workload="chat-heavy"))
    assert slo.ttft_p99_ms is not None and slo.itl_p99_ms is not None


def test_the_itl_slo_judges_the_pooled_chunk_gap() -> None:
    """tuner's ITL is every gap between streamed chunks, so a burstier stream (8 tokens per
    chunk) fails an ITL bound that a token-by-token stream meets."""
    from tuner.domain import Estimate

    def metrics(itl_p99: float) -> dict[str, Estimate]:
        names = ("ttft_p99_ms", "e2e_p99_ms", "error_rate")
        out = {n: Estimate(median=0.0, low=0.0, high=0.0, values=()) for n in names}
        return {**out, "itl_p99_ms": Estimate(itl_p99, itl_p99, itl_p99, ())}

    bound = Slo(itl_p99_ms=50.0)
    assert slo_margins(metrics(25.0), bound)[1] < 0  # one token per chunk: met
    assert slo_margins(metrics(130.0), bound)[1] > 0  # --stream-interval 8: violated


def test_a_study_with_nothing_to_search_is_refused(tmp_path: Path) -> None:
    """`params = []` and nothing else measured vLLM's defaults once per trial."""
    from tuner.catalog import get_gpu, resolve_model
    from tuner.compose import build_space, resolve_workload

    def built(text: str, *, new_study: bool = True) -> object:
        spec = load_spec(spec_file(tmp_path, "[study]\ntrials = 3\n" + textwrap.dedent(text)))
        model, gpu, workload = resolve_model(spec.model), get_gpu(spec.gpu), resolve_workload(spec)
        return build_space(spec, model, gpu, workload, new_study=new_study)

    for text in (
        "[space]\nparams = []\n",
        "[space]\nparams = []\n[[enqueue]]\nmax_num_seqs = 'default'\n",
    ):
        with pytest.raises(UsageError, match="nothing to search") as info:
            built(text)
        assert "study.toml" in info.value.hint
    built("[space]\nparams = []\n", new_study=False)  # a resume or an A/B command: its own arms
    built("[space]\nparams = []\n[[enqueue]]\nmax_num_seqs = 8\n")  # the enqueued one is tried
    built("[space]\nfixed = { enforce_eager = true }\n")  # no params: tuner's lever plan


def test_nothing_to_search_names_what_to_change_where_the_spec_came_from(tmp_path: Path) -> None:
    """A spec file's study is told about its file and --search; one queued through the API
    (its worker sets it up) about the request's space, not about a "request body" file."""
    from tuner.catalog import get_gpu, resolve_model
    from tuner.compose import build_space, resolve_workload

    def refused(spec: StudySpec) -> UsageError:
        model, gpu, workload = resolve_model(spec.model), get_gpu(spec.gpu), resolve_workload(spec)
        with pytest.raises(UsageError, match="nothing to search") as info:
            build_space(spec, model, gpu, workload, new_study=True)
        return info.value

    path = spec_file(tmp_path, "[study]\ntrials = 3\n[space]\nparams = []\n")
    from_file = refused(load_spec(path))
    assert "(no [space] params, choices or search) and no [[enqueue]]" in from_file.message
    assert from_file.hint.startswith(f"name knobs to search in [space] params or search in {path}")
    assert "--search FLAG=V1,V2" in from_file.hint
    queued = refused(StudySpec(params=(), source="request body"))
    assert "(no space.params or space.choices) and no enqueue " in queued.message
    assert queued.hint.startswith("queue it again (POST /v1/studies, another study.name)")
    assert "request body" not in queued.hint and "[space]" not in queued.hint
