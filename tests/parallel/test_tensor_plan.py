"""Plans (resolution, styles, divisibility), the option objects, the precision hook and clipping, in one process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from accel.backends.registry import create_backend
from accel.kwargs_handlers import FP8RecipeKwargs, collect_handlers
from accel.kwargs_handlers.tensor_parallel import TorchTensorParallelConfig, TorchTensorParallelPlugin
from accel.parallel.tensor_parallel import clip_grad_norm_
from accel.parallel.tensor_plan import choose_plan, model_plan, resolve_plan

sys.path.insert(0, str(Path(__file__).parent))
from tensor_tiny import make_llama  # noqa: E402


class Blocks(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(12, width)
        self.layers = nn.ModuleList(nn.ModuleDict({"up": nn.Linear(width, 2 * width), "down": nn.Linear(2 * width, width)})
                                    for _ in range(2))


def test_wildcards_expand_to_every_layer_with_torch_styles() -> None:
    styles = resolve_plan(Blocks(), {"layers.*.up": "colwise", "layers.*.down": "rowwise", "embed": "embedding_rowwise"},
                          2, given=True)
    assert sorted(styles) == ["embed", "layers.0.down", "layers.0.up", "layers.1.down", "layers.1.up"]
    assert isinstance(styles["layers.1.up"], ColwiseParallel) and isinstance(styles["layers.0.down"], RowwiseParallel)


def test_torch_style_objects_and_replicate_entries() -> None:
    styles = resolve_plan(Blocks(), {"layers.0.up": ColwiseParallel(), "embed": "replicate"}, 2, given=True)
    assert list(styles) == ["layers.0.up"]  # 'replicate' leaves the embedding whole


@pytest.mark.parametrize(("plan", "parts"), [
    ({"layers.*.up": "colwise"}, ["tp_size=3", "'layers.0.up'", "out_features is 16", "2, 4, 8, 16"]),
    ({"layers.*.down": "rowwise"}, ["'layers.0.down'", "in_features is 16"]),
    ({"embed": "embedding_rowwise"}, ["'embed'", "num_embeddings is 12"]),
])
def test_indivisible_dimension_names_layer_dimension_and_tp_size(plan: dict, parts: list[str]) -> None:
    tp_size = 5 if "embed" in plan else 3
    with pytest.raises(ValueError) as error:
        resolve_plan(Blocks(), plan, tp_size, given=True)
    for part in parts:
        assert part in str(error.value), str(error.value)


def test_bad_plans() -> None:
    with pytest.raises(ValueError, match="'layers.*.upp' matches no module"):
        resolve_plan(Blocks(), {"layers.*.upp": "colwise"}, 2, given=True)
    assert resolve_plan(Blocks(), {"layers.*.upp": "colwise"}, 2, given=False) == {}  # a model's own plan covers variants
    with pytest.raises(ValueError, match="'colwize' is not a style accel runs"):
        resolve_plan(Blocks(), {"embed": "colwize"}, 2, given=True)
    with pytest.raises(ValueError, match="'sequence_parallel' is not a style accel runs: it splits activations"):
        resolve_plan(Blocks(), {"embed": "sequence_parallel"}, 2, given=True)
    with pytest.raises(ValueError, match="'layers.0' is a ModuleDict"):
        resolve_plan(Blocks(), {"layers.0": "colwise"}, 2, given=True)


def test_plan_sources() -> None:
    llama = make_llama()
    own = model_plan(llama)
    assert own is not None and own["model.layers.*.self_attn.q_proj"] == "colwise"
    assert choose_plan(llama, None) == (own, False)
    assert choose_plan(llama, {"lm_head": "colwise"}) == ({"lm_head": "colwise"}, True)  # given wins
    styles = resolve_plan(llama, own, 2, given=False)
    assert "model.layers.1.mlp.down_proj" in styles and "lm_head" in styles
    with pytest.raises(ValueError, match="no tp_plan, and no plan was given"):
        choose_plan(nn.Linear(2, 2), None)


def test_option_objects() -> None:
    assert TorchTensorParallelPlugin(tp_size=4).tp_size == 4
    with pytest.raises(ValueError, match="tp_size=0 must be an int >= 1"):
        TorchTensorParallelPlugin(tp_size=0)
    with pytest.raises(ValueError, match="enable_async_tp=True"):
        TorchTensorParallelConfig(enable_async_tp=True)
    with pytest.raises(ValueError, match="'rowwize' is not a style"):
        TorchTensorParallelConfig(plan={"fc": "rowwize"})
    assert TorchTensorParallelConfig(plan={"fc": "rowwise"}).plan == {"fc": "rowwise"}
    from accel.utils import TorchTensorParallelConfig as exported

    assert exported is TorchTensorParallelConfig


def test_fp8_backends_refuse_tensor_parallelism_and_others_accept() -> None:
    handlers = collect_handlers([FP8RecipeKwargs(backend="native")], None)
    with pytest.raises(ValueError, match="cannot run with tensor parallelism"):
        create_backend("fp8", torch.device("cpu"), handlers).configure_tensor_parallel()
    create_backend("bf16", torch.device("cpu"), collect_handlers(None, None)).configure_tensor_parallel()


def test_clip_of_plain_gradients_equals_torch() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(4, 3), nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    a(torch.randn(5, 4)).pow(2).sum().backward()
    for p, q in zip(a.parameters(), b.parameters()):
        q.grad = p.grad.clone()
    ours, theirs = clip_grad_norm_(a.parameters(), 0.3), nn.utils.clip_grad_norm_(b.parameters(), 0.3)
    assert torch.equal(ours, theirs)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))
