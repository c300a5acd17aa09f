"""Processes and collectives: which process this is, its process group, and what processes exchange.

process_state (ProcessState: rank, device, group), process_group (joining and leaving
torch.distributed), partial_state (Accelerate's PartialState / AcceleratorState), operations
(gather, reduce, broadcast on nested structures), errors (a failed collective named), padding and
splitting (pad_across_processes, split_between_processes), types (DistributedType, PrecisionType).
Nothing here imports the Accelerator: an inference script's `PartialState` loads this folder only.
"""
