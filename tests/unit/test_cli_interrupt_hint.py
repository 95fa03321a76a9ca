"""What an interrupted run says continues it: `tuner run --study NAME --resume` for a run, and
`tuner worker --study NAME` for a worker that joined a study (it named `tuner run` instead)."""

from __future__ import annotations

import pytest

from tuner.cli.study import _reporting


@pytest.mark.parametrize(
    ("again", "said"),
    [
        ("", "--resume continues (tuner run --study s1 --resume)"),
        ("tuner worker --study s1", "tuner worker --study s1 continues it"),
    ],
)
def test_an_interrupted_run_names_the_command_that_continues_it(
    capsys: pytest.CaptureFixture[str], again: str, said: str
) -> None:
    with pytest.raises(SystemExit) as stopped, _reporting("s1", again):
        raise KeyboardInterrupt
    assert stopped.value.code == 130
    assert said in " ".join(capsys.readouterr().err.split())
