"""A model over 2 GB (one protobuf's limit) builds end to end: a seeded random-weight BERT of
hidden 1536 and 2 layers over a 320,000-token vocabulary (2.2 GB; its token table alone is
1.97 GB, as a large multilingual vocabulary's is), exported, normalized, fused, tagged and
verified on the CPU, its weights blobs beside each graph, linked rather than rewritten where a step keeps them,
and no step after export holding more than three copies of the weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import run_json, step

ROOT = Path(__file__).resolve().parents[2]
ENTRY_FILES = {"model.onnx", "weights", "manifest.json", "result.json",
               "model_htp_metadata.json", "model_hierarchy.md"}
SHAPE = {"vocab_size": 320_000, "hidden_size": 1536, "num_hidden_layers": 2,
         "num_attention_heads": 24, "intermediate_size": 6144}


def checkpoint(out: Path) -> Path:
    """The random-weight checkpoint, made in a process of its own (its memory goes with it)."""
    code = ("import torch, transformers\n"
            "torch.manual_seed(0)\n"
            f"config = transformers.BertConfig(**{SHAPE!r})\n"
            f"transformers.BertModel(config).eval().save_pretrained({str(out)!r})\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=600)
    return out


@pytest.mark.slow
def test_a_bert_over_2gb_builds_with_its_weights_stored_once(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "ckpt")
    size = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    assert size > 2**31
    store, outputs = tmp_path / "store", tmp_path / "out"
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "quant=none",
                                 "target=cpu", "optim=transformer", "verify.samples=2",
                                 "perf=none", store=store, outputs=outputs, fresh=True,
                                 timeout=1800)
    assert code == 0, err
    assert step(record, "verify")["metrics"]["cosine_mean"] > 0.999
    graphs = {s["id"]: Path(s["outputs"]["model.onnx"]).parent for s in record["steps"]
              if "model.onnx" in s["outputs"]}
    assert set(graphs) >= {"export", "optimize", "tag"}
    assert step(record, "normalize")["action"] == "elided"  # optimize normalizes its input
    for where in graphs.values():  # the graph alone is small: the weights are blobs
        assert {p.name for p in where.iterdir()} <= ENTRY_FILES  # no tool's own data files
        assert (where / "model.onnx").stat().st_size < 50 * 2**20
        assert sum(p.stat().st_size for p in (where / "weights").iterdir()) > 2**31
    kept = {p.name: p.stat().st_ino for p in (graphs["optimize"] / "weights").iterdir()}
    tagged = {p.name: p.stat().st_ino for p in (graphs["tag"] / "weights").iterdir()}
    assert tagged == kept  # tag changes no weight: every blob is the optimize step's file
    for s in record["steps"]:
        if s["action"] == "run" and s["op"] not in ("resolve", "export"):
            assert s["peak_rss_mb"] * 2**20 <= 3 * size, (s["id"], s["peak_rss_mb"])
    published = outputs / next(p.name for p in outputs.iterdir() if p.is_dir())
    assert os.path.getsize(published / "model.onnx") < 50 * 2**20
    assert len(list((published / "weights").iterdir())) == len(tagged)
