"""Everything after the script's path belongs to the script, for any number of processes.

Before, `accel launch`'s own parser took a script's `--num` for an abbreviation of
`--num_processes` (refused as ambiguous), and with two processes torchrun's parser refused
`--start` ("could match --start-method") or could take one of its own options from the script.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accel.cli.errors import CliError
from accel.cli.main import build_parser

COLLIDING = [
    "--start", "1", "--num", "3", "--nnodes", "4", "--master_port", "1", "-m", "x", "--standalone",
    "--cpu", "--num_processes=7", "--config_file", "nowhere.yaml", "--help", "--version", "--", "--rdzv_conf=x",
]
"""Options of accel launch, of torchrun and of neither, abbreviations of both, and argparse's own."""


def parse(*argv: str):
    args, unknown = build_parser().parse_known_args(["launch", *argv])
    assert unknown == []
    return args


def test_the_parser_stops_at_the_script() -> None:
    args = parse("--num_processes", "2", "--cpu", "train.py", *COLLIDING)
    assert args.script == "train.py" and args.script_args == COLLIDING
    assert args.num_processes == 2 and args.use_cpu is True and args.module is False
    assert args.config_file is None


def test_flag_forms_before_the_script() -> None:
    args = parse("--num_processes=2", "-m", "pkg.train", "--start")
    assert (args.num_processes, args.module, args.script, args.script_args) == (2, True, "pkg.train", ["--start"])
    args = parse("--cpu", "--", "train.py", "--cpu")
    assert (args.use_cpu, args.script, args.script_args) == (True, "train.py", ["--cpu"])
    args = parse("--num-proc", "3", "train.py")  # an unambiguous abbreviation of accel's own flag still works
    assert args.num_processes == 3 and args.script_args == []


def test_an_ambiguous_flag_before_the_script_is_still_refused() -> None:
    with pytest.raises(CliError, match="ambiguous option: --num could match --num_processes"):
        parse("--num", "2", "train.py")


def _argv_seen(stdout: str) -> list[list[str]]:
    return [json.loads(line.removeprefix("SHOW "))["argv"] for line in stdout.splitlines() if line.startswith("SHOW ")]


@pytest.mark.parametrize("processes", [1, 2])
def test_colliding_options_reach_the_script(run_accel, show_env_script: Path, processes: int) -> None:
    result = run_accel("launch", "--num_processes", str(processes), "--cpu", str(show_env_script), *COLLIDING)
    assert result.returncode == 0, result.stderr
    assert _argv_seen(result.stdout) == [COLLIDING] * processes
    assert result.stderr == ""


MODULE = """\
import json, os, sys
# one write per line: the two processes share stdout, where print's separate writes interleave
line = json.dumps([os.environ["RANK"], __name__, sys.argv[0].endswith("train.py"), sys.argv[1:]])
os.write(1, ("MODULE " + line + "\\n").encode())
"""


def test_a_module_with_two_processes_runs_as_main_with_its_arguments(run_accel, tmp_path: Path) -> None:
    (tmp_path / "trainpkg").mkdir()
    (tmp_path / "trainpkg" / "__init__.py").write_text("")
    (tmp_path / "trainpkg" / "train.py").write_text(MODULE)
    result = run_accel("launch", "--num_processes", "2", "--cpu", "-m", "trainpkg.train", "--start", "-m", "x",
                       extra_env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    seen = sorted(json.loads(line.removeprefix("MODULE ")) for line in result.stdout.splitlines())
    assert seen == [[rank, "__main__", True, ["--start", "-m", "x"]] for rank in ("0", "1")]


def test_a_script_with_two_processes_sees_what_python_script_py_gives(run_accel, tmp_path: Path) -> None:
    """Its folder first on sys.path (a sibling module imports), an absolute __file__, __name__ '__main__'."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "sibling.py").write_text("VALUE = 'sibling'\n")
    (tmp_path / "sub" / "train.py").write_text(
        "import json, os, sys, sibling\n"
        "line = json.dumps([sibling.VALUE, __name__, os.path.isabs(__file__), sys.argv[1:]])\n"
        "os.write(1, ('SCRIPT ' + line + '\\n').encode())  # one write: the ranks share stdout\n"
    )
    result = run_accel("launch", "--num_processes", "2", "--cpu", "sub/train.py", "--nnodes", "2")
    assert result.returncode == 0, result.stderr
    seen = [json.loads(line.removeprefix("SCRIPT ")) for line in result.stdout.splitlines()]
    assert seen == [["sibling", "__main__", True, ["--nnodes", "2"]]] * 2
