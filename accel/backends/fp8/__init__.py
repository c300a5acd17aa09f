"""mixed_precision='fp8': the FP8 backends behind one base class, and the choice between them.

base (FP8Backend and its registry), choice (which backend runs: `FP8RecipeKwargs(backend=...)`,
`auto`), base_precision (what runs outside the FP8 products), and one adapter per library: native
(accel's own, accel.backends.native_fp8) with native_model, te with te_convert / te_params /
te_recipe (TransformerEngine), ao with ao_recipe / ao_fsdp (torchao), msamp (MS-AMP); support holds
what the library adapters share. Import accel.backends.fp8.choice for the backends themselves.
"""
