"""Local stand-ins for the hub names the fixtures hard-code, built once per test session.

`from_pretrained("bert-base-cased")`, `load_dataset("nyu-mll/glue", "mrpc")` and
`evaluate.load("glue", "mrpc")` each resolve a local directory of that name (relative to the
working directory) before the hub, so a run whose working directory holds these folders needs no
network and no change to the script:

- `bert-base-cased/`: a WordPiece tokenizer over a 60-word vocabulary and a 2-layer BERT
  classifier of width 32, saved from a seeded initialisation (every run loads the same weights);
- `nyu-mll/glue/`: a dataset folder whose README declares the `mrpc` configuration (CSV files
  with MRPC's columns: sentence1, sentence2, label, idx) with 56 training and 40 validation pairs;
- `glue/glue.py`: an `evaluate` metric module computing MRPC's accuracy and F1 with numpy;
- `tiny-clm/`: the same tokenizer and a 2-layer GPT-2 of width 32, with `clm_train.txt` and
  `clm_validation.txt` for the causal-LM script;
- `unet-config/` and `images/`: a 2-block UNet2DModel configuration and 12 18x20 PNGs for the
  diffusers script;
- `tiny-llama/` (the same tokenizer and a 2-layer Llama of width 32, 4 heads, 2 key-value heads) and
  `roneneldan/TinyStories/train.jsonl` (200 lines of text) for Accelerate's nd_parallel.py.

Beside them, `standin_torchvision/` replaces a library rather than a hub name: torchvision, whose
wheels must match the installed torch build exactly, so that it often cannot be installed (see its
docstring). `module_standins` puts it on a run's PYTHONPATH only where the real one does not import.
"""

from __future__ import annotations

import csv
import functools
import random
import shutil
import subprocess
import sys
from pathlib import Path

WORDS = ("the cat dog bird sat ran on a mat log tree red blue green big small quick slow house car road "
         "river hill sun moon star day night walks jumps sees likes has is was will can and but or not "
         "very old new one two three four five six seven eight nine ten left right up down in").split()
TRAIN_PAIRS, VALIDATION_PAIRS = 56, 40
MODULE_STANDINS = {"torchvision": Path(__file__).resolve().with_name("standin_torchvision")}


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))


def _tokenizer(folder: Path) -> object:
    from transformers import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=False, model_max_length=128)
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_glue(root: Path) -> None:
    """bert-base-cased/, nyu-mll/glue/ and glue/glue.py under `root`."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = _tokenizer(root / "bert-base-cased")
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=2)
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(root / "bert-base-cased")

    rng = random.Random(0)
    data = root / "nyu-mll" / "glue" / "mrpc"
    data.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", TRAIN_PAIRS), ("validation", VALIDATION_PAIRS)):
        with open(data / f"{split}.csv", "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["sentence1", "sentence2", "label", "idx"])
            for idx in range(count):
                writer.writerow([_sentence(rng), _sentence(rng), rng.randint(0, 1), idx])
    (root / "nyu-mll" / "glue" / "README.md").write_text(
        "---\nconfigs:\n- config_name: mrpc\n  data_files:\n  - split: train\n    path: mrpc/train.csv\n"
        "  - split: validation\n    path: mrpc/validation.csv\n---\n")
    (root / "glue").mkdir(exist_ok=True)
    shutil.copy(Path(__file__).with_name("glue_metric.py"), root / "glue" / "glue.py")


def build_clm(root: Path) -> None:
    """tiny-clm/ (tokenizer and GPT-2 weights), clm_train.txt and clm_validation.txt under `root`."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = _tokenizer(root / "tiny-clm")
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=2, eos_token_id=3)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(root / "tiny-clm")
    rng = random.Random(1)
    (root / "clm_train.txt").write_text("\n".join(_sentence(rng) for _ in range(48)) + "\n")
    (root / "clm_validation.txt").write_text("\n".join(_sentence(rng) for _ in range(12)) + "\n")


def build_diffusers(root: Path) -> None:
    """unet-config/config.json and images/ (12 PNGs, 18x20 RGB) under `root`."""
    import json

    import numpy as np
    from PIL import Image

    (root / "unet-config").mkdir(parents=True, exist_ok=True)
    (root / "unet-config" / "config.json").write_text(json.dumps({
        "_class_name": "UNet2DModel", "sample_size": 16, "in_channels": 3, "out_channels": 3,
        "layers_per_block": 1, "block_out_channels": [8, 16], "norm_num_groups": 4,
        "down_block_types": ["DownBlock2D", "AttnDownBlock2D"], "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
    }))
    images = root / "images"
    images.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for index in range(12):
        # 18x20, so that the script's Resize(16) and CenterCrop(16) have work to do
        Image.fromarray(rng.integers(0, 256, (18, 20, 3), dtype=np.uint8)).save(images / f"{index:02d}.png")


def build_llama(root: Path) -> None:
    """tiny-llama/ (tokenizer and Llama weights) and roneneldan/TinyStories/train.jsonl under `root`."""
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _tokenizer(root / "tiny-llama")
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=64)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(root / "tiny-llama")
    data = root / "roneneldan" / "TinyStories"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2)
    lines = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40))) for _ in range(200))
    (data / "train.jsonl").write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))


def build_all(root: Path) -> Path:
    """Every stand-in under `root` (returned)."""
    build_glue(root)
    build_clm(root)
    build_diffusers(root)
    build_llama(root)
    return root


def link_into(root: Path, workdir: Path) -> None:
    """Make the stand-ins visible from `workdir` (the run's working directory) by symlinks."""
    workdir.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        target = workdir / entry.name
        if not target.exists():
            target.symlink_to(entry, target_is_directory=entry.is_dir())


@functools.cache
def _importable(module: str) -> bool:
    """Whether `module` imports in a fresh interpreter (a wheel built for another torch fails here, not in pytest)."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, timeout=120)
    return done.returncode == 0


def module_standins(modules: tuple[str, ...]) -> tuple[Path, ...]:
    """The PYTHONPATH folders standing in for those of `modules` (named in MODULE_STANDINS) that do not import here.

    Example: `module_standins(("torchvision",))` is `()` where torchvision imports, else the
    `standin_torchvision` folder. The real library is always preferred; both frameworks' runs of a
    case get the same folders, so the comparison stays fair.
    """
    unknown = [module for module in modules if module not in MODULE_STANDINS]
    if unknown:
        raise ValueError(f"no stand-in for {unknown}: MODULE_STANDINS has {sorted(MODULE_STANDINS)}")
    return tuple(MODULE_STANDINS[module] for module in modules if not _importable(module))
