"""Every code block in README.md and docs/ runs, so that the docs cannot go stale.

```python blocks run in order, one namespace per document (a block may use what an earlier block
of the same document defined), in a fresh temporary folder. ```bash blocks run each command
line in a shell from the repository root. ```yaml blocks are config files: `accel launch` must
accept them. Other blocks (``` alone, text, json) show output or layouts and are not run.

A block that cannot run here is marked on the line before its fence with
`<!-- snippet: skip: <reason> -->`; the test is skipped with that reason, so every skipped block
says why. `<!-- snippet: setup: <python> -->` runs a line of setup code before the next block
(for a block that continues from an object the prose describes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*snippet:\s*(skip|setup):\s*(.*?)\s*-->")
RUN = ("python", "bash", "yaml")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    language: str
    code: str
    skip: str | None
    setup: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    """The fenced blocks of `document` with their markers."""
    found, lines = [], document.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        fence = lines[index]
        if not fence.startswith("```"):
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        markers = [MARKER.search(lines[i]) for i in range(max(0, index - 2), index)]
        skip = next((m.group(2) for m in markers if m and m.group(1) == "skip"), None)
        setup = "\n".join(m.group(2) for m in markers if m and m.group(1) == "setup")
        code = "\n".join(lines[index + 1 : end])
        found.append(Block(document, index + 1, fence[3:].strip(), code, skip, setup))
        index = end + 1
    return found


ALL = [block for document in DOCUMENTS for block in blocks(document)]
RUNNABLE = [block for block in ALL if block.language in RUN]


def test_every_block_is_runnable_or_plain_text() -> None:
    """A block in another language would be neither run nor clearly output: label it."""
    odd = [f"{b.name} ({b.language})" for b in ALL if b.language not in (*RUN, "", "text", "json", "console")]
    assert not odd, f"label these blocks python, bash, yaml or text: {odd}"


@pytest.fixture(scope="module")
def namespaces() -> dict[Path, dict[str, object]]:
    return {}


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_block_runs(block: Block, namespaces: dict[Path, dict[str, object]], tmp_path_factory: pytest.TempPathFactory,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    if block.skip is not None:
        pytest.skip(block.skip)
    for name in [n for n in os.environ if n.startswith("ACCEL_")]:
        monkeypatch.delenv(name)
    if block.language == "python":
        _run_python(block, namespaces.setdefault(block.document, {}), tmp_path_factory, monkeypatch)
    elif block.language == "bash":
        _run_bash(block)
    else:
        _check_yaml(block, tmp_path_factory.mktemp("yaml"))


def _run_python(block: Block, namespace: dict[str, object], factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> None:
    folder = namespace.setdefault("__folder__", factory.mktemp(block.document.stem))
    monkeypatch.chdir(folder)  # type: ignore[arg-type]
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # slow-16-bit warnings depend on the CPU
        exec(compile(block.setup + "\n" + block.code, block.name, "exec"), namespace)  # noqa: S102


def _run_bash(block: Block) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for command in _commands(block.code):
        done = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{block.name}: `{command}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def _commands(code: str) -> list[str]:
    lines = [line.split("  #")[0].strip() for line in code.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _check_yaml(block: Block, folder: Path) -> None:
    from accel.cli.config.file import load_config

    path = folder / "config.yaml"
    path.write_text(block.code, encoding="utf-8")
    assert load_config(path, "accel launch")
