"""The ``tuner`` command line: the commands, registered from the modules beside this one, and
:func:`main`, which turns every TunerError into a message with a hint and its exit code (2 for
bad input)."""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys

import typer
from rich.markup import escape

from tuner.cli import (
    calibrate,
    canary,
    catalog,
    db,
    doctor,
    export,
    launch,
    load,
    serve,
    size,
    study,
)
from tuner.cli.common import INTERRUPTED, err
from tuner.cli.compare import compare
from tuner.cli.verify import verify_claims
from tuner.errors import TunerError

app = typer.Typer(
    help="Measure vLLM serving configurations on real servers and recommend the best.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["--help", "-h"]},
)
db_app = typer.Typer(
    help="tuner's own database tables (migrations, merging).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["--help", "-h"]},
)
app.add_typer(db_app, name="db")

app.command()(study.run)
app.command()(study.studies)
app.command()(study.trials)
app.command()(study.best)
app.command()(size.size)
app.command("compare")(compare)
app.command()(calibrate.calibrate)
app.command("verify-claims")(verify_claims)
app.command()(export.export)
app.command()(load.load)
app.command()(canary.canary)
app.command("launch")(launch.launch_command)
app.command("serve")(serve.serve_command)
app.command()(study.worker)
app.command("doctor")(doctor.doctor_command)
app.command()(catalog.models)
app.command()(catalog.gpus)
db_app.command("upgrade")(db.db_upgrade)
db_app.command("current")(db.db_current)
db_app.command("merge")(db.db_merge)


def main() -> None:
    """Entry point: run the app, turning errors into a message and an exit code.

    Without standalone mode typer *returns* the code of ``typer.Exit`` (``--help`` gives 0,
    Ctrl-C gives 130) and raises click's usage errors, which subclass ``typer.TyperException``
    (typer vendors click, so ``click.ClickException`` would not catch them).
    """
    # `kill -USR1 PID` prints every thread's stack on stderr and goes on: what a stuck process
    # is doing (tuner run --parallel asks it of a worker that does not stop). The process's own
    # stderr: a caller that runs main() in-process may have put one without a file behind it.
    if hasattr(signal, "SIGUSR1") and sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        code = app(standalone_mode=False)
    except TunerError as exc:
        # escape: messages quote spec sections like [study], which rich would take for markup
        err.print(f"[red]error:[/] {escape(exc.message)}")
        if exc.hint:
            err.print(f"[yellow]hint:[/] {escape(exc.hint)}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        code = INTERRUPTED
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        code = 1
    except typer.TyperException as exc:  # unknown option, bad value, missing argument: exit 2
        show = getattr(exc, "show", None)
        if callable(show):
            show()  # the usage line, "Try ... --help" and the error
        else:
            err.print(f"[red]error:[/] {escape(exc.format_message())}")
        sys.exit(exc.exit_code)
    if code == INTERRUPTED:  # a command with more to say (what it recorded) says it and exits
        err.print("interrupted")
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
