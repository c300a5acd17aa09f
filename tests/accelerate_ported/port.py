"""Regenerate the vendored copies of Accelerate's tests in this folder, with only their imports renamed.

    python tests/accelerate_ported/port.py [/path/to/accelerate/git/dir] [commit]

Each file is Accelerate's, unchanged except for its `from accelerate... import` / `import accelerate`
statements, which name `accel` instead, and a first comment naming the source path and commit.
Accelerate's own test scripts (`accelerate.test_utils.scripts`, `test_utils.test_script`, ...) are
vendored beside the tests, under scripts/, and imported from there (`accelerate_ported.scripts`):
they are Accelerate's tests, not part of accel's API.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
MIRROR = "/work/.mirror/huggingface+accelerate/repo"
TESTS = ["test_accelerator", "test_scheduler", "test_optimizer", "test_kwargs_handlers", "test_memory_utils",
         "test_data_loader", "test_state_checkpointing", "test_grad_sync", "test_utils", "test_cpu"]
SCRIPTS = ["test_script", "test_sync", "test_ops", "test_distributed_data_loop"]
_SCRIPT_NAMES = {"test_script", "test_sync", "test_ops"}


def _renamed(node: ast.ImportFrom | ast.Import) -> list[str] | None:
    """The import statement(s) naming accel ([] when renaming the module in place is enough), or None
    when `node` does not import accelerate."""
    if isinstance(node, ast.Import):
        if not any(alias.name.split(".")[0] == "accelerate" for alias in node.names):
            return None
        for alias in node.names:
            alias.name = "accel" + alias.name.removeprefix("accelerate")
        return [ast.unparse(node)]
    module = node.module or ""
    if node.level or module.split(".")[0] != "accelerate":
        return None
    if module.startswith("accelerate.test_utils.scripts"):
        node.module = "accelerate_ported.scripts" + module.removeprefix("accelerate.test_utils.scripts")
        return [ast.unparse(node)]
    node.module = "accel" + module.removeprefix("accelerate")
    scripts = [a for a in node.names if node.module == "accel.test_utils" and a.name in _SCRIPT_NAMES]
    if not scripts:
        return []  # the statement's own text, with its module renamed (see port)
    node.names = [a for a in node.names if a not in scripts]
    lines = [ast.unparse(node)] if node.names else []
    lines.append(ast.unparse(ast.ImportFrom("accelerate_ported.scripts", scripts, 0)))
    return lines


def port(source: str, origin: str) -> str:
    """`source` with its accelerate imports renamed, headed by a comment naming `origin`."""
    lines = source.splitlines()
    for node in sorted(ast.walk(ast.parse(source)), key=lambda n: -getattr(n, "lineno", 0)):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        new = _renamed(node)
        if new is None:
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if not new:  # keep the statement's layout: rename its module only
            lines[first] = lines[first].replace("accelerate", "accel", 1)
            continue
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first : last + 1] = [indent + line for line in new]
    note = f"# Ported from huggingface/accelerate {origin}: only the import lines are renamed (accelerate -> accel).\n"
    return note + "\n".join(lines) + "\n"


def main(mirror: str = MIRROR, commit: str = "HEAD") -> None:
    sha = subprocess.run(["git", "-C", mirror, "rev-parse", commit], capture_output=True, text=True, check=True).stdout
    sha = sha.strip()

    def show(path: str) -> str:
        return subprocess.run(["git", "-C", mirror, "show", f"{sha}:{path}"], capture_output=True, text=True,
                              check=True).stdout

    for name in TESTS:
        path = f"tests/{name}.py"
        (HERE / f"{name}.py").write_text(port(show(path), f"{path} at {sha}"))
    for name in SCRIPTS:
        path = f"src/accelerate/test_utils/scripts/{name}.py"
        (HERE / "scripts" / f"{name}.py").write_text(port(show(path), f"{path} at {sha}"))


if __name__ == "__main__":
    main(*sys.argv[1:])
