"""`accel launch` with real processes: settings reach the script, its exit status comes back."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from accel.cli.config.file import ConfigFile, load_config
from accel.cli.errors import CliError
from accel.cli.launch.children import torchrun_command
from accel.cli.launch.plan import LaunchPlan, plan_launch


def reports(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The JSON lines show_env.py printed, one per process, in rank order."""
    lines = [line[5:] for line in result.stdout.splitlines() if line.startswith("SHOW ")]
    try:
        found = [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        raise AssertionError(f"unreadable output: {result.stdout!r} (stderr {result.stderr!r})") from None
    return sorted(found, key=lambda r: int(r["env"].get("RANK", 0)))


def test_one_process_gets_flags_and_arguments(run_accel, show_env_script: Path) -> None:
    result = run_accel("launch", "--mixed-precision", "BF16-mixed", "--gradient_accumulation_steps", "4",
                       str(show_env_script), "--lr", "3", "--num_processes", "5")
    assert result.returncode == 0, result.stderr
    [report] = reports(result)
    assert report["argv"] == ["--lr", "3", "--num_processes", "5"]  # after the script: the script's own
    env = report["env"]
    assert env["ACCEL_MIXED_PRECISION"] == "bf16"
    assert env["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "4"
    assert env["ACCEL_NUM_PROCESSES"] == "1"
    assert "RANK" not in env and "ACCEL_USE_CPU" not in env  # not given, not distributed


def test_flags_override_the_config_file_which_overrides_defaults(run_accel, show_env_script: Path,
                                                                  tmp_path: Path) -> None:
    default_config = tmp_path / "xdg" / "accel" / "config.yaml"
    default_config.parent.mkdir(parents=True)
    default_config.write_text("mixed_precision: fp16\ngradient_accumulation_steps: 2\n")
    [report] = reports(run_accel("launch", "--mixed_precision", "bf16", str(show_env_script)))
    assert report["env"]["ACCEL_MIXED_PRECISION"] == "bf16"
    assert report["env"]["ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "2"


def test_child_exit_status_is_accels_with_one_line(run_accel, show_env_script: Path) -> None:
    result = run_accel("launch", str(show_env_script), extra_env={"EXIT_STATUS": "3"})
    assert result.returncode == 3
    assert result.stderr.strip() == "accel launch: show_env.py exited with status 3"


def test_child_traceback_is_shown_once(run_accel, tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text("raise RuntimeError('boom')\n")
    result = run_accel("launch", str(script))
    assert result.returncode == 1
    assert result.stderr.count("Traceback") == 1
    assert result.stderr.strip().splitlines()[-1] == "accel launch: crash.py exited with status 1"


def test_module(run_accel, tmp_path: Path) -> None:
    (tmp_path / "trainpkg").mkdir()
    (tmp_path / "trainpkg" / "__init__.py").write_text("")
    (tmp_path / "trainpkg" / "train.py").write_text(
        "import os, sys\nprint('MODULE', sys.argv[1:], os.environ['ACCEL_MIXED_PRECISION'])\n"
    )
    result = run_accel("launch", "--mixed_precision", "fp16", "-m", "trainpkg.train", "x",
                       extra_env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "MODULE ['x'] fp16" in result.stdout


def test_two_cpu_processes(run_accel, show_env_script: Path) -> None:
    result = run_accel("launch", "--num_processes", "2", "--cpu", "--mixed_precision", "bf16", str(show_env_script), "a")
    assert result.returncode == 0, result.stderr
    ranks = reports(result)
    assert [r["env"]["RANK"] for r in ranks] == ["0", "1"]
    cores = len(os.sched_getaffinity(0))
    for report in ranks:
        env = report["env"]
        assert report["argv"] == ["a"]
        assert env["WORLD_SIZE"] == "2" and env["ACCEL_NUM_PROCESSES"] == "2"
        assert env["ACCEL_USE_CPU"] == "true" and env["ACCEL_MIXED_PRECISION"] == "bf16"
        assert env["OMP_NUM_THREADS"] == str(max(1, cores // 2))


def test_two_processes_failure_is_one_line_with_the_rank(run_accel, show_env_script: Path) -> None:
    result = run_accel("launch", "--num_processes", "2", "--cpu", str(show_env_script),
                       extra_env={"EXIT_STATUS": "5", "FAIL_ON_RANK": "1", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 5
    assert "Traceback" not in result.stderr
    # rank 0 has exited 0 by then, or it is stopped, still running, and said to have followed rank 1
    assert result.stderr.strip().splitlines() in (
        ["accel launch: show_env.py exited with status 5 (rank 1 of 2)"],
        ["accel launch: rank 0 was stopped because rank 1 failed first",
         "accel launch: show_env.py exited with status 5 (rank 1 of 2)"],
    ), result.stderr
    assert all(r["env"]["OMP_NUM_THREADS"] == "1" for r in reports(result))  # the user's own setting wins


def test_torchrun_arguments() -> None:
    """One machine without a port: standalone rendezvous; several machines: the given rendezvous."""
    one = LaunchPlan({"num_processes": 2}, processes_per_machine=2, use_cpu=True, env={})
    assert torchrun_command(one, ["t.py", "--start"], module=False)[3:] == [
        "--standalone", "--max_restarts", "0", "--monitor_interval", "0.1", "--nproc_per_node", "2", "--", "script",
        "t.py", "--start",
    ]
    values = {"num_processes": 4, "num_machines": 2, "machine_rank": 1, "main_process_ip": "10.0.0.1",
              "main_process_port": 29501}
    two = LaunchPlan(values, processes_per_machine=2, use_cpu=True, env={})
    assert torchrun_command(two, ["-x"], module=True)[3:] == [
        "--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port", "29501",
        "--rdzv_conf", "timeout=300", "--max_restarts", "0", "--monitor_interval", "0.1", "--nproc_per_node", "2",
        "--", "module", "-x",
    ]
    elastic = {**values, "rdzv_backend": "c10d", "min_machines": 1, "max_restarts": 3, "monitor_interval": 0.5,
               "rdzv_timeout": 20}
    three = LaunchPlan(elastic, processes_per_machine=2, use_cpu=True, env={})
    assert torchrun_command(three, ["t.py"], module=False)[3:-3] == [
        "--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "10.0.0.1:29501", "--rdzv_id", "accel",
        "--rdzv_conf", "join_timeout=20", "--max_restarts", "3", "--monitor_interval", "0.5", "--nproc_per_node", "2",
    ]


ACCELERATE_CONFIG = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
fp8_config:
  amax_compute_algorithm: most_recent
  amax_history_length: 16
  backend: TE
  fp8_format: E4M3
  interval: 1
  override_linear_precision: [false, false, false]
  optimization_level: O2
machine_rank: 0
main_training_function: main
mixed_precision: fp8
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""

RUNS_ANYWHERE = ("--fp8_backend", "native", "--fp8_base_precision", "fp32")
"""Flags over ACCELERATE_CONFIG's backend TE, which `accel launch` refuses where TE cannot run."""


def test_accelerate_config_is_mapped_silently_when_nothing_is_lost(run_accel, show_env_script: Path,
                                                                   tmp_path: Path) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text(ACCELERATE_CONFIG)
    assert load_config(config, "accel launch")["fp8_backend"] == "te"
    # TE runs only on a CUDA FP8 GPU (accel launch refuses it elsewhere): run the mapped recipe on native,
    # which honours every field of it, with an fp32 base (no slowness note on any CPU)
    result = run_accel("launch", "--config_file", str(config), *RUNS_ANYWHERE, str(show_env_script))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    env = reports(result)[0]["env"]
    assert env["ACCEL_FP8_BACKEND"] == "native"
    assert env["ACCEL_FP8_AMAX_HISTORY_LEN"] == "16"
    assert env["ACCEL_FP8_AMAX_COMPUTE_ALGO"] == "most_recent"
    assert env["ACCEL_FP8_OPTIMIZATION_LEVEL"] == "O2"
    assert env["ACCEL_FP8_FORMAT"] == "E4M3"
    assert env["ACCEL_USE_CPU"] == "true"  # MULTI_CPU


def test_accelerate_config_asking_for_what_accel_does_not_run_is_refused(run_accel, show_env_script: Path,
                                                                         tmp_path: Path) -> None:
    text = ACCELERATE_CONFIG.replace("  interval: 1", "  interval: 2") + "enable_cpu_affinity: true\n"
    text += "dynamo_config:\n  dynamo_backend: INDUCTOR\n"
    config = tmp_path / "accelerate.yaml"
    config.write_text(text)
    result = run_accel("launch", "--config_file", str(config), *RUNS_ANYWHERE, str(show_env_script))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # the script never ran
    assert result.stderr.strip() == (
        f"accel launch: {config} is an Accelerate config that asks for what accel does not run, so nothing was "
        "started: enable_cpu_affinity=True (accel does not pin processes to CPU cores), fp8_config.interval=2. "
        "Remove these keys (or set them to Accelerate's defaults) to run the script with accel; `accel config` "
        "writes a config of accel's own"
    )


def test_accelerate_deepspeed_config_becomes_use_deepspeed_with_its_options(tmp_path: Path) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: true\n"
                      "deepspeed_config:\n  zero_stage: 3\n  offload_param_device: cpu\n  gradient_accumulation_steps: 2\n"
                      "  deepspeed_multinode_launcher: standard\n")
    values = load_config(config, "accel launch")
    assert (values["use_deepspeed"], values["zero_stage"], values["offload_param_device"]) == (True, 3, "cpu")
    assert values["gradient_accumulation_steps"] == 2
    env = plan_launch({}, ConfigFile(config, "flag", values, True), "accel launch", lambda: 0, 2).env
    assert (env["ACCEL_USE_DEEPSPEED"], env["ACCEL_ZERO_STAGE"], env["ACCEL_GRADIENT_ACCUMULATION_STEPS"]) == ("true", "3", "2")


def test_accelerate_deepspeed_keys_accel_cannot_honour_are_refused_before_any_process(tmp_path: Path) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: true\n"
                      "deepspeed_config:\n  zero_stage: 2\n  deepspeed_hostfile: /etc/hosts\n  gradient_accumulation_steps: 4\n"
                      "gradient_accumulation_steps: 2\n")
    with pytest.raises(CliError, match="gradient_accumulation_steps: 2 and deepspeed_config.gradient_accumulation_steps: 4"):
        load_config(config, "accel launch")
    config.write_text("distributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: true\n"
                      "deepspeed_config:\n  zero_stage: 2\n  deepspeed_hostfile: /etc/hosts\n")
    with pytest.raises(CliError, match="deepspeed_config.deepspeed_hostfile"):
        load_config(config, "accel launch")


def test_deepspeed_flags_need_use_deepspeed_and_exclude_fsdp(tmp_path: Path) -> None:
    empty = ConfigFile(tmp_path / "none.yaml", "default", {}, False)
    with pytest.raises(CliError, match="--zero_stage set DeepSpeed options"):
        plan_launch({"zero_stage": 2}, empty, "accel launch", lambda: 0, 2)
    with pytest.raises(CliError, match="use_deepspeed and use_fsdp"):
        plan_launch({"use_deepspeed": True, "use_fsdp": True}, empty, "accel launch", lambda: 0, 2)


def test_accelerate_restart_keys_are_honoured(tmp_path: Path) -> None:
    config = tmp_path / "accelerate.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 2\n"
                      "max_restarts: 3\nmonitor_interval: 0.5\nrdzv_backend: c10d\n")
    values = load_config(config, "accel launch")
    assert (values["max_restarts"], values["monitor_interval"], values["rdzv_backend"]) == (3, 0.5, "c10d")
    plan = LaunchPlan(values, processes_per_machine=2, use_cpu=True, env={})
    command = torchrun_command(plan, ["t.py"], module=False)
    assert command[command.index("--max_restarts") + 1] == "3"
    assert command[command.index("--monitor_interval") + 1] == "0.5"


def test_recipe_in_config_unused_for_another_precision_is_named(run_accel, show_env_script: Path,
                                                                tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("mixed_precision: fp8\nfp8_config:\n  margin: 1\n")
    result = run_accel("launch", "--config_file", str(config), "--mixed_precision", "no", str(show_env_script))
    assert result.returncode == 0
    assert result.stderr.strip() == f"accel launch: warning: fp8_config.margin from {config} not used: mixed_precision is 'no'"
    assert "ACCEL_FP8_MARGIN" not in reports(result)[0]["env"]


def test_busy_port_is_one_line_naming_the_port_and_flag(run_accel, show_env_script: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        result = run_accel("launch", "--cpu", "--num_processes", "2", "--main_process_port", port, str(show_env_script))
    assert result.returncode == 1
    line = result.stderr.strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1
    assert line == (
        f"accel launch: port {port} is already in use on this machine: pass another --main_process_port "
        "(or leave it out on one machine, and accel picks a free one)"
    )


def test_child_killed_by_a_signal(run_accel, tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    result = run_accel("launch", str(script))
    assert result.returncode == 128 + 15
    assert result.stderr.strip() == "accel launch: killed.py was stopped by SIGTERM"


def test_a_child_killed_from_outside_is_reported_with_the_likely_cause(run_accel, tmp_path: Path) -> None:
    # SIGKILL is what the kernel's out-of-memory killer sends: the process itself can print nothing.
    script = tmp_path / "oom.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = run_accel("launch", str(script))
    assert result.returncode == 128 + 9
    assert result.stderr.strip() == (
        "accel launch: oom.py was stopped by SIGKILL: nothing in the process could report why; most often the "
        "kernel's out-of-memory killer (`dmesg` says so) or a job scheduler's limit"
    )


def test_unreachable_machine_0_is_one_clear_line() -> None:
    import argparse

    from accel.cli.launch.distributed_run import _start_failure

    args = argparse.Namespace(master_addr="10.0.0.5", master_port=29877, nnodes="2", node_rank=1, rdzv_conf="timeout=300",
                              rdzv_backend="static", standalone=False)
    error = RuntimeError("The client socket has timed out after 300000ms while trying to connect to (10.0.0.5, 29877).")
    assert _start_failure(error, args, "train.py") == (
        "could not reach machine 0 at 10.0.0.5:29877 within 300 s (rdzv_timeout): check --main_process_ip and "
        "--main_process_port, that machine 0 has started, and that no firewall blocks the port"
    )


def test_the_torchrun_wrapper_runs_its_exit_handlers_and_skips_the_interpreters_teardown(tmp_path: Path) -> None:
    """After main() returns, the wrapper leaves from its last exit handler: handlers registered while it ran
    (torch's, logging's) still run, in order; objects still alive are not torn down (module teardown is
    ~0.6 s of CPU once torch is loaded, which every launch would wait for); its exit status stays main()'s."""
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(
        "import atexit\n"
        "class Alive:\n"
        "    def __del__(self):\n"
        "        print('torn down', flush=True)\n"
        "keep = Alive()\n"
        "from accel.cli.launch import distributed_run\n"
        "def main():\n"
        "    atexit.register(lambda: print('handler ran', flush=True))\n"
        "    return distributed_run.main(['--standalone', '--', 'script'])  # too few arguments: usage, status 2\n"
        "distributed_run.run_as_main(main)\n"
    )
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "usage: python -m accel.cli.launch.distributed_run" in done.stderr
    assert done.stdout.splitlines() == ["handler ran"]  # not "torn down": teardown skipped
    plain = subprocess.run([sys.executable, "-c", probe.read_text().split("from accel")[0]], capture_output=True,
                           text=True, timeout=60)
    assert plain.stdout.splitlines() == ["torn down"]  # what an ordinary end does, for comparison
