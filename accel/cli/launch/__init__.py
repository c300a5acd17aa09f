"""`accel launch`: the plan from flags, config file and defaults; the processes it starts (one child,
or torch.distributed.run); and the report of the first failure among them."""
