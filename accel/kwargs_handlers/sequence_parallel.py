"""DeepSpeedSequenceParallelConfig: Accelerate's options of DeepSpeed's Ulysses (`ParallelismConfig(sp_backend=
"deepspeed", sp_handler=...)`), torch-free; what runs them is accel.deepspeed.ulysses."""

from __future__ import annotations

import dataclasses
import os

from accel._validation import check_bool, check_choice, check_int

ATTENTIONS = ("sdpa", "flash_attention_2", "flash_attention_3")


@dataclasses.dataclass
class DeepSpeedSequenceParallelConfig:
    """How DeepSpeed's Ulysses splits sequences (Accelerate's fields and variables).

    Args:
        sp_seq_length: The sequence length, when every batch has the same (None with variable lengths).
            None: PARALLELISM_CONFIG_SP_SEQ_LENGTH.
        sp_seq_length_is_variable: True (the default) when batches' lengths vary. None:
            PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE, else True.
        sp_attn_implementation: The model's attention implementation ("sdpa", "flash_attention_2",
            "flash_attention_3"). None: PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION, else the model's own.

    Example:
        ```python
        ParallelismConfig(sp_backend="deepspeed", sp_size=2, sp_handler=DeepSpeedSequenceParallelConfig())
        ```
    """

    sp_seq_length: int | None = None
    sp_seq_length_is_variable: bool | None = None
    sp_attn_implementation: str | None = None

    def __post_init__(self) -> None:
        if self.sp_seq_length_is_variable is None:
            text = os.environ.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "true").strip().lower()
            self.sp_seq_length_is_variable = text == "true"
        check_bool("DeepSpeedSequenceParallelConfig.sp_seq_length_is_variable", self.sp_seq_length_is_variable)
        if self.sp_seq_length is None and os.environ.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "None") != "None":
            self.sp_seq_length = int(os.environ["PARALLELISM_CONFIG_SP_SEQ_LENGTH"])
        if self.sp_seq_length is not None:
            check_int("DeepSpeedSequenceParallelConfig.sp_seq_length", self.sp_seq_length, minimum=1)
        elif not self.sp_seq_length_is_variable:
            raise ValueError("DeepSpeedSequenceParallelConfig(sp_seq_length_is_variable=False) needs sp_seq_length (the "
                             "length every batch has), or sp_seq_length_is_variable=True.")
        if self.sp_attn_implementation is None:
            found = os.environ.get("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "None")
            self.sp_attn_implementation = None if found == "None" else found
        if self.sp_attn_implementation is not None:
            check_choice("DeepSpeedSequenceParallelConfig.sp_attn_implementation", self.sp_attn_implementation, ATTENTIONS)
