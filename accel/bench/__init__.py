"""`accel bench`: train a model for a few steps in every precision that runs here and compare them.

The command itself is accel/cli/bench.py. The modules, by job:

* what is trained: workload.py (the example GPT, or the user's model through a hook function),
  gpt.py (the small character-level GPT and its data, also the examples' model), cases.py (one case
  per precision and FP8 backend or level: the recipe of an Accelerator);
* running a case: run.py (a fresh copy of the model trained through an Accelerator, timed step by
  step), memory_use.py (peak memory, and bytes of state per parameter), flops.py (MFU: the
  workload's FLOPs per token over the device's peak);
* the outputs: report.py (the text table, the recommendation, the CSV and the PNG chart).
"""
