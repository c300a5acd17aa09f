"""The one-process reference for Accelerate's nd_parallel.py (test_nd_parallel.py): that script cannot run on one
process (it all-reduces its loss with no process group), so this one does what it does, through the same
fixture's `utils` (dataset, collator, tokenizer), with the global batch of `places` data-parallel places at once.
argv: places, steps, sequence length. Runs in a real-scripts work folder (the stand-ins), with the fixture's
renamed modules on its path; the recorder writes the loss of each backward."""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForCausalLM
from utils import create_collate_fn, get_dataset, setup_tokenizer

from accel import Accelerator
from accel.utils import set_seed

MODEL = "tiny-llama"


def main() -> None:
    places, steps, length = (int(arg) for arg in sys.argv[1:4])
    set_seed(42)
    accelerator = Accelerator(mixed_precision="bf16")
    model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.bfloat16, use_cache=False)
    tokenizer = setup_tokenizer(MODEL)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-5)
    loader = DataLoader(get_dataset(tokenizer, length, accelerator), batch_size=places, collate_fn=create_collate_fn())
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _, batch in zip(range(steps), loader):
        batch["position_ids"] = torch.arange(0, batch["input_ids"].size(1)).unsqueeze(0)
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)


if __name__ == "__main__":
    main()
