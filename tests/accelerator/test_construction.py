"""Building an Accelerator: arguments, ACCEL_* variables, and every bad input, at construction."""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator, FP8RecipeKwargs


def test_defaults() -> None:
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "no"
    assert accelerator.gradient_accumulation_steps == 1
    assert accelerator.device == torch.device("cpu")
    assert (accelerator.process_index, accelerator.local_process_index, accelerator.num_processes) == (0, 0, 1)
    assert accelerator.is_main_process and accelerator.is_local_main_process
    assert accelerator.sync_gradients


def test_precision_reports_the_canonical_name_and_backend() -> None:
    accelerator = Accelerator(mixed_precision="16-mixed")
    assert accelerator.mixed_precision == "fp16"
    assert accelerator.precision.compute_dtype == torch.float16
    assert accelerator.precision.param_dtype == torch.float32


def test_environment_is_read_when_arguments_are_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "BF16")
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCEL_USE_CPU", "true")
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "bf16"
    assert accelerator.gradient_accumulation_steps == 4
    assert accelerator.device.type == "cpu"


def test_argument_wins_over_environment_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    with pytest.warns(UserWarning, match="mixed_precision='no' given in the code overrides ACCEL_MIXED_PRECISION='fp16'"):
        assert Accelerator(mixed_precision="no").mixed_precision == "no"


def test_agreeing_argument_and_environment_do_not_warn(monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder) -> None:
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp32")
    Accelerator(mixed_precision="no")
    assert not [w for w in recwarn if "overrides" in str(w.message)]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ACCEL_MIXED_PRECISION", "half", "ACCEL_MIXED_PRECISION='half' is not accepted"),
        ("ACCEL_GRADIENT_ACCUMULATION_STEPS", "two", "ACCEL_GRADIENT_ACCUMULATION_STEPS='two' is not an integer"),
        ("ACCEL_GRADIENT_ACCUMULATION_STEPS", "0", "ACCEL_GRADIENT_ACCUMULATION_STEPS=0 must be an int >= 1"),
        ("ACCEL_USE_CPU", "maybe", "ACCEL_USE_CPU='maybe' is not a boolean"),
    ],
)
def test_invalid_environment_values_raise_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=message):
        Accelerator()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mixed_precision": "fp4"}, ValueError, "mixed_precision='fp4' is not accepted; accepted values: 'no'"),
        ({"mixed_precision": "bf61"}, ValueError, "Did you mean 'bf16'"),
        ({"gradient_accumulation_steps": 0}, ValueError, "gradient_accumulation_steps=0 must be an int >= 1"),
        ({"gradient_accumulation_steps": 2.0}, TypeError, "gradient_accumulation_steps=2.0 must be an int"),
        ({"gradient_accumulation_steps": True}, TypeError, "must be an int"),
        ({"cpu": "yes"}, TypeError, "cpu='yes' must be True or False"),
        ({"device_placement": 1}, TypeError, "device_placement=1 must be True or False"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Accelerator(**kwargs)


def test_arguments_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Accelerator("fp16")  # type: ignore[misc]


def test_fp8_backend_that_cannot_run_refuses_rather_than_running_something_else() -> None:
    with pytest.raises((NotImplementedError, RuntimeError), match="will not run another backend or precision"):
        Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(backend="te")])


def test_several_accelerators_with_different_precisions_coexist() -> None:
    first = Accelerator(mixed_precision="fp16")
    second = Accelerator(mixed_precision="bf16")
    third = Accelerator()
    assert [a.mixed_precision for a in (first, second, third)] == ["fp16", "bf16", "no"]


def test_gradient_accumulation_steps_setter_validates() -> None:
    accelerator = Accelerator()
    accelerator.gradient_accumulation_steps = 3
    assert accelerator.gradient_accumulation_steps == 3
    with pytest.raises(ValueError, match="gradient_accumulation_steps=0"):
        accelerator.gradient_accumulation_steps = 0


def test_fp8_recipe_from_the_environment_is_used_only_as_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_FP8_MARGIN", "2")
    accelerator = Accelerator(mixed_precision="bf16")  # the recipe is not a user-given handler here
    assert accelerator.handlers.get(FP8RecipeKwargs).margin == 2
    assert not accelerator.handlers.has(FP8RecipeKwargs)


def test_fp8_recipe_in_code_wins_over_the_environment_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_FP8_MARGIN", "2")
    with pytest.warns(UserWarning, match="overrides the one from ACCEL_FP8_"):
        accelerator = Accelerator(mixed_precision="fp8", kwarg_handlers=[FP8RecipeKwargs(margin=1)])
    assert accelerator.handlers.get(FP8RecipeKwargs).margin == 1


def test_bad_fp8_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_FP8_AMAX_HISTORY_LEN", "zero")
    with pytest.raises(ValueError, match="ACCEL_FP8_AMAX_HISTORY_LEN='zero'"):
        Accelerator()


def test_a_positional_argument_is_refused_with_the_keyword_to_write() -> None:
    import inspect

    with pytest.raises(TypeError, match=r"keyword arguments only, got 1 positional: 'bf16'.*Accelerator\(mixed_precision='bf16'\)"):
        Accelerator("bf16")  # type: ignore[misc]
    assert next(iter(inspect.signature(Accelerator).parameters)) == "mixed_precision"  # tools see the keywords
