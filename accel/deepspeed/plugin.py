"""DeepSpeedPlugin: Accelerate's name and fields for running prepared objects through DeepSpeed's ZeRO engine.

The plugin holds a DeepSpeed config (`deepspeed_config`, a dict): the JSON given as `hf_ds_config` (a path or
a dict), or one built from the fields. Values the Accelerator knows better (batch size, precision,
accumulation) may be "auto" and are filled at prepare (accel/deepspeed/config.py). Unlike Accelerate,
gradient clipping is never 1.0 unless asked: a field or JSON value of None means no clipping.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel._validation import check_bool, check_choice, check_int

OFFLOAD_DEVICES = ("none", "cpu", "nvme")
"""Where ZeRO may keep the optimizer state or the parameters (Accelerate's choices)."""
AUTO = "auto"


@dataclass
class DeepSpeedPlugin:
    """How DeepSpeed runs the prepared model: ZeRO stage, offloading, clipping, accumulation.

    Example: `Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2, gradient_clipping=1.0))`, or
    `DeepSpeedPlugin(hf_ds_config="ds_config.json")` for a DeepSpeed JSON (its "auto" values are filled at
    prepare from the Accelerator and the dataloaders).
    """

    hf_ds_config: Any = None
    """A DeepSpeed config: a path to its JSON, or a dict. When given, the other fields must agree with it."""
    gradient_accumulation_steps: int | str | None = None
    """Micro-batches per optimizer step (None: the Accelerator's)."""
    gradient_clipping: float | str | None = None
    """The gradients' global norm limit (None: no clipping, not DeepSpeed's default of 1.0)."""
    zero_stage: int | None = None
    """0 (plain data parallel), 1 (optimizer states sharded), 2 (+ gradients), 3 (+ parameters); default 2."""
    is_train_batch_min: bool = True
    """With several dataloaders, the smallest batch size is the micro-batch (False: the largest)."""
    offload_optimizer_device: str | None = None
    """'none', 'cpu' or 'nvme': where the optimizer states live (ZeRO 1-3)."""
    offload_param_device: str | None = None
    """'none', 'cpu' or 'nvme': where the parameters live between uses (ZeRO 3 only)."""
    offload_optimizer_nvme_path: str | None = None
    """A folder on an NVMe drive for the optimizer states; required with offload_optimizer_device='nvme'."""
    offload_param_nvme_path: str | None = None
    """A folder on an NVMe drive for the parameters; required with offload_param_device='nvme'."""
    zero3_init_flag: bool | None = None
    """Build transformers models partitioned (deepspeed.zero.Init); ZeRO 3 only."""
    zero3_save_16bit_model: bool | None = None
    """Under ZeRO 3, gather the full 16-bit weights on save (needed by save_model and get_state_dict)."""
    transformer_moe_cls_names: str | None = None
    """Accelerate's mixture-of-experts block names (ZeRO 3 leaf modules): accepted and not used, accel marks no
    leaf modules."""
    deepspeed_config: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        given = _load(self.hf_ds_config)
        self.deepspeed_config = given if given is not None else {}
        zero = self.deepspeed_config.setdefault("zero_optimization", {})
        self.zero_stage = self._agree("zero_stage", self.zero_stage, zero.get("stage"), 2)
        self.zero_stage = check_int("DeepSpeedPlugin.zero_stage", self.zero_stage, minimum=0)
        if self.zero_stage > 3:
            raise ValueError(f"DeepSpeedPlugin(zero_stage={self.zero_stage}): ZeRO stages are 0, 1, 2 and 3.")
        zero["stage"] = self.zero_stage
        self._offload("offload_optimizer", zero)
        self._offload("offload_param", zero)
        steps = self.deepspeed_config.get("gradient_accumulation_steps")
        self.gradient_accumulation_steps = self._agree("gradient_accumulation_steps",
                                                       self.gradient_accumulation_steps, steps, AUTO)
        if self.gradient_accumulation_steps != AUTO:
            check_int("DeepSpeedPlugin.gradient_accumulation_steps", self.gradient_accumulation_steps, minimum=1)
        self.deepspeed_config["gradient_accumulation_steps"] = self.gradient_accumulation_steps
        self.gradient_clipping = self._agree("gradient_clipping", self.gradient_clipping,
                                             self.deepspeed_config.get("gradient_clipping"), None)
        self._check_clipping()
        save16 = zero.get("stage3_gather_16bit_weights_on_model_save")
        self.zero3_save_16bit_model = bool(self._agree("zero3_save_16bit_model", self.zero3_save_16bit_model, save16, False))
        zero["stage3_gather_16bit_weights_on_model_save"] = self.zero3_save_16bit_model
        self.zero3_init_flag = check_bool("DeepSpeedPlugin.zero3_init_flag", bool(self.zero3_init_flag))
        if self.zero3_init_flag and self.zero_stage != 3:
            raise ValueError(
                f"DeepSpeedPlugin(zero3_init_flag=True) with zero_stage={self.zero_stage}: building partitioned models "
                "is ZeRO 3's; set zero_stage=3 or drop zero3_init_flag."
            )
        self.is_train_batch_min = check_bool("DeepSpeedPlugin.is_train_batch_min", self.is_train_batch_min)
        for key in ("train_micro_batch_size_per_gpu", "train_batch_size"):
            self.deepspeed_config.setdefault(key, AUTO)

    # ----------------------------------------------------------------- Accelerate's helpers
    def is_auto(self, ds_key_long: str) -> bool:
        """Whether the config's value at a dotted key ('zero_optimization.stage') is "auto".

        Args:
            ds_key_long: The dotted key.
        """
        return self.get_value(ds_key_long) == AUTO

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The config's value at a dotted key, or `default`.

        Args:
            ds_key_long: The dotted key, e.g. `"zero_optimization.stage"`.
            default: What to return when the key is missing.

        Example: `plugin.get_value("zero_optimization.stage")` -> 2.
        """
        node: Any = self.deepspeed_config
        for key in ds_key_long.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def is_zero3_init_enabled(self) -> bool:
        """Whether transformers models are built partitioned (`zero3_init_flag`), Accelerate's method."""
        return bool(self.zero3_init_flag)

    def set_deepspeed_weakref(self, precision_sections: dict[str, Any] | None = None) -> None:
        """With zero3_init_flag: tell transformers (its HfDeepSpeedConfig) to build models partitioned under
        deepspeed.zero.Init, in the engine's precision (`precision_sections`), as Accelerate does.

        Args:
            precision_sections: The DeepSpeed config sections that set the precision (`{"bf16": {...}}`),
                merged over the plugin's config.
        """
        if not self.zero3_init_flag:
            return
        try:
            from transformers.integrations import HfDeepSpeedConfig, unset_hf_deepspeed_config
        except ImportError:
            raise ImportError("DeepSpeedPlugin(zero3_init_flag=True) builds transformers models partitioned: "
                              "pip install transformers, or drop zero3_init_flag.") from None
        config = copy.deepcopy(self.deepspeed_config) | (precision_sections or {})
        for key in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu"):
            if config.get(key) in (AUTO, None):
                config[key] = 1  # placeholders: zero.Init reads neither
        config.pop("train_batch_size", None)
        unset_hf_deepspeed_config()
        self.dschf = HfDeepSpeedConfig(config)  # transformers holds a weak reference: keep it alive here

    # ----------------------------------------------------------------- checks
    def _agree(self, name: str, value: Any, in_config: Any, default: Any) -> Any:
        """The field's value, the config's, or the default; the field and the config disagreeing is refused."""
        if value is None or value == AUTO:
            return default if in_config is None else in_config
        if in_config not in (None, AUTO) and in_config != value:
            raise ValueError(
                f"DeepSpeedPlugin({name}={value!r}) contradicts the DeepSpeed config's {in_config!r} "
                f"(hf_ds_config={self.hf_ds_config!r}): give the value in one place, or the same value in both."
            )
        return value

    def _offload(self, what: str, zero: dict[str, Any]) -> None:
        """offload_optimizer / offload_param: the field (or config) device, checked, written to the config."""
        section = zero.get(what) or {}
        device = self._agree(f"{what}_device", getattr(self, f"{what}_device"), section.get("device"), "none")
        device = check_choice(f"DeepSpeedPlugin.{what}_device", device, OFFLOAD_DEVICES)
        path = getattr(self, f"{what}_nvme_path") or section.get("nvme_path")
        if device == "nvme" and not path:
            raise ValueError(f"DeepSpeedPlugin({what}_device='nvme') needs {what}_nvme_path (a folder on an NVMe drive).")
        if what == "offload_param" and device != "none" and self.zero_stage != 3:
            raise ValueError(
                f"DeepSpeedPlugin(offload_param_device={device!r}) with zero_stage={self.zero_stage}: only ZeRO 3 "
                "partitions parameters, so only it can offload them. Set zero_stage=3 or offload_param_device='none'."
            )
        setattr(self, f"{what}_device", device)
        zero[what] = {**section, "device": device, **({"nvme_path": path} if path else {})}

    def _check_clipping(self) -> None:
        value = self.gradient_clipping
        if value in (None, AUTO):
            self.deepspeed_config["gradient_clipping"] = value or 0.0
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"DeepSpeedPlugin(gradient_clipping={value!r}): give a number >= 0 (0: no clipping).")
        self.gradient_clipping = float(value)
        self.deepspeed_config["gradient_clipping"] = float(value)

    @property
    def clips(self) -> float:
        """The norm limit DeepSpeed clips at (0.0: none; "auto" is filled at prepare)."""
        value = self.deepspeed_config.get("gradient_clipping")
        return float(value) if isinstance(value, (int, float)) else 0.0


def _load(config: Any) -> dict[str, Any] | None:
    """The DeepSpeed config given as a path or a dict (a deep copy: the plugin fills it in), or None."""
    if config is None:
        return None
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if isinstance(config, (str, Path)):
        path = Path(config)
        if not path.is_file():
            raise FileNotFoundError(f"DeepSpeedPlugin(hf_ds_config={str(config)!r}): no such file; give a DeepSpeed "
                                    "JSON file or a dict.")
        loaded = json.loads(path.read_text())
        if not isinstance(loaded, dict):
            raise ValueError(f"DeepSpeedPlugin(hf_ds_config={str(config)!r}): the file holds {type(loaded).__name__}, "
                             "not a JSON object.")
        return loaded
    config_dict = getattr(config, "config", None)  # transformers' HfDeepSpeedConfig
    if isinstance(config_dict, dict):
        return copy.deepcopy(config_dict)
    raise TypeError(f"DeepSpeedPlugin(hf_ds_config={config!r}): give a path to a DeepSpeed JSON file or a dict.")
