"""`modelplan generate` for an encoder-decoder model's bundle: the input (a text, speech from
--audio, an image from --image) through the bundle's own tokenizer or preprocessor, the
encoder, then greedy decoding from the start and forced tokens through its decoder (the cached
one with its cross graph, or the uncached one) on the EP the bundle was built for; the text,
its token ids and timings."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from planner.errors import UsageError


def _row(graphs: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The evaluation row the input makes, checked against what the encoder takes."""
    from executors.samples import kind_of

    kinds = {kind_of(s) for s in graphs["encoder"]["inputs"]}
    if kinds & {"mel_features", "waveform", "spectrogram"}:
        if not args.audio:
            raise UsageError("generate: this is a speech model's bundle; give the speech with "
                             "--audio FILE (a WAV file)")
        import soundfile

        try:
            wav, rate = soundfile.read(args.audio, dtype="float32", always_2d=False)
        except (OSError, RuntimeError) as exc:
            raise UsageError(f"generate --audio {args.audio}: cannot read it as audio ({exc}); "
                             "give a WAV file") from exc
        return {"audio": {"array": wav if wav.ndim == 1 else wav.mean(1),
                          "sampling_rate": rate}}
    if "pixels" in kinds:
        if not args.image:
            raise UsageError("generate: this is an image-to-text bundle; give the image with "
                             "--image FILE")
        from PIL import Image, UnidentifiedImageError

        try:
            return {"image": Image.open(args.image).convert("RGB")}
        except (OSError, UnidentifiedImageError) as exc:
            raise UsageError(f"generate --image {args.image}: cannot read it as an image "
                             f"({exc})") from exc
    if not args.prompt.strip():
        raise UsageError("generate: give the text to translate (the prompt argument)")
    return {"text": args.prompt}


def transcribe(folder: Path, described: dict[str, Any], args: argparse.Namespace) -> int:
    from executors.evaluation import generation, inputs, textscore
    from executors.evaluation.base import Context, EvalDataError
    from executors.runtime.adapters import adapter
    from executors.runtime.generate import session_forward
    from planner.core.targets import of_params

    graphs = described["graphs"]
    row = _row(graphs, args)
    runs_on = described["runs_on"]
    target = of_params(runs_on)
    info = json.loads((folder / "config.json").read_text()) \
        if (folder / "config.json").is_file() else {}
    cx = Context("generate", {g: e["inputs"] for g, e in graphs.items()},
                 {g: [o["name"] for o in e["outputs"]] for g, e in graphs.items()}, folder, info)
    try:
        feed = inputs.modality_feed(cx, row)
        how = generation.decoding(cx)
    except EvalDataError as exc:
        raise UsageError(str(exc).replace("eval:", "generate:", 1)) from exc
    if args.new_tokens < 1:
        raise UsageError(f"generate --new-tokens {args.new_tokens}: give 1 or more")
    how = dataclasses.replace(how, most=args.new_tokens)
    forwards = {g: session_forward(adapter(target).step_session(
        folder / e["model"], target, runs_on["provider_options"], None)[0])
        for g, e in graphs.items()}
    start = time.perf_counter()
    ids = generation.generate(forwards, feed, cx, how)
    seconds = time.perf_counter() - start
    tok = textscore.tokenizer(folder)
    text = textscore.ids_text(ids) if tok is None else \
        str(tok.decode(ids, skip_special_tokens=True)).strip()
    if args.json:
        print(json.dumps({"tokens": ids, "text": text, "seconds": seconds,
                          "ep": runs_on["ep"]}, indent=2))
        return 0
    print(text)
    print(f"{len(ids)} tokens on {runs_on['ep']} in {seconds:.2f} s", file=sys.stderr)
    return 0
