"""onnxruntime-genai's decoder run by modelplan's loop from the bundle's genai_config.json, fed
as genai 0.18 feeds it, so that verify_generation checks what genai runs and `modelplan
generate --genai` runs it from the same description: the stages of a compiled bundle's pipeline
(executors/generation/stages.py makes them), or a CPU bundle's token graph of a free past
(genai's plain decoder).

The stages run in the config's order, each on the prompt or on each token as it says, reading
the tensors the fed ones and the earlier stages' outputs hold by name: the ids (the prompt
in windows of `window_size` from the left, the last one padded after its tokens), int32
`past_seq_len` (the position of the input's last slot: a window's end, or the token's own) and
`total_seq_len`, and one buffer per layer's keys and values of the cache's fixed length, which
each call gives back whole as the next past (measured: benchmarks/genai_pipeline_probe.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from executors.generation import genai, loop, stages
from planner.models.generation import GENAI_SECTION
from planner.models.roles import CACHE

_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class _FedAsGenai(loop.PromptStepper):
    """A runner that counts the tokens it has read (`seen`) against genai's context."""

    context: int
    seen: int

    @property
    def full(self) -> bool:
        return self.seen >= self.context


class StageGraphs(_FedAsGenai):
    """A compiled bundle's genai stages as a runner with LMGraphs' interface (prompt, step,
    greedy, context, full)."""

    def __init__(self, config: dict[str, Any], sessions: dict[str, Any]) -> None:
        decoder = config["model"][GENAI_SECTION]
        self.pipeline = decoder["pipeline"][0]
        self.sessions = sessions  # stage -> its ONNX Runtime session
        self.window = int(decoder["sliding_window"]["window_size"])
        self.pad = int(config["model"].get("pad_token_id") or 0)
        token = next(k for k, s in self.pipeline.items() if s["run_on_token_gen"] and
                     any(CACHE.is_past(n) for n in s["inputs"]))
        self.empty = {i.name: np.zeros(i.shape, _TYPES[i.type])
                      for i in sessions[token].get_inputs() if CACHE.is_past(i.name)}
        self.context = next(iter(self.empty.values())).shape[2]
        self.buffers, self.seen = dict(self.empty), 0

    def _call(self, ids: list[int], last: int, on: str) -> np.ndarray:
        """One pass of the stages that run `on` ("run_on_prompt" or "run_on_token_gen") over
        `ids` whose last token sits at position `last`; the logits [len(ids), vocab]."""
        held: dict[str, np.ndarray] = {
            stages.IDS: np.array([ids], np.int64),
            stages.PAST_SEQ_LEN: np.array([[last]], np.int32),
            stages.TOTAL_SEQ_LEN: np.array([last + 1], np.int32), **self.buffers}
        for name, stage in self.pipeline.items():
            if stage[on]:
                session = self.sessions[name]
                outs = session.run(stage["outputs"], {n: held[n] for n in stage["inputs"]})
                held.update(zip(stage["outputs"], outs, strict=True))
        self.buffers = {n: held[CACHE.present_of(n)] for n in self.empty}
        return held["logits"][0]

    def prompt(self, ids: list[int]) -> np.ndarray:
        """Read the prompt into the buffers a window at a time; the logits at every prompt
        position [n, vocab]."""
        if len(ids) > self.context:
            raise loop.cache_full(self.context)
        self.buffers, rows = dict(self.empty), []
        for start in range(0, len(ids), self.window):
            part = ids[start:start + self.window]
            window = [*part, *[self.pad] * (self.window - len(part))]
            rows += list(self._call(window, start + self.window - 1, "run_on_prompt")[:len(part)])
        self.seen = len(ids)
        return np.stack(rows)

    def step(self, token: int) -> np.ndarray:
        """One token at the next position; its logits for the token after it."""
        if self.full:
            raise loop.cache_full(self.context)
        logits = self._call([token], self.seen, "run_on_token_gen")[-1]
        self.seen += 1
        return logits


class PlainDecoder(_FedAsGenai):
    """genai's plain decoder over a bundle's token graph of a free past (a CPU bundle's
    decode_model.onnx), fed as genai feeds it: the whole prompt on an empty past, then one token
    at a time, each call's present (past and new) the next call's past."""

    def __init__(self, config: dict[str, Any], session: Any) -> None:
        from executors.generation.bundle import session_forward

        model = config["model"]
        decoder = model[GENAI_SECTION]
        self.forward, self.names = session_forward(session), decoder["inputs"]
        self.taken = {i.name for i in session.get_inputs()}  # what it reads of genai's feed
        self.context = int(model["context_length"])
        layers, kv, width = (int(decoder[k]) for k in ("num_hidden_layers",
                                                        "num_key_value_heads", "head_size"))
        kinds = {i.name: _TYPES.get(i.type) for i in session.get_inputs()}  # the past's
        self.empty = {name % i: np.zeros((1, kv, 0, width), kinds.get(name % i) or np.float32)
                      for i in range(layers) for name in (self.names["past_key_names"],
                                                          self.names["past_value_names"])}
        self.buffers, self.seen = dict(self.empty), 0

    def _call(self, ids: list[int]) -> np.ndarray:
        total = self.seen + len(ids)
        feed = {self.names["input_ids"]: np.array([ids], np.int64),
                self.names["attention_mask"]: np.ones((1, total), np.int64), **self.buffers}
        if "position_ids" in self.names:
            feed[self.names["position_ids"]] = np.arange(self.seen, total, dtype=np.int64)[None]
        out = self.forward({k: v for k, v in feed.items() if k in self.taken})
        self.buffers = {name: out[CACHE.present_of(name)] for name in self.empty}
        self.seen = total
        return out["logits"][0]

    def prompt(self, ids: list[int]) -> np.ndarray:
        self.buffers, self.seen = dict(self.empty), 0
        return self._call(ids)

    def step(self, token: int) -> np.ndarray:
        if self.full:
            raise loop.cache_full(self.context)
        return self._call([token])[-1]


def genai_graphs(folder: Path, described: dict[str, Any], target: Any,
                 provider_options: dict[str, Any], cache_dir: Path | None = None
                 ) -> StageGraphs | PlainDecoder:
    """What onnxruntime-genai runs of the bundle, as a runner: its compiled stages
    (`stage_graphs`), or its plain decoder over the bundle's token graph of a free past."""
    from executors.generation.bundle import BundleError
    from executors.runtime.adapters import adapter

    if has_stages(described):
        return stage_graphs(folder, described, target, provider_options, cache_dir)
    config = genai.read(folder, described)
    decoder = (config or {}).get("model", {}).get(GENAI_SECTION, {})
    own = {e["model"] for e in described["graphs"].values()}
    if config is None or decoder.get("filename") not in own or "sliding_window" in decoder:
        raise BundleError(f"{folder}: modelplan runs onnxruntime-genai's decoder over the "
                          "bundle's own token graph or its compiled stages, and this bundle "
                          "has neither (genai_config.json: none, genai's windowed graph, or a "
                          "pipeline genai does not run); run it without --genai")
    session = adapter(target).step_session(folder / decoder["filename"], target,
                                           provider_options, cache_dir)[0]
    return PlainDecoder(config, session)


def has_stages(described: dict[str, Any]) -> bool:
    """Whether a causal LM's bundle (its bundle.json) carries genai's compiled stages."""
    return "stages" in (described.get("genai") or {})


def stage_graphs(folder: Path, described: dict[str, Any], target: Any,
                 provider_options: dict[str, Any], cache_dir: Path | None = None
                 ) -> StageGraphs:
    """The bundle's genai stages as a runner: each stage on the EP genai_config.json gives it
    (the target's, with the build's options; the host CPU for a stage with no provider)."""
    import onnxruntime as ort

    from executors.generation.bundle import BundleError
    from executors.runtime.adapters import adapter, host_providers

    config = genai.read(folder, described)
    if config is None or not has_stages(described):
        raise BundleError(f"{folder} has no onnxruntime-genai stages (a compiled language "
                          "model's bundle gets them unless export.genai_stages=false); "
                          "run it without --genai")
    sessions = {}
    for name, stage in config["model"][GENAI_SECTION]["pipeline"][0].items():
        path = folder / stage["filename"]
        if stage.get("session_options", {}).get("provider_options") == []:
            sessions[name] = ort.InferenceSession(str(path), providers=host_providers())
        else:
            sessions[name] = adapter(target).step_session(path, target, provider_options,
                                                          cache_dir)[0]
    return StageGraphs(config, sessions)
