"""Tasks and model types, as data: what a checkpoint's config.json says it is, which task it
builds for, which transformers class loads it, and which graphs it exports.

Pure: the planner detects a task and derives input and output specs (planner/models/specs.py) from
config.json and preprocessor_config.json without importing transformers. Class names are
those of transformers 5.x; `None` means the task's Auto class resolves the class at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.errors import ConfigError
from planner.models import automap, forwards
from planner.models.lm_classes import (
    CAUSAL_LM,
    causal_lm_class,
    names_causal_lm,
    reads_images_among_tokens,
)

# Modalities: what a graph takes. text2text, image2text and speech2text (Whisper: log-mel
# features) models export an encoder and a decoder graph; a causal LM a prefill and a decode
# graph, or one graph on the whole prefix per new token where its forward keeps no cache
TEXT, IMAGE, AUDIO, TEXT_IMAGE, TEXT2TEXT, IMAGE2TEXT, CAUSAL, SPEECH2TEXT, CAUSAL_UNCACHED = (
    "text", "image", "audio", "text+image", "text2text", "image2text", "causal", "speech2text",
    "causal-uncached")


@dataclass(frozen=True)
class Task:
    name: str
    auto_class: str | None         # the transformers Auto class that loads it
    outputs: tuple[str, ...]       # the graph's outputs, in order
    modalities: tuple[str, ...]    # the modalities it exists for


TASKS: dict[str, Task] = {t.name: t for t in (
    Task("feature-extraction", "AutoModel", ("last_hidden_state",), (TEXT, AUDIO)),
    Task("sentence-similarity", "AutoModel", ("last_hidden_state", "sentence_embedding"),
         (TEXT,)),
    Task("text-classification", "AutoModelForSequenceClassification", ("logits",), (TEXT,)),
    Task("zero-shot-classification", "AutoModelForSequenceClassification", ("logits",),
         (TEXT,)),
    Task("token-classification", "AutoModelForTokenClassification", ("logits",), (TEXT,)),
    Task("question-answering", "AutoModelForQuestionAnswering", ("start_logits", "end_logits"),
         (TEXT,)),
    Task("fill-mask", "AutoModelForMaskedLM", ("logits",), (TEXT,)),
    Task("image-classification", "AutoModelForImageClassification", ("logits",), (IMAGE,)),
    Task("image-feature-extraction", "AutoModel", ("last_hidden_state",), (IMAGE,)),
    Task("image-segmentation", "AutoModelForSemanticSegmentation", ("logits",), (IMAGE,)),
    Task("depth-estimation", "AutoModelForDepthEstimation", ("predicted_depth",), (IMAGE,)),
    Task("object-detection", "AutoModelForObjectDetection", ("logits", "pred_boxes"), (IMAGE,)),
    Task("zero-shot-object-detection", "AutoModelForZeroShotObjectDetection",
         ("logits", "pred_boxes"), (TEXT_IMAGE,)),
    Task("zero-shot-image-classification", "AutoModelForZeroShotImageClassification",
         ("logits_per_image", "text_embeds", "image_embeds"), (TEXT_IMAGE,)),
    Task("keypoint-detection", None, ("heatmaps",), (IMAGE,)),
    Task("audio-classification", "AutoModelForAudioClassification", ("logits",), (AUDIO,)),
    Task("automatic-speech-recognition", "AutoModelForCTC", ("logits",), (AUDIO, SPEECH2TEXT)),
    Task("text2text-generation", "AutoModelForSeq2SeqLM", ("logits",), (TEXT2TEXT,)),
    Task("image-to-text", "VisionEncoderDecoderModel", ("logits",), (IMAGE2TEXT,)),
    Task("text-generation", "AutoModelForCausalLM", ("logits",), (CAUSAL,)),
)}

# The graphs a modality exports, and the encoder graph's outputs (the decoder's: the task's)
GRAPHS = {TEXT2TEXT: ("encoder", "decoder"), IMAGE2TEXT: ("encoder", "decoder"),
          SPEECH2TEXT: ("encoder", "decoder"), CAUSAL: ("prefill", "decode"),
          CAUSAL_UNCACHED: ("uncached",)}
ENCODER_OUTPUTS = ("last_hidden_state",)


@dataclass(frozen=True)
class ModelType:
    name: str
    modality: str
    tasks: tuple[str, ...]                       # what it builds for; first = a bare model's
    text_inputs: tuple[str, ...] = ("input_ids", "attention_mask")
    position_offset: int = 0                     # positions taken before the first token
    absolute_positions: bool = True              # False: rotary/relative, no position table
    classes: dict[str, str] = field(default_factory=dict)  # task -> class no Auto class loads
    outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # task -> other outputs
    image_size: int | None = None                # when config.json does not say
    end_token: str = "eos_token_id"              # the config field generation stops at
    # a speech encoder's convolutions (kernel, stride, padding) config.json does not say
    audio_convs: tuple[tuple[int, int, int], ...] = ()
    # or each `conv_kernel_sizes` kernel's stride, padded by half the kernel (Speech2Text's)
    kernel_stride: int = 0


_TEXT_TASKS = ("feature-extraction", "fill-mask", "text-classification",
               "token-classification", "question-answering", "sentence-similarity",
               "zero-shot-classification")
_TYPES_IDS = ("input_ids", "attention_mask", "token_type_ids")
_IMAGE_TASKS = ("image-feature-extraction", "image-classification")
# a causal LM generates; its base model's hidden states export as feature extraction
_LM_TASKS = ("text-generation", "feature-extraction")

MODEL_TYPES: dict[str, ModelType] = {m.name: m for m in (
    ModelType("bert", TEXT, _TEXT_TASKS, _TYPES_IDS),
    ModelType("roberta", TEXT, _TEXT_TASKS, position_offset=2),
    ModelType("xlm-roberta", TEXT, _TEXT_TASKS, position_offset=2),
    ModelType("camembert", TEXT, _TEXT_TASKS, position_offset=2),
    ModelType("distilbert", TEXT, _TEXT_TASKS),
    ModelType("mpnet", TEXT, _TEXT_TASKS, position_offset=2),
    ModelType("electra", TEXT, _TEXT_TASKS, _TYPES_IDS),
    ModelType("deberta-v2", TEXT, _TEXT_TASKS, absolute_positions=False),
    ModelType("modernbert", TEXT, _TEXT_TASKS, absolute_positions=False),
    ModelType("layoutlm", TEXT, _TEXT_TASKS[:5],
              ("input_ids", "bbox", "attention_mask", "token_type_ids")),
    ModelType("layoutlmv3", TEXT, _TEXT_TASKS[:5], ("input_ids", "bbox", "attention_mask"),
              position_offset=2),
    ModelType("vit", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("deit", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("dinov2", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("beit", IMAGE, (*_IMAGE_TASKS, "image-segmentation"), image_size=224),
    ModelType("swin", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("swinv2", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("convnext", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("resnet", IMAGE, _IMAGE_TASKS, image_size=224),
    ModelType("mobilevit", IMAGE, (*_IMAGE_TASKS, "image-segmentation"), image_size=256),
    ModelType("segformer", IMAGE, ("image-segmentation", *_IMAGE_TASKS), image_size=512),
    ModelType("dpt", IMAGE, ("depth-estimation", "image-segmentation",
                             "image-feature-extraction"), image_size=384),
    ModelType("depth_anything", IMAGE, ("depth-estimation",), image_size=518),
    ModelType("yolos", IMAGE, ("object-detection", "image-feature-extraction"), image_size=512),
    ModelType("rt_detr", IMAGE, ("object-detection",), image_size=640),
    ModelType("detr", IMAGE, ("object-detection",), image_size=800),
    ModelType("vitpose", IMAGE, ("keypoint-detection",),
              classes={"keypoint-detection": "VitPoseForPoseEstimation"}, image_size=256),
    ModelType("owlvit", TEXT_IMAGE, ("zero-shot-object-detection",), image_size=768),
    ModelType("owlv2", TEXT_IMAGE, ("zero-shot-object-detection",), image_size=960),
    ModelType("clip", TEXT_IMAGE, ("zero-shot-image-classification",
                                   "feature-extraction", "image-feature-extraction"),
              classes={"feature-extraction": "CLIPTextModelWithProjection",
                       "image-feature-extraction": "CLIPVisionModelWithProjection"},
              outputs={"feature-extraction": ("text_embeds",),
                       "image-feature-extraction": ("image_embeds",)},
              image_size=224),
    ModelType("wav2vec2", AUDIO, ("feature-extraction", "audio-classification",
                                  "automatic-speech-recognition")),
    ModelType("hubert", AUDIO, ("feature-extraction", "audio-classification",
                                "automatic-speech-recognition")),
    ModelType("audio-spectrogram-transformer", AUDIO, ("audio-classification",
                                                       "feature-extraction")),
    ModelType("marian", TEXT2TEXT, ("text2text-generation",)),
    ModelType("t5", TEXT2TEXT, ("text2text-generation",), absolute_positions=False),
    # bart-large-mnli: its sequence-classification head reads the encoder-decoder's text
    ModelType("bart", TEXT2TEXT, ("text2text-generation", "text-classification",
                                  "zero-shot-classification"), position_offset=2),
    ModelType("whisper", SPEECH2TEXT, ("automatic-speech-recognition",),
              classes={"automatic-speech-recognition": "WhisperForConditionalGeneration"}),
    ModelType("moonshine", SPEECH2TEXT, ("automatic-speech-recognition",),
              classes={"automatic-speech-recognition": "MoonshineForConditionalGeneration"},
              absolute_positions=False, audio_convs=((127, 64, 0), (7, 3, 0), (3, 2, 0))),
    ModelType("speech_to_text", SPEECH2TEXT, ("automatic-speech-recognition",),
              classes={"automatic-speech-recognition": "Speech2TextForConditionalGeneration"},
              kernel_stride=2),
    ModelType("vision-encoder-decoder", IMAGE2TEXT, ("image-to-text",), image_size=224),
    # BLIP captioning: its vision model is the encoder, its text decoder reads the image
    ModelType("blip", IMAGE2TEXT, ("image-to-text",),
              classes={"image-to-text": "BlipForConditionalGeneration"}, image_size=384,
              end_token="sep_token_id"),
    *(ModelType(name, CAUSAL, _LM_TASKS, absolute_positions=absolute)
      for name, absolute in (("gpt2", True), ("llama", False), ("mistral", False),
                             ("qwen2", False), ("qwen3", False), ("phi3", False),
                             ("gemma", False), ("gemma2", False), ("phi", False),
                             ("gpt_neox", False), ("opt", True), ("olmo", False),
                             ("granite", False), ("smollm3", False))),
)}

# A checkpoint's class name -> task, by what the class name ends with, per modality.
SUFFIXES: tuple[tuple[str, dict[str, str]], ...] = (
    ("ForMaskedLM", {TEXT: "fill-mask"}),
    ("ForSequenceClassification", {TEXT: "text-classification",
                                   AUDIO: "audio-classification",
                                   TEXT2TEXT: "text-classification"}),
    ("ForAudioClassification", {AUDIO: "audio-classification"}),
    ("ForTokenClassification", {TEXT: "token-classification"}),
    ("ForQuestionAnswering", {TEXT: "question-answering"}),
    ("ForImageClassificationWithTeacher", {IMAGE: "image-classification"}),
    ("ForImageClassification", {IMAGE: "image-classification"}),
    ("ForSemanticSegmentation", {IMAGE: "image-segmentation"}),
    ("ForDepthEstimation", {IMAGE: "depth-estimation"}),
    ("ForObjectDetection", {IMAGE: "object-detection",
                            TEXT_IMAGE: "zero-shot-object-detection"}),
    ("ForPoseEstimation", {IMAGE: "keypoint-detection"}),
    ("ForCTC", {AUDIO: "automatic-speech-recognition"}),
    ("ForConditionalGeneration", {TEXT2TEXT: "text2text-generation",
                                  SPEECH2TEXT: "automatic-speech-recognition",
                                  IMAGE2TEXT: "image-to-text"}),
    ("MTModel", {TEXT2TEXT: "text2text-generation"}),
    ("TextModelWithProjection", {TEXT_IMAGE: "feature-extraction"}),
    ("VisionModelWithProjection", {TEXT_IMAGE: "image-feature-extraction"}),
    ("EncoderDecoderModel", {IMAGE2TEXT: "image-to-text"}),
    ("Model", {TEXT: "feature-extraction", IMAGE: "image-feature-extraction",
               AUDIO: "feature-extraction", TEXT_IMAGE: "zero-shot-image-classification"}),
)
SENTENCE_TRANSFORMER_FILES = ("modules.json", "sentence_bert_config.json")


def model_type_of(info: dict[str, Any]) -> ModelType | None:
    """The catalogue's entry for a checkpoint's model_type, or a generic entry for a model type
    it does not list but whose config says its modality (other BERT-likes, ViT-likes...)."""
    name = str(info.get("model_type", ""))
    listed = MODEL_TYPES.get(name)
    if listed is not None and (listed.modality == CAUSAL or not names_causal_lm(info)):
        return listed
    modality = guess_modality(info)  # an encoder type saved as a causal LM is a causal LM
    if modality is None:
        return None
    tasks = tuple(t.name for t in TASKS.values() if modality in t.modalities)
    inputs = _TYPES_IDS if (info.get("type_vocab_size") or 0) >= 2 else ("input_ids",
                                                                          "attention_mask")
    return ModelType(name or "unknown", modality, tasks, inputs)


def guess_modality(info: dict[str, Any]) -> str | None:
    """What a config.json of a model type the catalogue does not list takes, from its fields."""
    if names_causal_lm(info):  # a multimodal class that AutoModelForCausalLM loads, too
        return CAUSAL
    if "vision_config" in info and "text_config" in info:
        return TEXT_IMAGE
    if forwards.is_encoder_decoder(info) or ("encoder" in info and "decoder" in info):
        read = forwards.ENCODER_DECODER_MODALITIES.get(forwards.encoder_reads(info) or "")
        if read:  # what its forward reads: token ids, pixels, speech (its source says)
            return read
        if "num_mel_bins" in info:  # log-mel features in, text out (Whisper-like)
            return SPEECH2TEXT
        return IMAGE2TEXT if "image_size" in (info.get("encoder") or {}) else TEXT2TEXT
    if any(k in info for k in ("num_mel_bins", "conv_dim", "feat_extract_norm")):
        return AUDIO
    if "image_size" in info or "num_channels" in info:
        return IMAGE
    if "vocab_size" in info:
        return TEXT
    return None


def task_outputs(task: str, info: dict[str, Any]) -> list[str]:
    mt = model_type_of(info)
    return list((mt.outputs.get(task) if mt else None) or TASKS[task].outputs)


def modality_of(info: dict[str, Any], model_class: str | None) -> str | None:
    """A checkpoint's modality: its model type's, refined by a tower class (CLIP's towers)."""
    mt = model_type_of(info)
    if model_class and mt and mt.modality == TEXT_IMAGE:
        if model_class.endswith("TextModelWithProjection") or "TextModel" in model_class:
            return TEXT
        if model_class.endswith("VisionModelWithProjection") or "VisionModel" in model_class:
            return IMAGE
    return mt.modality if mt else None


def task_from_class(cls: str, modality: str | None, info: dict[str, Any]) -> str | None:
    if causal_lm_class(cls, info):  # checked first: "LMHeadModel" also ends in "Model"
        return "text-generation"
    for suffix, by_modality in SUFFIXES:
        if cls.endswith(suffix) and modality in by_modality:
            task = by_modality[modality]
            if task == "text-classification" and _is_nli(info):
                return "zero-shot-classification"
            return task
    return None


def _is_nli(info: dict[str, Any]) -> bool:
    """An NLI head (labels include entailment) is what zero-shot classification runs on."""
    labels = {str(v).lower() for v in (info.get("id2label") or {}).values()}
    return "entailment" in labels


def with_class(model: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """config.json as the planner reads it: one that names no class (written by hand, or a
    random-init config) takes model.model_class's, or, asked for text generation, the causal
    LM class transformers has for its model type, so that a generative type the catalogue
    lists by its encoder (bloom, falcon, gptj) is read as the model asked for."""
    if info.get("architectures"):
        return info
    cls = model.get("model_class") or (
        automap.causal_lm_class(str(info.get("model_type", "")))
        if model.get("task") == "text-generation" else None)
    return {**info, "architectures": [cls]} if cls else info


def detect(model: dict[str, Any], info: dict[str, Any],
           files: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(task, model class) from config.json, with model.task / model.model_class overriding.
    The class is None when the task's Auto class picks it at run time."""
    found_type = info.get("model_type")
    mt = model_type_of(info)
    arch = (info.get("architectures") or [None])[0]
    cls = model["model_class"] or arch
    task = model["task"]
    if task is None and cls:
        task = task_from_class(cls, modality_of(info, cls), info)
        if task == "feature-extraction" and any(f in files for f in SENTENCE_TRANSFORMER_FILES):
            task = "sentence-similarity"
    if task is None:
        _refuse_encoded_inputs(info, cls)
        candidates = mt.tasks if mt else ()
        if len(candidates) == 1 or (mt is not None and mt.modality in (CAUSAL, TEXT2TEXT)):
            # a generative type's config without a class is its generator's (a classifier
            # head names its class)
            task = candidates[0]
        else:
            raise ConfigError(
                f"model.task: cannot detect the task (config.json has model_type "
                f"{found_type!r}, architectures {info.get('architectures') or 'none'}); set "
                f"model.task to one of: {', '.join(candidates or TASKS)}")
    if task not in TASKS:
        raise ConfigError(f"model.task: {task!r} is not a task modelplan builds; choose one of: "
                          f"{', '.join(TASKS)}")
    if mt is not None and task not in mt.tasks:
        raise ConfigError(f"model.task: {task!r} is not a task modelplan builds for model_type "
                          f"{mt.name!r}; choose one of: {', '.join(mt.tasks)}")
    return task, class_for(task, cls, mt, info, chosen=bool(model["model_class"]))


def _refuse_encoded_inputs(info: dict[str, Any], cls: str | None) -> None:
    """A sequence-to-sequence class that is one language model (text_config) reading another
    input's encoder embeddings among its tokens (Qwen2-Audio, Voxtral): it has no text-only
    build, and no encoder-decoder's graphs either."""
    model_type = str(info.get("model_type", ""))
    if not cls or cls != automap.seq2seq_class(model_type) or info.get("is_encoder_decoder") \
            or not isinstance(info.get("text_config"), dict):
        return
    towers = [k for k, v in info.items()
              if k.endswith("_config") and k != "text_config" and isinstance(v, dict)]
    raise ConfigError(
        f"model: {cls} (model_type {model_type!r}) generates text from what its "
        f"{' and '.join(towers) or 'encoder'} encodes, its language model reading those "
        "embeddings among the token ids; modelplan builds no such graphs (it builds causal LMs "
        "from token ids, and encoder-decoders); to build its language model alone, save its "
        "text model with its text_config as a causal-LM checkpoint and set model.path to it")


def class_for(task: str, cls: str | None, mt: ModelType | None,
              info: dict[str, Any], chosen: bool = False) -> str | None:
    """The class to load: the checkpoint's own when it is a class for this task, else the
    model type's class for the task (towers, pose models), else None (the Auto class). Text
    generation from a multimodal checkpoint loads the class AutoModelForCausalLM has for its
    type where there is one (Qwen3.5's text model alone, without its vision tower), unless
    model.model_class `chosen` it."""
    if cls and not chosen and task == "text-generation" and \
            reads_images_among_tokens(cls, info):
        return automap.causal_lm_class(str(info.get("model_type", ""))) or cls
    if cls and task_from_class(cls, modality_of(info, cls), info) in (task,
                                                                       _NLI_PARENT.get(task)):
        return cls
    if cls and task == "sentence-similarity" and cls.endswith("Model") \
            and not cls.endswith(CAUSAL_LM):
        return cls
    return (mt.classes.get(task) if mt else None) or (forwards.seq2seq_class(info) if any(
        m in TASKS[task].modalities for m in (TEXT2TEXT, IMAGE2TEXT, SPEECH2TEXT)) else None)


_NLI_PARENT = {"zero-shot-classification": "text-classification",
               "text-classification": "zero-shot-classification"}


def task_modality(task: str, info: dict[str, Any], model_class: str | None) -> str:
    """The modality the graphs of this build take."""
    modality = modality_of(info, model_class)
    allowed = TASKS[task].modalities
    if modality in (CAUSAL, TEXT2TEXT) and TEXT in allowed:
        return TEXT  # a causal LM's base model, an encoder-decoder's classifier: on text
    if modality in allowed:
        return modality  # type: ignore[return-value]
    if modality is None and len(allowed) == 1:
        return allowed[0]
    raise ConfigError(f"model.task: {task!r} takes {' or '.join(allowed)} input, but "
                      f"model_type {info.get('model_type')!r} is "
                      f"{modality or 'of no known modality'}; set model.task or "
                      "model.model_class to match the checkpoint")
