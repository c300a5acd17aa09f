"""The QLoRA example runs with tiny settings and reports less memory for QLoRA than for full fine-tuning."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("bitsandbytes")
pytest.importorskip("peft")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "qlora_gpt.py"
LINE = re.compile(r"weights +([\d.]+) MB \+ optimizer state +([\d.]+) MB .* val loss ([\d.]+)")


def test_qlora_example_quantizes_and_saves_memory(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("qlora_gpt", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "qlora_gpt", module)
    spec.loader.exec_module(module)
    args = ["--pretrain_steps", "3", "--finetune_steps", "2", "--batch_size", "4", "--n_layer", "1", "--n_embd", "64"]
    assert module.main(args) == 0
    out = capsys.readouterr().out
    full, qlora = (LINE.search(line).groups() for line in out.splitlines() if LINE.search(line))
    assert float(qlora[0]) < float(full[0]) / 2  # 4-bit Linear weights (embeddings stay fp32)
    assert float(qlora[1]) < float(full[1]) / 5  # optimizer state of the adapters only
    assert "QLoRA keeps" in out
