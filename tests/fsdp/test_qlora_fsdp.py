"""QLoRA under FSDP2 with 2 real processes (gloo, CPU): peft LoRA adapters on bitsandbytes 4-bit bases
train like the one-process QLoRA run, with the quantized bases frozen and sharded and the adapters and
their AdamW state sharded; save_state / load_state restore the adapters, the optimizer and the bases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("bitsandbytes")
pytest.importorskip("peft")
pytest.importorskip("transformers")

from launching import Launched, launch  # noqa: E402
from qlora_tiny import (  # noqa: E402
    STEPS,
    dequantized_sums,
    load_quantized_by_transformers,
    make_llama,
    make_model,
    optimizer_for,
    quantization,
    train,
)

from accel import Accelerator, BitsandbytesKwargs  # noqa: E402
from accel.utils import FullyShardedDataParallelPlugin  # noqa: E402

SCRIPT = str(Path(__file__).parent / "qlora_fsdp_script.py")
LOSS_TOLERANCE = 1e-5
"""Relative: the halves of each gradient are summed in another order than one process sums them."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Launched]:
    folder = str(tmp_path_factory.mktemp("qlora") / "state")
    result = {}
    for mode in ("save", "resume"):
        result[mode] = launch(SCRIPT, mode, folder, timeout=300)
        assert result[mode].returncode == 0, result[mode].stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """The one-process QLoRA run (no FSDP) on the same global batches: its losses and dequantized bases."""
    accelerator = Accelerator(cpu=True, kwarg_handlers=[quantization()])
    model = accelerator.prepare(make_model(0))
    model.train()
    losses = train(accelerator, model, accelerator.prepare(optimizer_for(model)), range(STEPS))
    return {"losses": losses, "dequantized": dequantized_sums(accelerator, model)}


def test_two_process_qlora_trains_like_one_process(runs, reference) -> None:
    for losses in runs["save"].of("losses"):
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference["losses"]), rtol=LOSS_TOLERANCE, atol=0)
    assert reference["losses"][0] != reference["losses"][-1]


def test_get_state_dict_dequantizes_the_gathered_bases_on_the_main_process(runs, reference) -> None:
    main, other = runs["save"].of("dequantized")
    assert len(main) == 14 and main == reference["dequantized"] and other == {}


def test_quantized_bases_stay_frozen_4bit_and_each_process_holds_half(runs) -> None:
    save = runs["save"]
    assert save.of("num_4bit_layers") == [14, 14]  # 7 per block, lm_head kept
    assert save.of("base_frozen_uint8") == [True, True]
    assert save.of("base_sharded") == [True, True]
    (mine, whole), (theirs, _) = save.of("base_numel")
    assert mine == theirs == whole // 2 and whole == 2 * (4 * 64 * 64 + 3 * 64 * 128) // 2  # 4 bits per weight
    assert save.of("trainable_is_lora") == [True, True]


def test_lora_parameters_and_their_optimizer_state_are_sharded(runs) -> None:
    save = runs["save"]
    assert save.of("lora_trains") == [True, True] and save.of("lora_sharded") == [True, True]
    (mine, whole), (theirs, _) = save.of("lora_numel")
    assert mine == theirs == whole // 2
    assert save.of("optimizer_numel") == [2 * mine, 2 * theirs]  # AdamW's two moments of each shard


def test_load_state_restores_the_bases_adapters_and_optimizer(runs) -> None:
    save, resume = runs["save"], runs["resume"]
    assert resume.of("checksum_before_load") != save.of("checksum")  # another seed: other bases
    assert resume.of("checksum") == save.of("checksum")
    for full, resumed in zip(save.of("losses"), resume.of("resumed_losses")):
        assert resumed == full[STEPS // 2:]


@pytest.mark.parametrize("storage", ["uint8", "float32"])
def test_a_model_quantized_by_transformers_is_sharded_trains_like_one_process_and_resumes(tmp_path: Path, storage: str) -> None:
    make_llama(0).save_pretrained(tmp_path)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(load_quantized_by_transformers(str(tmp_path), getattr(torch, storage)))
    model.train()
    reference = train(accelerator, model, accelerator.prepare(optimizer_for(model)), range(STEPS))
    run = launch(SCRIPT, "transformers", str(tmp_path), storage, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.of("base_sharded") == [True, True] and run.of("base_frozen") == [[14, True]] * 2
    for losses in run.of("losses"):
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference), rtol=LOSS_TOLERANCE, atol=0)
    if storage == "uint8":  # its checkpoint, loaded by a model quantized from other weights
        other = tmp_path / "other"
        make_llama(1).save_pretrained(other)
        resumed = launch(SCRIPT, "transformers_resume", str(other), storage, str(tmp_path / "state"), timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-4000:]
        assert resumed.of("checksum") == run.of("checksum")
        for full, second in zip(run.of("losses"), resumed.of("resumed_losses")):
            assert second == full[STEPS // 2:]


@pytest.mark.filterwarnings("ignore:.*will be slow here")  # the int8 modes compute in float16 (tiny probe)
@pytest.mark.parametrize("mode", ["int8", "int8-training"])
def test_int8_modes_with_fsdp_are_refused_at_construction(mode: str) -> None:
    plugin = FullyShardedDataParallelPlugin()
    with pytest.raises(ValueError, match=rf"mode='{mode}'\) with fsdp_plugin.*'nf4', 'nf4-dq', 'fp4' or 'fp4-dq'"):
        Accelerator(cpu=True, fsdp_plugin=plugin, kwarg_handlers=[BitsandbytesKwargs(mode=mode)])
