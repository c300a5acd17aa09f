"""Count the cases of Accelerate's 2-process test scripts that pass, one by one, under accel or Accelerate.

    PYTHONPATH=$PWD:$PWD/tests python tests/accelerate_ported/cases.py accel tests/accelerate_ported/scripts/test_script.py
    python tests/accelerate_ported/cases.py accelerate <Accelerate's copy of the same script>

The script's `main()` runs in 2 CPU processes (the library's `debug_launcher`), as Accelerate's
test_cpu.py runs it, with every top-level function `main()` calls wrapped so that a failing case
is recorded and the run goes on (where a failure leaves the processes out of step, the run can stop
early; the cases it reached are still printed). One line per case: PASS/FAIL, name, calls, first error.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any


def _cases(path: str) -> list[str]:
    tree = ast.parse(Path(path).read_text())
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    called = {n.func.id for n in ast.walk(main) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return sorted(called & {node.name for node in tree.body if isinstance(node, ast.FunctionDef)} - {"main"})


def _worker(path: str, record: str) -> None:
    spec = importlib.util.spec_from_file_location("ported_case_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rank = int(os.environ.get("RANK", "0"))

    def wrap(name: str, function: Any) -> Any:
        @functools.wraps(function)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            result, outcome, error = None, "PASS", ""
            try:
                result = function(*args, **kwargs)
            except BaseException as failure:  # noqa: BLE001 - every failure is a case's result
                outcome, error = "FAIL", "".join(traceback.format_exception_only(type(failure), failure)).strip()[:300]
            with open(record, "a") as file:
                file.write(json.dumps([rank, name, outcome, error]) + "\n")
            return result

        return recorded

    for name in _cases(path):
        setattr(module, name, wrap(name, getattr(module, name)))
    module.main()


def main(library: str, path: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        record = os.path.join(folder, "cases.jsonl")
        try:
            importlib.import_module(library).debug_launcher(functools.partial(_worker, path, record), num_processes=2)
        except BaseException as failure:  # noqa: BLE001 - report what ran
            print("RUN STOPPED:", str(failure).strip().splitlines()[-1][:300])
        results: dict[str, list[tuple[str, str]]] = {}
        for line in Path(record).read_text().splitlines() if os.path.exists(record) else []:
            _, name, outcome, error = json.loads(line)
            results.setdefault(name, []).append((outcome, error))
    for name, outcomes in results.items():
        failed = [error for outcome, error in outcomes if outcome == "FAIL"]
        print("FAIL" if failed else "PASS", name, len(outcomes), failed[0] if failed else "")


if __name__ == "__main__":
    main(*sys.argv[1:3])
