"""resolve: find the model source, check its content digest, detect task and model class."""

from __future__ import annotations

import json
from pathlib import Path

from executors.onnx.artifacts import SOURCE
from executors.run.step_api import StepContext, StepResult
from planner.models import sources

TOKEN_IDS = {"pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
             "sep_token_id", "cls_token_id"}
CUSTOM_CODE_HINT = ("set model.trust_remote_code=true only if you trust the checkpoint's code")


def run(ctx: StepContext) -> StepResult:
    p = ctx.params
    if p["source"] == "random_init":
        checkpoint = _random_init(ctx)
    elif p["source"] == "onnx_file":
        return _onnx_file(ctx)
    else:
        checkpoint = _existing(ctx)
    info = json.loads((checkpoint / "config.json").read_text())
    if info.get("auto_map") and not p["trust_remote_code"]:
        raise ctx.fail("the checkpoint needs custom code (auto_map in config.json), which is "
                       "refused by default", CUSTOM_CODE_HINT, where=str(checkpoint))
    rel = "checkpoint" if checkpoint.parent == ctx.out else str(checkpoint)
    (ctx.out / SOURCE).write_text(json.dumps({
        "source": p["source"], "checkpoint": rel, "digest": p["digest"], "task": p["task"],
        "model_class": p["model_class"], "model_type": info.get("model_type"),
        "trust_remote_code": p["trust_remote_code"]}, indent=2, sort_keys=True))
    return StepResult(metrics={"checkpoint": rel})


def _existing(ctx: StepContext) -> Path:
    p = ctx.params
    try:
        where = sources.checkpoint_location({**p, "path": p["path"]})
    except Exception as exc:
        raise ctx.fail(str(exc), "re-plan on this machine", where=p["path"] or p["package"]) from exc
    assert where is not None
    digest = sources.DigestMemo(None).tree_digest(where)
    if digest != p["digest"]:
        raise ctx.fail("the checkpoint's content changed since the plan was made "
                       f"(digest {digest[:12]}, plan {p['digest'][:12]})",
                       "re-plan (`modelplan plan`/`run`) to build the current content",
                       where=str(where))
    return where


def _random_init(ctx: StepContext) -> Path:
    """A checkpoint from a transformers config with seeded random weights, saved with a
    preprocessor (image processor or feature extractor) so samples go through it as they
    would for a real checkpoint."""
    import torch
    import transformers

    from executors.runtime import torchmodel
    from executors.samples.preprocessors import settle_batchnorm, write_preprocessor

    ri = ctx.params["random_init"]
    if ri["model_type"] not in transformers.CONFIG_MAPPING:
        raise ctx.fail(f"transformers {transformers.__version__} knows no model_type "
                       f"{ri['model_type']!r}", "set model.random_init.model_type to a "
                       "transformers model type (e.g. bert, vit, wav2vec2)")
    try:
        made = transformers.AutoConfig.for_model(ri["model_type"])
        default = set(made.to_dict()) | set(dir(made)) | TOKEN_IDS
    except (ValueError, TypeError, KeyError, AttributeError):
        default = set(ri["config"])  # composite configs (encoder + decoder) need their parts
    unknown = sorted(set(ri["config"]) - default)
    if unknown:
        raise ctx.fail(f"model.random_init.config has field(s) {unknown} that a "
                       f"{ri['model_type']} config does not have",
                       "remove them or check their spelling")
    config = transformers.AutoConfig.for_model(ri["model_type"], **ri["config"])
    cls = torchmodel.model_class({"model_class": ctx.params["model_class"],
                                  "task": ctx.params["task"]})
    config = tower_config(cls, config)
    torch.manual_seed(ri["seed"])
    model = cls.from_config(config) if cls.__name__.startswith("Auto") else cls(config)
    out = ctx.out / "checkpoint"
    out.mkdir()
    write_preprocessor(ri["model_type"], config, out, ri["preprocessor"])
    settle_batchnorm(model.eval(), out)
    model.eval().save_pretrained(str(out))
    return out


def tower_config(cls: type, config: object) -> object:
    """The sub-config a tower class takes (CLIP's text or vision tower from a CLIP config),
    with the model's projection size; `config` itself for every other class."""
    wanted = getattr(cls, "config_class", None)
    if cls.__name__.startswith("Auto") or wanted is None or isinstance(config, wanted):
        return config
    for name in getattr(config, "sub_configs", None) or {}:
        part = getattr(config, name, None)
        if isinstance(part, wanted):
            if hasattr(config, "projection_dim"):
                part.projection_dim = config.projection_dim
            return part
    return config


def _onnx_file(ctx: StepContext) -> StepResult:
    from executors.onnx.artifacts import MODEL, load, save

    src = Path(ctx.params["path"])
    digest = sources.DigestMemo(None).tree_digest(src)
    if digest != ctx.params["digest"]:
        raise ctx.fail("the ONNX file changed since the plan was made", "re-plan",
                       where=str(src))
    try:
        model = load(src)
    except Exception as exc:
        raise ctx.fail(f"not a readable ONNX model ({type(exc).__name__})",
                       "point model.path at a .onnx file", where=str(src)) from exc
    save(model, ctx.out / MODEL)
    (ctx.out / SOURCE).write_text(json.dumps({"source": "onnx_file", "checkpoint": None,
                                              "digest": digest, "task": ctx.params["task"],
                                              "model_class": ctx.params["model_class"]},
                                             indent=2, sort_keys=True))
    return StepResult()
