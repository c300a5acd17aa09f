"""scaling='mxfp8' on the `ao` backend for real: torchao's MXFP8 training, emulated on this CPU, and its refusals."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from accel import Accelerator, FP8RecipeKwargs
from accel.backends.fp8 import ao_mxfp8
from accel.backends.fp8.ao import TorchAOFP8
from accel.backends.fp8.ao_mxfp8 import MXFP8Linear, mxfp8_recipe_name

pytest.importorskip("torchao.prototype.moe_training.config", reason="this torchao has no MXFP8 training")


def mx_accelerator(**recipe: object) -> Accelerator:
    recipe.setdefault("base_precision", "fp32")
    return Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="ao", scaling="mxfp8", **recipe)])


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 3))


def test_on_cpu_torchaos_emulated_mxfp8_recipe_runs_and_says_so() -> None:
    from torchao.quantization.quantize_.common import KernelPreference

    accelerator = mx_accelerator()
    config = accelerator.precision.ao_config
    assert type(config).__name__ == "MXFP8TrainingOpConfig"
    assert config.kernel_preference == KernelPreference.EMULATED and not config.wgrad_with_hp
    assert "ao, mxfp8 scaling" in accelerator.precision.describe()
    assert "MXFP8 emulation" in accelerator.precision.describe()


def test_layers_aligned_to_32_convert_and_the_rest_are_reported() -> None:
    accelerator = mx_accelerator()
    model = accelerator.prepare(mlp())
    assert [type(m) for m in model[::2]] == [MXFP8Linear, MXFP8Linear, nn.Linear]
    assert type(model[0].weight).__name__ == "MXFP8TrainingWeightWrapperTensor"
    assert type(model[0].bias) is nn.Parameter  # torchao's wrapper on the bias is undone (its matmul never reads it)
    report = accelerator.precision.conversion_report
    assert report.num_fp8 == 2 and "torchao's MXFP8 scales blocks of 32 values" in report.details()


def test_products_are_mxfp8_and_the_bias_is_added() -> None:
    """torchao 0.18's MXFP8 override of F.linear drops the bias; accel adds it. The product itself is MXFP8:
    close to fp32, not equal."""
    torch.manual_seed(0)
    layer = nn.Linear(64, 64)
    with torch.no_grad():
        layer.bias.fill_(5.0)
    x = torch.randn(32, 64)
    exact = layer(x).detach()
    twin = nn.Linear(64, 64)
    twin.load_state_dict(layer.state_dict())
    model = mx_accelerator().prepare(nn.Sequential(twin))
    got = model(x).detach()
    assert got.mean().item() == pytest.approx(exact.mean().item(), abs=0.05)  # the bias of 5 is there
    assert not torch.equal(got, exact)
    assert (got - exact).abs().max() < 0.1 * exact.abs().max()


def test_training_lowers_the_loss_with_a_token_count_that_is_not_a_multiple_of_32() -> None:
    accelerator = mx_accelerator()
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # built before prepare: re-pointed
    model, optimizer = accelerator.prepare(model, optimizer)
    torch.manual_seed(1)
    x = torch.randn(5, 8, 64)  # 40 tokens: the weight gradient's blocks of 32 need padding
    y = x[..., :3] * 2 - 1
    losses = []
    for _ in range(8):
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    assert any(p is model[0].weight for group in optimizer.param_groups for p in group["params"])


@pytest.mark.parametrize("in_eval", [False, True])
def test_eval_runs_in_high_precision_unless_asked(in_eval: bool) -> None:
    torch.manual_seed(0)
    layer, x = nn.Linear(64, 64), torch.randn(32, 64)
    exact = layer(x).detach()
    twin = nn.Linear(64, 64)
    twin.load_state_dict(layer.state_dict())
    model = mx_accelerator(use_autocast_during_eval=in_eval).prepare(nn.Sequential(twin))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), exact) is not in_eval


def test_saved_weights_are_plain_tensors_with_the_trained_values() -> None:
    accelerator = mx_accelerator()
    model = accelerator.prepare(mlp())
    state = accelerator.get_state_dict(model)
    assert {type(v) for v in state.values()} == {torch.Tensor}
    assert torch.equal(state["0.weight"], model[0].weight._data)


# ----------------------------------------------------------------------------- refusals
def test_a_format_other_than_e4m3_is_refused() -> None:
    with pytest.raises(ValueError, match=r"fp8_format='HYBRID'\) cannot run on the 'ao' FP8 backend: it always runs "
                                         r"fp8_format='E4M3' \(torchao's MXFP8 is E4M3"):
        mx_accelerator(fp8_format="HYBRID")


def _gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], name: str) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)


def test_a_gpu_without_mxfp8_gemms_is_refused_with_what_to_use(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(monkeypatch, (9, 0), "NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match=r"cannot run on NVIDIA H100 80GB HBM3 \(compute capability 9.0\): torchao's "
                                         r"MXFP8 GEMMs need a Blackwell data-centre GPU \(compute capability 10.x.*"
                                         "Use scaling='rowwise' or 'current'"):
        mxfp8_recipe_name(torch.device("cuda"))
    _gpu(monkeypatch, (10, 0), "NVIDIA B200")
    assert mxfp8_recipe_name(torch.device("cuda")) == "mxfp8_rceil"
    assert mxfp8_recipe_name(torch.device("cpu")) == "mxfp8_emulated_rceil"


def test_a_torch_that_torchao_cannot_run_mxfp8_on_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def old_torch(*args: Any) -> None:
        raise AssertionError("Please install the latest torch nightly build to use MXFP8 training")

    monkeypatch.setattr(ao_mxfp8, "_quantize", old_torch)
    with pytest.raises(ValueError, match=r"scaling='mxfp8'\) cannot run with torch .*torchao says Please install the "
                                         "latest torch nightly.*use scaling='rowwise' or 'current'"):
        mx_accelerator()


def test_mxfp8_under_fsdp_is_refused() -> None:
    backend = mx_accelerator().precision
    assert isinstance(backend, TorchAOFP8)
    with pytest.raises(ValueError, match=r"scaling='mxfp8'\) cannot run under FSDP in accel.*under DDP"):
        backend.configure_fsdp()
