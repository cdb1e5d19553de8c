"""The config schema: every shipped config validates; bad values and unknown keys are errors."""

from __future__ import annotations

import pytest

from planner.config.compose import GROUPS, compose, group_options
from planner.config.validate import check_config
from planner.errors import ConfigError

NEEDS_PATH = {"local_hf", "onnx_file", "hub_cache"}


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in group_options(g)
                                          if o not in NEEDS_PATH])
def test_every_shipped_option_composes_and_validates(group: str, option: str) -> None:
    check_config(compose([f"{group}={option}"]))


def errors_of(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        check_config(compose(overrides))
    return info.value.lines


def test_bad_enum_value_names_path_value_and_allowed() -> None:
    assert errors_of(["quant.activation_type=uint12"]) == [
        ("quant.activation_type: 'uint12' is not one of uint8, uint16, int8, int16 "
         "(did you mean 'uint16'?)")]


def test_unknown_key_override_is_an_error_with_did_you_mean() -> None:
    (line,) = errors_of(["quant.activaton_type=int8"])
    assert line.startswith("quant.activaton_type: unknown key (did you mean "
                           "'quant.activation_type'?)")


def test_added_unknown_key_is_rejected_by_the_schema_not_dropped() -> None:
    (line,) = errors_of(["+quant.activaton_type=int8"])
    assert line.startswith("quant.activaton_type: unknown key (did you mean "
                           "'quant.activation_type'?)")


def test_unknown_group_option_lists_the_options() -> None:
    (line,) = errors_of(["quant=w8a9"])
    assert line == ("quant: 'w8a9' is not one of fp16, none, w4a16, w8a16, w8a16_pc, w8a8 "
                    "(did you mean 'w8a8'?) (configs in conf/quant/)")


def test_wrong_type_and_range() -> None:
    assert errors_of(["export.opset=abc"]) == ["export.opset: 'abc' is not an integer"]
    assert errors_of(["export.opset=9"]) == ["export.opset: 9 is below the minimum 14"]


def test_required_path_must_be_set() -> None:
    assert errors_of(["model=local_hf"]) == [
        "model.path: required but not set; set model.path=<value>"]


def test_every_violation_is_reported_sorted() -> None:
    lines = errors_of(["quant.activation_type=uint12", "export.shapes.batch_size=0"])
    assert [ln.split(":")[0] for ln in lines] == ["export.shapes.batch_size", "quant.activation_type"]


def test_unknown_fusion_flag_is_a_config_error() -> None:
    (line,) = errors_of(["optim.flags=[gelu,fuse_everything]"])
    assert line.startswith("optim.flags.1: 'fuse_everything' is not one of gelu, layer_norm")


def test_conditional_requirement_carries_a_fix() -> None:
    lines = errors_of(["quant=none", "quant.kind=qdq"])
    assert [ln.split(":")[0] for ln in lines] == [
        "quant.activation_type", "quant.calibration", "quant.weight_type"]
    assert lines[2].startswith("quant.weight_type: null is not a string; set quant.weight_type=")


def test_mistyped_top_level_key() -> None:
    (line,) = errors_of(["qunt=w8a8"])
    assert line.startswith("qunt: unknown key (did you mean 'quant'?)")
