"""`accel launch`: the plan from flags, config file and defaults; the processes it starts (one child,
or torch.distributed.run); and the report of the failure that caused the others.

The modules, by job:

* the plan: command.py (the subcommand: flags over the config file over the defaults; the script's
  exit status is accel's), plan.py (`LaunchPlan`: processes, machines, device and environment, and
  what cannot work refused before a process starts), rendezvous.py (torchrun's rendezvous and
  restart arguments, and what a failed rendezvous means), dry_run.py (`--dry_run MODEL`: the job's
  sharding plan and each rank's memory at its size, nothing run);
* the processes: children.py (one process as a child, several through the torchrun wrapper),
  distributed_run.py (that wrapper: torch.distributed.run made strict), worker.py (how each of
  several processes starts the script), parent_death.py (each process dies with its parent, so that
  a killed launch leaves nothing running), rank_grace.py (the others stopped some time after one
  process exited);
* stalls: stall_watch.py (processes waiting in a collective that another has not joined, reported),
  stacks.py (every thread's Python stack asked of a worker, shown as a traceback);
* failures: first_failure.py (each process's failure recorded, one traceback printed for all),
  cause.py (which process's failure caused the others), lost_machine.py (the machine at fault when
  several run: one that never joined, or one lost mid-run).
"""
