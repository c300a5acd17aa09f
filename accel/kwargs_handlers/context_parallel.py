"""TorchContextParallelConfig: Accelerate's options of context parallelism (`ParallelismConfig(cp_handler=...)`),
torch-free; what runs them is accel.parallel.context."""

from __future__ import annotations

import dataclasses
import os

from accel._validation import check_choice

CP_COMM_STRATEGIES = ("allgather", "alltoall")


@dataclasses.dataclass
class TorchContextParallelConfig:
    """Accelerate's options of context parallelism (`ParallelismConfig(cp_handler=...)`).

    Args:
        cp_comm_strategy: How keys and values go round the cp ranks: "allgather" (the default) or "alltoall".
            None: ACCEL_PARALLELISM_CONFIG_CP_COMM_STRATEGY, else Accelerate's PARALLELISM_CONFIG_CP_COMM_STRATEGY,
            else "allgather".

    Example:
        ```python
        handler = TorchContextParallelConfig(cp_comm_strategy="alltoall")
        ParallelismConfig(dp_shard_size=2, cp_size=2, cp_handler=handler)
        ```
    """

    cp_comm_strategy: str | None = None

    def __post_init__(self) -> None:
        given = self.cp_comm_strategy
        if given is None:
            given = os.environ.get("ACCEL_PARALLELISM_CONFIG_CP_COMM_STRATEGY") or os.environ.get(
                "PARALLELISM_CONFIG_CP_COMM_STRATEGY", "allgather")
        self.cp_comm_strategy = check_choice("TorchContextParallelConfig.cp_comm_strategy", given, CP_COMM_STRATEGIES)
