"""The version of accel, kept apart so the CLI can read it without importing torch."""

__version__ = "1.15.0"
