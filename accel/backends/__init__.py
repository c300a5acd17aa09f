"""Precision backends: one file per precision, behind `PrecisionBackend`, found through a registry.

Import `accel.backends.registry` for the backends themselves; this package's own import is
kept free of torch so that the command line can use `accel.backends.names`.
"""
