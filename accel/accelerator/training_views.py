"""The Accelerator's views of the run in progress (Accelerate's names): the device, the precision that
runs and what it reports, the accumulation state, the next checkpoint's number."""

from __future__ import annotations

from typing import Any

import torch

from accel.accelerator import options


class TrainingViewsMixin:
    """`device`, `mixed_precision`, `scaler`, `native_amp`, `step_stats`, `conversion_report`,
    `quantization_report`, `gradient_accumulation_steps` and `sync_gradients` (settable),
    `optimizer_step_was_skipped`, `save_iteration` (settable): read from the objects the constructor
    built, so they always say what runs."""

    process_state: Any
    project_configuration: Any
    precision: Any
    gradient_state: Any
    prepared: Any
    quantizer: Any

    @property
    def device(self) -> torch.device:
        """The device this process trains on, named as Accelerate names it (`cpu:0` on each process of a
        multi-CPU run, `cpu` for one process)."""
        return self.process_state.public_device

    @property
    def save_iteration(self) -> int:
        """The number the next save_state() gets (checkpoint_<n>); load_state() continues it."""
        return self.project_configuration.iteration

    @save_iteration.setter
    def save_iteration(self, value: int) -> None:
        self.project_configuration.iteration = value

    @property
    def mixed_precision(self) -> str:
        """The canonical name of the precision that runs ('no', 'fp16', 'bf16', 'fp8', '16-true', ...)."""
        return self.precision.name

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.num_steps = options.positive_int("gradient_accumulation_steps", steps)

    @property
    def sync_gradients(self) -> bool:
        """True on a micro-batch that ends with an optimizer step."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state.sync_gradients = value

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last step of any prepared optimizer was skipped (inf/NaN gradients)."""
        return any(optimizer.step_was_skipped for optimizer in self.prepared.optimizers)

    @property
    def conversion_report(self) -> Any:
        """For FP8: every nn.Linear, converted or skipped and why (None for other precisions)."""
        return getattr(self.precision, "conversion_report", None)

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """torch's GradScaler where the precision scales the loss (fp16), else None."""
        return self.precision.grad_scaler

    @property
    def native_amp(self) -> bool:
        """True where the forward runs under torch.autocast (fp16, bf16 mixed)."""
        return self.precision.native_amp

    @property
    def quantization_report(self) -> Any:
        """With BitsandbytesKwargs: every nn.Linear of the last prepared model, quantized or skipped and why."""
        return None if self.quantizer is None else self.quantizer.report

    @property
    def step_stats(self) -> dict[str, float]:
        """Numbers worth logging each step: for fp16 the loss scale and the count of skipped steps."""
        return self.precision.stats()
