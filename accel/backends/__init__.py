"""Precision backends: one file per precision, behind `PrecisionBackend`, found through a registry.

Import `accel.backends.registry` for the backends themselves; this package's own import is
kept free of torch so that the command line can use `accel.backends.names`.

The modules, by job:

* the interface: base.py (`PrecisionBackend`: the hooks the Accelerator calls, whose do-nothing
  defaults are fp32 training), names.py (the precision vocabulary: accel's, Lightning's and NeMo's
  spellings; torch-free), registry.py (precision name -> the backend that runs it);
* one backend per precision: full.py (fp32 and fp64), amp.py (fp16 and bf16 mixed: torch.autocast
  over fp32 weights, a GradScaler for fp16), half.py (16-true and bf16-true: weights, inputs and
  compute in one dtype), deepspeed.py (the precision DeepSpeed's engine runs, named and configured);
  FP8 in fp8/ (the FP8 backends and the choice between them), accel's own FP8 in native_fp8/;
* what the backends share: masters.py (float32 master weights for mixed precision), loss_scaler.py
  (`LossScaler`: dynamic loss scaling, skipped steps counted), conversion.py (which linear layers run
  in FP8: one rule and one report for every backend), capability.py (whether this machine runs a
  dtype fast, and why not).
"""
