"""ParallelismConfig layouts with real processes (gloo, CPU): HSDP (2 x 2), FSDP2 and DDP over a 1-D mesh, and
the whole world by default, each against one process training on the global batch; the mesh's dimension
names and sizes, the parameters' placements, the rows each rank reads, and the refusals of bad layouts.

Tolerance: torch sums the gradient parts of the processes in another order than one process does, so
losses agree to ~1e-7 and weights after 4 AdamW steps to ~1e-6 (measured: at most 2.4e-7 and 9.1e-7); the
bounds are 1e-6 and 1e-5."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fsdp_tiny import GLOBAL_BATCH, batch, loss_of, make_model, optimizer_for
from launching import Launched, launch

SCRIPT = str(Path(__file__).parent / "mesh_script.py")
STEPS = 4


def reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, the global batch of each step: its losses and final weights."""
    model = make_model()
    optimizer = optimizer_for(model)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        x[:, 7] = torch.arange(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH, dtype=x.dtype)  # as the script's rows
        loss = loss_of(model, x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, model.state_dict()


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    result = launch(SCRIPT, str(tmp_path_factory.mktemp("checkpoints")), processes=4, timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    result = launch(SCRIPT, str(tmp_path_factory.mktemp("checkpoints")), processes=2, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def check_against_reference(run: Launched, layout: str) -> None:
    losses, weights = reference()
    for reported in run.of(f"{layout}_losses"):
        torch.testing.assert_close(torch.tensor(reported), torch.tensor(losses), rtol=0, atol=1e-6)
    full = run.of(f"{layout}_full")[0]
    assert full.keys() == weights.keys()
    for name, tensor in weights.items():
        torch.testing.assert_close(torch.tensor(full[name]), tensor, rtol=0, atol=1e-5)


@pytest.mark.parametrize("layout", ["hsdp", "fsdp", "ddp", "whole_world", "tp_2d"])
def test_each_layout_on_four_processes_trains_like_one_process(four: Launched, layout: str) -> None:
    check_against_reference(four, layout)


@pytest.mark.parametrize("layout", ["fsdp", "ddp", "tp_only"])
def test_each_layout_on_two_processes_trains_like_one_process(two: Launched, layout: str) -> None:
    check_against_reference(two, layout)


def test_hsdp_builds_accelerates_two_dimensional_mesh_and_shards_within_replicas(four: Launched) -> None:
    assert four.of("hsdp_mesh") == [[["dp_replicate", "dp_shard"], [2, 2], {"dp": 4, "dp_shard_cp": 2, "dp_cp": 4}]] * 4
    assert four.of("hsdp_placements") == ["(Replicate(), Shard(dim=0))"] * 4
    assert four.of("hsdp_strategy") == ["FSDPStrategy"] * 4
    # data_parallel_rank, data_parallel_shard_rank, tensor_parallel_rank (Accelerate's views)
    assert four.of("hsdp_ranks") == [[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]]
    assert four.of("ddp_ranks") == [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]


def test_one_dimensional_meshes_carry_accelerates_names(four: Launched, two: Launched) -> None:
    assert four.of("fsdp_mesh")[0] == [["dp_shard"], [4], {"dp": 4, "dp_shard_cp": 4, "dp_cp": 4}]
    assert four.of("fsdp_placements")[0] == "(Shard(dim=0),)"
    assert four.of("ddp_mesh")[0] == [["dp_replicate"], [4], {"dp": 4, "dp_cp": 4}]
    assert four.of("ddp_strategy")[0] == "DataParallelStrategy"
    assert two.of("fsdp_mesh")[1] == [["dp_shard"], [2], {"dp": 2, "dp_shard_cp": 2, "dp_cp": 2}]


def test_all_sizes_one_with_fsdp_shards_over_the_whole_world(four: Launched) -> None:
    assert four.of("whole_world_mesh")[0] == [["dp_shard"], [4], {"dp": 4, "dp_shard_cp": 4, "dp_cp": 4}]


def test_every_data_parallel_rank_reads_its_own_rows(four: Launched) -> None:
    for layout in ("hsdp", "fsdp", "ddp"):
        rows = four.of(f"{layout}_rows")
        for rank, mine in enumerate(rows):
            assert mine == [[step * GLOBAL_BATCH + 2 * rank, step * GLOBAL_BATCH + 2 * rank + 1] for step in range(STEPS)]


def test_ranks_of_one_tensor_parallel_group_read_the_same_rows(four: Launched, two: Launched) -> None:
    rows = four.of("tp_rows")
    assert rows[0] == rows[1] and rows[2] == rows[3] and rows[0] != rows[2]
    assert rows[0][0] == [0, 1, 2, 3] and rows[2][0] == [4, 5, 6, 7]
    assert [m[2:] for m in four.of("tp_mesh")] == [[2, 0], [2, 0], [2, 1], [2, 1]]
    assert two.of("tp_rows")[0] == two.of("tp_rows")[1] == [list(range(s * 8, s * 8 + 8)) for s in range(STEPS)]


def test_bad_layouts_are_refused_when_the_accelerator_is_built(four: Launched) -> None:
    kind, message = four.of("bad_product")[0]
    assert kind == "ValueError"
    assert "dp_replicate_size=4 * dp_shard_size=2 * tp_size=1 * cp_size=1 * sp_size=1 = 8 processes" in message
    assert "world size (num_processes) is 4" in message
    kind, message = four.of("bad_shard_without_fsdp")[0]
    assert kind == "ValueError" and "dp_shard_size=4 shards the model with FSDP2, but FSDP is not on" in message
    kind, message = four.of("bad_fsdp_without_shard")[0]
    assert kind == "ValueError" and "nothing to shard over" in message


def test_an_hsdp_checkpoint_reloads_onto_fsdp2_over_four_processes(four: Launched) -> None:
    assert four.of("reloaded_full")[0] == four.of("hsdp_full")[0]


def test_tensor_parallel_layouts_run_through_the_accelerator_and_tp_ranks_share_batches(four: Launched, two: Launched) -> None:
    """ParallelismConfig(tp_size=2, tp_handler=TorchTensorParallelConfig(plan=...)) picks the tensor-parallel
    strategy; the two ranks of a tp group read the same rows, different tp groups different ones."""
    assert four.of("tp_2d_strategy") == ["TensorParallelStrategy"] * 4 == two.of("tp_only_strategy") * 2
    assert four.of("tp_2d_mesh")[0][:2] == [["dp_shard", "tp"], [2, 2]]
    rows = four.of("tp_2d_rows")
    assert rows[0] == rows[1] and rows[2] == rows[3] and rows[0] != rows[2]
    assert two.of("tp_only_rows")[0] == two.of("tp_only_rows")[1]
