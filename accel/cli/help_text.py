"""What a setting means, in words, for `--help` and the wizard's questions.

A top-level setting carries its own help; an FP8 recipe or bitsandbytes setting is described by
the docstring written under its field in FP8RecipeKwargs or BitsandbytesKwargs, so the words live
next to the field they describe.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from accel.kwargs_handlers.bitsandbytes import BitsandbytesKwargs
from accel.kwargs_handlers.fp8 import FP8RecipeKwargs
from accel.settings import BNB_SECTION, Setting


def describe(setting: Setting) -> str:
    """The setting's help, else its handler field's docstring, else its YAML path."""
    if setting.help:
        return setting.help
    if setting.section == BNB_SECTION:
        return _field_docs(BitsandbytesKwargs).get(setting.yaml_key, f"bitsandbytes option {setting.yaml_key}")
    return _field_docs(FP8RecipeKwargs).get(setting.yaml_key, f"FP8 recipe field {setting.yaml_key}")


@functools.cache
def _field_docs(handler: type) -> dict[str, str]:
    """The string literal under each field of `handler` ({} when the source is not available)."""
    try:
        body = ast.parse(textwrap.dedent(inspect.getsource(handler))).body[0].body  # type: ignore[attr-defined]  # the ClassDef
    except (OSError, TypeError, IndexError, AttributeError):
        return {}
    docs = {}
    for node, following in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = following.value.value
    return docs
