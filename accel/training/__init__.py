"""The wrappers around the user's training objects: optimizer, scheduler, model, gradient accumulation.

The modules, by job:

* the wrappers: optimizer.py (`AcceleratedOptimizer`: the user's optimizer, stepped through the
  precision backend), scheduler.py (`AcceleratedScheduler`: stepped as Accelerate steps it),
  model.py (a model prepared for a precision and for several processes, and unwrapped again),
  prepared.py (`PreparedObjects`: the registry of what an Accelerator prepared, which checkpoints
  read);
* gradient accumulation: gradient_state.py (`GradientState`: which micro-batch ends with an
  optimizer step, and the dataloaders being iterated), accumulation.py (`GradientAccumulationPlugin`);
* over several processes: local_sgd.py (`LocalSGD`: local optimizer steps, then the parameters
  averaged); how a model is spread over them is the strategy's (accel.parallel.strategy);
* the model itself: blocks.py (a model's repeated blocks, and activation checkpointing of them), selective.py
  (which activations a checkpointed block keeps: selective checkpointing, a memory budget),
  compiling.py (torch.compile: its options resolved at construction, the compile in prepare),
  meta_init.py (models built on the meta device, given memory at prepare);
* helpers scripts import: seeding.py (`set_seed`), out_of_memory.py (`find_executable_batch_size`,
  `release_memory`).
"""
