"""Graph roles as data (planner/models/roles.py): the graphs the planner derives for a
generating model take and give what their roles declare, and the cache protocol's names."""

from __future__ import annotations

from typing import Any

import pytest

from planner.models.roles import CACHE, CACHED_DECODER, ROLES, Kind, Trace, kind_of, role_of
from planner.planning import plan_from_overrides


def exported(*overrides: str) -> dict[str, dict[str, Any]]:
    ir = plan_from_overrides(["model=tiny_random", "target=cpu", *overrides]).to_json()
    return {s["id"].split(".")[0]: s["params"] for s in ir["steps"] if s["op"] == "export"}


def conforms(graph: str, params: dict[str, Any]) -> None:
    names = [s["name"] for s in params["inputs"]]
    role = role_of(graph, names)
    assert names[:len(role.inputs)] == list(role.inputs), graph
    assert params["outputs"][:len(role.outputs)] == list(role.outputs), graph
    past = [n for n in names if CACHE.is_past(n)]
    assert bool(past) == role.reads_cache, graph
    presents = [o for o in params["outputs"] if o.startswith(CACHE.present + ".")]
    if past:  # a step gives back the new entries of every buffer it reads
        assert presents == [CACHE.present_of(n) for n in past], graph
    else:  # a prompt gives its entries; nothing else without a cache gives any
        assert bool(presents) == role.prompt_stage, graph
    assert any(n.startswith(CACHE.cross + ".") for n in names) == role.reads_cross, graph
    assert any(o.startswith(CACHE.cross + ".") for o in params["outputs"]) == \
        role.gives_cross, graph


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen3"])
def test_a_causal_lm_graphs_take_what_their_roles_declare(family: str) -> None:
    graphs = exported(f"model.random_init.model_type={family}")
    assert kind_of(graphs) is Kind.DECODER_ONLY and list(graphs) == ["prefill", "decode"]
    for graph, params in graphs.items():
        conforms(graph, params)


@pytest.mark.parametrize("cache", ["true", "false"])
def test_an_encoder_decoder_graphs_take_what_their_roles_declare(cache: str) -> None:
    graphs = exported("model.random_init.model_type=marian",
                      f"export.shapes.decoder_cache={cache}")
    assert kind_of(graphs) is Kind.ENCODER_DECODER
    decoder = [s["name"] for s in graphs["decoder"]["inputs"]]
    assert (role_of("decoder", decoder) is CACHED_DECODER) == (cache == "true")
    assert ("cross" in graphs) == (cache == "true")
    for graph, params in graphs.items():
        if ROLES[graph].trace is not Trace.ENCODER:  # the encoder's inputs are its modality's
            conforms(graph, params)


def test_the_cache_protocol_names() -> None:
    assert CACHE.names(CACHE.past, 2) == ["past_key_values.0.key", "past_key_values.0.value",
                                          "past_key_values.1.key", "past_key_values.1.value"]
    assert CACHE.present_of("past_key_values.1.value") == "present.1.value"
    assert CACHE.layers(["input_ids", *CACHE.names(CACHE.past, 3)]) == 3
    assert kind_of(["model"]) is Kind.SINGLE and kind_of({"encoder": 1, "decoder": 2}) is \
        Kind.ENCODER_DECODER
