"""The torch module each role's graph traces (planner/models/roles.py declares which), taking
positional inputs and returning a tensor tuple; the wrapper holds the module whose forward it
calls as `model`, the scope of the node names (torchmodel.WRAPPER_PREFIX).

* A causal LM (`Trace.LM`) runs the checkpoint's own forward with a transformers cache built
  inside the traced function, from the static buffers it is fed, whose empty slots the
  attention mask hides: the prefill graph over a window of prompt tokens, the decode graph
  over one token; each returns only its new tokens' entries. The weights are the
  same tensors in both graphs (one weight set, stored once by content).
* An encoder-decoder's `cross` graph computes the decoder's cross-attention keys and values on
  the encoder's states (one decoder pass on the start token fills them; only they are returned,
  so the rest of that pass is not in the graph); its cached decoder (`Trace.STEP_DECODER`)
  decodes one token over the static self-attention cache with the cross entries marked as
  filled. The cache is fed in full (C slots) and the token's own key goes after them, so the
  model would take C as the token's position: `positions_at` gives the decoder `position_ids`
  wherever its family reads positions (a BART-, Whisper- or TrOCR-like `embed_positions`, a
  BERT-like embeddings module, GPT-2's `wpe`), or for T5's relative attention bias computes the
  bias of the slots and the token from their true positions.
* Its uncached decoder (`Trace.PREFIX_DECODER`) decodes the whole prefix on given states.

One decoder forward (`decode`) serves the traced graphs, PyTorch's reference and the
calibration samples: the model's own forward on given encoder states, or a captioner's text
decoder on the image's (BLIP)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

from executors.generation import recurrent
from executors.generation.cache import layer_entries, own_layers, unread_indexer_slots
from executors.generation.positions import decoder_of, position_module, positions_at
from executors.runtime import torchmodel
from planner.models.roles import CACHE, Role, Trace
from planner.models.seq2seq import start_token


def graph_module(model: Any, role: Role, input_names: list[str],
                 output_names: list[str], free_past: bool = False) -> Any:
    """The module to trace for a graph of `role` (`free_past`: a causal LM's token graph
    gives back the past it read and the new entries, as a graph of a free past does)."""
    if role.trace is Trace.LM:
        return lm_module(model, input_names, output_names, free_past)
    if role.trace is Trace.CROSS:
        return positional(model, input_names, cross)
    if role.trace is Trace.STEP_DECODER:
        # over a free past it counts its positions itself (onnxruntime-genai's Whisper layout)
        return positional(model, input_names, step if "position_ids" in input_names
                          else free_step)
    if gives_cross(role, output_names):
        return positional(model, input_names, lambda held, feed: encoder_and_cross(
            held, feed, output_names[0]))
    held = torchmodel.encoder_of(model) if role.trace is Trace.ENCODER else model
    run = prefix_decoder if role.trace is Trace.PREFIX_DECODER else \
        prefix_lm if role.trace is Trace.PREFIX_LM else None
    return torchmodel.wrapped(held, input_names, output_names, run)


def gives_cross(role: Role, output_names: list[str]) -> bool:
    """Whether an encoder's graph also gives the decoder's cross keys and values
    (onnxruntime-genai's Whisper layout): its wrapper then holds the whole model."""
    return role.trace is Trace.ENCODER and any(n.startswith(CACHE.cross + ".")
                                               for n in output_names)


def positional(model: Any, input_names: list[str],
               run: Callable[[Any, dict[str, Any]], Any]) -> Any:
    """A module to trace: positional inputs named `input_names`, `run(model, feed)` returning
    the output tensors; it holds the model as `model`."""
    import torch

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return run(self.model, dict(zip(input_names, args, strict=True)))

    return Graph().eval()


# -- a causal LM ---------------------------------------------------------------------------------
def dynamic_cache(model: Any, past: dict[str, Any] | None = None) -> Any:
    """A transformers cache of the model's config holding `past` (graph input name -> tensor:
    each own layer's keys and values, or the states of a layer that keeps a recurrent state)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    if not past:
        return cache
    # a graph's layer i is the cache's i-th layer with entries of its own
    own = {id(layer) for layer in own_layers(cache.layers)}
    index = [i for i, layer in enumerate(cache.layers) if id(layer) in own]

    def at(i: int) -> int:
        return index[i] if i < len(index) else i

    names = list(past)
    for i in range(len(index) or CACHE.layers(names)):
        key, value = (f"{CACHE.past}.{i}.{part}" for part in CACHE.parts)
        if key in past:
            cache.update(past[key], past[value], at(i))
            unread_indexer_slots(cache.layers[at(i)], int(past[key].shape[-2]))
    for i, states in recurrent.fed_states(names).items():
        recurrent.feed_states(cache.layers[at(i)], {(kind, n): past[name]
                                                    for kind, n, name in states})
    return cache


def cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """A causal LM's cache as its forward takes it: under `cache` where its signature names it
    so (Mamba's and Mamba-2's take no other name: given `past_key_values`, they would make a
    cache of their own and drop the one given), else `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}


def returned_cache(out: Any) -> Any:
    """The cache a causal LM's forward gives back, under either name."""
    cache = getattr(out, "past_key_values", None)
    return cache if cache is not None else out.cache


def _presents(cache: Any, last: int | None) -> list[Any]:
    out = []
    for _layer, part, value in layer_entries(cache.layers):
        if last is not None and part in CACHE.parts:
            value = value[:, :, -last:]
        out.append(value)
    return out


def lm_step(model: Any, tokens: Any, attention_mask: Any, position_ids: Any,
            past: dict[str, Any] | None = None, embedded: bool = False,
            headless: bool = False, whole: bool = False) -> tuple[Any, ...]:
    """(logits, present.0.key, present.0.value, ...) of one forward: tokens on the fed cache
    (`past`: input name -> tensor; none: an empty one), giving the new entries only (`whole`:
    the fed past and the new entries after it; a recurrent layer's states whole).
    `embedded`: `tokens` are the embeddings the host looked up; `headless`: the final hidden
    states instead of the logits (the host applies the head)."""
    cache = dynamic_cache(model, past)
    held = model.base_model if headless else model
    if past and attention_mask is not None and not CACHE.layers(list(past)):
        attention_mask = attention_mask[:, -tokens.shape[1]:]  # its tokens' (recurrent.py)
    kwargs = {"inputs_embeds" if embedded else "input_ids": tokens,
              "attention_mask": attention_mask, **cache_kwargs(held, cache), "use_cache": True,
              "return_dict": True}
    takes = takes_positions(model)
    if takes:
        kwargs["position_ids"] = position_ids
    with contextlib.nullcontext() if takes or not past else _lm_positions_at(model,
                                                                             position_ids):
        out = held(**kwargs)
    new = tokens.shape[1] if past and not whole else None
    first = out.last_hidden_state if headless else out.logits
    return (first, *_presents(returned_cache(out), new))


def lm_io(model: Any, specs: list[dict[str, Any]], outputs: list[str],
          reads_cache: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """A causal LM graph's inputs and outputs: the plan's, or, where the model's cache has
    layers that keep a recurrent state, what its own cache holds after one token: the keys and
    values of the layers that cache them and the other layers' states
    (executors/generation/recurrent.py)."""
    own = recurrent.own_cache_class(model)
    if own:
        raise recurrent.RecurrentState(
            f"{type(model).__name__}'s forward takes a cache class of its own ({own}), which "
            "keeps its states apart from transformers' cache layers")
    made = dynamic_cache(model)
    layers = recurrent.recurrent_layers(made)
    if not layers:
        return specs, outputs
    try:
        filled = filled_cache(model, made, 1)
    except Exception as exc:  # transformers' own refusal, said in one line
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise recurrent.RecurrentState(
            f"{type(model).__name__} keeps a recurrent state in layer"
            f"{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}, and its forward "
            f"on transformers' DynamicCache of its config fails ({type(exc).__name__}: "
            f"{said})"
            ) from exc
    return recurrent.state_specs(list(layer_entries(filled.layers)), specs, outputs,
                                 reads_cache)


def filled_cache(model: Any, cache: Any, tokens: int) -> Any:
    """`cache` as the model's own forward fills it on a prompt of `tokens` tokens (token id 0,
    positions from 0, no padding): the shapes of what each layer keeps."""
    import torch

    ids = torch.zeros((1, tokens), dtype=torch.long)
    at = {"position_ids": torch.arange(tokens)[None]} if takes_positions(model) else {}
    with torch.no_grad():
        return returned_cache(model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                    **cache_kwargs(model, cache), use_cache=True,
                                    return_dict=True, **at))


def takes_positions(model: Any) -> bool:
    """Whether a model's forward takes position ids (else it counts them itself: from its
    cache's length, its padding index or its attention mask): by name, or through its
    keyword arguments, which it passes on to a decoder that takes them (a multimodal class's
    language model: MOSS-Transcribe-Diarize's)."""
    params = inspect.signature(model.forward).parameters
    if "position_ids" in params:
        return True
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return False
    try:
        inner = model.get_decoder()
    except (AttributeError, NotImplementedError):
        return False
    return inner is not None and inner is not model and \
        "position_ids" in inspect.signature(inner.forward).parameters


def _lm_positions_at(model: Any, position_ids: Any) -> contextlib.AbstractContextManager:
    """A causal LM whose forward takes no position ids counts a token's position from its
    cache's length, which over the static cache is every slot: its position embedding is given
    the token's own (TrOCR); one with none reads positions from the attention mask (BLOOM's
    ALiBi), which hides the empty slots."""
    try:
        position_module(decoder_of(model))
    except ValueError:
        return contextlib.nullcontext()
    return positions_at(model, position_ids)


def lm_module(model: Any, input_names: list[str], output_names: list[str],
              free_past: bool = False) -> Any:
    """The module a causal LM's prefill or decode graph traces (its inputs and outputs as
    `lm_io` gives them)."""
    headless = output_names[0] == "hidden_states"

    def run(held: Any, feed: dict[str, Any]) -> Any:
        past = {n: feed[n] for n in input_names if CACHE.is_past(n)}
        embedded = "inputs_embeds" in feed
        return lm_step(held, feed["inputs_embeds" if embedded else "input_ids"],
                       feed["attention_mask"], feed["position_ids"], past, embedded, headless,
                       free_past)

    return positional(model, input_names, run)


# -- an encoder-decoder's decoder ----------------------------------------------------------------
def start(model: Any) -> int:
    return int(start_token(model.config.to_dict()) or 0)


def decode(model: Any, states: Any, ids: Any, encoder_mask: Any = None,
           use_cache: bool = True, **kwargs: Any) -> Any:
    """One decoder forward on the encoder's `states` (return_dict; use_cache off: the
    decoder of the whole prefix)."""
    if hasattr(model, "text_decoder"):  # BLIP: the text decoder reads the image's states
        import torch

        mask = kwargs.pop("decoder_attention_mask", None)
        return model.text_decoder(input_ids=ids, encoder_hidden_states=states,
                                  attention_mask=torch.ones_like(ids) if mask is None else mask,
                                  use_cache=use_cache, return_dict=True, **kwargs)
    if "past_key_values" in kwargs and "cache" in inspect.signature(model.forward).parameters:
        kwargs["cache"] = kwargs.pop("past_key_values")  # its name from transformers 5.40 on
    kw = {"encoder_outputs": encoder_states()(last_hidden_state=states),
          "decoder_input_ids": ids, "return_dict": True, "use_cache": use_cache, **kwargs}
    if encoder_mask is not None:
        kw["attention_mask"] = encoder_mask
    return model(**kw)


@cache
def encoder_states() -> type:
    """The encoder's output a decoder forward is given: its states, as the model's own encoder
    gives them (forwards read `.last_hidden_state` or `[0]`); any other field an encoder may
    give is none (the host passes the encoder's mask itself; Moonshine reads `.attention_mask`)."""
    from transformers.modeling_outputs import BaseModelOutput

    class EncoderStates(BaseModelOutput):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return None

    return EncoderStates


def prefix_lm(model: Any, feed: dict[str, Any]) -> Any:
    """A causal LM that keeps no key/value cache, on the whole prefix: its forward told to make
    no state to hand back where it takes `use_cache` (RWKV's state, Recurrent Gemma's cache)."""
    import inspect

    takes = inspect.signature(model.forward).parameters
    extra = {"use_cache": False} if "use_cache" in takes else {}
    return model(**feed, **extra, return_dict=True)


def prefix_decoder(model: Any, feed: dict[str, Any]) -> Any:
    """The decoder on given encoder states without a cache: the static-shape variant, which
    recomputes the whole prefix each step."""
    import torch

    extra = {}
    if hasattr(model.config, "num_mel_bins"):
        # a speech decoder given no mask looks for packed sequences in its positions (a
        # torch.diff ONNX cannot express); its ids are one sequence: say so with a full mask
        extra["decoder_attention_mask"] = torch.ones_like(feed["input_ids"])
    return decode(model, feed["encoder_hidden_states"], feed["input_ids"],
                  feed.get("encoder_attention_mask"), use_cache=False, **extra)


def cross(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    import torch

    ids = torch.full((1, 1), start(model), dtype=torch.long)
    out = decode(model, feed["encoder_hidden_states"], ids, feed.get("encoder_attention_mask"))
    layers = out.past_key_values.cross_attention_cache.layers
    return tuple(t for layer in layers for t in (layer.keys, layer.values))


def encoder_and_cross(model: Any, feed: dict[str, Any], states_name: str) -> tuple[Any, ...]:
    """The encoder's states and, from them, every decoder layer's cross keys and values (the
    encoder graph of onnxruntime-genai's Whisper layout)."""
    encoded = torchmodel.encoder_of(model)(**feed, return_dict=True)
    states = getattr(encoded, states_name)
    return (states, *cross(model, {"encoder_hidden_states": states}))


def _caches(feed: dict[str, Any]) -> tuple[Any, int]:
    """The decoder's cache from a feed: its past self-attention entries, the cross entries
    marked as filled; and its layer count."""
    from transformers import DynamicCache, EncoderDecoderCache

    layers = CACHE.layers(list(feed))
    mine, theirs = DynamicCache(), DynamicCache()
    for i in range(layers):
        key, value = (f"{i}.{part}" for part in CACHE.parts)
        mine.update(feed[f"{CACHE.past}.{key}"], feed[f"{CACHE.past}.{value}"], i)
        theirs.update(feed[f"{CACHE.cross}.{key}"], feed[f"{CACHE.cross}.{value}"], i)
    cache = EncoderDecoderCache(mine, theirs)
    for i in range(layers):
        cache.is_updated[i] = True
    return cache, layers


def free_step(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    """The cached decoder over a free past (onnxruntime-genai's Whisper layout): any number of
    new tokens after a past of any length, their positions counted from the past's length;
    it gives back the past and the new entries together."""
    import torch

    cache, layers = _caches(feed)
    ids = feed["input_ids"]
    seen = feed[f"{CACHE.past}.0.{CACHE.parts[0]}"].shape[2]
    positions = torch.arange(ids.shape[1]).unsqueeze(0) + seen
    states = _stand_in_states(model, feed)
    with positions_at(model, positions):
        out = decode(model, states, ids, decoder_attention_mask=torch.ones(
            1, seen + ids.shape[1], dtype=torch.long), past_key_values=cache)
    own = out.past_key_values.self_attention_cache.layers
    return (out.logits, *(t for layer in own[:layers] for t in (layer.keys, layer.values)))


def step(model: Any, feed: dict[str, Any]) -> tuple[Any, ...]:
    cache, layers = _caches(feed)
    states = _stand_in_states(model, feed)
    with positions_at(model, feed["position_ids"]):
        out = decode(model, states, feed["input_ids"], feed.get("encoder_attention_mask"),
                     decoder_attention_mask=feed["attention_mask"], past_key_values=cache)
    own = out.past_key_values.self_attention_cache.layers
    return (out.logits, *(t for layer in own[:layers]
                          for t in (layer.keys[:, :, -1:], layer.values[:, :, -1:])))


def _stand_in_states(model: Any, feed: dict[str, Any]) -> Any:
    """Encoder states of zeros in the model's dtype (a bf16 model's too): the layers read the
    cross cache, and the states give its length and width only."""
    import torch

    return torch.zeros(1, feed[f"{CACHE.cross}.0.key"].shape[2], encoder_width(model),
                       dtype=getattr(model, "dtype", torch.float32))


def encoder_width(model: Any) -> int:
    """The width of the encoder's states the decoder reads."""
    cfg = model.config
    for part in (getattr(cfg, "encoder", None), getattr(cfg, "vision_config", None), cfg):
        for key in ("d_model", "hidden_size"):
            value = getattr(part, key, None) if part is not None else None
            if isinstance(value, int):
                return value
    raise ValueError(f"{type(model).__name__}: its config says no encoder width")
