"""Checkpointing needs only its CheckpointHost protocol: a host built from accel's parts, with no
Accelerator, saves and resumes exactly."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from accel.backends.base import PrecisionBackend
from accel.backends.full import FullPrecision
from accel.checkpointing import ProjectConfiguration, load_state, save_state
from accel.distributed.process_state import ProcessState
from accel.kwargs_handlers import Handlers, collect_handlers
from accel.parallel.strategy import DataParallelStrategy, ParallelStrategy
from accel.training.gradient_state import GradientState
from accel.training.model import unwrap_model
from accel.training.optimizer import AcceleratedOptimizer
from accel.training.prepared import PreparedObjects


@dataclasses.dataclass
class Host:
    """The least a training loop needs to be checkpointed (the Accelerator is the real host)."""

    prepared: PreparedObjects
    precision: PrecisionBackend
    handlers: Handlers
    process_state: ProcessState
    gradient_state: GradientState
    project_configuration: ProjectConfiguration
    strategy: ParallelStrategy

    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> nn.Module:
        return unwrap_model(model, keep_fp32_wrapper=keep_fp32_wrapper, keep_torch_compile=keep_torch_compile)

    def get_state_dict(self, model: nn.Module, unwrap: bool = True, dequantize: bool = False) -> dict[str, torch.Tensor]:
        return self.strategy.full_state_dict(self.unwrap_model(model) if unwrap else model)


def _host(folder: Path) -> tuple[Host, nn.Module, AcceleratedOptimizer]:
    torch.manual_seed(0)
    state = ProcessState(device=torch.device("cpu"))
    handlers = collect_handlers(None, None)
    precision = FullPrecision(state.device, handlers)
    model = nn.Linear(4, 1)
    gradients = GradientState(1, True)
    optimizer = AcceleratedOptimizer(torch.optim.AdamW(model.parameters(), lr=0.1), precision, gradients)
    prepared = PreparedObjects(models=[model], optimizers=[optimizer])
    host = Host(prepared, precision, handlers, state, gradients, ProjectConfiguration(project_dir=str(folder)),
                DataParallelStrategy(state, precision, handlers))
    return host, model, optimizer


def _step(model: nn.Module, optimizer: AcceleratedOptimizer, x: torch.Tensor) -> None:
    model(x).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_a_host_without_an_accelerator_saves_and_resumes_exactly(tmp_path: Path) -> None:
    data = torch.randn(3, 8, 4, generator=torch.Generator().manual_seed(1))
    host, model, optimizer = _host(tmp_path)
    _step(model, optimizer, data[0])
    folder = save_state(host, None)
    for x in data[1:]:
        _step(model, optimizer, x)
    expected = model.weight.detach().clone()

    resumed, model, optimizer = _host(tmp_path)  # fresh weights and an empty optimizer
    assert load_state(resumed, None) == folder
    for x in data[1:]:
        _step(model, optimizer, x)
    assert torch.equal(model.weight, expected)
    assert (folder / "manifest.json").is_file() and folder.name == "checkpoint_0"
