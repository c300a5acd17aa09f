"""Parallel layouts beyond data parallelism: device meshes, tensor parallelism, N-D strategies."""
