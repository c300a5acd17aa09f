"""The model an estimate is for, built on the meta device (shapes only, no memory, nothing downloaded).

A source is one of:
* a preset: "gpt" (the example GPT, as `accel bench` and examples/train_gpt.py build it by default),
  "llama3-8b", "llama3-70b" (Llama 3's published shapes, through transformers' LlamaConfig);
* a transformers model: a local folder with a config.json, or a Hub name already in the local cache;
* "module:function" or "path/to/file.py:function": a function that returns an `nn.Module`.
"""

from __future__ import annotations

import importlib
import importlib.util
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

PRESETS: dict[str, dict[str, Any]] = {
    "llama3-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
    "llama3-70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
                   "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256},
}


def build_on_meta(source: str, library_name: str | None = None, lm_head: bool = True) -> nn.Module:
    """The model `source` names, its parameters on the meta device, in float32 (as Accelerate's command).

    Args:
        source: a preset name, a transformers folder or cached Hub name, or "module:function".
        library_name: "transformers" to insist on a transformers model; None to decide from `source`.
        lm_head: build a transformers model with its head (AutoModelForCausalLM, what training holds);
            False: the bare AutoModel, as Accelerate's `estimate-memory` builds it.

    Raises:
        ValueError: naming the source and the three kinds accepted, when none of them matches.
    """
    if source == "gpt":
        from accel.bench.gpt import GPT, GPTConfig

        with torch.device("meta"):
            return GPT(GPTConfig())
    if ":" in source and library_name is None and not Path(source).exists():
        return _from_function(source)
    if importlib.util.find_spec("transformers") is None:
        raise ValueError(f"model {source!r}: presets and transformers models need transformers (pip install "
                         "transformers); without it, give 'module:function' or the preset gpt")
    with _torchao_quiet():
        if source in PRESETS:
            from transformers import LlamaConfig

            return _transformers_model(LlamaConfig(**PRESETS[source], tie_word_embeddings=False), lm_head)
        return _transformers_model(_transformers_config(source), lm_head)


def _torchao_quiet() -> AbstractContextManager[None]:
    """transformers imports torchao where it is installed; its start-up noise is not this command's output."""
    if importlib.util.find_spec("torchao") is None:
        return nullcontext()
    from accel.backends.fp8.ao_import import torchao_noise_held_back

    return torchao_noise_held_back()


def _transformers_config(source: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"model {source!r} is not a preset (gpt, {', '.join(PRESETS)}), a folder with a config.json, a Hub name in "
            f"the local cache (nothing is downloaded: `huggingface-cli download {source} config.json` first), or "
            f"'module:function' ({str(error).splitlines()[0]})"
        ) from None


def _transformers_model(config: Any, lm_head: bool) -> nn.Module:
    from transformers import AutoModel, AutoModelForCausalLM

    with torch.device("meta"):
        if lm_head:
            try:
                return AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            except ValueError:  # not a causal LM: the bare model
                pass
        return AutoModel.from_config(config, dtype=torch.float32)


def _from_function(source: str) -> nn.Module:
    where, _, name = source.rpartition(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        if spec is None or spec.loader is None:
            raise ValueError(f"model {source!r}: cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"model {source!r}: {where} has no function {name!r}")
    with torch.device("meta"):
        try:
            model = function()
        except TypeError as error:  # it wants arguments: say so in one line, not a traceback
            raise ValueError(f"model {source!r}: {name}() must build the model without arguments ({error}); "
                             f"write a function that does, e.g. def make(): return {name}(...)") from None
    if not isinstance(model, nn.Module):
        raise ValueError(f"model {source!r}: {name}() returned {type(model).__name__}, not an nn.Module")
    return model
