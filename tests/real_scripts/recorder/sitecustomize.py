"""What a real script computes, recorded from outside it, in every process of a run.

Python imports `sitecustomize` at start-up from the first directory on PYTHONPATH that has one,
so putting this directory first makes every process of a run (the launcher's children included)
record, without a line of the script changed. Nothing is recorded unless REAL_SCRIPTS_RECORD
names a folder; then each process appends JSON lines to `<folder>/rank<RANK>.jsonl`:

- `["backward", loss]`: the value of every scalar that `backward()` is called on (what
  `accelerator.backward(loss)` hands to autograd, after its division for accumulation);
- `["step", {"lr": [...], "digest": sha256}]`: at every real optimizer step (torch's global
  optimizer-step hooks, so a step that Accelerate's wrapper skips is not recorded), the learning
  rate of each parameter group used by that step and a digest of the bytes of every parameter
  after it (equal digests: bit-identical weights).

At exit it saves the parameters of the last optimizer that stepped to `<folder>/rank<RANK>.pt`,
for comparisons within a tolerance. The recorder consumes no random numbers and changes no value.

Processes other than rank 0 write their output to `<folder>/output_rank<RANK>.txt` instead of the
run's shared pipe: with two processes writing unbuffered to one pipe, a line such as
`print("epoch 0:", metrics)` (several writes) could be cut by the other rank's output and no
longer read as printed (it happened once in CI); the harness appends these files after rank 0's.
"""

from __future__ import annotations

import os

if os.environ.get("REAL_SCRIPTS_RECORD"):
    import atexit
    import hashlib
    import json
    import weakref
    from typing import Any

    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    _FOLDER = os.environ["REAL_SCRIPTS_RECORD"]
    _RANK = os.environ.get("RANK", "0")
    if "RANK" in os.environ and _RANK != "0":
        _log = os.open(os.path.join(_FOLDER, f"output_rank{_RANK}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(_log, 1)
        os.dup2(_log, 2)
        os.close(_log)
    _last: list[weakref.ref[torch.optim.Optimizer]] = []
    _lrs: dict[int, list[float]] = {}

    def _write(kind: str, value: Any) -> None:
        with open(os.path.join(_FOLDER, f"rank{_RANK}.jsonl"), "a") as file:
            file.write(json.dumps([kind, value]) + "\n")

    def _parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def _digest(optimizer: torch.optim.Optimizer) -> str:
        digest = hashlib.sha256()
        for p in _parameters(optimizer):
            p = p.to_local() if hasattr(p, "to_local") else p  # a DTensor (FSDP2, TP): this rank's shard
            digest.update(p.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def _before_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        _lrs[id(optimizer)] = [float(group["lr"]) for group in optimizer.param_groups]

    def _after_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        _last[:] = [weakref.ref(optimizer)]
        _write("step", {"lr": _lrs.pop(id(optimizer), None), "digest": _digest(optimizer)})

    register_optimizer_step_pre_hook(_before_step)
    register_optimizer_step_post_hook(_after_step)

    _backward = torch.Tensor.backward

    def _recording_backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.numel() == 1:
            _write("backward", float(self.detach().float()))
        return _backward(self, *args, **kwargs)

    torch.Tensor.backward = _recording_backward  # type: ignore[method-assign]

    @atexit.register
    def _save_last_parameters() -> None:
        optimizer = _last[0]() if _last else None
        if optimizer is not None:
            tensors = [(p.to_local() if hasattr(p, "to_local") else p).detach().cpu().clone() for p in _parameters(optimizer)]
            torch.save(tensors, os.path.join(_FOLDER, f"rank{_RANK}.pt"))

if os.environ.get("REAL_SCRIPTS_SEED"):
    # For scripts that set no seed (diffusers' train_unconditional): every process starts from
    # the same random state under both frameworks, as `set_seed` at the top of the script would.
    import random

    import numpy
    import torch

    random.seed(int(os.environ["REAL_SCRIPTS_SEED"]))
    numpy.random.seed(int(os.environ["REAL_SCRIPTS_SEED"]))
    torch.manual_seed(int(os.environ["REAL_SCRIPTS_SEED"]))
