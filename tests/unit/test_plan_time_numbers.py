"""Values a config cannot mean are refused at plan time, in one line naming the key: NaN or
infinity anywhere (a plan is JSON, which has neither), and a random-init model's size or count
below 1 (it would plan, then fail in export), a value of the wrong shape for its key."""

from __future__ import annotations

import re

import pytest

from planner.errors import ConfigError
from planner.planning import plan_from_overrides


@pytest.mark.parametrize("override", ["eval.max_drop=nan", "eval.max_drop=inf",
                                      "verify.threshold=nan", "verify.threshold=-inf"])
def test_a_number_that_is_not_finite_is_refused(override: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=f"{key}: .* is not a finite number"):
        plan_from_overrides(["model=tiny_bert", "eval=task", override])


@pytest.mark.parametrize(("model_type", "field", "value"), [
    ("llama", "num_hidden_layers", -1), ("bert", "hidden_size", 0),
    ("gpt2", "n_head", 0), ("t5", "d_model", -4), ("llama", "intermediate_size", 0)])
def test_a_random_model_of_no_size_is_refused(model_type: str, field: str, value: int) -> None:
    with pytest.raises(ConfigError, match=f"random_init.config.{field}: {value} is a size"):
        plan_from_overrides(["model=tiny_random", f"model.random_init.model_type={model_type}",
                             f"+model.random_init.config.{field}={value}", "target=cpu"])


def test_a_token_id_of_zero_is_not_a_size() -> None:
    plan_from_overrides(["model=tiny_random", "model.random_init.model_type=llama",
                         "+model.random_init.config.eos_token_id=0", "target=cpu"])


@pytest.mark.parametrize(("override", "said"), [
    ("quant.overrides={a: 1}", "quant.overrides takes a list; write its value in [ ]"),
    ("export.shapes=[1]", "export.shapes takes a mapping; write its value in { }")])
def test_a_value_of_the_wrong_shape_says_the_shape_it_takes(override: str, said: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(said)):
        plan_from_overrides(["model=tiny_bert", override])
