"""Graph roles, as data: what each graph a model exports is, as ops and targets are declared.

A role says which torch module its graph traces, when the host runs it while generating,
whether it reads and gives back the static key/value cache, and which steps a plan gives it.
The cache protocol's names are declared here once: a graph over a static cache takes one
`past_key_values.{layer}.{key|value}` buffer per layer ([1, heads, slots, head width], the
empty slots masked) and gives back only the new tokens' entries, `present.{layer}.{key|value}`,
which the host writes into the next slots; an encoder-decoder's cross graph gives
`cross.{layer}.{key|value}` once per input, which its decoder reads. A layer that keeps a
recurrent state (a convolution's, a state-space or linear-attention layer's) is fed its states
whole, `past_key_values.{layer}.{conv|recurrent}.{index}` (fixed shapes), and gives them back
updated, `present.{layer}.{conv|recurrent}.{index}`, which replace the fed ones.

Executors read these declarations; they never compare role names (tests/unit/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """How a model's graphs generate together."""

    SINGLE = "single"                     # one graph, no generation
    DECODER_ONLY = "decoder_only"         # prefill, then decode one token at a time (or, with
                                          # no cache, one graph on the whole prefix per token)
    ENCODER_DECODER = "encoder_decoder"   # encoder once, (cross once,) decoder per token


class Trace(StrEnum):
    """The torch module a role's graph traces (executors/generation/modules.py builds it)."""

    MODEL = "model"                # the whole model
    ENCODER = "encoder"            # an encoder-decoder's encoder (a captioner's vision model)
    PREFIX_DECODER = "prefix"      # its decoder on the encoder's states, the whole prefix
    STEP_DECODER = "step"          # its decoder for one token over the static cache
    CROSS = "cross"                # its decoder's cross keys and values of the encoder's states
    LM = "lm"                      # a causal LM's forward over the static cache
    PREFIX_LM = "prefix_lm"        # a causal LM's forward on the whole prefix, no cache


class Runs(StrEnum):
    """When the host runs a role's graph while generating."""

    ONCE = "once"        # once per input (the encoder, the cross graph, a single graph)
    PROMPT = "prompt"    # once per prompt (a causal LM's prefill)
    TOKEN = "token"      # once per new token, over the cache (decode, the cached decoder)
    PREFIX = "prefix"    # once per new token, on the whole prefix (the uncached decoder)


@dataclass(frozen=True)
class CacheNames:
    """The static key/value cache's input and output names."""

    past: str = "past_key_values"   # fed: the host's buffers
    present: str = "present"        # given back: the new entries, which the host writes
    cross: str = "cross"            # an encoder-decoder's cross-attention keys and values
    parts: tuple[str, str] = ("key", "value")
    states: tuple[str, str] = ("conv", "recurrent")  # a recurrent layer's states, by kind

    def names(self, prefix: str, layers: int) -> list[str]:
        return [f"{prefix}.{i}.{part}" for i in range(layers) for part in self.parts]

    def is_past(self, name: str) -> bool:
        return name.startswith(self.past + ".")

    def present_of(self, past_name: str) -> str:
        """The output a graph gives back for a past input's new entries."""
        return self.present + past_name[len(self.past):]

    def layers(self, names: list[str]) -> int:
        """The layers that cache keys and values (a recurrent layer's states are not counted)."""
        return sum(1 for n in names if self.is_past(n) and n.endswith("." + self.parts[0]))

    def is_state(self, name: str) -> bool:
        """Whether a past input or present output is a recurrent layer's state (replaced
        whole each step), not a layer's keys or values (written into the next slots)."""
        parts = name.split(".")
        return len(parts) == 4 and parts[0] in (self.past, self.present) and \
            parts[2] in self.states


CACHE = CacheNames()
FIRST_PAST = f"{CACHE.past}.0.{CACHE.parts[0]}"  # the input that says a graph reads a cache


@dataclass(frozen=True)
class Role:
    name: str
    kind: Kind
    trace: Trace
    runs: Runs
    inputs: tuple[str, ...] = ()  # the inputs it always takes, before any cache (an encoder's
                                  # and a single graph's come from the model's modality)
    outputs: tuple[str, ...] = ()  # the outputs it always gives, before any cache
    reads_cache: bool = False     # takes the past_key_values buffers and gives back present
    reads_cross: bool = False     # takes the cross keys and values
    gives_cross: bool = False     # gives the cross keys and values
    prompt_stage: bool = False    # onnxruntime-genai runs it on the prompt
    token_stage: bool = False     # onnxruntime-genai runs it for each new token
    chain: bool = False           # the bundle's chain: the graph a bundle step reads first
    steps: tuple[str, ...] = ()   # the ops a plan gives it beyond its graph's chain


# the graphs' names (the planner's; executors read a role's fields, never its name)
MODEL, PREFILL, DECODE, ENCODER, CROSS, DECODER, UNCACHED = (
    "model", "prefill", "decode", "encoder", "cross", "decoder", "uncached")

_PROMPT = ("input_ids", "attention_mask", "position_ids")  # input_ids: inputs_embeds on_host
_STEP = ("input_ids", "position_ids", "attention_mask")
_STATES = "encoder_hidden_states"
_LOGITS = ("logits",)  # hidden_states when the head runs on the host
_LM_STEPS = ("share_context", "genai_stages", "split", "host_layers", "lm_bundle",
             "verify_generation")
_S2S_STEPS = ("bundle", "verify_generation")

ROLES: dict[str, Role] = {r.name: r for r in (
    Role(MODEL, Kind.SINGLE, Trace.MODEL, Runs.ONCE),
    Role(PREFILL, Kind.DECODER_ONLY, Trace.LM, Runs.PROMPT, _PROMPT, _LOGITS, reads_cache=True,
         prompt_stage=True, steps=_LM_STEPS),
    Role(DECODE, Kind.DECODER_ONLY, Trace.LM, Runs.TOKEN, _STEP, _LOGITS, reads_cache=True,
         token_stage=True, chain=True, steps=_LM_STEPS),
    # a causal LM whose forward keeps no cache: one graph, run on the whole prefix per token
    Role(UNCACHED, Kind.DECODER_ONLY, Trace.PREFIX_LM, Runs.PREFIX,
         ("input_ids", "attention_mask"), _LOGITS, chain=True,
         steps=("uncached_bundle", "verify_generation")),
    Role(ENCODER, Kind.ENCODER_DECODER, Trace.ENCODER, Runs.ONCE,
         steps=(*_S2S_STEPS, "generate_loop")),
    Role(CROSS, Kind.ENCODER_DECODER, Trace.CROSS, Runs.ONCE, (_STATES,), gives_cross=True,
         steps=_S2S_STEPS),
    Role(DECODER, Kind.ENCODER_DECODER, Trace.PREFIX_DECODER, Runs.PREFIX, ("input_ids", _STATES),
         _LOGITS, chain=True,
         steps=(*_S2S_STEPS, "generate_loop")),
)}
# the decoder over a static cache (export.shapes.decoder_cache): the same graph name, read
# through `role_of` by the inputs it takes
CACHED_DECODER = Role(DECODER, Kind.ENCODER_DECODER, Trace.STEP_DECODER, Runs.TOKEN, _STEP,
                      _LOGITS, reads_cache=True, reads_cross=True, chain=True, steps=_S2S_STEPS)
GENERATING = tuple(n for n, r in ROLES.items() if r.kind is not Kind.SINGLE)


def role_of(graph: str | None, input_names: list[str] | tuple[str, ...] = ()) -> Role:
    """A graph's role by its name (None: the whole model), the decoder's by whether it takes
    the static cache: the one place that says whether a decoder is cached."""
    role = ROLES[graph or MODEL]
    if role.trace is Trace.PREFIX_DECODER and FIRST_PAST in input_names:
        return CACHED_DECODER
    return role


def roles_of(graphs: dict[str, list[dict[str, Any]]]) -> dict[str, Role]:
    """Every graph's role, from graph -> its input specs (each names its input)."""
    return {g: role_of(g, [s["name"] for s in specs]) for g, specs in graphs.items()}


def uncached_graph(graphs: list[str] | tuple[str, ...] | dict[str, object]) -> str | None:
    """A causal LM's graph run on the whole prefix for each token (a forward that keeps no
    cache), among `graphs`; None where its graphs are a prompt and a token graph."""
    return next((g for g in graphs if g in ROLES and ROLES[g].kind is Kind.DECODER_ONLY
                 and ROLES[g].runs is Runs.PREFIX), None)


def prompt_and_token(graphs: list[str] | tuple[str, ...] | dict[str, object]) -> tuple[str, str]:
    """A causal LM's prompt graph and token graph among `graphs` (by their names' roles)."""
    prompt, token = (next(g for g in graphs if ROLES[g].runs is runs)
                     for runs in (Runs.PROMPT, Runs.TOKEN))
    return prompt, token


def kind_of(graphs: list[str] | tuple[str, ...] | dict[str, object]) -> Kind:
    """How a set of graphs generates (a bundle's, a plan's)."""
    kinds = {ROLES[g].kind for g in graphs if g in ROLES} - {Kind.SINGLE}
    return kinds.pop() if len(kinds) == 1 else Kind.SINGLE


def graphs_of(kind: Kind) -> tuple[str, ...]:
    """The graphs of a kind, in the order they run (the cross graph where built)."""
    return tuple(n for n, r in ROLES.items() if r.kind is kind)
