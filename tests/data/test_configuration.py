"""DataLoaderConfiguration and GradientAccumulationPlugin: Accelerate's fields and defaults, checked values."""

from __future__ import annotations

import dataclasses

import pytest

from accel.data.configuration import DataLoaderConfiguration
from accel.training.accumulation import GradientAccumulationPlugin


def test_dataloader_configuration_has_accelerates_fields_and_defaults() -> None:
    config = DataLoaderConfiguration()
    assert dataclasses.asdict(config) == {
        "split_batches": False,
        "dispatch_batches": None,
        "even_batches": True,
        "use_seedable_sampler": False,
        "data_seed": None,
        "non_blocking": False,
        "use_stateful_dataloader": False,
    }
    assert config.non_default_fields() == {}
    changed = DataLoaderConfiguration(even_batches=False, data_seed=7, dispatch_batches=False)
    assert changed.non_default_fields() == {"even_batches": False, "data_seed": 7, "dispatch_batches": False}


def test_gradient_accumulation_plugin_has_accelerates_fields_defaults_and_to_kwargs() -> None:
    plugin = GradientAccumulationPlugin()
    assert dataclasses.asdict(plugin) == {
        "num_steps": None,
        "adjust_scheduler": True,
        "sync_with_dataloader": True,
        "sync_each_batch": False,
    }
    assert GradientAccumulationPlugin(num_steps=4, sync_each_batch=True).to_kwargs() == {
        "num_steps": 4,
        "sync_each_batch": True,
    }
    assert GradientAccumulationPlugin(2).num_steps == 2  # positional, as Accelerate's dataclass allows


def test_a_dataloader_configuration_can_be_changed_and_each_change_is_checked() -> None:
    # As Accelerate's: scripts (and Accelerate's own tests) set a field and build the next Accelerator with it.
    config = DataLoaderConfiguration(use_seedable_sampler=True)
    config.data_seed = 43
    assert config.non_default_fields() == {"use_seedable_sampler": True, "data_seed": 43}
    with pytest.raises(ValueError, match="data_seed=1.5.*an int"):
        config.data_seed = 1.5  # type: ignore[assignment]
    with pytest.raises(ValueError, match="split_batches='yes'.*True or False"):
        config.split_batches = "yes"  # type: ignore[assignment]
    assert config.data_seed == 43 and config.split_batches is False


def test_the_gradient_accumulation_plugin_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        GradientAccumulationPlugin().num_steps = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: DataLoaderConfiguration(split_batches="yes"), "split_batches='yes'.*True or False"),
        (lambda: DataLoaderConfiguration(dispatch_batches=1), "dispatch_batches=1.*True, False or None"),
        (lambda: DataLoaderConfiguration(data_seed=1.5), "data_seed=1.5.*an int"),
        (lambda: DataLoaderConfiguration(non_blocking=None), "non_blocking=None.*True or False"),
        (lambda: GradientAccumulationPlugin(num_steps=0), r"num_steps=0.*an int >= 1"),
        (lambda: GradientAccumulationPlugin(num_steps=True), r"num_steps=True.*an int >= 1"),
        (lambda: GradientAccumulationPlugin(sync_each_batch=1), "sync_each_batch=1.*True or False"),
    ],
)
def test_a_bad_value_raises_naming_the_field_the_value_and_what_is_accepted(build, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        build()
