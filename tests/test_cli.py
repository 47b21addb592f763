"""The command line's own refusals: unknown commands exit 2 with argparse's usage."""

from __future__ import annotations

import pytest

from barnraise.cli import main


@pytest.mark.parametrize(("argv", "needle"), [(["launch"], "launch"), ([], "command")])
def test_an_unknown_or_missing_command_exits_2_with_the_usage(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: barnraise") and "error:" in err[-1] and needle in err[-1]


def test_the_old_bench_and_demo_commands_are_gone(capsys: pytest.CaptureFixture[str]) -> None:
    # benchmarks run from a checkout (python -m benchmarks); the demo became the scenarios
    for command in ("bench", "demo"):
        with pytest.raises(SystemExit):
            main([command])
        assert "invalid choice" in capsys.readouterr().err
