"""The settings schema: each setting's one name, from which its YAML key, `accel launch` flag,
ACCEL_* variable and keyword are derived, in one place (DESIGN.md, principle 2). Torch-free, so that
the command line shares it with the Accelerator.

The modules, by job:

* what a setting is: setting (the `Setting` class: one name -> YAML key, flag, variable, keyword,
  and reading it from the environment), kinds (the kinds of value: how each is checked, parsed from
  text and asked for by the wizard);
* what settings there are: catalogue (every setting accel has, the FP8/bitsandbytes/FSDP ones
  derived from their handlers' fields; re-exported here, so `from accel.settings import
  MIXED_PRECISION` reads it), accelerate_names (Accelerate's launcher's spellings of the same
  settings), deepspeed_names (the `deepspeed_config:` table, in Accelerate's keys);
* reading them: handlers (the kwargs handlers a launched script gets from its environment),
  environment (every ACCEL_* name accel knows, and the check of those that are set).
"""

from accel.settings.catalogue import *  # noqa: F403  # the catalogue is the package's public face
