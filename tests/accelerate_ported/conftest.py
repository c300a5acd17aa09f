"""Accelerate's own tests, with only their imports renamed, run against accel (see README.md).

`NOT_FOR_ACCEL` is the one list of the ported tests that cannot apply to accel, each with its reason
(docs/migration.md lists the same). Tests that need hardware this machine lacks skip themselves
through Accelerate's own `require_*` decorators (accel.test_utils answers them the same way).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `accelerate_ported.scripts` importable
collect_ignore = ["scripts", "port.py", "cases.py"]

_BUILT_DIRECTLY = (
    "builds Accelerate's dataloader class directly from a dataset and DataLoader arguments; accel's prepared "
    "loaders wrap a DataLoader and are built by prepare()/prepare_data_loader() (docs/migration.md, accelerate.data_loader)"
)

NOT_FOR_ACCEL: dict[str, str] = {
    "test_accelerator.py::AcceleratorTester::test_prepare_model_8bit_cpu_offload_raises_valueerror_not_typeerror":
        "patches Accelerate's internals by name (`patch('accelerate.accelerator.is_bitsandbytes_multi_backend_"
        "available')`, a string the import rename does not change); unpatched, with bitsandbytes' multi-backend "
        "installed, Accelerate too accepts an 8-bit model placed on the CPU",
    "test_data_loader.py::DataLoaderTester::test_dataloader_inheritance":
        _BUILT_DIRECTLY,
    "test_data_loader.py::DataLoaderTester::test_end_of_dataloader":
        _BUILT_DIRECTLY,
    "test_data_loader.py::DataLoaderTester::test_end_of_dataloader_dispatcher":
        _BUILT_DIRECTLY,
    "test_data_loader.py::DataLoaderTester::test_skip_first_batches_does_not_reset_sampler_epoch":
        _BUILT_DIRECTLY,
    "test_data_loader.py::DataLoaderTester::test_skip_first_batches_preserves_iteration":
        _BUILT_DIRECTLY,
    "test_data_loader.py::DataLoaderTester::test_iterable_dataset_with_non_tensor_samples":
        "dispatches batches holding strings; accel dispatches tensors only (it broadcasts shapes, then tensors, never "
        "pickles) and refuses other batches naming dispatch_batches=False",
    "test_kwargs_handlers.py::KwargsHandlerTester::test_torch_dynamo_plugin":
        "sets ACCELERATE_DYNAMO_MODE=reduce-overhead with backend aot_ts_nvfuser; accel refuses a compile mode its "
        "backend ignores (only inductor takes one), and reads the variables when the Accelerator is built",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # pytest-xdist appends "@<group>" to the ids of grouped tests when its hook has run first (it depends
        # on which folders the command names): the key is the id without it
        reason = NOT_FOR_ACCEL.get(item.nodeid.split("@", 1)[0].split("accelerate_ported/", 1)[-1])
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"not for accel by design: {reason}"))


@pytest.fixture(autouse=True)
def fresh_state() -> None:
    """Each test starts with no state left by the one before (Accelerate's suite relies on its tearDowns)."""
    from accel.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
