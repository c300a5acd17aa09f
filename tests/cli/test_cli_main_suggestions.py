"""Mistyped commands, actions and flags get one line with "did you mean", as config keys do."""

from __future__ import annotations

import pytest

from accel.cli.main import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["lanch", "train.py"], "accel: unknown command 'lanch'; did you mean 'launch'? (see `accel --help`)"),
        (["tset"], "accel: unknown command 'tset'; did you mean 'test'?"),
        (["config", "defualt"], "accel config: unknown action 'defualt'; did you mean 'default'?"),
        (["launch", "--mixed_prcision", "fp16", "train.py"],
         ("accel launch: unrecognized arguments: --mixed_prcision; did you mean --mixed_precision? "
          "(see `accel launch --help`)")),
        (["env", "--confg_file", "x.yaml"],
         "accel env: unrecognized arguments: --confg_file x.yaml; did you mean --config_file?"),
        (["config", "default", "--forse"], "accel config default: unrecognized arguments: --forse; did you mean --force?"),
        (["test", "--fp8_scalng", "current"],
         "accel test: unrecognized arguments: --fp8_scalng current; did you mean --fp8_scaling?"),
    ],
)
def test_a_typo_gets_the_closest_name(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(expected)


def test_nothing_close_lists_what_is_known(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xyzzy"]) == 2
    assert capsys.readouterr().err.strip() == (
        "accel: unknown command 'xyzzy'; known: config, launch, env, test, bench, estimate-memory (see `accel --help`)"
    )
