"""The wrappers around the user's training objects, and how a model is spread over processes.

optimizer (AcceleratedOptimizer), scheduler (AcceleratedScheduler), gradient_state and accumulation
(which micro-batch ends with a step), model (precision conversion, unwrapping), compiling
(torch.compile), strategy (one process or DDP; accel.fsdp.strategy is FSDP2's), seeding (set_seed),
out_of_memory (find_executable_batch_size).
"""
