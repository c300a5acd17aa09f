"""The `accel` command line. Imports torch only in subcommands that need it."""
