"""Tensor parallelism through the Accelerator on real processes (gloo, CPU), against one process.

TP alone on 2 processes (a residual MLP with a user plan; a tiny transformers Llama with its own tp_plan,
its embeddings tied or not) and FSDP2 + TP (2-D) on 4, accumulating over 2 micro-batches: losses and gradient
norms within 1e-6 of the one-process run on the whole batch, full weights within 1e-6 (the Llama's within 1e-4:
AdamW divides by the square root of tiny second moments, which magnifies last-bit differences of the
gradients). A sharded checkpoint saved by TP on 2 processes reloads on other layouts (2-D on 4, plain data
parallelism on 2) with the same weights and optimizer steps.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed" / "two_processes"))
from launching import Launched, launch  # noqa: E402

HERE = Path(__file__).parent
TOLERANCE = 1e-6


def run(processes: int, *args: str) -> Launched:
    done = launch(str(HERE / "tensor_train_script.py"), *args, processes=processes, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def tp_mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Launched, Path]:
    """The MLP trained with TP on 2 processes (its checkpoint is reloaded on other layouts below)."""
    folder = tmp_path_factory.mktemp("tp_mlp")
    return run(2, "train", "mlp", "2", str(folder)), folder


@pytest.mark.parametrize(("processes", "kind", "weights"), [
    (2, "mlp", TOLERANCE), (4, "mlp", TOLERANCE), (2, "llama", 1e-4), (2, "tied", 1e-4),
])
def test_matches_one_process(
    tmp_path: Path, tp_mlp: tuple[Launched, Path], processes: int, kind: str, weights: float
) -> None:
    accumulate = "2" if processes == 4 else "1"  # 2-D: micro-batches that skip FSDP2's reduce-scatter (no_sync)
    done = tp_mlp[0] if (processes, kind) == (2, "mlp") else run(processes, "train", kind, "2", str(tmp_path), accumulate)
    for name in ("loss_difference", "norm_difference"):
        assert max(done.of(name)) <= TOLERANCE, (name, done.of(name))
    assert done.of("weight_difference")[0] <= weights
    split = done.of("split")[0]
    assert split == (["DTensor"] if processes == 4 else ["DTensor", "Parameter"])  # 2-D: everything sharded
    assert "shards" in done.of("checkpoint")[0]
    assert done.of("tied")[0] == (["lm_head.weight"] if kind == "tied" else [])  # still one parameter, split alike


def test_checkpoint_reloads_on_other_layouts(tp_mlp: tuple[Launched, Path]) -> None:
    for processes, tp_size in ((4, 2), (2, 1)):  # 2-D (dp_shard 2 x tp 2), plain data parallelism
        done = run(processes, "load", "mlp", str(tp_size), str(tp_mlp[1]))
        assert done.of("loaded_difference")[0] == 0.0, (processes, tp_size)
        assert done.of("optimizer_steps") == [[4]] * processes


def test_a_data_parallel_checkpoint_loads_into_tensor_parallel(tmp_path: Path) -> None:
    """A DDP checkpoint (model.safetensors, optimizer.pt by position) into TP: each process keeps its slices."""
    saved = run(2, "train", "mlp", "1", str(tmp_path))
    assert "model.safetensors" in saved.of("checkpoint")[0]
    done = run(2, "load", "mlp", "2", str(tmp_path))
    assert done.of("loaded_difference")[0] == 0.0
    assert done.of("optimizer_steps") == [[4], [4]]
