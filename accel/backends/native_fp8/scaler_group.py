"""All the FP8 scalers of a model, for the once-per-step work: one all-reduce of their amaxes,
their scale updates stacked (a few operations per step instead of a few per scaler), the
non-finite check that skips a step, their statistics and their checkpoint state.

:class:`~accel.backends.native_fp8.scaling.TensorScaler` is one tensor's scaling; this module
coordinates many.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from accel.backends.native_fp8 import data_parallel as distributed
from accel.backends.native_fp8.scaling import STATE_KEYS, TensorScaler, raw_scale


def _update_together(scalers: list[TensorScaler]) -> None:
    """:meth:`TensorScaler.update` of scalers on one device with one history length, stacked."""
    amax = torch.stack([s.step_amax for s in scalers])
    finite = torch.isfinite(amax)
    history = torch.stack([s.amax_history for s in scalers])
    rolled = torch.cat((amax.unsqueeze(1), history[:, :-1]), dim=1)
    history = torch.where(finite.unsqueeze(1), rolled, history)
    by_max = torch.tensor([s.amax_compute_algo == "max" for s in scalers], device=amax.device)
    history_amax = torch.where(by_max, history.amax(dim=1), history[:, 0])
    previous = torch.stack([s.scale for s in scalers])
    numerator = torch.stack([s._numerator for s in scalers])
    usable = torch.isfinite(history_amax) & (history_amax > 0)
    scale = torch.where(usable, raw_scale(history_amax, numerator), previous)
    delayed = torch.tensor([s.scaling == "delayed" for s in scalers], device=amax.device)
    scale = torch.where(delayed, scale, previous)
    calibrated = torch.stack([s.calibrated for s in scalers]) | (finite & (amax > 0))
    # Each scaler gets its rows of the stacks (views: a checkpoint's state_dict copies them out).
    for scaler, row, new_scale, flag in zip(scalers, history.unbind(), scale.unbind(), calibrated.unbind()):
        scaler.amax_history, scaler.scale, scaler.calibrated = row, new_scale, flag
        scaler.last_amax = scaler.step_amax
        scaler.step_amax = scaler._zero
        if scaler.count_stats:
            scaler.publish_counts()


class ScalerGroup:
    """All the scalers of a model, by name, for the once-per-step work.

    Build it once after conversion and call, once per optimizer step (after all
    the step's gradient-accumulation micro-batches) and in this order:
    :meth:`found_nonfinite` (skip the optimizer step if true), then :meth:`update`.
    """

    def __init__(self, scalers: Mapping[str, TensorScaler]) -> None:
        self.scalers: dict[str, TensorScaler] = dict(scalers)

    def __len__(self) -> int:
        return len(self.scalers)

    def __iter__(self) -> Iterator[str]:
        return iter(self.scalers)

    def __getitem__(self, name: str) -> TensorScaler:
        return self.scalers[name]

    def reduce_amax(self) -> None:
        """Make every process's step amaxes equal (their maximum) before the scales are derived,
        so that all replicas cast with the same scales. One all-reduce for the whole model;
        nothing with one process."""
        if distributed.world_size() == 1 or not self.scalers:
            return
        scalers = list(self.scalers.values())
        reduced = distributed.max_over_processes(torch.stack([s.step_amax for s in scalers]))
        for scaler, amax in zip(scalers, reduced.unbind()):
            scaler.step_amax = amax

    def update(self) -> None:
        """End the step on every scaler: reduce the amaxes, then update the scales.

        What :meth:`TensorScaler.update` does, computed for all the scalers that share a device and
        a history length at once: a few operations per step instead of a few per scaler.
        """
        self.reduce_amax()
        batches: dict[tuple[torch.device, int], list[TensorScaler]] = {}
        for scaler in self.scalers.values():
            batches.setdefault((scaler.device, scaler.amax_history_len), []).append(scaler)
        for batch in batches.values():
            if len(batch) == 1:
                batch[0].update()
            else:
                _update_together(batch)

    def found_nonfinite(self) -> torch.Tensor:
        """0-dim bool tensor: did any FP8 cast in this step see NaN or inf?"""
        if not self.scalers:
            return torch.zeros((), dtype=torch.bool)
        amaxes = torch.stack([s.step_amax for s in self.scalers.values()])
        return ~torch.isfinite(amaxes).all()

    def stats(self) -> dict[str, dict[str, torch.Tensor]]:
        """Each scaler's :meth:`TensorScaler.last_stats`, by name."""
        return {name: s.last_stats() for name, s in self.scalers.items()}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Flat ``{"<scaler name>.<key>": tensor}``, loadable with weights_only=True."""
        return {
            f"{name}.{key}": value
            for name, scaler in self.scalers.items()
            for key, value in scaler.state_dict().items()
        }

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict`; raises ValueError listing missing or unexpected keys."""
        expected = {
            f"{name}.{key}" for name in self.scalers for key in STATE_KEYS
        }
        missing = sorted(expected - set(state))
        unexpected = sorted(set(state) - expected)
        if missing or unexpected:
            raise ValueError(
                f"FP8 scaling state does not match the model: missing keys {missing[:8]}"
                f"{' ...' if len(missing) > 8 else ''}, unexpected keys {unexpected[:8]}"
                f"{' ...' if len(unexpected) > 8 else ''}"
            )
        for name, scaler in self.scalers.items():
            scaler.load_state_dict({key: state[f"{name}.{key}"] for key in STATE_KEYS})
