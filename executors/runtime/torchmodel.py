"""The torch side of a build: load the resolved checkpoint with the class its task needs, and
the wrapper a graph traces around the whole model or its encoder, with an explicit positional
forward as TorchScript needs (executors/generation/modules.py picks the module by role)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from executors.onnx.artifacts import SOURCE
from planner.models.roles import Role, Trace
from planner.models.tasks import TASKS

WRAPPER_PREFIX = "model"  # the wrapper's attribute holding the HF model (node name scope)


def source_info(source: Path) -> dict[str, Any]:
    info = json.loads((source / SOURCE).read_text())
    ckpt = Path(info["checkpoint"]) if info.get("checkpoint") else None
    info["checkpoint_dir"] = None if ckpt is None else ckpt if ckpt.is_absolute() else source / ckpt
    return info


def model_class(info: dict[str, Any]) -> Any:
    """The checkpoint's class for its task: the planned class, else the task's Auto class."""
    import transformers

    name = info.get("model_class") or TASKS[info["task"]].auto_class
    cls = getattr(transformers, name or "", None)
    if cls is None:
        raise LookupError(f"transformers {transformers.__version__} has no class {name!r} for "
                          f"task {info['task']}")
    return cls


def load(source: Path, dtype: str = "float32") -> tuple[Any, dict[str, Any]]:
    """The resolved checkpoint as a torch model in eval mode, in float32 whatever the dtype it
    was saved in (a bf16 or fp16 checkpoint upcast: its graphs are fp32 graphs, which ONNX
    Runtime's CPU EP runs and the quantizer reads), or in `dtype` (export traces a narrow
    checkpoint as saved: runtime/narrow.py), and its source description."""
    import torch

    info = source_info(source)
    cls = model_class(info)
    kwargs = {"local_files_only": True, "trust_remote_code": bool(info.get("trust_remote_code")),
              "dtype": getattr(torch, dtype)}
    if chooses_experts(cls):
        kwargs["experts_implementation"] = TRACEABLE_EXPERTS
    try:
        model = cls.from_pretrained(str(info["checkpoint_dir"]), attn_implementation="eager",
                                    **kwargs)
    except (TypeError, ValueError) as exc:
        if "attn_implementation" not in str(exc) and "eager" not in str(exc):
            raise
        model = cls.from_pretrained(str(info["checkpoint_dir"]), **kwargs)  # no attention
    default_language(model)
    traceable_experts(model)
    return model.eval(), info


def saved_narrow(source: Path) -> str | None:
    """"bfloat16" when the resolved checkpoint was saved in bf16 (config.json's dtype), else
    None. PyTorch's CPU kernels run a bf16 decoder as saved; fp16 has gaps there, so an fp16
    checkpoint is run as fp32."""
    from planner.models.specs import weights_dtype

    ckpt = source_info(source)["checkpoint_dir"]
    config = None if ckpt is None else Path(ckpt) / "config.json"
    if config is None or not config.is_file():
        return None
    return "bfloat16" if weights_dtype(json.loads(config.read_text())) == "bfloat16" else None


def default_language(model: Any) -> None:
    """A model whose forward reads its inputs' language from its config's default_language,
    which the config leaves unset (X-MOD's language adapters), gets the one language its config
    lists; of several, the config says none: one line asks for it."""
    config = model.config
    languages = list(getattr(config, "languages", None) or [])
    if not hasattr(model, "set_default_language") or not languages or \
            getattr(config, "default_language", None) is not None:
        return
    if len(languages) > 1:
        raise ValueError(f"config.json lists {len(languages)} languages ({', '.join(languages[:4])}"
                         f"{', ...' if len(languages) > 4 else ''}) and no default_language, "
                         "the language its inputs are read in; set default_language in the "
                         "checkpoint's config.json to one of them")
    model.set_default_language(languages[0])


# A mixture-of-experts block run as a graph of fixed shapes: each token's top-k experts' weights
# gathered and applied by batched MatMuls. transformers' loop over the experts a batch hits
# traces only the experts the example input chose, and its grouped kernel counts tokens per
# expert with histc, which no ONNX exporter writes.
TRACEABLE_EXPERTS = "batched_mm"


def chooses_experts(cls: Any) -> bool:
    """Whether the class's experts blocks take `experts_implementation` (transformers 5)."""
    can = getattr(cls, "_can_set_experts_implementation", None)
    return bool(can()) if callable(can) else False


def traceable_experts(model: Any) -> None:
    """The traceable experts' implementation on every part of a loaded model that can choose
    one: the load's keyword reaches a class that chooses it itself, but not a class loaded
    through an Auto class, nor the language model inside a class whose own module does not
    choose it (Kimi K2.5's image-text class around DeepSeek-V3's MoE: transformers decides by
    the class's module). Their grouped kernel counts tokens with histc, which no exporter
    writes."""
    import transformers

    if any(isinstance(m, transformers.PreTrainedModel) and chooses_experts(type(m)) and
           m.config._experts_implementation != TRACEABLE_EXPERTS for m in model.modules()):
        model.set_experts_implementation(TRACEABLE_EXPERTS)


def pick(out: Any, name: str, feed: dict[str, Any]) -> Any:
    """One named output of a forward pass; `sentence_embedding` is the mean of the token
    states over the attention mask, L2-normalized (what sentence similarity compares)."""
    import torch

    if name == "sentence_embedding":
        states = out["last_hidden_state"]
        mask = feed["attention_mask"].unsqueeze(-1).to(states.dtype)
        mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2, dim=-1)
    value = out[name]
    return value[0] if isinstance(value, tuple) else value


def traced_base(model: Any, role: Role) -> str:
    """The attribute path (in `model`) of the module a graph's wrapper holds: the encoder's for
    an encoder graph (its node names are relative to it), else the whole model's ("")."""
    if role.trace is not Trace.ENCODER:
        return ""
    encoder = encoder_of(model)
    return next(name for name, module in model.named_modules() if module is encoder)


def encoder_of(model: Any) -> Any:
    """An encoder-decoder model's encoder: its vision model for a captioner whose text decoder
    reads the image (BLIP), else what the model calls its encoder."""
    if hasattr(model, "text_decoder") and hasattr(model, "vision_model"):
        return model.vision_model
    return model.get_encoder()


def wrapped(held: Any, input_names: list[str], output_names: list[str],
            run: Callable[[Any, dict[str, Any]], Any] | None = None) -> Any:
    """A module to trace around `held` (the model, or its encoder): positional inputs, the named
    outputs of `run(held, feed)` (default: its own forward) as a tensor tuple. The wrapper holds
    the module whose forward it calls, so node names carry its scopes."""
    import torch

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = held  # attribute name == WRAPPER_PREFIX

        def forward(self, *args: Any) -> Any:
            feed = dict(zip(input_names, args, strict=True))
            out = self.run(feed)
            values = tuple(pick(out, name, feed) for name in output_names)
            return values[0] if len(values) == 1 else values

        def run(self, feed: dict[str, Any]) -> Any:
            if run is not None:
                return run(self.model, feed)
            if pools_at_end(self.model):
                return end_pooled(self.model, feed)
            return self.model(**feed, return_dict=True)

    return Graph().eval()


def pools_at_end(model: Any) -> bool:
    """An encoder-decoder classifier that reads the decoder's state at the last end token
    (BART's sequence classification)."""
    return hasattr(model, "classification_head") and \
        bool(getattr(model.config, "is_encoder_decoder", False))


def end_pooled(model: Any, feed: dict[str, Any]) -> dict[str, Any]:
    """Its forward with the pooling as HTP runs it: HF selects the end tokens' states with a
    boolean mask (NonZero and GatherND, of a data-dependent shape); the last end token's
    position is found with ArgMax and its state gathered, the same value on any input whose
    sequences end in the end token."""
    import torch

    ids = feed["input_ids"]
    states = model.model(input_ids=ids, attention_mask=feed.get("attention_mask"),
                         return_dict=True).last_hidden_state
    positions = torch.arange(ids.shape[1], device=ids.device)
    last = (ids.eq(model.config.eos_token_id).long() * (positions + 1)).argmax(-1)
    pooled = states[torch.arange(ids.shape[0], device=ids.device), last]
    return {"logits": model.classification_head(pooled)}
