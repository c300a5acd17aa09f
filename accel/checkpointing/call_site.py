"""Whether the script called a save from inside `if accelerator.is_main_process:` (or a function
decorated with `@accelerator.on_main_process`): the caller's own knowledge that the other
processes will not come, read from its source without asking them.

The script's frames (and up to three callers of them, for a helper called inside such an `if`)
are looked up in their source: the call's enclosing `if` statements, and the decorators of the
function it is in. Only the main-process tests are recognised: `is_main_process`,
`is_local_main_process` on one machine, and `on_main_process`/`on_local_main_process`.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accel.checkpointing.host import CheckpointHost

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTS = {"is_main_process", "is_local_main_process"}
_DECORATORS = {"on_main_process", "on_local_main_process"}
_CALLERS = 4
"""How many of the script's frames are looked at, innermost first."""


def called_on_main_only() -> bool:
    """True when the script's call into accel sits inside a main-process-only branch."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    for _ in range(_CALLERS):
        if frame is None:
            return False
        if _guarded(frame):
            return True
        frame = frame.f_back
    return False


def refuse_main_only(accelerator: CheckpointHost, method: str) -> None:
    """Raise RuntimeError when `method`, which every process must call (the model is sharded over
    them), was called from a main-process-only branch: the others would never come."""
    if accelerator.process_state.distributed and called_on_main_only():
        raise RuntimeError(
            f"{method} was called inside `if accelerator.is_main_process:` (or a main-process-only function), but the "
            "model is sharded over the processes (FSDP) and every process must take part in gathering or writing it; "
            f"the others would wait forever. Call {method} from every process: it writes the files from the main "
            "process only."
        )


def _guarded(frame: FrameType) -> bool:
    tree = _parse(frame.f_code.co_filename)
    if tree is None:
        return False
    line = frame.f_lineno
    function = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == frame.f_code.co_name:
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                function = node
    if function is not None and any(_names_main(d) for d in function.decorator_list):
        return True
    return _inside_main_branch(function or tree, line)


def _inside_main_branch(root: ast.AST, line: int) -> bool:
    """Whether `line` is in the body (not the else) of an `if` under `root` that tests for the main process."""
    for node in ast.walk(root):
        if isinstance(node, ast.If) and _names_main(node.test) and node.body:
            start, end = node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno
            if start <= line <= end:
                return True
    return False


def _names_main(test: ast.AST) -> bool:
    """`x.is_main_process`, alone or and-ed with other conditions (never under `not`)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_names_main(value) for value in test.values)
    if isinstance(test, ast.Call):
        test = test.func
    name = test.attr if isinstance(test, ast.Attribute) else test.id if isinstance(test, ast.Name) else None
    return name in _TESTS or name in _DECORATORS


@functools.lru_cache(maxsize=32)
def _parse(filename: str) -> ast.AST | None:
    try:
        with open(filename, encoding="utf-8") as file:
            return ast.parse(file.read(), filename)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
