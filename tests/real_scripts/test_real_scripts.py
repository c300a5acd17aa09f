"""Scripts written by others (Accelerate's examples, transformers' run_clm_no_trainer, diffusers'
train_unconditional), unchanged but for their import lines, compute under accel what they compute
under Accelerate, in one and in two processes.

Each case runs the fixture under Accelerate and under accel (its imports renamed), side by side,
on the hub stand-ins (real_script_standins) and compares, rank by rank:
- the learning rate of every optimizer step and the loss handed to every `backward()` (exactly);
- the parameters after every optimizer step (bit for bit: a digest of their bytes); everything
  here runs in fp32 on the CPU through the same torch kernels, and with two processes both
  frameworks average gradients by torch's DDP, so the arithmetic is the same and no tolerance is
  needed; where the digests part, the message gives the largest difference of the last weights;
- what the script prints about its evaluation (`epoch N: {...}` metrics, perplexity);
- the files it writes: checkpoints, tracker logs, saved models, where the script expects them;
- for a case with a resume, the same again for a second run that continues from the first run's
  last checkpoint (`--resume_from_checkpoint latest`) in the same folder.
Every run has a time limit (real_script_runs.TIMEOUT): a hang fails its case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from real_script_runs import Run, run_both
from real_script_standins import module_standins
from safetensors.torch import load_file


@dataclass(frozen=True)
class Case:
    """A fixture with the arguments that make its run tiny, and the files it must leave behind."""

    fixture: str
    args: tuple[str, ...]
    files: Callable[[int], list[str]]  # paths (relative to the run's folder) the script writes, by process count
    seed: int | None = None  # for scripts that seed nothing themselves
    standins: tuple[str, ...] = ()  # modules the script imports that have a stand-in where the real one fails
    resume: tuple[str, ...] = ()  # arguments added for a second run continuing from the first one's checkpoint
    tensors: tuple[str, ...] = ("out/model.safetensors", "out/unet/diffusion_pytorch_model.safetensors")


def _nothing(processes: int) -> list[str]:
    return []


CASES = {
    "nlp_example": Case("nlp_example.py", ("--cpu",), _nothing),
    "checkpointing": Case("checkpointing.py", ("--cpu", "--checkpointing_steps", "epoch", "--output_dir", "out"),
                          lambda p: [f"out/epoch_{e}" for e in range(3)]),
    "tracking": Case("tracking.py", ("--cpu", "--with_tracking", "--project_dir", "logs"),
                     lambda p: ["logs/tracking"]),
    "gradient_accumulation": Case("gradient_accumulation.py", ("--cpu", "--gradient_accumulation_steps", "2"),
                                  _nothing),
    "multi_process_metrics": Case("multi_process_metrics.py", ("--cpu",), _nothing),
    "memory": Case("memory.py", ("--cpu",), _nothing),
    "run_clm_no_trainer": Case(
        "run_clm_no_trainer.py",
        ("--model_name_or_path", "tiny-clm", "--train_file", "clm_train.txt", "--validation_file", "clm_validation.txt",
         "--block_size", "16", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
         "--num_train_epochs", "2", "--num_warmup_steps", "2", "--learning_rate", "1e-3", "--seed", "42",
         "--output_dir", "out", "--checkpointing_steps", "epoch", "--with_tracking", "--report_to", "tensorboard"),
        lambda p: ["out/epoch_0", "out/epoch_1", "out/model.safetensors", "out/config.json", "out/all_results.json",
                   "out/clm_no_trainer"]),
    "train_unconditional": Case(
        "train_unconditional.py",
        ("--train_data_dir", "images", "--model_config_name_or_path", "unet-config", "--resolution", "16",
         "--center_crop", "--train_batch_size", "4", "--eval_batch_size", "2", "--num_epochs", "2",
         "--save_images_epochs", "100", "--save_model_epochs", "100", "--lr_warmup_steps", "2",
         "--ddpm_num_steps", "50", "--ddpm_num_inference_steps", "2", "--checkpointing_steps", "2",
         "--output_dir", "out", "--logger", "tensorboard"),
        # 12 images, batch 4: 3 steps per epoch in 1 process, 2 in 2 (Accelerate's even batches);
        # the resumed run continues from the last checkpoint for a third epoch
        lambda p: [*(f"out/checkpoint-{s}/unet" for s in ((2, 4, 6, 8) if p == 1 else (2, 4, 6))),
                   "out/unet/diffusion_pytorch_model.safetensors", "out/model_index.json", "out/logs/train_unconditional"],
        seed=0, standins=("torchvision",), resume=("--resume_from_checkpoint", "latest", "--num_epochs", "3"),
        tensors=("out/unet/diffusion_pytorch_model.safetensors", "out/checkpoint-2/unet/diffusion_pytorch_model.safetensors",
                 "out/checkpoint-6/unet/diffusion_pytorch_model.safetensors")),
}
RESUMED = "-resumed"  # the resumed run's key in a case's runs: "accelerate-resumed", "accel-resumed"


_RUNS: dict[tuple[str, int], dict[str, Run]] = {}


@pytest.fixture
def runs(request: pytest.FixtureRequest, standins: Path, hf_zygote: None,
         tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Both frameworks' runs of the case, and their resumed runs where the case has a resume (run once
    per session, shared by its tests)."""
    name, processes = request.param
    if (name, processes) not in _RUNS:
        case = CASES[name]
        folder = tmp_path_factory.mktemp(f"{name}_{processes}")
        paths = module_standins(case.standins)
        runs = run_both(case.fixture, processes, list(case.args), folder, standins, seed=case.seed, paths=paths)
        if case.resume and all(run.returncode == 0 for run in runs.values()):
            resumed = run_both(case.fixture, processes, [*case.args, *case.resume], folder, standins, seed=case.seed,
                               paths=paths, record_name="record" + RESUMED)
            runs.update({framework + RESUMED: run for framework, run in resumed.items()})
        _RUNS[name, processes] = runs
    return _RUNS[name, processes]


# A case's tests share its runs (_RUNS, one per process): under pytest-xdist they go to one worker together.
PARAMS = [pytest.param((name, processes), id=f"{name}-{processes}proc",
                       marks=pytest.mark.xdist_group(f"real_scripts-{name}-{processes}"))
          for name in CASES for processes in (1, 2)]
RESUME_PARAMS = [param for param in PARAMS if CASES[param.values[0][0]].resume]  # type: ignore[index]


def _first_difference(label: str, rank: int, ours: list[object], theirs: list[object]) -> str | None:
    if ours == theirs:
        return None
    for index, (mine, reference) in enumerate(zip(ours, theirs)):
        if mine != reference:
            return f"rank {rank}: {label} #{index}: accel {mine!r}, Accelerate {reference!r}"
    return f"rank {rank}: {len(ours)} {label} values under accel, {len(theirs)} under Accelerate"


def _weights_difference(accelerate: Run, accel: Run, rank: int) -> str:
    try:
        ours, theirs = accel.final_parameters(rank), accelerate.final_parameters(rank)
    except FileNotFoundError as missing:
        return f"(no last weights: {missing})"
    largest = max((float((a - b).abs().max()) for a, b in zip(ours, theirs) if a.shape == b.shape), default=0.0)
    return f"largest difference of the last weights: {largest:.3g}"


@pytest.mark.parametrize("runs", PARAMS, indirect=True)
def test_same_numbers(runs: dict[str, Run]) -> None:
    """Every step's lr and loss, and the weights after it, equal Accelerate's, on every rank."""
    _check_same_numbers(runs["accelerate"], runs["accel"])


@pytest.mark.parametrize("runs", RESUME_PARAMS, indirect=True)
def test_resumed_same_numbers(runs: dict[str, Run]) -> None:
    """A second run resuming from the first run's last checkpoint (`load_state` on the folder the
    script saved, through diffusers' load hook where Accelerate's version lets it register one) says
    it resumes and steps exactly as Accelerate's resumed run does, from the same weights."""
    for framework in ("accelerate", "accel"):
        runs[framework].check_succeeded()
    accelerate, accel = runs["accelerate" + RESUMED], runs["accel" + RESUMED]
    _check_same_numbers(accelerate, accel)
    resuming = r"Resuming from checkpoint \S+"
    assert accel.printed(resuming) == accelerate.printed(resuming) != []
    assert len(accelerate.steps()) < len(runs["accelerate"].steps()), "the resumed run did not skip the steps taken"


def _check_same_numbers(accelerate: Run, accel: Run) -> None:
    accelerate.check_succeeded()
    accel.check_succeeded()
    assert sorted(accel.events) == sorted(accelerate.events) == list(range(accelerate.processes))
    differences = []
    for rank in sorted(accelerate.events):
        assert accelerate.steps(rank), f"rank {rank} took no optimizer step under Accelerate"
        found = [
            _first_difference("lr", rank, [s["lr"] for s in accel.steps(rank)], [s["lr"] for s in accelerate.steps(rank)]),
            _first_difference("loss", rank, accel.losses(rank), accelerate.losses(rank)),
            _first_difference("weights digest after step", rank, [s["digest"] for s in accel.steps(rank)],
                              [s["digest"] for s in accelerate.steps(rank)]),
        ]
        if found[2] is not None:
            found[2] += "; " + _weights_difference(accelerate, accel, rank)
        differences += [difference for difference in found if difference is not None]
    assert not differences, "\n".join(differences)


EVALUATION = r"epoch \d+: .*$"  # from "epoch", after any logging prefix or progress bar on the line


@pytest.mark.parametrize("runs", PARAMS, indirect=True)
def test_same_evaluation(runs: dict[str, Run]) -> None:
    """What the script prints about its evaluation (metrics, perplexity) equals Accelerate's."""
    accelerate, accel = runs["accelerate"], runs["accel"]
    accelerate.check_succeeded()
    accel.check_succeeded()
    theirs, ours = accelerate.printed(EVALUATION), accel.printed(EVALUATION)
    if accelerate.workdir.joinpath("script", "train_unconditional.py").exists():
        assert theirs == ours == [], "train_unconditional evaluates nothing it prints"
        return
    assert theirs, f"no evaluation printed under Accelerate:\n{accelerate.output[-3000:]}"
    assert ours == theirs


@pytest.mark.parametrize("runs", PARAMS, indirect=True)
def test_files_where_expected(runs: dict[str, Run]) -> None:
    """Checkpoints, tracker logs and saved models appear where the script expects them (where they
    appear under Accelerate), and the saved models and tracker scalars hold the same values."""
    accelerate, accel = runs["accelerate"], runs["accel"]
    accelerate.check_succeeded()
    accel.check_succeeded()
    case = next(case for case in CASES.values() if accelerate.workdir.joinpath("script", case.fixture).exists())
    expected = case.files(accelerate.processes)
    assert [p for p in expected if not (accelerate.workdir / p).exists()] == [], "the case's list is wrong"
    assert [p for p in expected if not (accel.workdir / p).exists()] == []
    for name in case.tensors:
        if (accelerate.workdir / name).exists():
            ours, theirs = load_file(accel.workdir / name), load_file(accelerate.workdir / name)
            assert ours.keys() == theirs.keys()
            unequal = [key for key in theirs if not torch.equal(ours[key], theirs[key])]
            assert unequal == [], f"{name}: {len(unequal)} of {len(theirs)} tensors differ, e.g. {unequal[:3]}"
    assert _scalars(accel.workdir) == _scalars(accelerate.workdir)


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard scalar the run logged, by tag (a folder per run name keeps its prefix)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        accumulator.Reload()
        where = str(events.parent.relative_to(folder))
        for tag in accumulator.Tags()["scalars"]:
            scalars[f"{where}:{tag}"] = [(event.step, event.value) for event in accumulator.Scalars(tag)]
    return scalars
