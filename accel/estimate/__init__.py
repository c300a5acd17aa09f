"""Will it fit: memory a model needs, estimated before the job from its shapes alone (meta device).

* what is estimated: sizes.py (Accelerate's loading table: total size, largest layer, its "Training
  using Adam" column), training.py (each rank's parameters, gradients, optimizer state and
  communication buffers for a precision, layout and number of processes), activations.py (the
  activations of one micro-batch, measured by a forward on fake tensors, with and without the blocks
  checkpointed), quantized.py (what bitsandbytes holds for each Linear accel quantizes: the packed
  weight and its quant state, for training.py's `quantization`), zero.py (DeepSpeed ZeRO 1-3 and offload:
  each rank's device and host bytes, and `zero_held_bytes` measuring a live engine the same way);
* communication.py: the bytes each rank hands to collectives per step (ZeRO: communication_zero.py; TP: communication_tp.py);
* at scale: plan.py (the real sharding plan, FSDP2 / HSDP / tensor parallelism, at any number of
  ranks in this one process, on torch's fake process group), layout.py (the layout, read from the
  settings a launch reads), per_rank.py (each rank's bytes for a layout, over the rules of each);
* the model: models.py (presets, transformers configs from a folder or the local cache,
  module:function), built on the meta device;
* what a run really holds, to check the estimate against: measure.py.

`accel estimate-memory` (accel/cli/estimate.py) prints them; `accel launch --dry_run` plans a job with them.
"""
