"""A manifest that parses but cannot be true, or nests too deeply to parse, is refused with the
checkpoint's own error (CheckpointError), never a raw exception, and nothing is restored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel.checkpointing import CheckpointError
from checkpoint_scenario import Job, Setup, build


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Setup, Path]:
    setup = build(Job(project_dir=str(tmp_path / "project")))
    batches = iter(setup.loader)
    for _ in range(3):
        setup.micro_batch(*next(batches))
    return setup, setup.accelerator.save_state(tmp_path / "ckpt")


def _load_refused(folder: Path, tmp_path: Path, message: str) -> None:
    fresh = build(Job(project_dir=str(tmp_path / "fresh")))
    before = [p.detach().clone() for p in fresh.model.parameters()]
    with pytest.raises(CheckpointError, match=message):
        fresh.accelerator.load_state(folder)
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.model.parameters()))
    assert fresh.accelerator.gradient_state.step == 0


def _edit_manifest(folder: Path, edit: object) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)  # type: ignore[operator]
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("micro_batch", "steps", "message"),
    [
        (3, 3, r"gradient_accumulation.micro_batch=3 with steps=3, but it must be from 0 to steps - 1 = 2"),
        (7, 3, r"gradient_accumulation.micro_batch=7 with steps=3, but it must be from 0 to steps - 1 = 2"),
        (-1, 3, r"gradient_accumulation.micro_batch=-1 with steps=3"),
        (0, 0, r"gradient_accumulation.steps=0, but it must be >= 1"),
    ],
)
def test_an_impossible_position_in_the_accumulation_window(
    saved: tuple[Setup, Path], tmp_path: Path, micro_batch: int, steps: int, message: str
) -> None:
    setup, folder = saved
    assert setup.accelerator.gradient_accumulation_steps == 3
    _edit_manifest(folder, lambda m: m["gradient_accumulation"].update(micro_batch=micro_batch, steps=steps))
    _load_refused(folder, tmp_path, message)


def test_a_deeply_nested_manifest(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    depth = 100_000
    text = (folder / "manifest.json").read_text()
    (folder / "manifest.json").write_text(text.replace('"fp8": null', '"fp8": ' + "[" * depth + "]" * depth))
    _load_refused(folder, tmp_path, r"manifest.json cannot be read \(it nests too deeply")


def test_nesting_that_json_reads_but_accel_never_writes(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    nested: object = {}
    for _ in range(900):
        nested = {"a": nested}
    _edit_manifest(folder, lambda m: m.update(fp8=nested))
    _load_refused(folder, tmp_path, "manifest.json nests more than 32 levels deep")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_processes", 0, r"manifest.json has num_processes=0, but it must be >= 1; the checkpoint is damaged"),
        ("num_processes", -2, r"manifest.json has num_processes=-2, but it must be >= 1; the checkpoint is damaged"),
        ("iteration", -1, r"manifest.json has iteration=-1, but it must be >= 0; the checkpoint is damaged"),
        ("contents.models", -1, r"manifest.json has contents.models=-1, but it must be >= 0; the checkpoint is damaged"),
    ],
)
def test_a_count_below_what_accel_writes(
    saved: tuple[Setup, Path], tmp_path: Path, field: str, value: int, message: str
) -> None:
    """A number of processes of 0 (or a negative count) cannot be true: refused naming the field, as any other field."""
    _, folder = saved

    def edit(manifest: dict[str, object]) -> None:
        *sections, key = field.split(".")
        target = manifest
        for section in sections:
            target = target[section]  # type: ignore[assignment]
        target[key] = value

    _edit_manifest(folder, edit)
    _load_refused(folder, tmp_path, message)
