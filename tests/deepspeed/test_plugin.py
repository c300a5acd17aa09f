"""DeepSpeedPlugin, the config built from it and the Accelerator's checks at construction (one process, no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accel.backends.deepspeed import DeepSpeedPrecision, deepspeed_precision
from accel.deepspeed import config as ds_config
from accel.deepspeed.environment import environment_plugin
from accel.kwargs_handlers import GradScalerKwargs, collect_handlers
from accel.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

CPU = torch.device("cpu")


def precision(name: str = "no", *handlers: object) -> DeepSpeedPrecision:
    return deepspeed_precision(name, CPU, collect_handlers(list(handlers), None))  # type: ignore[arg-type]


def built(plugin: DeepSpeedPlugin, name: str = "no", optimizer: object = None, scheduler: object = None) -> dict:
    model = torch.nn.Linear(2, 2)
    optimizer = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=0.1)
    return ds_config.build(plugin, precision(name), steps=2, micro=4, num_processes=2, model=model,
                           optimizer=optimizer, scheduler=scheduler, split_batches=False)


def test_plugin_builds_accelerates_config_with_no_clipping_unless_asked() -> None:
    plugin = DeepSpeedPlugin(zero_stage=3, offload_param_device="cpu", zero3_save_16bit_model=True)
    assert plugin.get_value("zero_optimization.stage") == 3 and plugin.is_auto("train_micro_batch_size_per_gpu")
    config = built(plugin)
    assert config["gradient_clipping"] == 0.0  # never DeepSpeed's silent 1.0
    sizes = (config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"], config["train_batch_size"])
    assert sizes == (4, 2, 16)
    assert config["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert config["zero_allow_untested_optimizer"] is True
    assert built(DeepSpeedPlugin(gradient_clipping=0.5))["gradient_clipping"] == 0.5
    assert built(DeepSpeedPlugin(hf_ds_config={"gradient_clipping": "auto"}))["gradient_clipping"] == 0.0


def test_precision_sections_say_what_the_accelerator_runs() -> None:
    assert built(DeepSpeedPlugin(), "bf16")["bf16"] == {"enabled": True}
    assert built(DeepSpeedPlugin(), "bf16")["fp16"] == {"enabled": False}
    scaled = built(DeepSpeedPlugin(), "fp16") | {}
    assert scaled["fp16"] == {"enabled": True}
    config = ds_config.build(DeepSpeedPlugin(), precision("fp16", GradScalerKwargs(init_scale=2.0**10, growth_interval=50)),
                             steps=1, micro=1, num_processes=1, model=torch.nn.Linear(1, 1), optimizer=None,
                             scheduler=None, split_batches=False)
    assert config["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 10, "loss_scale_window": 50}


@pytest.mark.parametrize("name", ["fp8", "bf16-true", "16-true", "64-true"])
def test_precisions_deepspeed_cannot_run_are_refused_with_the_reason(name: str) -> None:
    with pytest.raises(ValueError, match=f"mixed_precision='{name}' with a DeepSpeedPlugin"):
        precision(name)


def test_a_json_contradicting_the_accelerator_is_refused_naming_both_values(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"gradient_accumulation_steps": 4, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 2}}))
    plugin = DeepSpeedPlugin(hf_ds_config=str(path))
    with pytest.raises(ValueError, match="gradient_accumulation_steps=4 and the Accelerator gradient_accumulation_steps=2"):
        ds_config.accumulation_steps(plugin, 2)
    assert ds_config.accumulation_steps(plugin, None) == 4
    with pytest.raises(ValueError, match="enables bf16, the Accelerator runs mixed_precision='fp16'"):
        ds_config.check_precision(plugin, precision("fp16"))
    assert ds_config.precision_name(plugin, None) == "bf16"
    with pytest.raises(ValueError, match=r"DeepSpeedPlugin\(zero_stage=3\) contradicts the DeepSpeed config's 2"):
        DeepSpeedPlugin(hf_ds_config=str(path), zero_stage=3)


def test_an_optimizer_in_the_json_and_in_the_script_is_refused() -> None:
    plugin = DeepSpeedPlugin(hf_ds_config={"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})
    sgd = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="the DeepSpeed config has an optimizer \\('AdamW'\\) and the script prepared SGD"):
        ds_config.check_objects(plugin, sgd, None)
    dummy = DummyOptim([torch.nn.Parameter(torch.ones(1))], lr=0.25, weight_decay=0.5)
    ds_config.check_objects(plugin, dummy, None)
    assert built(plugin, optimizer=dummy)["optimizer"]["params"] == {"lr": 0.25, "weight_decay": 0.5}
    with pytest.raises(ValueError, match="no \"optimizer\" section"):
        ds_config.check_objects(DeepSpeedPlugin(), dummy, None)
    with pytest.raises(ValueError, match="DummyScheduler without lr_scheduler_callable"):
        ds_config.check_objects(plugin, dummy, DummyScheduler(dummy))


@pytest.mark.parametrize(("fields", "message"), [
    ({"zero_stage": 4}, "ZeRO stages are 0, 1, 2 and 3"),
    ({"zero_stage": 2, "offload_param_device": "cpu"}, "only ZeRO 3 partitions parameters"),
    ({"offload_optimizer_device": "disk"}, "offload_optimizer_device"),
    ({"offload_optimizer_device": "nvme"}, "needs offload_optimizer_nvme_path"),
    ({"gradient_clipping": -1}, "give a number >= 0"),
    ({"zero_stage": 2, "zero3_init_flag": True}, "building partitioned models is ZeRO 3's"),
    ({"hf_ds_config": "/nonexistent/ds.json"}, "no such file"),
])
def test_bad_plugin_fields_are_refused_at_construction(fields: dict, message: str) -> None:
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        DeepSpeedPlugin(**fields)


def test_accel_launch_variables_describe_the_plugin_and_accelerates_are_read_too() -> None:
    plugin = environment_plugin({"ACCEL_USE_DEEPSPEED": "true", "ACCEL_ZERO_STAGE": "3",
                                 "ACCEL_OFFLOAD_PARAM_DEVICE": "cpu", "ACCEL_GRADIENT_CLIPPING": "0.5"})
    assert (plugin.zero_stage, plugin.offload_param_device, plugin.gradient_clipping) == (3, "cpu", 0.5)
    theirs = environment_plugin({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "1"})
    assert theirs.zero_stage == 1
    assert environment_plugin({"ACCEL_ZERO_STAGE": "3"}) is None  # not without use_deepspeed
    with pytest.raises(ValueError, match="ACCEL_USE_DEEPSPEED"):
        environment_plugin({"ACCEL_USE_DEEPSPEED": "1", "ACCEL_ZERO_STAGE": "2", "ACCEL_OFFLOAD_PARAM_DEVICE": "cpu"})


class TestAccelerator:
    """The Accelerator with a DeepSpeedPlugin, in this one process (no engine is built)."""

    @pytest.fixture(autouse=True)
    def _deepspeed(self) -> None:
        pytest.importorskip("deepspeed")

    def test_it_reports_deepspeed_and_the_precision_its_engine_runs(self) -> None:
        from accel import Accelerator
        from accel.utils import DistributedType

        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2), mixed_precision="bf16", cpu=True)
        assert accelerator.distributed_type == DistributedType.DEEPSPEED
        assert accelerator.state.deepspeed_plugin.zero_stage == 2
        assert (accelerator.mixed_precision, accelerator.native_amp) == ("bf16", False)
        assert accelerator.deepspeed_config["zero_optimization"]["stage"] == 2
        json_bf16 = DeepSpeedPlugin(hf_ds_config={"bf16": {"enabled": True}})
        assert Accelerator(deepspeed_plugin=json_bf16, cpu=True).mixed_precision == "bf16"

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"mixed_precision": "fp8"}, "FP8 layers"),
        ({"gradient_accumulation_steps": 3, "deepspeed_plugin": DeepSpeedPlugin(gradient_accumulation_steps=2)},
         "gradient_accumulation_steps=2 and the Accelerator gradient_accumulation_steps=3"),
        ({"mixed_precision": "fp16", "deepspeed_plugin": DeepSpeedPlugin(hf_ds_config={"bf16": {"enabled": True}})},
         "enables bf16, the Accelerator runs mixed_precision='fp16'"),
        ({"dynamo_backend": "inductor"}, "compiling the engine is not provided"),
    ])
    def test_contradictions_are_refused_at_construction(self, kwargs: dict, message: str) -> None:
        from accel import Accelerator

        kwargs.setdefault("deepspeed_plugin", DeepSpeedPlugin())
        with pytest.raises(ValueError, match=message):
            Accelerator(cpu=True, **kwargs)

    def test_bitsandbytes_and_fsdp_are_refused_with_the_reason(self) -> None:
        from accel import Accelerator
        from accel.kwargs_handlers import BitsandbytesKwargs
        from accel.utils import FullyShardedDataParallelPlugin

        with pytest.raises(ValueError, match="bitsandbytes' packed 4/8-bit weights"):
            Accelerator(deepspeed_plugin=DeepSpeedPlugin(), kwarg_handlers=[BitsandbytesKwargs(mode="nf4")], cpu=True)
        with pytest.raises(ValueError, match="deepspeed_plugin and fsdp_plugin"):
            Accelerator(deepspeed_plugin=DeepSpeedPlugin(), fsdp_plugin=FullyShardedDataParallelPlugin(), cpu=True)


ONE_PROCESS = """
import torch
from accel import Accelerator
from accel.utils import DeepSpeedPlugin
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
reference = torch.nn.Linear(4, 1)
reference.load_state_dict(model.state_dict())
accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2), cpu=True)
data = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
prepared = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1),
                               torch.utils.data.DataLoader(data, batch_size=4))
engine, optimizer, loader = prepared
plain = torch.optim.SGD(reference.parameters(), lr=0.1)
for x in loader:
    loss = engine(x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    reference(x).pow(2).mean().backward()
    plain.step()
    plain.zero_grad()
print("DIFF", max((a - b).abs().max().item() for a, b in zip(engine.module.parameters(), reference.parameters())))
"""


def test_one_process_runs_the_engine_without_a_launcher() -> None:
    """`python train.py` with a DeepSpeedPlugin: a process group of one is made for DeepSpeed's engine."""
    import os
    import subprocess
    import sys

    pytest.importorskip("deepspeed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_", "RANK", "LOCAL_RANK"))}
    done = subprocess.run([sys.executable, "-c", ONE_PROCESS], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.split("DIFF")[-1]) < 1e-7


DUMMIES = """
import torch
from accel import Accelerator
from accel.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler
config = {"zero_optimization": {"stage": 2},
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                       "warmup_num_steps": "auto"}}}
accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config), cpu=True)
model = torch.nn.Linear(4, 1)
optimizer = DummyOptim(model.parameters(), lr=0.1, weight_decay=0.01)
scheduler = DummyScheduler(optimizer, warmup_num_steps=2)
loader = torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=4)
model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
rates = []
for x in loader:
    accelerator.backward(model(x).pow(2).mean())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    rates.append(scheduler.get_last_lr()[0])
built = accelerator.deepspeed_config
print("RESULT", [type(optimizer).__name__, type(scheduler).__name__, type(optimizer.optimizer.optimizer).__name__,
                 built["optimizer"]["params"], built["scheduler"]["params"], rates])
"""


def test_dummy_optimizer_and_scheduler_build_the_jsons_with_their_values() -> None:
    """DummyOptim/DummyScheduler: DeepSpeed builds the JSON's AdamW and WarmupLR, their "auto" filled from the script."""
    import ast
    import os
    import subprocess
    import sys

    pytest.importorskip("deepspeed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_", "RANK", "LOCAL_RANK"))}
    done = subprocess.run([sys.executable, "-c", DUMMIES], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    wrapper, scheduler, inner, optimizer_params, scheduler_params, rates = ast.literal_eval(
        done.stdout.split("RESULT")[-1].strip())
    assert (wrapper, scheduler, inner) == ("DeepSpeedOptimizerWrapper", "DeepSpeedSchedulerWrapper", "AdamW")
    assert (optimizer_params["lr"], optimizer_params["weight_decay"]) == (0.1, 0.01)
    assert scheduler_params == {"warmup_min_lr": 0, "warmup_max_lr": 0.1, "warmup_num_steps": 2}
    assert rates[0] < rates[-1] == pytest.approx(0.1)  # the engine stepped the warmup


def _construct(plugin: DeepSpeedPlugin, device: str) -> None:
    from accel.deepspeed import options
    from accel.kwargs_handlers import Handlers

    options.backend(plugin, "no", torch.device(device), Handlers(), quantized=False, parallelism=None,
                    dynamo_backend=None)


def test_zero3_on_the_cpu_gathers_one_parameter_at_a_time() -> None:
    """gloo finishes DeepSpeed's coalesced gathers out of order (docs/deepspeed.md): on the CPU the engine's and
    zero.Init's config carry stage3_allgather_sequential; elsewhere, and below stage 3, nothing is added."""
    pytest.importorskip("deepspeed")
    plugin = DeepSpeedPlugin(zero_stage=3)
    _construct(plugin, "cpu")
    assert plugin.deepspeed_config["zero_optimization"]["stage3_allgather_sequential"] is True
    for stage, device in ((2, "cpu"), (3, "meta")):
        other = DeepSpeedPlugin(zero_stage=stage)
        _construct(other, device)
        assert "stage3_allgather_sequential" not in other.deepspeed_config["zero_optimization"]


def test_a_config_asking_for_coalesced_gathers_on_the_cpu_is_refused_with_the_reason() -> None:
    pytest.importorskip("deepspeed")
    plugin = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 3, "stage3_allgather_sequential": False}})
    with pytest.raises(ValueError, match=r"stage3_allgather_sequential=false on the CPU: .* waits only for the last"):
        _construct(plugin, "cpu")


@pytest.mark.parametrize("value", ["no", 0])
def test_any_other_value_for_sequential_gathers_on_the_cpu_is_refused_naming_it(value: object) -> None:
    pytest.importorskip("deepspeed")
    plugin = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 3, "stage3_allgather_sequential": value}})
    with pytest.raises(ValueError, match=rf"stage3_allgather_sequential={json.dumps(value)} on the CPU"):
        _construct(plugin, "cpu")
    auto = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 3, "stage3_allgather_sequential": "auto"}})
    _construct(auto, "cpu")  # "auto": accel's to fill
    assert auto.deepspeed_config["zero_optimization"]["stage3_allgather_sequential"] is True

