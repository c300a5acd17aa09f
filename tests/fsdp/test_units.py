"""In one process: which modules become units, the precision policy, an optimizer pointed at new
parameters, one-process sharding, and the consolidate command's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy

from accel import Accelerator, FP8RecipeKwargs
from accel.distributed.process_state import ProcessState
from accel.fsdp import (
    FullyShardedDataParallelPlugin as Plugin,
    clip_grad_norm_,
    consolidate,
    full_state_dict,
    mixed_precision_policy,
    modules_to_shard,
    parameter_names,
    retarget_optimizer,
    shard_model,
)
from fsdp_tiny import make_model

BLOCKS = Plugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"])


def names_of(model: nn.Module, units: list[nn.Module]) -> list[str]:
    named = {id(m): n for n, m in model.named_modules()}
    return [named[id(u)] for u in units]


def test_transformer_wrap_takes_every_block_innermost_first() -> None:
    model = make_model()
    assert names_of(model, modules_to_shard(model, BLOCKS)) == ["blocks.0", "blocks.1"]


def test_a_class_name_that_matches_nothing_names_the_models_classes() -> None:
    plugin = Plugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block", "GPT2Block"])
    with pytest.raises(ValueError, match=r"'GPT2Block' match\(es\) no module.*TinyNet, Linear, ModuleList, Block"):
        modules_to_shard(make_model(), plugin)


def test_transformer_wrap_without_names_uses_no_split_modules_or_says_it_needs_them() -> None:
    model = make_model()
    with pytest.raises(ValueError, match="needs transformer_cls_names_to_wrap"):
        modules_to_shard(model, Plugin(auto_wrap_policy="transformer_based_wrap"))
    model._no_split_modules = ["Block"]
    assert names_of(model, modules_to_shard(model, Plugin(auto_wrap_policy="transformer_based_wrap"))) == [
        "blocks.0", "blocks.1"]


def test_size_based_wrap_counts_only_parameters_not_in_an_inner_unit() -> None:
    model = make_model()
    # up: 544, down: 528 -> units; a block then holds no free parameters; blocks (ModuleList) neither.
    assert names_of(model, modules_to_shard(model, Plugin(auto_wrap_policy="size_based_wrap", min_num_params=500))) == [
        "blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down"]
    assert names_of(model, modules_to_shard(model, Plugin(auto_wrap_policy="size_based_wrap", min_num_params=2000))) == [
        "blocks"]


def test_a_callable_policy_picks_the_units() -> None:
    model = make_model()
    plugin = Plugin(auto_wrap_policy=lambda m: isinstance(m, nn.Linear) and m.out_features == 4)
    assert names_of(model, modules_to_shard(model, plugin)) == ["head"]


@pytest.mark.parametrize(
    "precision, param_dtype",
    [("no", None), ("bf16", torch.bfloat16), ("fp16", torch.float16), ("bf16-true", None), ("64-true", None)],
)
def test_the_mixed_precision_policy_follows_the_precision(precision: str, param_dtype: torch.dtype | None) -> None:
    policy = mixed_precision_policy(precision, None)
    assert policy.param_dtype == param_dtype
    assert policy.reduce_dtype == (torch.float32 if param_dtype is not None else None)


def test_a_given_policy_wins_and_fp8_shards_as_its_base_precision() -> None:
    given = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    assert mixed_precision_policy("bf16", given) is given
    with pytest.raises(ValueError, match="no MixedPrecisionPolicy for precision 'fp8'.*shards as its base"):
        mixed_precision_policy("fp8", None)  # an FP8 backend names its base (fsdp_precision), never 'fp8'
    bases = {"bf16": "bf16", "fp16": "fp16", "fp32": "no", "bf16-true": "bf16-true", "16-true": "16-true"}
    for base, name in bases.items():
        recipe = FP8RecipeKwargs(backend="native", base_precision=base)
        backend = Accelerator(cpu=True, mixed_precision="fp8", kwarg_handlers=[recipe]).precision
        assert backend.fsdp_precision == name
        mixed_precision_policy(backend.fsdp_precision, None)


def test_one_process_warns_that_nothing_is_sharded_and_still_checkpoints_activations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accel import _warnings

    monkeypatch.setattr(_warnings, "_given", set())  # warned once per process: an earlier test may have seen it
    model = make_model()
    plugin = Plugin(auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap="Block",
                    activation_checkpointing=True)
    with pytest.warns(UserWarning, match="one process: there is nothing to shard"):
        sharded = shard_model(model, plugin, "no", torch.device("cpu"), ProcessState(torch.device("cpu")))
    assert sharded is model
    calls = []
    model.blocks[0].up.register_forward_hook(lambda *_: calls.append(1))
    model(torch.randn(2, 8)).sum().backward()
    assert len(calls) == 2  # recomputed in backward
    assert list(full_state_dict(model)) == list(make_model().state_dict())


def test_clip_grad_norm_of_plain_tensors_is_torchs() -> None:
    model = make_model()
    model(torch.randn(2, 8)).sum().backward()
    expected = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    torch.testing.assert_close(clip_grad_norm_(model.parameters(), 1e9), expected)


def test_retarget_optimizer_swaps_parameters_by_name_and_refuses_stepped_state() -> None:
    old = make_model()
    optimizer = torch.optim.AdamW(old.parameters())
    names = parameter_names(old)
    new = make_model(seed=3)
    assert retarget_optimizer(optimizer, names, new) == 12
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in new.parameters()]
    assert retarget_optimizer(optimizer, names, new) == 0  # already pointed at the new ones
    stepped = make_model()
    optimizer = torch.optim.AdamW(stepped.parameters())
    stepped(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    with pytest.raises(ValueError, match="already has state"):
        retarget_optimizer(optimizer, parameter_names(stepped), make_model())


def test_consolidate_says_what_it_needs(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="neither it nor a subfolder holds .metadata"):
        consolidate(tmp_path, tmp_path / "out")
    done = subprocess.run([sys.executable, "-m", "accel.fsdp.consolidate", str(tmp_path), str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("error: consolidate:")
