"""generate_loop (`export.generate_loop=true`): an encoder-decoder model's greedy decoding as
one ONNX graph: the traced encoder, then an ONNX `Loop` whose body runs the traced decoder
(the prefix padded to its fixed length) and an argmax. TorchScript scripts the loop and its
exporter keeps it a `Loop` (the trip count is an input, `steps`), the decoder's weights
inside the body's graph.

The graph is checked against PyTorch's greedy tokens (the scripted loop itself) on the verify
samples, then opened twice through the optimized-model session cache (executors/runtime/
session_cache.py): the metrics say which tier held it (`.onnx`, `.ort`, or off) and the cold
and warm session times. A graph ONNX Runtime cannot reload from its own optimized `.onnx` is
served from the `.ort` tier."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from executors.run.step_api import StepContext, StepResult
from executors.samples import Samples
from planner.models.seq2seq import LOOP_FILE

LOOP = LOOP_FILE
INLINE_BYTES = 1_800_000_000  # below this the weights stay in the graph's own file


def run(ctx: StepContext) -> StepResult:
    import torch

    from executors.runtime import torchmodel

    p = ctx.params
    model, _ = torchmodel.load(ctx.inputs["model"])
    names = [s["name"] for s in p["encoder_inputs"]]
    feeds = Samples(p["encoder_inputs"], "verify", source=ctx.inputs["model"]).feeds(2)
    steps = p["decoder_length"] - 1
    ctx.progress("scripting the greedy loop over the traced encoder and decoder")
    loop = scripted(model, names, feeds[0], p)
    args = (*(torch.from_numpy(feeds[0][n]) for n in names), torch.tensor(steps))
    path = ctx.out / LOOP
    ctx.progress(f"exporting the loop with torchscript, opset {p['opset']}")
    _export(loop, args, names, path, p["opset"])
    expected = [loop(*(torch.from_numpy(f[n]) for n in names), torch.tensor(steps)).numpy()
                for f in feeds]
    metrics = {**_structure(path), **_through_cache(ctx, path, names, feeds, steps, expected)}
    return StepResult(metrics=metrics)


def scripted(model: Any, names: list[str], feed: dict[str, np.ndarray],
             p: dict[str, Any]) -> Any:
    """The greedy loop as a TorchScript module: `(*encoder inputs, steps) -> tokens` (the
    start token, then one argmax per step, padding after)."""
    import torch

    from executors.generation.modules import graph_module
    from planner.models.roles import Kind, graphs_of, role_of

    length, masked = p["decoder_length"], p["masked"]
    enc_in = tuple(torch.from_numpy(feed[n]) for n in names)
    encoder, _cross, decoder = (role_of(g) for g in graphs_of(Kind.ENCODER_DECODER))
    enc = graph_module(model, encoder, names, ["last_hidden_state"])
    dec_names = ["input_ids", "encoder_hidden_states",
                 *(["encoder_attention_mask"] if masked else [])]
    dec = graph_module(model, decoder, dec_names, ["logits"])
    with torch.no_grad():
        states = enc(*enc_in)
        prefix = torch.full((1, length), p["start"], dtype=torch.long)
        traced_enc = torch.jit.trace(enc, enc_in)
        traced_dec = torch.jit.trace(dec, (prefix, states, *(enc_in[1:2] if masked else ())))
    shared = (traced_enc, traced_dec, int(p["start"]), int(p["pad"]), int(length))
    loop, masked_loop = loop_classes()
    return torch.jit.script(masked_loop(*shared) if masked else loop(*shared))


def loop_classes() -> tuple[type, type]:
    """The scripted loop's classes: one input to the encoder, or token ids and their mask."""
    import torch

    class Loop(torch.nn.Module):
        """One input to the encoder (pixels, features)."""

        def __init__(self, enc: Any, dec: Any, start: int, pad: int, length: int) -> None:
            super().__init__()
            self.enc, self.dec = enc, dec
            self.start, self.pad, self.length = start, pad, length

        def forward(self, source: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            states = self.enc(source)
            pos = torch.arange(self.length).unsqueeze(0)
            out = torch.where(pos == 0, self.start, self.pad)
            for i in range(int(steps)):  # a tensor trip count: exported as a Loop
                token = self.dec(out, states)[:, i].argmax(-1, keepdim=True)
                out = torch.where(pos == i + 1, token, out)
            return out

    class MaskedLoop(torch.nn.Module):
        """Token ids and their attention mask to the encoder (text)."""

        def __init__(self, enc: Any, dec: Any, start: int, pad: int, length: int) -> None:
            super().__init__()
            self.enc, self.dec = enc, dec
            self.start, self.pad, self.length = start, pad, length

        def forward(self, source: torch.Tensor, mask: torch.Tensor,
                    steps: torch.Tensor) -> torch.Tensor:
            states = self.enc(source, mask)
            pos = torch.arange(self.length).unsqueeze(0)
            out = torch.where(pos == 0, self.start, self.pad)
            for i in range(int(steps)):
                token = self.dec(out, states, mask)[:, i].argmax(-1, keepdim=True)
                out = torch.where(pos == i + 1, token, out)
            return out

    return Loop, MaskedLoop


def _export(loop: Any, args: tuple, names: list[str], path: Any, opset: int) -> None:
    import onnx
    import torch

    from executors.runtime.nativelog import fd1_to_stderr

    tmp = path.with_name(f".{path.name}.export")
    tmp.mkdir()
    try:
        with fd1_to_stderr():
            torch.onnx.export(loop, args, str(tmp / LOOP), input_names=[*names, "steps"],
                              output_names=["tokens"], dynamo=False, opset_version=opset)
        proto = onnx.load(str(tmp / LOOP))
        big = proto.ByteSize() > INLINE_BYTES
        onnx.save_model(proto, str(path), save_as_external_data=big,
                        location=f"{LOOP}.data" if big else None)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _structure(path: Any) -> dict[str, Any]:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    loops = [n for n in proto.graph.node if n.op_type == "Loop"]
    bodies = [a.g for n in loops for a in n.attribute if a.name == "body"]
    return {"loops": len(loops), "outer_nodes": len(proto.graph.node),
            "body_nodes": sum(len(b.node) for b in bodies),
            "body_initializers": sum(len(b.initializer) for b in bodies)}


def _through_cache(ctx: StepContext, path: Any, names: list[str],
                   feeds: list[dict[str, np.ndarray]], steps: int,
                   expected: list[np.ndarray]) -> dict[str, Any]:
    """Open the graph twice through the session cache (cold, then warm) and generate."""
    from executors.runtime.session_cache import cpu_session

    opened = []
    for _ in range(2):
        t = time.perf_counter()
        session, info = cpu_session(path, ctx.cache_dir)
        opened.append((session, info, round(time.perf_counter() - t, 4)))
    session = opened[-1][0]
    got = [session.run(None, {**{n: f[n] for n in names},
                              "steps": np.array(steps, np.int64)})[0] for f in feeds]
    same = all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
    if not same:
        raise ctx.fail("the exported loop does not generate the tokens PyTorch's loop does "
                       f"(ONNX {got[0].tolist()}, PyTorch {expected[0].tolist()})",
                       "set export.generate_loop=false and report this model")
    return {"tokens_match_pytorch": same, "tokens": [g.tolist() for g in got],
            "cache_cold": opened[0][1].state, "cache_warm": opened[1][1].state,
            "cache_detail": opened[1][1].detail, "session_cold_s": opened[0][2],
            "session_warm_s": opened[1][2]}
