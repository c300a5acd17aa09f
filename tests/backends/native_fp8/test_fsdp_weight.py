"""The tensors behind fp8_params under FSDP2 (fsdp_weight.py), in one process: the master keeps its
subclass through the ops FSDP2 shards with and loses it elsewhere, the pre/post all-gather hooks
hand over FP8 bytes and the scale, and the FP8 GEMMs on a gathered weight equal those on the
one-process FP8 weight (a Linear and a transposed, Conv1D-style weight). The 2-process run is
tests/fsdp/test_fp8_allgather.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from accel.backends.native_fp8 import Float8Config, Float8Linear
from accel.backends.native_fp8.formats import E4M3
from accel.backends.native_fp8.fsdp_weight import GatheredFP8Weight, ShardCast, ShardedMaster, plain_master
from accel.backends.native_fp8.functions import Float8LinearFunction
from accel.backends.native_fp8.scaling import TensorScaler, tensor_amax


def _master(rows: int = 6, cols: int = 4) -> ShardedMaster:
    torch.manual_seed(0)
    return ShardedMaster(torch.randn(rows, cols), ShardCast(TensorScaler(E4M3, amax_history_len=4)))


def test_the_master_keeps_its_subclass_through_fsdp_sharding_ops_only() -> None:
    master = _master()
    for made in (master.detach(), master.view(-1), master.narrow(0, 0, 3), master.new_zeros(3, 4),
                 torch.chunk(master, 2)[1], master.to(torch.float32)):
        assert isinstance(made, ShardedMaster) and made.shard_cast is master.shard_cast
    # the optimizer's state and arithmetic, and clones (state dicts), are plain tensors
    for plain in (torch.zeros_like(master), master.clone(), master * 2, master.sum()):
        assert type(plain) is torch.Tensor
    master.add_(1.0)  # in place on the master's values
    assert torch.equal(plain_master(master), master._tensor)
    assert type(plain_master(master)) is torch.Tensor


def test_pre_and_post_all_gather_hand_over_fp8_bytes_padded_to_fsdp_shard_size() -> None:
    master = _master(rows=2)  # the last shard of a 5-row weight over 2 processes: 3 rows padded
    mesh = SimpleNamespace(size=lambda: 2)
    (data,), scale_inv = master.fsdp_pre_all_gather(mesh, torch.Size([5, 4]), (4, 1), None, None)
    assert data.dtype == torch.uint8 and data.shape == (3, 4) and not data[2].any()
    scaler = master.shard_cast.scaler
    expected, expected_inv = TensorScaler(E4M3, amax_history_len=4).quantize(master._tensor)
    assert torch.equal(data[:2], expected.view(torch.uint8)) and torch.equal(scale_inv, expected_inv)
    assert torch.equal(scaler.step_amax, tensor_amax(master._tensor))  # recorded for the amax history
    gathered, inner = master.fsdp_post_all_gather((data,), scale_inv, torch.bfloat16)
    assert isinstance(gathered, GatheredFP8Weight) and gathered.dtype == torch.bfloat16
    assert gathered._data.dtype == torch.float8_e4m3fn and inner[0] is data
    kept = master.shard_cast.data
    master.fsdp_pre_all_gather(mesh, torch.Size([5, 4]), (4, 1), None, None)
    assert master.shard_cast.data is kept  # cast once per change of the master, not per all-gather


def test_a_gathered_weight_is_dequantized_elsewhere_and_refuses_changes_in_place() -> None:
    data = torch.tensor([[1.0, -2.0], [0.5, 4.0]]).to(torch.float8_e4m3fn)
    gathered = GatheredFP8Weight(data, torch.tensor(0.25), torch.float32)
    strided = torch.as_strided(gathered, (2, 2), (2, 1))
    assert isinstance(strided, GatheredFP8Weight)
    torch.testing.assert_close(gathered + 0, torch.tensor([[0.25, -0.5], [0.125, 1.0]]))
    with pytest.raises(RuntimeError, match="cannot be changed in place"):
        gathered.mul_(2)


@pytest.mark.parametrize("transposed", [False, True])
def test_fp8_gemms_on_a_gathered_weight_equal_the_one_process_fp8_weight(transposed: bool) -> None:
    torch.manual_seed(1)
    config = Float8Config(amax_history_len=4)
    layer = Float8Linear(32, 16, config=config)
    weight = layer.weight.detach().t().contiguous() if transposed else layer.weight.detach()  # the Parameter's layout
    x = torch.randn(8, 32)
    results = []
    for gathered in (False, True):
        scalers = (config.make_scaler(E4M3, None), config.make_scaler(E4M3, None), config.make_scaler(torch.float8_e5m2, None))
        w = weight.clone().requires_grad_(True)
        xi = x.clone().requires_grad_(True)
        if gathered:  # as the all-gather gives it: cast in the Parameter's layout with the whole weight's amax
            q, scale_inv = scalers[1].quantize_part(w, tensor_amax(w.detach()))
            operand_weight = GatheredFP8Weight(q, scale_inv, torch.float32).requires_grad_(True)
            y = Float8LinearFunction.apply(xi, operand_weight, None, scalers, torch.float32, None, None, transposed)
        else:
            y = Float8LinearFunction.apply(xi, w, None, scalers, torch.float32, None, layer.keep_fp8_weight(), transposed)
            layer.fp8_weight.invalidate()
        y.square().sum().backward()
        grad_w = operand_weight.grad if gathered else w.grad
        results.append((y.detach(), xi.grad, grad_w, scalers[1].step_amax))
    for one, other in zip(*results):
        assert torch.equal(one, other)
