"""The dataloader options in force, as Accelerator properties (Accelerate's names), and resuming a
dataloader mid-epoch (`skip_first_batches`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from accel._validation import check_bool
from accel.data.configuration import DataLoaderConfiguration
from accel.data.loader_options import check_dataloader_config
from accel.data.skipping import skip_first_batches


class DataOptionsMixin:
    """`split_batches`, `even_batches` (settable), `use_seedable_sampler`, `non_blocking`,
    `dispatch_batches`, `use_stateful_dataloader`: read from `dataloader_config`, which prepared
    dataloaders follow; `skip_first_batches`."""

    dataloader_config: DataLoaderConfiguration

    @property
    def split_batches(self) -> bool:
        """Whether each batch a prepared dataloader yields is split over the processes."""
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        """Whether samples are repeated so that every process gets the same number of batches
        (settable, as in Accelerate: dataloaders prepared afterwards follow the new value)."""
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        config = dataclasses.replace(self.dataloader_config, even_batches=check_bool("even_batches", value))
        check_dataloader_config(config)
        self.dataloader_config = config

    @property
    def use_seedable_sampler(self) -> bool:
        """Whether prepared dataloaders shuffle with the seedable sampler (DataLoaderConfiguration)."""
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        """Whether batches are copied to the device with non_blocking=True."""
        return self.dataloader_config.non_blocking

    @property
    def dispatch_batches(self) -> bool | None:
        """Never True: each process reads its own part of the data (DataLoaderConfiguration)."""
        return self.dataloader_config.dispatch_batches

    @property
    def use_stateful_dataloader(self) -> bool:
        """Whether `load_state` puts prepared dataloaders back where the checkpoint was taken
        (DataLoaderConfiguration; no torchdata needed).

        Example: `Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))`."""
        return self.dataloader_config.use_stateful_dataloader

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A dataloader that skips the first `num_batches` batches of its next epoch, to resume mid-epoch.

        Args:
            dataloader: A prepared dataloader (or a plain one).
            num_batches: How many batches to skip (those already trained on before the checkpoint).

        Returns:
            The dataloader to iterate for the rest of this epoch; later epochs start at the beginning.
        """
        return skip_first_batches(dataloader, num_batches)
