"""`accel config` and the config file: the questionary wizard, reading and writing config.yaml
(accel's keys, or an Accelerate config mapped onto them), and the checks `accel test` runs on one.

The modules, by job:

* the command: command.py (`accel config`, the wizard, and `accel config default`, the defaults
  without questions; both written atomically);
* the file: file.py (where config.yaml lives, how it is read, checked against the schema and
  written), from_accelerate.py (an Accelerate config.yaml: what accel understands kept, the rest named
  once) with from_accelerate_fsdp.py (its FSDP part; an FSDP1 config runs as FSDP2);
* the check: check.py (the whole configuration tried on this machine, as the script's Accelerator
  would build it, before anything runs or is written);
* the wizard: wizard.py (the questions, one function per group, only what matters on this machine),
  prompts.py (one questionary prompt per setting, answers checked by the flag's parser), and one
  module per topic: wizard_recipe.py (the FP8 recipe: only values the backend runs here), wizard_bnb.py
  (bitsandbytes quantization), wizard_dynamo.py (torch.compile), wizard_fsdp.py (FSDP),
  wizard_parallel.py (the device mesh), wizard_deepspeed.py (DeepSpeed).
"""
