"""Processes and collectives: which process this is, its process group, and what processes exchange.

Where this package ends and the parallel layout begins: here are the processes themselves (the process
group they join, each one's rank and device, the collectives, Accelerate's process-state objects); how a
model and its optimizer are placed over those processes (DDP, FSDP2, HSDP, tensor parallelism, DeepSpeed,
the device meshes they run on) is chosen in accel.parallel, with each engine's code in accel.fsdp and
accel.deepspeed.

The modules, by job:

* the process and its group: process_state.py (`ProcessState`: rank, device, group), process_group.py
  (joining and leaving torch.distributed), partial_state.py (Accelerate's `PartialState` /
  `AcceleratorState`), state_lifetime.py (which of them are alive, what `_reset_state()` empties,
  `is_initialized()`), run_where.py (the `on_*_process` decorators' rule), types.py (Accelerate's
  `DistributedType`, `PrecisionType`);
* what processes exchange: operations.py (gather, reduce, broadcast on nested structures), padding.py
  (`pad_across_processes`), splitting.py (`split_between_processes`);
* when a collective goes wrong: errors.py (a failed collective named, with the process and the
  operation), stall_marks.py (which collective this process waits in, read by `accel launch` to name a
  stuck rank).

Nothing here imports the Accelerator: an inference script's `PartialState` loads this folder only.
"""
