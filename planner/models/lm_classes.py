"""Which checkpoint classes are language models that generate text from token ids: a
language-model head by its name, the class transformers' AutoModelForCausalLM loads for the
checkpoint's type (gemma3's Gemma3ForConditionalGeneration), or a language model that reads
images among its tokens (AutoModelForImageTextToText's class: Qwen3.5, LLaVA); and what a
multimodal one's config.json says of its language model: its text_config as transformers
completes it, and the encoders of other inputs its graphs leave out. Read from transformers'
source without importing it (automap, forwards)."""

from __future__ import annotations

from typing import Any

from planner.models import automap, forwards

# decoder-only language-model heads (LlamaForCausalLM, GPT2LMHeadModel): next-token logits
CAUSAL_LM = ("ForCausalLM", "LMHeadModel")
# an image-text class that generates token by token (not DiffusionGemma's block diffusion)
GENERATORS = ("ForConditionalGeneration", "ForCausalLM")


def names_causal_lm(info: dict[str, Any]) -> bool:
    """Whether the checkpoint's class is a causal LM: a language-model head by its name, or the
    class transformers' AutoModelForCausalLM loads for its model type (gemma3's
    Gemma3ForConditionalGeneration, which generates text from token ids alone)."""
    return any(causal_lm_class(str(a), info) for a in info.get("architectures") or ())


def causal_lm_class(cls: str, info: dict[str, Any]) -> bool:
    """Whether `cls` is a causal LM class for a checkpoint of this config.json."""
    return cls.endswith(CAUSAL_LM) or \
        cls == automap.causal_lm_class(str(info.get("model_type", ""))) or \
        reads_images_among_tokens(cls, info)


def reads_images_among_tokens(cls: str, info: dict[str, Any]) -> bool:
    """Whether `cls` is a language model (config.json's text_config) that reads images among
    its tokens: the class AutoModelForImageTextToText loads for its type (Qwen3.5, Mistral 3,
    LLaVA), named for generation, which is no encoder-decoder (by config.json, else by its
    config class's default: Florence-2's) and whose forward reads token ids first. Given token
    ids alone it generates text as a causal LM does."""
    model_type = str(info.get("model_type", ""))
    return isinstance(info.get("text_config"), dict) and \
        cls == automap.image_text_class(model_type) and cls.endswith(GENERATORS) and \
        not info.get("is_encoder_decoder",
                     automap.config_defaults(model_type).get("is_encoder_decoder")) and \
        forwards.main_input(model_type, cls) == "input_ids"


def completed(info: dict[str, Any]) -> dict[str, Any]:
    """config.json as transformers reads it where the planner reads a multimodal causal LM's
    text_config: the fields it omits take the defaults its config class declares (the original
    gemma-3-4b-it names six; its heads, head width and vocabulary are Gemma3TextConfig's)."""
    text = info.get("text_config")
    if not isinstance(text, dict) or not text.get("model_type") or not names_causal_lm(info):
        return info
    return {**info, "text_config": {**automap.config_defaults(str(text["model_type"])), **text}}


def unfed_towers(info: dict[str, Any], task: str) -> list[str]:
    """The encoders of other inputs (config.json's vision_config, audio_config...) that a text
    generation build of a multimodal class leaves out: its graphs take token ids alone."""
    if task != "text-generation" or not isinstance(info.get("text_config"), dict):
        return []
    return [k for k, v in info.items() if k.endswith("_config") and k != "text_config"
            and isinstance(v, dict) and "model_type" in v]
