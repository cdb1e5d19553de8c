"""A plan says a family of repeated tensor names once: a 16-layer LLM's 32 cache inputs are
one `past_key_values.{0..15}.{key,value}` entry, not 32 names on one line."""

from __future__ import annotations

import re

from planner.render.common import repeated_once
from tests.conftest import run_cli


def test_a_16_layer_llm_plan_names_its_cache_once() -> None:
    done = run_cli("plan", "model=tiny_random", "model.random_init.model_type=llama",
                   "target=cpu", "quant=none", "+model.random_init.config.num_hidden_layers=16")
    assert done.returncode == 0, done.stderr
    decode = next(ln for ln in done.stdout.splitlines() if "decode.export " in ln)
    assert re.search(r"past_key_values\.\{0\.\.15\}\.\{key,value\}:float32\[1x\d+x\d+x\d+\]",
                     decode), decode
    assert "present.{0..15}.{key,value}" in decode and "past_key_values.3.key" not in decode


def test_only_whole_families_of_three_or_more_are_folded() -> None:
    names = ["input_ids:int64[1x1]", "position_ids:int64[1x1]",
             *(f"past.{i}.{k}:float32[2]" for i in range(3) for k in ("key", "value"))]
    assert repeated_once(names) == ["input_ids:int64[1x1]", "position_ids:int64[1x1]",
                                    "past.{0..2}.{key,value}:float32[2]"]
    assert repeated_once(["a.1.x", "a.2.x"]) == ["a.1.x", "a.2.x"]            # two stay
    assert repeated_once(["a.0.k", "a.1.k", "a.1.v"]) == ["a.0.k", "a.1.k", "a.1.v"]  # not all
    assert repeated_once(["l.0", "l.1", "l.3"]) == ["l.{0,1,3}"]
    assert repeated_once(["x.a", "x.b", "x.c"]) == ["x.a", "x.b", "x.c"]      # no number varies
