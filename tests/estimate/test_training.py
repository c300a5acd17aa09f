"""The per-rank training estimate equals what real runs hold: parameters, gradients and optimizer state
byte for byte (measure.held_bytes after a step), on one process in every precision, on two processes
under DDP (with its gradient buckets, as torch reports them) and FSDP2 (padded shards), and on four
under DDP, HSDP (2 groups of 2 shards) and FSDP2 (4 shards)."""

from __future__ import annotations

import pytest
import torch
from estimate_script import odd_model
from launching import Launched, launch

from accel import Accelerator
from accel.estimate.measure import held_bytes
from accel.estimate.training import training_bytes


@pytest.mark.parametrize("precision", ["no", "bf16", "fp16", "bf16-true", "64-true"])
@pytest.mark.parametrize("optimizer", ["adamw", "sgd-momentum", "sgd"])
def test_one_process_holds_what_was_estimated(precision: str, optimizer: str) -> None:
    model = odd_model()
    [estimate] = training_bytes(model, precision, "ddp", 1, optimizer)
    accelerator = Accelerator(cpu=True, mixed_precision=precision)
    trainable = [p for p in model.parameters() if p.requires_grad]
    made = {"adamw": lambda: torch.optim.AdamW(trainable, lr=1e-3),
            "sgd-momentum": lambda: torch.optim.SGD(trainable, lr=1e-3, momentum=0.9),
            "sgd": lambda: torch.optim.SGD(trainable, lr=1e-3)}[optimizer]()
    model, made = accelerator.prepare(model, made)
    for _ in range(8):  # fp16: the loss scaler skips the steps whose gradients overflow; state comes at a real one
        with accelerator.autocast():
            loss = model(torch.randint(0, 11, (4, 3))).float().mean()
        accelerator.backward(loss)
        made.step()
        if made.state or optimizer == "sgd":
            break
    held = held_bytes(model, [made])
    assert (held.parameters, held.gradients, held.optimizer) == (estimate.parameters, estimate.gradients,
                                                                 estimate.optimizer)
    assert estimate.buffers == 0 and held.optimizer > 0 or optimizer == "sgd"


@pytest.fixture(scope="module", params=["ddp", "fsdp", "hsdp", "fsdp@4", "ddp@4"])
def launched(request: pytest.FixtureRequest) -> Launched:
    layout, _, count = request.param.partition("@")
    processes = int(count) if count else 4 if layout == "hsdp" else 2
    run = launch("../../estimate/estimate_script.py", layout, processes=processes, timeout=240)
    assert run.returncode == 0, run.stderr[-4000:]
    return run


def test_two_processes_hold_what_was_estimated(launched: Launched, request: pytest.FixtureRequest) -> None:
    held, estimated = launched.of("held"), launched.of("estimate")
    assert [h for h in held] == [e[:3] for e in estimated]
    if "buckets" in launched.results[0]:  # DDP: one more copy of the gradients, in its buckets
        assert [e[3] for e in estimated] == launched.of("buckets") == [h[1] for h in held]
    else:  # FSDP2: the ranks hold padded shards of the same size, and optimizer state for their own rows only
        assert held[0][:2] == held[1][:2] and held[0][2] != held[-1][2]
    if request.node.callspec.params["launched"] == "hsdp":  # the two groups hold the same shards
        assert held[:2] == held[2:]
    if request.node.callspec.params["launched"] == "fsdp@4":  # four shards of one size, the last ones short of rows
        assert len(held) == 4 and len({h[2] for h in held}) > 1 and {h[0] for h in held} == {held[0][0]}


def test_zero_accounting_at_scale() -> None:
    """ZeRO's paper: fp32 AdamW holds 16 bytes a parameter (4 weights, 4 gradients, 8 moments); sharded over
    N ranks (ZeRO-3 / FSDP) 16/N, plus each parameter's 4-byte step; a parameter of 1,000 rows on 64 ranks is
    held in chunks of 16 rows (the last rank's chunk has 8)."""
    with torch.device("meta"):
        model = torch.nn.Linear(1000, 4096, bias=False).requires_grad_(True)
        model.weight = torch.nn.Parameter(torch.empty(1000, 4096))
    ranks = training_bytes(model, "no", "fsdp", 64, "adamw")
    assert ranks[0].parameters == ranks[63].parameters == 16 * 4096 * 4
    assert ranks[0].optimizer == 2 * 16 * 4096 * 4 + 4
    assert ranks[62].optimizer == 2 * 8 * 4096 * 4 + 4 and ranks[63].optimizer == 4  # 1000 = 62 * 16 + 8
    [one] = training_bytes(model, "no", "ddp", 1, "adamw")
    assert one.total == 16 * 1000 * 4096 + 4


def test_bad_input_names_the_argument() -> None:
    model = torch.nn.Linear(2, 2)
    for kwargs, named in (({"precision": "fp8"}, "precision='fp8'"), ({"layout": "zero2"}, "layout='zero2'"),
                          ({"optimizer": "lion"}, "optimizer='lion'"), ({"processes": 0}, "processes=0")):
        with pytest.raises(ValueError, match=named):
            training_bytes(model, **kwargs)  # type: ignore[arg-type]


def fp8_model() -> torch.nn.Module:
    """Two layers native FP8 converts (dimensions multiples of 16), one it does not, a frozen one."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16),
                                torch.nn.Linear(16, 16), torch.nn.Linear(16, 5))
    model[3].requires_grad_(False)
    return model


@pytest.mark.parametrize(("precision", "optimizer"), [("fp8-native", "adamw"), ("fp8-native-O1", "adamw"),
                                                      ("fp8-native-O1", "sgd-momentum"), ("fp8-native-O2", "adamw")])
def test_native_fp8_holds_what_was_estimated(precision: str, optimizer: str) -> None:
    """O1/O2: float16 weights with a scale, FP8 gradients with two scales (counted through the
    Accelerator's precision), O1 the optimizer's float32 state, O2 its FP8 and float16 moments."""
    from accel import FP8RecipeKwargs

    model = fp8_model()
    [estimate] = training_bytes(model, precision, "ddp", 1, optimizer, device="cpu")
    level = {"fp8-native": None, "fp8-native-O1": "O1", "fp8-native-O2": "O2"}[precision]
    accelerator = Accelerator(cpu=True, mixed_precision="fp8",
                              kwarg_handlers=[FP8RecipeKwargs(backend="native", optimization_level=level)])
    trainable = [p for p in model.parameters() if p.requires_grad]
    made = (torch.optim.AdamW(trainable, lr=1e-3) if optimizer == "adamw"
            else torch.optim.SGD(trainable, lr=1e-3, momentum=0.9))
    model, made = accelerator.prepare(model, made)
    for _ in range(2):
        accelerator.backward(model(torch.randn(4, 32)).sum())
        made.step()
    accelerator.backward(model(torch.randn(4, 32)).sum())  # gradients held again, as in the middle of a step
    held = held_bytes(model, [made], accelerator)
    assert (held.parameters, held.gradients, held.optimizer) == (estimate.parameters, estimate.gradients,
                                                                 estimate.optimizer)
    if level:  # the converted layers are smaller than fp32's
        [fp32] = training_bytes(fp8_model(), "no", "ddp", 1, optimizer, device="cpu")
        assert estimate.total < fp32.total
