"""transformers' Auto mappings (model type -> class name), the module a model type's classes
live in, and the literal defaults of its config class, read from the installed package's source
without importing it: the planner stays free of transformers, and the rules that read them
follow whatever transformers is installed instead of a copied table of names.

`causal_lm_class("gemma3")` is the class `AutoModelForCausalLM` loads for a gemma3 checkpoint
(Gemma3ForConditionalGeneration in transformers 5.x: a multimodal class that generates text from
token ids alone, as `generate` does when given no image)."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any

CAUSAL_LM = "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
SEQ2SEQ_LM = "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"
SPEECH_SEQ2SEQ = "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"
IMAGE_TEXT = "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"  # LLaVA, Mistral 3, Qwen3.5
BASE_MODEL = "MODEL_MAPPING_NAMES"  # model type -> its headless model class (BertModel)
MODULE_NAMES = "SPECIAL_MODEL_TYPE_TO_MODULE_NAME"  # model types whose module is named otherwise
CONFIG_NAMES = "CONFIG_MAPPING_NAMES"  # model type -> its config class
MODELING_AUTO = "models/auto/modeling_auto.py"
AUTO_MAPPINGS = "models/auto/auto_mappings.py"


def source(relative: str) -> str:
    """The text of one of transformers' files (`models/auto/modeling_auto.py`), or "" when
    transformers or the file is not there."""
    try:
        spec = importlib.util.find_spec("transformers")  # finds the package, runs none of it
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return ""
    try:
        return Path(next(iter(spec.submodule_search_locations)), relative).read_text(
            encoding="utf-8")
    except OSError:
        return ""


@functools.cache
def mapping(name: str, relative: str = MODELING_AUTO) -> dict[str, str]:
    """One `NAME = OrderedDict([(key, class name), ...])` of a transformers file (an empty
    mapping when it is not there or not written as literal pairs)."""
    text = source(relative)
    start = text.find(f"\n{name} = OrderedDict(")
    end = text.find("\n)\n", start)
    if start < 0 or end < 0:
        return {}
    try:
        call = ast.parse(text[start + 1:end + 2]).body[0].value  # type: ignore[attr-defined]
        pairs = ast.literal_eval(call.args[0])
    except (SyntaxError, ValueError, AttributeError, IndexError):
        return {}
    return {str(k): str(v) for k, v in pairs if isinstance(v, str)}


def causal_lm_class(model_type: str) -> str | None:
    """The class AutoModelForCausalLM loads for `model_type`, if it loads one."""
    return mapping(CAUSAL_LM).get(model_type)


def image_text_class(model_type: str) -> str | None:
    """The class AutoModelForImageTextToText loads for `model_type`: a language model that reads
    images among its tokens, and generates from token ids alone without one."""
    return mapping(IMAGE_TEXT).get(model_type)


def seq2seq_class(model_type: str) -> str | None:
    """The class a text or speech sequence-to-sequence Auto class loads for `model_type`."""
    return mapping(SEQ2SEQ_LM).get(model_type) or mapping(SPEECH_SEQ2SEQ).get(model_type)


def base_class(model_type: str) -> str | None:
    """The class AutoModel loads for `model_type`: its model without a head."""
    return mapping(BASE_MODEL).get(model_type)


@functools.cache
def types_naming(cls: str) -> tuple[str, ...]:
    """The model types an Auto mapping loads as `cls` (ShieldGemma 2's and Gemma 3's class is
    Gemma3ForConditionalGeneration, defined in gemma3's module)."""
    names = (CAUSAL_LM, IMAGE_TEXT, SEQ2SEQ_LM, SPEECH_SEQ2SEQ, BASE_MODEL)
    return tuple(dict.fromkeys(t for name in names for t, c in mapping(name).items() if c == cls))


def modeling_file(model_type: str, kind: str = "modeling") -> str:
    """The path (in transformers) of the module of `model_type`'s classes (`kind`: modeling, or
    configuration)."""
    module = mapping(MODULE_NAMES, AUTO_MAPPINGS).get(model_type) or \
        model_type.replace("-", "_")
    return f"models/{module}/{kind}_{module}.py"


@functools.cache
def config_defaults(model_type: str) -> dict[str, Any]:
    """The defaults `model_type`'s config class declares as literal field values
    (`num_attention_heads: int = 8`), which transformers gives a config.json that omits them."""
    name = mapping(CONFIG_NAMES, AUTO_MAPPINGS).get(model_type)
    try:
        tree = ast.parse(source(modeling_file(model_type, "configuration")))
    except SyntaxError:
        return {}
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    out: dict[str, Any] = {}
    for item in node.body if node is not None else ():
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value:
            try:
                out[item.target.id] = ast.literal_eval(item.value)
            except (ValueError, TypeError, SyntaxError):
                continue  # not a literal (a field factory, a computed default)
    return out
