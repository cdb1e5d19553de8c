"""The packaged all-MiniLM-L6-v2, for real: export with hierarchy tags up to `tag`."""

from __future__ import annotations

from pathlib import Path

from executors.artifacts import problems
from tests.integration.conftest import run_json, step


def test_minilm_export_normalize_tag(tmp_path: Path) -> None:
    code, record, err = run_json("quant=none", "target=cpu", "verify=none", "perf=none",
                                 store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    export = step(record, "export")["metrics"]
    assert export["max_abs_vs_torch"] <= 1e-4
    # root, embeddings, encoder, pooler and 7 modules in each of 6 layers; torch.nn's own
    # classes (Linear, LayerNorm, Dropout, ...) are inlined into them
    assert export["coverage"]["percent"] == 100.0 and export["traced_modules"] == 46
    final = Path(record["published"]["model.onnx"])
    assert final.stat().st_size > 80e6  # real weights, not a stub
    assert problems(final, tagged=True) == []
    assert step(record, "optimize")["action"] == "elided"
