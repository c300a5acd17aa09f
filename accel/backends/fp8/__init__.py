"""mixed_precision='fp8': the FP8 backends behind one base class, and the choice between them.

Import accel.backends.fp8.choice for the backends themselves.

The modules, by job:

* common ground: base.py (`FP8Backend`, the recipe's checks, and the registry of backends),
  choice.py (which backend runs: `FP8RecipeKwargs(backend=...)`, `auto`), base_precision.py (what
  runs outside the FP8 products: bf16 or fp16 autocast, or fp32), small_layers.py (the Linear layers
  too small to gain from FP8), support.py (what the library adapters share: is it installed, which
  version, which recipe fields it runs at one value);
* FP8 health (`health_interval`): health.py (per-layer amax, scale, saturated and underflowed
  fractions, as metrics), health_readers.py (what the te and ao backends can read of them);
* one adapter per library:
  - native.py (accel's own FP8, accel.backends.native_fp8) with native_model.py (its forward
    wrapper, its scalers, the tied weights it cannot give O1/O2 storage) and native_readings.py
    (FP8 health's readings and `fp8_stats` from its scalers and O1/O2 gradients);
  - te.py (NVIDIA TransformerEngine) with te_api.py (TE's entry points before and after 2.9),
    te_convert.py (Linear and LayerNorm layers swapped for TE's), te_params.py (`fp8_params`: FP8
    weights in the modules, masters with the optimizer), te_recipe.py (the TE recipe object, and
    whether this GPU runs it);
  - ao.py (torchao's float8 training) with ao_import.py (importing torchao without its start-up
    noise), ao_recipe.py (the Float8LinearConfig of a recipe), ao_mxfp8.py (`scaling='mxfp8'`),
    ao_fsdp.py (weights all-gathered in FP8 under FSDP2);
  - msamp.py (Microsoft MS-AMP: model and optimizer converted together).
"""
