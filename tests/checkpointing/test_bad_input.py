"""Bad input to save_state / load_state: a clear error naming what is wrong, and nothing lost
(no file damaged, no training state changed, no code run)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from accel import Accelerator
from accel.checkpointing import CheckpointError
from accel.checkpointing.manifest import describe_file
from checkpoint_scenario import Job, Setup, build


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Setup, Path]:
    """A trained setup and a checkpoint of it."""
    setup = build(Job(project_dir=str(tmp_path / "project")))
    batches = iter(setup.loader)
    for _ in range(4):
        setup.micro_batch(*next(batches))
    return setup, setup.accelerator.save_state(tmp_path / "ckpt")


def _fresh(tmp_path: Path, **changes: object) -> Setup:
    return build(Job(project_dir=str(tmp_path / "fresh"), **changes))  # type: ignore[arg-type]


def _parameters(setup: Setup) -> list[torch.Tensor]:
    return [p.detach().clone() for p in setup.model.parameters()]


def _assert_unchanged(setup: Setup, before: list[torch.Tensor]) -> None:
    for old, new in zip(before, setup.model.parameters()):
        assert torch.equal(old, new)


def _rewrite_manifest(folder: Path, **changes: object) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _flip_a_byte(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


class _RunsCode:
    """Unpickling this creates the marker file: the attack a weights-only load must refuse."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


# ----------------------------------------------------------------------------- loading


def test_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nowhere'}.*no such folder"):
        Accelerator().load_state(tmp_path / "nowhere")


def test_a_folder_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match=r"not an accel checkpoint, it has no manifest.json.*notes\.txt"):
        Accelerator().load_state(tmp_path)


def test_a_file_instead_of_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="a file, not a checkpoint folder"):
        Accelerator().load_state(tmp_path / "file")


def test_a_damaged_accelerate_checkpoint_is_refused_naming_the_file(tmp_path: Path) -> None:
    for name in ("model.safetensors", "optimizer.bin", "random_states_0.pkl"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"random_states_0\.pkl .* was refused and nothing in it ran"):
        Accelerator().load_state(tmp_path)  # no prepared model: the only file read is the RNG file


def test_a_newer_format_version(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    _rewrite_manifest(folder, format_version=99)
    with pytest.raises(CheckpointError, match="newer accel.*format 99.*Upgrade accel"):
        _fresh(tmp_path).accelerator.load_state(folder)


def test_a_damaged_manifest(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="manifest.json cannot be read.*damaged"):
        _fresh(tmp_path).accelerator.load_state(folder)
    (folder / "manifest.json").write_text('{"format": "accel-checkpoint", "format_version": 1}')
    with pytest.raises(CheckpointError, match="manifest.json has accel_version=None"):
        _fresh(tmp_path).accelerator.load_state(folder)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda path: path.unlink(), "optimizer.pt is missing"),
        (lambda path: path.write_bytes(path.read_bytes()[:-10]), "optimizer.pt has .* bytes, the manifest says"),
        (lambda path: path.write_bytes(_flip_a_byte(path.read_bytes())), "optimizer.pt differs .*SHA-256"),
    ],
    ids=["missing", "truncated", "changed"],
)
def test_a_damaged_or_incomplete_checkpoint_is_named_by_file(
    saved: tuple[Setup, Path], tmp_path: Path, damage: object, message: str
) -> None:
    _, folder = saved
    damage(folder / "optimizer.pt")  # type: ignore[operator]
    fresh = _fresh(tmp_path)
    before = _parameters(fresh)
    with pytest.raises(CheckpointError, match=f"{folder}.* is damaged or incomplete: {message}"):
        fresh.accelerator.load_state(folder)
    _assert_unchanged(fresh, before)


@pytest.mark.parametrize("update_manifest", [False, True], ids=["manifest-unchanged", "manifest-forged"])
@pytest.mark.parametrize(
    "name", ["optimizer.pt", "scheduler.pt", "precision.pt", "custom_checkpoint_0.pt", "random_states_0.pt",
             "dataloaders_0.pt"]
)
def test_a_file_replaced_by_a_code_running_pickle_is_refused_unrun(
    saved: tuple[Setup, Path], tmp_path: Path, name: str, update_manifest: bool
) -> None:
    _, folder = saved
    marker = tmp_path / "code-ran"
    (folder / name).write_bytes(pickle.dumps(_RunsCode(marker)))
    if update_manifest:  # an attacker who also rewrites the checksums: the weights-only loader still refuses
        manifest = json.loads((folder / "manifest.json").read_text())
        entry = describe_file(folder / name)
        manifest["files"][name] = {"size": entry.size, "sha256": entry.sha256}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    fresh = _fresh(tmp_path)
    before = _parameters(fresh)
    expected = "holds objects that only running code could rebuild, so it was refused" if update_manifest else (
        "has .* bytes, the manifest says"  # refused by its checksum before anything reads it
    )
    with pytest.raises(CheckpointError, match=f"{name} {expected}"):
        fresh.accelerator.load_state(folder)
    assert not marker.exists()
    _assert_unchanged(fresh, before)


def test_another_precision(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    with pytest.raises(CheckpointError, match="saved with mixed_precision='no', this Accelerator runs 'fp16'"):
        _fresh(tmp_path, precision="fp16").accelerator.load_state(folder)


def test_another_model_names_the_parameters_and_shapes_that_differ(tmp_path: Path) -> None:
    accelerator = Accelerator()
    accelerator.prepare(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    folder = accelerator.save_state(tmp_path / "ckpt")
    other = Accelerator()
    model = other.prepare(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2), nn.Linear(2, 2)))
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError) as raised:
        other.load_state(folder)
    message = str(raised.value)
    assert "parameters missing from the checkpoint: 3.weight, 3.bias" in message
    assert "shapes that differ: 0.weight (checkpoint (8, 4), model (16, 4))" in message
    assert "0.bias (checkpoint (8,), model (16,))" in message
    assert "2.weight (checkpoint (2, 8), model (2, 16))" in message
    for old, new in zip(before, model.parameters()):
        assert torch.equal(old, new)
    smaller = Accelerator()
    smaller.prepare(nn.Sequential(nn.Linear(4, 8)))
    with pytest.raises(CheckpointError, match="in the checkpoint that this model does not have: 2.bias, 2.weight"):
        smaller.load_state(folder)


def test_other_prepared_objects(saved: tuple[Setup, Path]) -> None:
    _, folder = saved
    accelerator = Accelerator()
    accelerator.prepare(nn.Linear(16, 16))
    with pytest.raises(CheckpointError) as raised:
        accelerator.load_state(folder)
    message = str(raised.value)
    for expected in (
        "it holds 1 prepared optimizer, this Accelerator has 0 prepared optimizers",
        "it holds 1 prepared scheduler, this Accelerator has 0",
        "it holds 1 object registered with register_for_checkpointing, this Accelerator has 0 objects registered",
    ):
        assert expected in message


def test_an_optimizer_with_other_parameter_groups(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    accelerator = Accelerator()
    accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    folder = accelerator.save_state(tmp_path / "ckpt")
    other_model = nn.Linear(2, 2)
    other = Accelerator()
    groups = [{"params": [other_model.weight]}, {"params": [other_model.bias]}]
    other.prepare(other_model, torch.optim.SGD(groups, lr=0.1))
    expected = r"optimizer 0: parameters per group differ \(checkpoint \[2\], prepared optimizer \[1, 1\]\)"
    with pytest.raises(CheckpointError, match=expected):
        other.load_state(folder)


# ----------------------------------------------------------------------------- saving


def test_save_with_nowhere_to_save() -> None:
    accelerator = Accelerator()
    with pytest.raises(ValueError, match="no output_dir.*no project_dir.*save_state\\('path/to/checkpoint'\\)"):
        accelerator.save_state()
    with pytest.raises(ValueError, match="no input_dir.*no project_dir"):
        accelerator.load_state()


def test_save_refuses_a_folder_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n")
    accelerator = Accelerator()
    accelerator.prepare(nn.Linear(2, 2))
    with pytest.raises(FileExistsError, match=f"{tmp_path}.*not an accel checkpoint.*data.csv.*will not mix"):
        accelerator.save_state(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["data.csv"]


def test_save_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file, not a folder"):
        Accelerator().save_state(tmp_path / "file")


def test_save_refuses_state_that_only_code_could_load(tmp_path: Path) -> None:
    class Unsafe:
        def state_dict(self) -> dict[str, object]:
            return {"ok": 1, "nested": [torch.ones(1), {"when": Path("x")}]}

        def load_state_dict(self, state: dict[str, object]) -> None:
            pass

    accelerator = Accelerator()
    accelerator.register_for_checkpointing(Unsafe())
    with pytest.raises(TypeError, match=r"registered object 0 \(Unsafe\)\['nested'\]\[1\]\['when'\].*PosixPath"):
        accelerator.save_state(tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_place_is_named_and_the_previous_checkpoint_survives(saved: tuple[Setup, Path]) -> None:
    setup, folder = saved
    blocker = folder.parent / "blocker"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(OSError, match=f"could not write in '{blocker}'"):
        setup.accelerator.save_state(blocker / "ckpt")
    if os.geteuid() != 0:  # permissions do not stop root
        folder.parent.chmod(0o500)
        try:
            with pytest.raises(OSError, match=f"could not write in '{folder.parent}'.*Permission denied"):
                setup.accelerator.save_state(folder)
        finally:
            folder.parent.chmod(0o700)
    _fresh(folder.parent).accelerator.load_state(folder)


def test_a_full_disk_names_the_file_and_the_previous_checkpoint_survives(saved: tuple[Setup, Path]) -> None:
    resource = pytest.importorskip("resource")
    import signal

    setup, folder = saved
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8000, hard))  # files over 8000 bytes fail as on a full disk
    try:
        expected = r"could not write '.*/\.ckpt\.tmp-[^/]*/optimizer.pt': File too large.*untouched"
        with pytest.raises(OSError, match=expected):
            setup.accelerator.save_state(folder)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous_handler)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    assert [path.name for path in folder.parent.iterdir() if path.name.startswith(".")] == []
    _fresh(folder.parent).accelerator.load_state(folder)


def test_a_dataloader_built_differently(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    fresh = _fresh(tmp_path)
    fresh.loader.loader.__dict__["generator"] = torch.Generator()  # its order now depends on a generator
    with pytest.raises(CheckpointError, match="restoring dataloader 0 from dataloaders_0.pt failed.*torch.Generator"):
        fresh.accelerator.load_state(folder)


def test_copying_a_checkpoint_keeps_it_loadable(saved: tuple[Setup, Path], tmp_path: Path) -> None:
    _, folder = saved
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    _fresh(tmp_path).accelerator.load_state(copy)


def test_registering_objects_without_state_dict_names_each_in_accelerates_words() -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError) as raised:
        Accelerator().register_for_checkpointing(torch.ones(1), torch.ones(2), model, optimizer)
    message = str(raised.value)
    assert "Item at index 0 (Tensor), Item at index 1 (Tensor) have no state_dict()/load_state_dict()" in message
    assert "index 2" not in message and "index 3" not in message
