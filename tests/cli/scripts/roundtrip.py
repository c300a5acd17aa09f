"""Rebuilds the configured values from the environment through the schema and prints them as JSON.

Setting.from_env for every top-level setting, fp8_recipe_from_env for the recipe, and an
Accelerator built with no arguments (its error, if the precision cannot run in this version).
"""

import dataclasses
import json

from accel.settings import TOP_LEVEL_SETTINGS
from accel.settings.handlers import fp8_recipe_from_env

report = {"settings": {s.name: s.from_env() for s in TOP_LEVEL_SETTINGS}}
recipe = fp8_recipe_from_env()
if recipe is not None:
    report["recipe"] = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(recipe)}
    report["recipe_explicit"] = sorted(recipe.explicit_fields)
try:
    from accel import Accelerator

    accelerator = Accelerator()
    report["accelerator"] = {
        "mixed_precision": accelerator.mixed_precision,
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
        "device": str(accelerator.device),
    }
    plugin = accelerator.dynamo_plugin
    report["dynamo"] = {"backend": plugin.backend, "mode": plugin.mode, "fullgraph": plugin.fullgraph,
                        "dynamic": plugin.dynamic}
except NotImplementedError as error:
    report["accelerator_error"] = str(error)
print("ROUNDTRIP " + json.dumps(report), flush=True)
