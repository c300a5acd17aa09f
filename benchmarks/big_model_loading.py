"""Peak CPU memory per process when FSDP2 loads a transformers model, with and without
cpu_ram_efficient_loading.

    python benchmarks/big_model_loading.py [--processes 2] [--layers 10] [--hidden 768]

Saves a Llama model (about 95M float32 parameters, 364 MiB, with the defaults) with
`save_pretrained`, then for each `--source` launches `--processes` processes twice under
`accel launch --cpu --use_fsdp` (decoder layers as units), the model made inside
`accelerator.init_module()`: without cpu_ram_efficient_loading (every process makes the whole
model, as before) and with `--fsdp_cpu_ram_efficient_loading` (process 0 reads the weights, the
others build on the meta device). Each process reports its resident memory (VmRSS) after imports,
its peak (VmHWM) after loading, after `prepare` and after one training step (SGD, 32 tokens), and
whether its parameters were on the meta device before prepare. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MIB = 1 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--layers", type=int, default=10, help="decoder layers (default 10)")
    parser.add_argument("--hidden", type=int, default=768, help="hidden size (default 768; MLP 8/3 of it)")
    parser.add_argument("--source", default="pretrained,code",
                        help="how the model is made: 'pretrained' (from_pretrained), 'code' (built from its config, "
                        "then load_state_dict on the processes that hold real weights); default both")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the saved model's folder, in a launched process
    return parser.parse_args(argv)


def memory_kib(field: str) -> int:
    """A field of /proc/self/status in KiB: VmRSS (resident now) or VmHWM (peak resident)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def worker(folder: str, source: str) -> int:
    """In each launched process: build or load, prepare, one step; report the memory to the results file."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from accel import Accelerator

    accelerator = Accelerator()
    after_imports = memory_kib("VmRSS")
    with accelerator.init_module():
        if source == "pretrained":
            model = LlamaForCausalLM.from_pretrained(folder)
        else:  # built in code, then process 0 reads the weights (the others have none to read into)
            model = LlamaForCausalLM(LlamaConfig.from_pretrained(folder))
            if not any(p.is_meta for p in model.parameters()):
                from safetensors.torch import load_file

                model.load_state_dict(load_file(Path(folder) / "model.safetensors"), strict=False)
    meta = any(p.is_meta for p in model.parameters())
    loaded = memory_kib("VmHWM")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    prepared = memory_kib("VmHWM")
    tokens = torch.arange(32).reshape(1, 32) % 1000
    accelerator.backward(model(input_ids=tokens, labels=tokens).loss)
    optimizer.step()
    report = {"rank": accelerator.process_index, "meta_before_prepare": meta, "after_imports_mib": after_imports / 1024,
              "peak_after_loading_mib": loaded / 1024, "peak_after_prepare_mib": prepared / 1024,
              "peak_mib": memory_kib("VmHWM") / 1024}
    with open(Path(os.environ["BIG_MODEL_LOADING_RESULTS"]) / f"rank{accelerator.process_index}.json", "w") as file:
        json.dump(report, file)
    accelerator.end_training()
    return 0


def save_model(folder: Path, layers: int, hidden: int) -> int:
    """A Llama with tied embeddings saved in `folder`; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 8 // 3, num_hidden_layers=layers,
                         num_attention_heads=12, num_key_value_heads=12, vocab_size=32000, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def launch(folder: Path, processes: int, efficient: bool, source: str) -> list[dict[str, Any]]:
    """Each process's report of one launch."""
    with tempfile.TemporaryDirectory() as results:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_", "FSDP_"))}
        env.update(BIG_MODEL_LOADING_RESULTS=results, OMP_NUM_THREADS="1")
        command = [sys.executable, "-m", "accel", "launch", "--cpu", "--num_processes", str(processes), "--use_fsdp",
                   "--fsdp_auto_wrap_policy", "transformer_based_wrap",
                   *(["--fsdp_cpu_ram_efficient_loading"] if efficient else []), __file__, "--worker", str(folder),
                   "--source", source]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"the launch failed:\n{done.stderr[-4000:]}")
        return [json.loads(path.read_text()) for path in sorted(Path(results).glob("rank*.json"))]


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| model made by | loading | process | parameters on meta before prepare | RSS after imports | "
             "peak after loading | peak after prepare | peak after 1 step |", "|---|---|---|---|---|---|---|---|"]
    for label, reports in runs.items():
        for r in reports:
            lines.append(f"| {label} | {r['rank']} | {'yes' if r['meta_before_prepare'] else 'no'} | "
                         f"{r['after_imports_mib']:.0f} | {r['peak_after_loading_mib']:.0f} | "
                         f"{r['peak_after_prepare_mib']:.0f} | {r['peak_mib']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args.worker, args.source)
    with tempfile.TemporaryDirectory() as folder:
        count = save_model(Path(folder), args.layers, args.hidden)
        print(f"Llama, {count / 1e6:.1f}M float32 parameters ({count * 4 / MIB:.0f} MiB), "
              f"{args.processes} processes, FSDP2 (one unit per decoder layer)", flush=True)
        runs = {}
        for source in args.source.split(","):
            runs[f"{source} | every process (before)"] = launch(Path(folder), args.processes, False, source)
            runs[f"{source} | cpu_ram_efficient_loading"] = launch(Path(folder), args.processes, True, source)
    print("Peak resident memory per process (VmHWM), MiB:")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
