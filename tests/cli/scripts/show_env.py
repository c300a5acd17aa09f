"""Prints one JSON line: argv, the torchrun rank variables and every ACCEL_* variable; exits with $EXIT_STATUS.

With $FAIL_ON_RANK set, only that rank exits with $EXIT_STATUS.
"""

import json
import os
import sys

keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT")
report = {
    "argv": sys.argv[1:],
    "env": {k: v for k, v in os.environ.items() if k.startswith("ACCEL_") or k in keys},
}
os.write(1, ("SHOW " + json.dumps(report) + "\n").encode())  # one write: ranks share the pipe
fail_rank = os.environ.get("FAIL_ON_RANK")
if fail_rank is None or fail_rank == os.environ.get("RANK"):
    sys.exit(int(os.environ.get("EXIT_STATUS", "0")))
