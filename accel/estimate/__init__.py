"""Will it fit: memory a model needs, estimated before the job from its shapes alone (meta device).

* what is estimated: sizes.py (Accelerate's loading table: total size, largest layer, its "Training
  using Adam" column), training.py (each rank's parameters, gradients, optimizer state and
  communication buffers for a precision, layout and number of processes), activations.py (the
  activations of one micro-batch, measured by a forward on fake tensors, with and without the blocks
  checkpointed);
* the model: models.py (presets, transformers configs from a folder or the local cache,
  module:function), built on the meta device;
* what a run really holds, to check the estimate against: measure.py.

`accel estimate-memory` (accel/cli/estimate.py) prints them.
"""
