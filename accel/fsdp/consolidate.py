"""The command that consolidates a sharded checkpoint's model into one `model.safetensors`.

    python -m accel.fsdp.consolidate CHECKPOINT_DIR OUTPUT_DIR

CHECKPOINT_DIR is the folder torch.distributed.checkpoint wrote (it holds `.metadata`), or a
folder with exactly one such subfolder (an accel checkpoint). Only the model's tensors are read
(not the optimizer state), each at its full size, so the machine needs the model's size in CPU
memory once. The result loads into the plain model with safetensors' `load_file` and
`model.load_state_dict`. Tensors only: no code from the checkpoint runs.

The function is `accel.fsdp.consolidate` (defined in checkpoint.py); this module is the command
only, and is not imported by the package (so that `-m` runs it without a second copy).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from accel.fsdp.checkpoint import consolidate


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: consolidate CHECKPOINT_DIR into OUTPUT_DIR/model.safetensors."""
    parser = argparse.ArgumentParser(
        prog="python -m accel.fsdp.consolidate",
        description="Write a sharded (FSDP) checkpoint's model as one model.safetensors.",
    )
    parser.add_argument("checkpoint_dir", help="the sharded checkpoint (the folder with .metadata, or its parent)")
    parser.add_argument("output_dir", help="where to write model.safetensors")
    args = parser.parse_args(argv)
    try:
        target = consolidate(args.checkpoint_dir, args.output_dir)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
