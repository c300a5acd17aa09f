"""What a new user does first, on a plain `pip install accel` (no extras): train, save, load.

CI runs this in a fresh virtual environment holding only accel and what pyproject.toml's
dependencies bring (see .ci/run), so that a dependency the package needs but does not
declare fails here, not on a user's machine. tests/cli/test_plain_install_check.py runs it in
the development environment too. Prints one line per check; exits 0 when every check passes.

    python .ci/plain_install_check.py [--plain]

--plain also checks that no test-only package (pytest, pexpect) is importable, i.e. that this
really is an environment without the extras.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

TEST_ONLY = ("pytest", "pexpect")
"""Packages only the `test` extra installs: a plain install must not have them."""


def train(accelerator: object, steps: int) -> tuple[object, object, list[float]]:
    """A few optimizer steps of a tiny regression; the prepared model, optimizer and losses."""
    import torch

    torch.manual_seed(0)
    inputs, targets = torch.randn(64, 8), torch.randn(64, 1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)  # type: ignore[attr-defined]
    losses = []
    for step in range(steps):
        batch = slice(8 * (step % 8), 8 * (step % 8 + 1))
        loss = torch.nn.functional.mse_loss(model(inputs[batch]).float(), targets[batch])
        accelerator.backward(loss)  # type: ignore[attr-defined]
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model, optimizer, losses


def check_precision(precision: str, folder: Path) -> list[str]:
    """Train, save_state, change the weights, load_state, save_model; the problems found."""
    import torch
    from safetensors.torch import load_file

    from accel import Accelerator

    accelerator = Accelerator(mixed_precision=precision, cpu=True)
    model, optimizer, losses = train(accelerator, steps=5)
    problems = [] if all(loss == loss for loss in losses) else [f"{precision}: a loss is NaN: {losses}"]
    saved = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    accelerator.save_state(folder / "checkpoint")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    accelerator.load_state(folder / "checkpoint")
    restored = accelerator.unwrap_model(model).state_dict()
    if any(not torch.equal(saved[k], restored[k]) for k in saved):
        problems.append(f"{precision}: load_state did not restore the saved weights")
    accelerator.save_model(model, folder / "model")
    written = load_file(str(folder / "model" / "model.safetensors"))
    if sorted(written) != sorted(saved) or any(not torch.equal(written[k], saved[k]) for k in saved):
        problems.append(f"{precision}: save_model wrote other weights than the model's: {sorted(written)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    import warnings

    from accel import PrecisionWarning

    warnings.simplefilter("ignore", PrecisionWarning)  # fp16 is slow on many CPUs; here it only has to work
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", action="store_true", help="also check that no test-only package is installed")
    args = parser.parse_args(argv)
    problems: list[str] = []
    if args.plain:
        present = [name for name in TEST_ONLY if importlib.util.find_spec(name) is not None]
        if present:
            problems.append(f"not a plain install: {', '.join(present)} importable")
    for precision in ("no", "fp16"):
        with tempfile.TemporaryDirectory() as folder:
            found = check_precision(precision, Path(folder))
        print(f"{'FAIL' if found else 'ok  '}  {precision}: train 5 steps, save_state, load_state, save_model", flush=True)
        problems += found
    for problem in problems:
        print(f"FAIL  {problem}", flush=True)
    print(f"plain install check: {'FAIL' if problems else 'PASS'}", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
