"""The target table (planner/core/targets.py): one declaration per conf/target/*.yaml with the
same fields, one session adapter each, and every declared name something executors can use."""

from __future__ import annotations

import importlib

import pytest
import yaml

import schemas
from executors.onnx.quantizer import CONFIGS
from executors.runtime.adapters import adapter, available_eps
from planner.core import targets as T
from planner.core.targets import of_params
from planner.errors import ConfigError, PlanFileError
from tests.conftest import ROOT

CONFIG_FIELDS = ("name", "ep", "backend", "embed_context", "cpu_fallback", "provider_options",
                 "fp16_provider_options")
ADAPTER = ("available", "session_options", "session", "step_session")


def test_every_conf_target_is_declared_with_the_same_fields() -> None:
    confs = {p.stem: yaml.safe_load(p.read_text()) for p in (ROOT / "conf/target").glob("*.yaml")}
    assert sorted(confs) == sorted(T.TARGETS)
    for name, conf in confs.items():
        target = T.TARGETS[name]
        assert conf == {f: getattr(target, f) for f in CONFIG_FIELDS}, name
        assert T.target_name(conf["ep"], conf["backend"]) == name


def test_every_declaration_has_what_executors_need() -> None:
    eps = schemas.load("config")["properties"]["target"]["properties"]["ep"]["enum"]
    assert [t.name for t in T.TARGETS.values() if t.reference] == [T.reference().name]
    for target in T.TARGETS.values():
        assert target.ep in eps
        assert target.qdq.config in CONFIGS
        runtime = adapter(target)
        assert all(callable(getattr(runtime, f, None)) for f in ADAPTER), target.name
        if target.compiles:
            assert callable(getattr(runtime, "errors", None)), target.name
            assert target.legalizer is not None, target.name  # compile requires legal_for
        if target.legalizer:
            assert importlib.import_module(f"executors.onnx.{target.legalizer}_rewrites")
        assert bool(target.session.profiling) == bool(target.session.profiling_file)
    assert T.reference().ep in available_eps()


def test_steps_find_their_target_by_params() -> None:
    qnn_htp = T.TARGETS["qnn_htp"]
    assert of_params({"target": "qnn_htp", "ep": "qnn", "backend": "htp"}) is qnn_htp
    assert of_params({"profile": "qnn_htp", "kind": "qdq"}) is qnn_htp
    assert of_params({"ep": "qnn", "backend": "htp", "provider_options": {}}) is qnn_htp
    assert of_params({"ep": "cpu", "backend": None}) is T.reference()
    with pytest.raises(PlanFileError, match="not declared"):
        of_params({"ep": "qnn", "backend": "cpu"})


def test_an_undeclared_target_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="qnn_cpu"):
        T.of_config({"ep": "qnn", "backend": "cpu"})
