"""The `accel` command line. Imports torch only in subcommands that need it.

The modules, by job:

* the entry point: main.py (`accel` and `python -m accel`: the subcommands registered from their
  modules), arguments.py (argparse with one-line errors; the `accel launch` flags derived from the
  settings schema), suggest.py ("did you mean ...?" for a mistyped command, choice or flag),
  errors.py (a problem said in one line on stderr, never a traceback), help_text.py (what a setting
  means, for `--help` and the wizard);
* the subcommands: config/ (`accel config`, the wizard and config.yaml), launch/ (`accel launch`),
  env.py (`accel env`: what a bug report needs), selftest.py (`accel test`) with selftest_script.py
  (the short training run it launches and checks), bench.py (`accel bench`; what it trains and
  reports is in accel/bench/), estimate.py (`accel estimate-memory`; the arithmetic is in
  accel/estimate/);
* this machine: capabilities.py (its devices, and the precisions and FP8 backends it can run, with
  the reason where it cannot), for the wizard, `accel launch` and `accel env`.
"""
