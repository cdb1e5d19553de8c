"""Every single-graph family of the catalogue, exported for the CPU, computes what its PyTorch
model computes: the test loads the checkpoint `resolve` wrote with transformers itself, runs it
and the exported graph (CPU EP) on the same random inputs, and compares every output with a
tolerance relative to the output's size. The tiny configs draw weights at a range that gives
outputs far from zero (a tolerance relative to outputs of 1e-30 says nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from planner.models.tasks import GRAPHS, MODEL_TYPES
from planner.models.tiny import TINY
from tests.integration.conftest import run_json, step

# the catalogue's types without a tiny config of their own take a relative's
BORROWED = {"camembert": "xlm-roberta", "deit": "vit"}
# weights drawn at this range: activations of a realistic size (at transformers' 0.02 many tiny
# models' outputs are of 1e-3 and below); types whose config has no such field keep their own
RANGE = 0.2
LENGTH = 16
RTOL = 1e-3       # of the output's largest magnitude
LEAST = 0.05      # an output smaller than this is too close to zero to judge the export by
# the transformers class of each first (bare model's) task, as a user would load it
AUTO = {"feature-extraction": "AutoModel", "image-feature-extraction": "AutoModel",
        "image-segmentation": "AutoModelForSemanticSegmentation",
        "depth-estimation": "AutoModelForDepthEstimation",
        "object-detection": "AutoModelForObjectDetection",
        "zero-shot-object-detection": "AutoModelForZeroShotObjectDetection",
        "zero-shot-image-classification": "AutoModelForZeroShotImageClassification",
        "audio-classification": "AutoModelForAudioClassification"}

# one graph per model; the catalogue's generative families (several graphs) are compared with
# transformers by the generation tests
ENCODERS = sorted(name for name, mt in MODEL_TYPES.items() if mt.modality not in GRAPHS)


def overrides(model_type: str) -> list[str]:
    import transformers

    config = dict(TINY[BORROWED.get(model_type, model_type)])
    made = transformers.AutoConfig.for_model(model_type)
    if hasattr(made, "initializer_range"):
        config["initializer_range"] = RANGE
    return [f"+model.random_init.config.{k}={json.dumps(v).replace(' ', '')}"
            for k, v in config.items() if k not in TINY.get(model_type, {}) or
            k == "initializer_range"]


def feeds(session: ort.InferenceSession, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for spec in session.get_inputs():
        # a free axis: batch 1, then the planned sequence length
        shape = [d if isinstance(d, int) else 1 if i == 0 else LENGTH
                 for i, d in enumerate(spec.shape)]
        if spec.name == "attention_mask" or spec.name.endswith("pixel_mask"):
            mask = np.ones(shape, np.int64)
            mask[..., shape[-1] * 3 // 4:] = 0 if spec.name == "attention_mask" else 1
            out[spec.name] = mask
        elif spec.name == "bbox":  # x0 <= x1, y0 <= y1 within 0..1000
            corner = rng.integers(0, 500, shape[:-1] + [2])
            out[spec.name] = np.concatenate([corner, corner + 100], -1)
        elif "int" in spec.type:
            high = 2 if "token_type" in spec.name else vocab
            out[spec.name] = rng.integers(3 if high > 3 else 0, high, shape).astype(np.int64)
        else:
            out[spec.name] = rng.normal(size=shape).astype(np.float32)
    return out


@pytest.mark.slow  # ~15 s each, 32 families
@pytest.mark.parametrize("model_type", ENCODERS)
def test_the_fp32_export_computes_what_pytorch_computes(model_type: str, tmp_path: Path) -> None:
    import torch
    import transformers

    code, record, err = run_json(
        "model=tiny_random", f"model.random_init.model_type={model_type}",
        f"model.task={MODEL_TYPES[model_type].tasks[0]}", "target=cpu",
        "quant=none", "verify=none", "perf=none", f"export.shapes.sequence_length={LENGTH}",
        *overrides(model_type), store=tmp_path / "store", outputs=tmp_path / "out")
    assert code == 0, err
    folder = Path(step(record, "resolve")["outputs"]["source.json"]).parent / "checkpoint"
    task = MODEL_TYPES[model_type].tasks[0]
    cls = MODEL_TYPES[model_type].classes.get(task) or AUTO[task]
    model = getattr(transformers, cls).from_pretrained(str(folder)).eval()
    session = ort.InferenceSession(step(record, "export")["outputs"]["model.onnx"],
                                   providers=["CPUExecutionProvider"])
    vocab = int(getattr(model.config, "vocab_size", None) or
                getattr(getattr(model.config, "text_config", None), "vocab_size", 100))
    feed = feeds(session, vocab)
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(names, feed), strict=True))
    with torch.inference_mode():
        want = model(**{k: torch.from_numpy(v) for k, v in feed.items()}, return_dict=True)
    for name in names:
        expected = want[name].float().numpy()
        scale = float(np.abs(expected).max())
        assert scale >= LEAST, f"{name} peaks at {scale:.3g}: no yardstick"
        error = float(np.abs(got[name] - expected).max())
        assert error <= RTOL * scale, f"{name}: off by {error:.3g} of {scale:.3g}"
