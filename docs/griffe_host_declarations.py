"""A griffe extension for the API reference: a mixin's bare annotations are not members.

The Accelerator's mixins (accel/accelerator/*.py) declare what they read from their host with bare
class annotations (`is_main_process: bool`), which create no attribute at run time. griffe would list
them as attributes, and, through the Accelerator's inheritance, let an earlier mixin's bare
declaration hide the later mixin's real property (ProcessMixin.is_main_process). This extension drops
those declarations from the mixins, so that the reference shows what Python finds.
"""

from __future__ import annotations

from typing import Any

import griffe


class HostDeclarations(griffe.Extension):
    """Remove annotation-only, undocumented class attributes from the Accelerator's mixins."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if not (cls.path.startswith("accel.accelerator.") and cls.name.endswith("Mixin")):
            return
        for name, member in list(cls.members.items()):
            if isinstance(member, griffe.Attribute) and member.value is None and member.docstring is None:
                del cls.members[name]
