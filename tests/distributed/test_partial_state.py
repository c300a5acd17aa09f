"""PartialState and AcceleratorState in one process (the 2-process run is in
distributed/test_partial_state.py)."""

from __future__ import annotations

import pytest
import torch

from accel import AcceleratorState, DistributedType, PartialState
from accel.distributed.process_state import ProcessState


def test_one_process_is_the_main_the_local_main_and_the_last() -> None:
    state = PartialState(cpu=True)
    assert (state.process_index, state.local_process_index, state.num_processes) == (0, 0, 1)
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert state.device == torch.device("cpu") and state.backend is None
    assert state.distributed_type == DistributedType.NO == "NO" and not state.use_distributed
    assert state.initialized and "Distributed environment: NO" in repr(state)
    state.wait_for_everyone()
    with state.main_process_first(), state.local_main_process_first():
        pass
    PartialState._reset_state()
    assert not state.initialized


def test_reset_empties_the_live_states_of_its_kind() -> None:
    from accel import Accelerator
    from accel.state import is_initialized

    partial, accelerator = PartialState(cpu=True), Accelerator(cpu=True, mixed_precision="bf16")
    assert is_initialized() and accelerator.state.mixed_precision == "bf16"
    PartialState._reset_state()  # PartialStates only, as in Accelerate
    with pytest.raises(AttributeError, match=r"`PartialState` object has no attribute `num_processes`\. This happens if "
                       r"`PartialState._reset_state\(\)` was called"):
        _ = partial.num_processes
    with pytest.raises(AttributeError, match=r"^'PartialState' object has no attribute 'unknown'$"):
        _ = partial.unknown
    assert accelerator.num_processes == 1 and is_initialized()

    accelerator.state._reset_state()
    assert not is_initialized() and not accelerator.state.initialized
    with pytest.raises(AttributeError, match=r"`AcceleratorState` object has no attribute `num_processes`\. This happens "
                       r"if `AcceleratorState._reset_state\(\)`"):
        _ = accelerator.num_processes
    with pytest.raises(AttributeError, match=r"This happens if `AcceleratorState._reset_state\(\)`"):
        accelerator.prepare(torch.nn.Linear(1, 1))  # refused early, as Accelerate's
    accelerator.state.note = "kept"  # an emptied state takes new attributes, as Accelerate's
    assert accelerator.state.note == "kept"

    fresh = Accelerator(cpu=True)  # starts fresh: nothing of the reset one carries over
    assert is_initialized() and fresh.state.mixed_precision == "no" and fresh.num_processes == 1
    # a state kept from before the reset now reads the new run's, as Accelerate's shared state
    assert accelerator.state.mixed_precision == "no" and accelerator.num_processes == 1
    AcceleratorState._reset_state(reset_partial_state=True)
    assert not is_initialized()


def test_cpu_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_USE_CPU", "1")
    assert PartialState().device == torch.device("cpu")


def test_decorators_run_the_function_in_a_single_process() -> None:
    state = PartialState()
    for decorator in (state.on_main_process, state.on_local_main_process, state.on_last_process):
        assert decorator(lambda x: x + 1)(1) == 2
    assert state.on_process(process_index=0)(lambda: "here")() == "here"
    assert state.on_process(process_index=1)(lambda: "here")() is None
    assert state.on_local_process(local_process_index=0)(lambda: "here")() == "here"
    with pytest.raises(ValueError, match=r"process_index=None is not accepted: give the index"):
        state.on_process(lambda: None)


def test_print_prints_on_the_local_main_process(capsys: pytest.CaptureFixture[str]) -> None:
    PartialState().print("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"


def test_accelerator_state_precision_comes_from_the_argument_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AcceleratorState().mixed_precision == "no"
    assert AcceleratorState(mixed_precision="bf16-mixed").mixed_precision == "bf16"
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    state = AcceleratorState()
    assert state.mixed_precision == "fp16" and "Mixed precision type: fp16" in repr(state)
    assert state.deepspeed_plugin is None and state.num_processes == 1
    with pytest.raises(ValueError, match="fp12"):
        AcceleratorState(mixed_precision="fp12")


def test_states_of_an_existing_process_state() -> None:
    process = ProcessState(torch.device("cpu"), 1, 1, 4, 2, "gloo")
    partial = PartialState.of(process)
    assert partial.process_state is process
    assert (partial.process_index, partial.num_local_processes, partial.distributed_type) == (1, 2, "MULTI_CPU")
    assert not partial.is_main_process and not partial.is_last_process and partial.distributed
    full = AcceleratorState.of(process, "bf16", fsdp_plugin="plugin")
    assert (full.mixed_precision, full.fsdp_plugin, full.backend) == ("bf16", "plugin", "gloo")
    assert full.on_process(process_index=1)(lambda: "ran")() == "ran"
    assert full.on_main_process(lambda: "ran")() is None


def test_accelerates_torch_device_variable_names_the_device_and_a_bad_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACCELERATE_TORCH_DEVICE (which Accelerate's PartialState reads) picks the device; nonsense is named."""
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cpu:3")
    assert ProcessState.from_environment(cpu=False).device == torch.device("cpu", 3)
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "gpu7")
    with pytest.raises(ValueError, match=r"ACCELERATE_TORCH_DEVICE='gpu7' is not a device torch knows"):
        ProcessState.from_environment(cpu=False)
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cuda:0")
    with pytest.raises(ValueError, match=r"cpu=True"):
        ProcessState.from_environment(cpu=True)
