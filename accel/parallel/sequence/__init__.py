"""Sequence parallelism (Ulysses, `ParallelismConfig(sp_size=N, sp_backend="torch")`): each rank holds a slice
of every sequence; around attention, an all-to-all gives each rank every position of its share of the heads.

Torch-native: it needs only all-to-all and all-reduce, so it runs wherever the process group does, gloo on
CPU processes included. Loaded only when sp_size > 1. The modules, by job:

* ulysses.py (`SequenceParallel`: the group, and what prepare does with it to models and dataloaders);
* collectives.py (the differentiable all-to-all between heads and positions, and the sum over the group);
* attention.py (the dispatcher put in transformers' attention registry, the models it refuses);
* batches.py (one rank's slice of a batch: targets shifted and positions numbered on the whole sequence);
* loss.py (the whole sequence's loss as `outputs.loss`, from each rank's slice).
"""
