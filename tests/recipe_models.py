"""Tiny random-weight checkpoints shaped like a winml-cli recipe's model (for the import tests
and benchmarks/import_bench.py): the model type's tiny config (planner/models/tiny.py) with what the
recipe's input tensors fix (vocabulary, position table, image and audio geometry), and patch
sizes that keep the sequence short, saved as transformers would save the real checkpoint."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from planner.models import tasks as T
from planner.models.tiny import TINY, TINY_PREPROCESSOR
from planner.recipes import winml

PATCH = 32
ROOT = Path(__file__).resolve().parent.parent
SKIP_WHY = ("the winml-cli recipe corpus is not beside the clone (../shared/corpus/"
            "winml-recipes); set MODELPLAN_RECIPE_CORPUS to its directory")


def corpus_dir() -> Path | None:
    """The recipe corpus: $MODELPLAN_RECIPE_CORPUS, else ../shared/corpus/winml-recipes."""
    path = Path(os.environ.get("MODELPLAN_RECIPE_CORPUS")
                or ROOT.parent / "shared" / "corpus" / "winml-recipes")
    return path if path.is_dir() else None


# One recipe per model type the corpus has and modelplan builds (its own target and precision).
BUILDS: dict[str, str] = {
    "audio-spectrogram-transformer":
        "MIT_ast-finetuned-audioset-10-10-0.4593/cpu/cpu/audio-classification_fp16_config.json",
    "bert": "sentence-transformers_all-MiniLM-L6-v2/feature-extraction_w8a16_config.json",
    "clip_text_model": "openai_clip-vit-base-patch32/feature-extraction_w8a16_config.json",
    "clip_vision_model":
        "openai_clip-vit-large-patch14/zero-shot-image-classification_fp16_config_image-encoder"
        ".json",
    "convnext": "facebook_convnext-tiny-224/image-classification_fp16_config.json",
    "deberta-v2": "mixedbread-ai_mxbai-rerank-xsmall-v1/cpu/cpu/text-classification_fp32_config"
                  ".json",
    "dinov2": "facebook_dinov2-small/qnn/npu/image-feature-extraction_w8a16_config.json",
    "distilbert": "typeform_distilbert-base-uncased-mnli/cpu/cpu/text-classification_fp16_config"
                  ".json",
    "electra": "daekeun-ml_koelectra-small-v3-nsmc/cpu/cpu/text-classification_fp32_config.json",
    "layoutlm": "impira_layoutlm-document-qa/cpu/cpu/question-answering_fp16_config.json",
    "layoutlmv3": "xhyi_layoutlmv3_docvqa_t11c5000/cpu/cpu/question-answering_fp16_config.json",
    "marian": "Helsinki-NLP_opus-mt-en-ru/cpu/cpu/translation_fp32_encoder_config.json",
    "mobilevit": "apple_mobilevit-small/image-classification_w8a16_config.json",
    "mpnet": "dell-research-harvard_names-linking-model/cpu/cpu/feature-extraction_fp32_config"
             ".json",
    "owlv2": "google_owlv2-base-patch16/cpu/cpu/zero-shot-object-detection_fp16_config.json",
    "owlvit": "google_owlvit-base-patch16/cpu/cpu/zero-shot-object-detection_fp32_config.json",
    "resnet": "microsoft_resnet-50/image-classification_w8a16_config.json",
    "roberta": "deepset_tinyroberta-squad2/question-answering_w8a16_config.json",
    "segformer": "mattmdjaga_segformer_b2_clothes/image-segmentation_w8a16_config.json",
    "swin": "microsoft_swin-large-patch4-window7-224/image-classification_fp16_config.json",
    "vision-encoder-decoder":
        "microsoft_trocr-large-handwritten/image-to-text_fp16_config_encoder.json",
    "vit": "rizvandwiki_gender-classification/image-classification_w8a16_config.json",
    "vitpose": "usyd-community_vitpose-base-simple/keypoint-detection_w8a8_config.json",
    "wav2vec2": "jonatasgrosman_wav2vec2-large-xlsr-53-polish/cpu/cpu/"
                "automatic-speech-recognition_fp16_config.json",
    "xlm-roberta": "cross-encoder_mmarco-mMiniLMv2-L12-H384-v1/cpu/cpu/"
                   "text-classification_fp16_config.json",
}


def _inputs(recipe: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in (recipe.get("export") or {}).get("input_tensors") or []}


def _divisor(size: int, want: int = PATCH) -> int:
    """A patch size near `want` that tiles `size` exactly."""
    return next((d for d in range(want, size + 1) if size % d == 0), size)


def _text(cfg: dict[str, Any], ins: dict[str, dict[str, Any]], mt: T.ModelType | None) -> None:
    ids = ins.get("input_ids")
    if ids is None:
        return
    if ids.get("value_range"):
        cfg["vocab_size"] = int(ids["value_range"][1])
    seq = ids["shape"][1] + (mt.position_offset if mt else 0)
    cfg["max_position_embeddings"] = max(cfg.get("max_position_embeddings", 0), seq)
    types = ins.get("token_type_ids")
    if types and types.get("value_range"):
        cfg["type_vocab_size"] = max(1, int(types["value_range"][1]))


def _image(ins: dict[str, dict[str, Any]]) -> tuple[int, int] | None:
    pixels = ins.get("pixel_values")
    return (pixels["shape"][2], pixels["shape"][3]) if pixels else None


def tiny_config(model_type: str, recipes: list[dict[str, Any]]) -> tuple[dict[str, Any],
                                                                         dict[str, Any]]:
    """(config fields, preprocessor hints) for a tiny `model_type` checkpoint the recipes
    (one, or an encoder's and a decoder's) can be built from."""
    cfg = copy.deepcopy(TINY[model_type])
    pre = copy.deepcopy(TINY_PREPROCESSOR.get(model_type, {}))
    ins: dict[str, dict[str, Any]] = {}
    for r in recipes:
        ins.update(_inputs(r))
    size = _image(ins)
    mt = T.MODEL_TYPES.get(model_type)
    if model_type in ("clip", "owlvit", "owlv2"):
        ids = ins.get("input_ids")
        if ids and ids.get("value_range"):
            cfg["text_config"]["vocab_size"] = int(ids["value_range"][1])
        if size:
            cfg["vision_config"].update(image_size=size[0], patch_size=_divisor(size[0]))
        for tower in ("text_config", "vision_config"):  # as real checkpoints say it per tower
            cfg[tower]["projection_dim"] = cfg["projection_dim"]
    elif model_type in ("marian", "vision-encoder-decoder"):
        _pair(model_type, cfg, size)
    elif mt is not None and mt.modality == T.TEXT:
        _text(cfg, ins, mt)
        if model_type == "layoutlmv3" and size:  # its visual embedding takes the page image
            cfg.update(input_size=size[0], patch_size=_divisor(size[0], 16))
    elif size:
        _vision(model_type, cfg, pre, size)
    elif model_type == "audio-spectrogram-transformer" and "input_values" in ins:
        _, frames, mels = ins["input_values"]["shape"]
        cfg.update(max_length=frames, num_mel_bins=mels, frequency_stride=16, time_stride=16)
    return cfg, pre


def _vision(model_type: str, cfg: dict[str, Any], pre: dict[str, Any],
            size: tuple[int, int]) -> None:
    h, w = size
    if model_type == "vitpose":
        cfg["backbone_config"].update(image_size=[h, w], patch_size=[16, 16])
        pre["image_size"] = [h, w]
    elif model_type == "swin":
        cfg.update(image_size=h, patch_size=8, window_size=7)
    elif model_type == "segformer":
        cfg.update(strides=[16, 2], patch_sizes=[16, 3])
        pre["image_size"] = h
    elif model_type in ("resnet", "convnext", "mobilevit"):
        cfg["image_size"] = h
        pre["image_size"] = h  # (MobileViT's initializer_range comes with its tiny config)
    else:
        cfg.update(image_size=h, patch_size=_divisor(h))


def _pair(model_type: str, cfg: dict[str, Any], size: tuple[int, int] | None) -> None:
    if model_type == "marian":
        cfg["max_position_embeddings"] = 512
        return
    if size:
        cfg["encoder"].update(image_size=size[0], patch_size=_divisor(size[0]))
    cfg["decoder"]["max_position_embeddings"] = 512


def save_checkpoint(model_type: str, task: str, model_class: str | None,
                    recipes: list[dict[str, Any]], dest: Path) -> Path:
    """Save a tiny `model_type` checkpoint for `task` to `dest` (config, weights, preprocessor)."""
    import torch
    import transformers

    from executors.samples.preprocessors import write_preprocessor

    fields, hints = tiny_config(model_type, recipes)
    config = transformers.AutoConfig.for_model(model_type, **fields)
    # a tower class loads from the whole model's checkpoint, as from the real one on the hub
    tower = model_class and model_class.endswith("ModelWithProjection")
    name = "AutoModel" if tower else model_class or T.TASKS[task].auto_class
    cls = getattr(transformers, str(name))
    torch.manual_seed(0)
    model = cls.from_config(config) if cls.__name__.startswith("Auto") else cls(config)
    model.eval().save_pretrained(str(dest))
    write_preprocessor(model_type, config, dest, hints)
    return dest


def checkpoint_for(recipe_paths: list[Path], dest: Path) -> Path:
    """A tiny checkpoint for the model the recipe files (one, or an encoder and a decoder)
    build."""
    recipes = [json.loads(p.read_text()) for p in recipe_paths]
    loader = recipes[0]["loader"]
    model_type, _ = winml.TYPE_ALIASES.get(loader["model_type"], (loader["model_type"], ""))
    mt = T.MODEL_TYPES[model_type]
    pair = mt.modality in T.GRAPHS
    task = mt.tasks[0] if pair else loader["task"]
    cls = None if pair or str(loader.get("model_class", "")).startswith("Auto") \
        else loader.get("model_class")
    return save_checkpoint(model_type, task, cls, recipes, dest)
