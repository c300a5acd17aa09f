"""FullyShardedDataParallelPlugin: Accelerate's names, FSDP2 only, every bad value refused at construction."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

from accel.fsdp import CONFIG_KEYS, FullyShardedDataParallelPlugin as Plugin


def test_defaults_are_fsdp2_sharded_checkpoints_and_no_wrap() -> None:
    plugin = Plugin()
    assert (plugin.fsdp_version, plugin.auto_wrap_policy, plugin.state_dict_type) == (2, None, "SHARDED_STATE_DICT")
    assert plugin.reshard_after_forward is True and plugin.offload_policy is None and plugin.sharded_state_dict
    assert plugin.to_kwargs() == {}


def test_fsdp_version_1_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"fsdp_version=1.*FSDP2 only.*Set fsdp_version=2"):
        Plugin(fsdp_version=1)
    with pytest.raises(ValueError, match="accepted: 2"):
        Plugin(fsdp_version=3)


@pytest.mark.parametrize("name", ["sharding_strategy", "backward_prefetch", "use_orig_params", "sync_module_states"])
def test_fsdp1_options_are_refused_saying_what_to_do(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} is an FSDP1 option"):
        Plugin(**{name: "FULL_SHARD"})


def test_accelerate_spellings_are_accepted() -> None:
    plugin = Plugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap="GPT2Block, Block",
                    state_dict_type="full_state_dict")
    assert plugin.auto_wrap_policy == "transformer_based_wrap"
    assert plugin.transformer_cls_names_to_wrap == ("GPT2Block", "Block")
    assert plugin.state_dict_type == "FULL_STATE_DICT"
    assert Plugin(auto_wrap_policy="NO_WRAP").auto_wrap_policy is None


def test_a_misspelt_policy_or_field_names_the_closest_match() -> None:
    with pytest.raises(ValueError, match="Did you mean 'transformer_based_wrap'"):
        Plugin(auto_wrap_policy="transfomer_based_wrap")
    with pytest.raises(TypeError, match="Did you mean 'reshard_after_forward'"):
        Plugin(reshard_after_forwrd=False)
    with pytest.raises(ValueError, match="Did you mean 'FULL_STATE_DICT'"):
        Plugin(state_dict_type="FULL_STATE_DICTS")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"transformer_cls_names_to_wrap": ["Block"]}, "read only with auto_wrap_policy='transformer_based_wrap'"),
        ({"min_num_params": 10, "auto_wrap_policy": "transformer_based_wrap"}, "read only with auto_wrap_policy='size"),
        ({"activation_checkpointing": True}, "there are no blocks"),
        ({"cpu_ram_efficient_loading": "yes"}, "cpu_ram_efficient_loading"),
        ({"auto_wrap_policy": "size_based_wrap", "min_num_params": 0}, "must be an int >= 1"),
    ],
)
def test_options_that_would_be_ignored_or_cannot_run_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Plugin(**fields)


@pytest.mark.parametrize(
    "fields",
    [{"reshard_after_forward": "yes"}, {"cpu_offload": 1}, {"transformer_cls_names_to_wrap": [3]},
     {"mixed_precision_policy": "bf16"}],
)
def test_values_of_the_wrong_type_are_refused(fields: dict) -> None:
    with pytest.raises(TypeError):
        Plugin(**({"auto_wrap_policy": "transformer_based_wrap"} | fields))


def test_mixed_precision_policy_from_a_dict_of_dtype_names() -> None:
    policy = Plugin(mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": torch.float32}).mixed_precision_policy
    assert policy == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    with pytest.raises(ValueError, match="Did you mean 'param_dtype'"):
        Plugin(mixed_precision_policy={"param_dtpye": "bf16"})


def test_cpu_offload_takes_a_bool_or_torchs_policy() -> None:
    assert isinstance(Plugin(cpu_offload=True).offload_policy, CPUOffloadPolicy)
    given = CPUOffloadPolicy(pin_memory=False)
    assert Plugin(cpu_offload=given).offload_policy is given


def test_a_callable_wrap_policy_is_kept() -> None:
    def policy(module: torch.nn.Module) -> bool:
        return isinstance(module, torch.nn.Linear)

    assert Plugin(auto_wrap_policy=policy, activation_checkpointing=True).auto_wrap_policy is policy


def test_from_config_maps_accelerates_keys() -> None:
    plugin = Plugin.from_config({
        "fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "Block", "fsdp_reshard_after_forward": False,
        "fsdp_offload_params": True, "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_activation_checkpointing": True, "fsdp_cpu_ram_efficient_loading": False,
    })
    assert plugin.to_kwargs() == {
        "auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": ("Block",),
        "reshard_after_forward": False, "cpu_offload": True, "state_dict_type": "FULL_STATE_DICT",
        "activation_checkpointing": True,
    }
    assert set(CONFIG_KEYS) >= {"fsdp_min_num_params"}
    with pytest.raises(ValueError, match="Did you mean 'fsdp_offload_params'"):
        Plugin.from_config({"fsdp_offload_param": True})
