"""What a checkpoint class's forward returns, read from transformers' source without importing
it (planner/models/automap.py finds the files): whether its output carries a key/value cache
(`past_key_values`), which a causal LM's prefill and decode graphs are built over. OpenAI GPT's
forward returns a CausalLMOutput, XLM's a MaskedLMOutput, XLNet's its own output with `mems`:
none of them a cache."""

from __future__ import annotations

import ast
import functools
from typing import Any

from planner.models import automap

OUTPUTS = "modeling_outputs.py"  # where transformers' shared output classes are defined
CACHE_FIELDS = frozenset({"past_key_values", "cache"})  # the cache's names, older and newer
_LEAF = "ModelOutput"


def returns_cache(model_type: str, cls: str) -> bool | None:
    """Whether `cls`'s forward returns a key/value cache; None when its source does not say
    (the class, its forward or its output class not found as plain definitions)."""
    found = outputs(model_type, cls)
    return None if not found else any(CACHE_FIELDS & fields for fields in found.values())


@functools.cache
def outputs(model_type: str, cls: str) -> dict[str, frozenset[str]]:
    """The output classes `cls`'s forward is annotated to return, with their fields."""
    local = _module_of(model_type, cls)
    shared = _shared()
    forward = _method(local, cls, "forward")
    if forward is None or forward.returns is None:
        return {}
    return {name: frozenset(fields) for name in _names(forward.returns)
            if (fields := _fields(name, local, shared)) is not None}


@functools.cache
def extends_prompt(model_type: str, cls: str) -> bool:
    """Whether `cls` generates from more than its prompt: its `prepare_inputs_for_generation`
    appends tokens to the ids before each forward (XLM's mask token, XLNet's dummy token, whose
    logits are the next token's), so the next token is not read at the prompt's last position."""
    local = _module_of(model_type, cls)
    prepare = _method(local, cls, "prepare_inputs_for_generation")
    return prepare is not None and any(
        isinstance(node, ast.Assign) and
        any(isinstance(t, ast.Name) and t.id == "input_ids" for t in node.targets) and
        isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) and
        node.value.func.attr in ("cat", "concat", "concatenate")
        for node in ast.walk(prepare))


@functools.cache
def _module_of(model_type: str, cls: str) -> dict[str, ast.ClassDef]:
    """The classes of the transformers module that defines `cls`: `model_type`'s, or where its
    class is defined in another type's module (ShieldGemma 2's Gemma3ForConditionalGeneration),
    that type's."""
    local = _classes(automap.source(automap.modeling_file(model_type)))
    if cls in local:
        return local
    for other in automap.types_naming(cls):
        found = _classes(automap.source(automap.modeling_file(other)))
        if cls in found:
            return found
    return local


@functools.cache
def _shared() -> dict[str, ast.ClassDef]:
    return _classes(automap.source(OUTPUTS))


def _classes(text: str) -> dict[str, ast.ClassDef]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
            if isinstance(b, ast.Name | ast.Attribute)]


def _method(classes: dict[str, ast.ClassDef], cls: str,
            name: str) -> ast.FunctionDef | None:
    """`cls.name` as defined in the class or the first base of the same file that defines it."""
    node = classes.get(cls)
    if node is None:
        return None
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == name:
            return item
    return next((m for b in _base_names(node) if (m := _method(classes, b, name))), None)


def _names(annotation: ast.expr) -> list[str]:
    """The class names a return annotation names (`tuple | CausalLMOutput`, quoted or not)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return []
    return [n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)]


def _fields(name: str, local: dict[str, ast.ClassDef],
            shared: dict[str, ast.ClassDef]) -> set[str] | None:
    """The annotated fields of an output class and its bases (None: not an output class found
    in the model's file or among transformers' shared outputs)."""
    node = local.get(name) or shared.get(name)
    if node is None:
        return None
    fields = {t.target.id for t in node.body
              if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    bases = _base_names(node)
    if _LEAF not in bases and not any(b in local or b in shared for b in bases):
        return None  # not derived from ModelOutput (a tensor, a tuple)
    for base in bases:
        if base != _LEAF and (inherited := _fields(base, local, shared)) is not None:
            fields |= inherited
    return fields


# what an encoder-decoder's forward reads first, and the modality that makes it
ENCODER_DECODER_MODALITIES = {"input_ids": "text2text", "pixel_values": "image2text",
                              "input_features": "speech2text", "input_values": "speech2text"}


@functools.cache
def main_input(model_type: str, cls: str) -> str | None:
    """The first parameter of `cls`'s forward (`input_features` for Whisper's and Cohere ASR's,
    `input_values` for SpeechT5's speech-to-text, `input_ids` for BART's): what its encoder
    reads. None when its source does not say."""
    forward = _method(_module_of(model_type, cls), cls, "forward")
    if forward is None:
        return None
    names = [a.arg for a in (*forward.args.posonlyargs, *forward.args.args)]
    return names[1] if len(names) > 1 and names[0] == "self" else None


def encoder_reads(info: dict[str, Any]) -> str | None:
    """What the checkpoint's class reads first: its config.json's first architecture, or
    where it names none (a random-init config) the class transformers' sequence-to-sequence
    Auto classes load for its model type; for a composite whose forward names no input of
    its own, what its `encoder` part's model reads."""
    model_type = str(info.get("model_type", ""))
    arch = (info.get("architectures") or [None])[0] or automap.seq2seq_class(model_type)
    reads = main_input(model_type, arch) if isinstance(arch, str) else None
    encoder = info.get("encoder")
    if reads not in ENCODER_DECODER_MODALITIES and isinstance(encoder, dict):
        # a composite of any encoder and decoder (SpeechEncoderDecoderModel's generic
        # `inputs`): what its encoder part's own model reads
        part = str(encoder.get("model_type", ""))
        base = automap.base_class(part)
        return main_input(part, base) if base else None
    return reads


def is_encoder_decoder(info: dict[str, Any]) -> bool:
    """config.json's `is_encoder_decoder`, else its config class's default where transformers'
    sequence-to-sequence Auto classes load its type (a random-init config names only the
    fields it sets, and SpeechT5's and Cohere ASR's classes set the flag; DETR's and
    FastSpeech 2's set it too, and generate no text)."""
    flag = info.get("is_encoder_decoder")
    model_type = str(info.get("model_type", ""))
    if flag is None and automap.seq2seq_class(model_type) is not None:
        flag = automap.config_defaults(model_type).get("is_encoder_decoder")
    return bool(flag)


def seq2seq_class(info: dict[str, Any]) -> str | None:
    """The class an encoder-decoder whose config.json names none (a random-init one) loads as:
    the one transformers' sequence-to-sequence Auto classes load for its model type (not the
    task's Auto class: automatic speech recognition's is CTC's)."""
    if info.get("architectures") or not is_encoder_decoder(info):
        return None
    return automap.seq2seq_class(str(info.get("model_type", "")))
