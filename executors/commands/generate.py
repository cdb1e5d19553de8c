"""`modelplan generate BUNDLE ...`: greedy generation with a published bundle on the execution
provider it was built for (bundle.json's `runs_on`), through the one generation loop: a causal
LM continues a prompt (its tokenizer reading the prompt and writing the answer, its end tokens
those of the genai_config.json onnxruntime-genai reads, checked against its graphs; time to
first token and decode tokens per second); an encoder-decoder reads its input (a text, speech from
--audio, an image from --image) through its own tokenizer or preprocessor, then decodes from
the start and forced tokens through its decoder (cached with its cross graph, or uncached)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from executors.publish import runtime_manifest
from planner.errors import UsageError


def add_command(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("generate", parents=[common],
                        help="generate text greedily with a built bundle: a language model's "
                        "(prompt), or an encoder-decoder's (translate a text, --audio, --image)")
    sp.add_argument("bundle", metavar="BUNDLE",
                    help="the published folder of a text-generation build (outputs/NAME/)")
    sp.add_argument("prompt", nargs="?", default="",
                    help="the prompt text (a language model), or the text to translate (an "
                    "encoder-decoder text model)")
    sp.add_argument("--audio", metavar="FILE",
                    help="speech to transcribe (a speech model's bundle: Whisper, "
                    "Moonshine, Speech2Text)")
    sp.add_argument("--image", metavar="FILE",
                    help="an image to caption (an image-to-text model's bundle)")
    sp.add_argument("--new-tokens", type=int, default=32, metavar="N",
                    help="tokens to generate at most (default 32; fewer at an end token or a "
                    "full cache)")
    sp.add_argument("--genai", action="store_true",
                    help="a language model's bundle: run what onnxruntime-genai runs of it, as "
                    "its genai_config.json names it (a compiled bundle's stages, a CPU "
                    "bundle's token graph on a growing cache) instead of its own pair")
    sp.add_argument("--json", action="store_true",
                    help="print token ids, text and timings as JSON")
    sp.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from executors.generation import bundle
    from planner.models.roles import Kind

    folder = Path(args.bundle).resolve()
    folder = folder.parent if folder.is_file() else folder
    for flag, given in (("--audio", args.audio), ("--image", args.image)):
        if given is not None and not Path(given).is_file():
            raise UsageError(f"generate {flag} {given}: no such file; give the path of "
                             f"{'a WAV file' if flag == '--audio' else 'an image file'}")
    if (folder / runtime_manifest.RUNTIME).is_file():  # this runtime is the one it was built for
        line = runtime_manifest.mismatch(folder, runtime_manifest.read(folder))
        if line:
            raise UsageError(f"generate: {line}")
    try:
        described = bundle.read(folder)
    except bundle.BundleError as exc:
        raise UsageError(f"generate: {exc}") from exc
    if bundle.kind(described) is Kind.ENCODER_DECODER:
        if args.genai:
            raise UsageError(f"generate --genai: {folder} is an encoder-decoder's bundle, and "
                             "--genai runs a compiled language model's onnxruntime-genai "
                             "stages; drop --genai")
        return _encoder_decoder(folder, described, args)
    if args.audio or args.image:
        raise UsageError(f"generate {'--audio' if args.audio else '--image'}: {folder} is a "
                         "language model's bundle, which continues a text prompt; drop the "
                         "option and give the prompt")
    return _decoder_only(folder, described, args)


def _decoder_only(folder: Path, described: dict[str, Any], args: argparse.Namespace) -> int:
    from executors.generation import bundle, genai, pipeline
    from executors.samples.text import tokenizer
    from planner.core.targets import of_params
    from planner.models.roles import uncached_graph

    if args.new_tokens < 1:
        raise UsageError(f"generate --new-tokens {args.new_tokens}: give 1 or more")
    tok = tokenizer(folder)
    if tok is None:
        raise UsageError(f"generate: {folder} has no tokenizer files to read the prompt; copy "
                         "the checkpoint's tokenizer files (tokenizer.json, ...) beside it")
    ids = list(tok(args.prompt)["input_ids"]) if args.prompt else []
    if not ids:
        raise UsageError("generate: the prompt has no text, or its text gives no tokens; give "
                         "a prompt with some text")
    runs_on = described["runs_on"]
    if args.genai and uncached_graph(described["graphs"]):
        raise UsageError(f"generate --genai: {folder} is a language model that keeps no "
                         "key/value cache, which onnxruntime-genai does not run (it has no "
                         "genai_config.json); drop --genai")
    try:
        runner = (pipeline.genai_graphs if args.genai else bundle.lm_graphs)(
            folder, described, of_params(runs_on), runs_on["provider_options"])
        config = genai.read(folder, described)  # the end tokens: what onnxruntime-genai reads
    except bundle.BundleError as exc:
        raise UsageError(f"generate: {exc}") from exc
    if len(ids) > runner.context:  # a prompt that fills the cache still gives one token
        holder = "the graph takes" if uncached_graph(described["graphs"]) else "the cache holds"
        raise UsageError(f"generate: the prompt has {len(ids)} tokens and {holder} "
                         f"{runner.context}; shorten it or rebuild with a larger "
                         "export.shapes.context_length")
    eos = genai.eos_ids(config) if config is not None else bundle.eos_ids(folder)
    got = runner.greedy(ids, args.new_tokens, eos)
    text = str(tok.decode(got.tokens, skip_special_tokens=True))
    rate = got.tokens_per_s
    if args.json:
        print(json.dumps({"prompt_ids": ids, "tokens": got.tokens, "text": text,
                          "stopped": got.stopped, "ttft_ms": got.first_token_s * 1000,
                          "tokens_per_s": rate, "ep": runs_on["ep"]}, indent=2))
        return 0
    print(_shown(str(tok.decode(ids + got.tokens, skip_special_tokens=True))))
    print(f"{len(got.tokens)} tokens on {runs_on['ep']} ({got.stopped}); time to first token "
          f"{got.first_token_s * 1000:.1f} ms" +
          (f", {rate:.1f} tokens/s" if rate else ""), file=sys.stderr)
    return 0


def _shown(text: str) -> str:
    """Generated text for a terminal: control characters other than newlines and tabs escaped
    (an untrained model's tokens decode to backspaces and the like; --json keeps them)."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def _row(encoder_specs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The evaluation row the input makes, checked against what the encoder takes."""
    from executors.onnx.iospecs import kind_of

    kinds = {kind_of(s) for s in encoder_specs}
    if kinds & {"mel_features", "waveform", "spectrogram"}:
        if args.image:
            raise UsageError("generate --image: this is a speech model's bundle; give the "
                             "speech with --audio FILE instead")
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
        if args.audio:
            raise UsageError("generate --audio: this is an image-to-text bundle; give the "
                             "image with --image FILE instead")
        if not args.image:
            raise UsageError("generate: this is an image-to-text bundle; give the image with "
                             "--image FILE")
        from PIL import Image, UnidentifiedImageError

        try:
            return {"image": Image.open(args.image).convert("RGB")}
        except (OSError, UnidentifiedImageError) as exc:
            raise UsageError(f"generate --image {args.image}: cannot read it as an image "
                             f"({exc})") from exc
    if args.audio or args.image:
        raise UsageError(f"generate {'--audio' if args.audio else '--image'}: this bundle "
                         "reads text; give the text to translate as the prompt instead")
    if not args.prompt.strip():
        raise UsageError("generate: give the text to translate (the prompt argument)")
    return {"text": args.prompt}


def _encoder_decoder(folder: Path, described: dict[str, Any], args: argparse.Namespace) -> int:
    from executors.evaluation import inputs, textscore
    from executors.evaluation.base import Context, EvalDataError
    from executors.generation import bundle, encoder_decoder, genai_speech
    from planner.core.targets import of_params
    from planner.models.roles import Trace, roles_of

    graphs = described["graphs"]
    roles = roles_of({g: e["inputs"] for g, e in graphs.items()})
    encoder = next(g for g, r in roles.items() if r.trace is Trace.ENCODER)
    row = _row(graphs[encoder]["inputs"], args)
    runs_on = described["runs_on"]
    target = of_params(runs_on)
    info = json.loads((folder / "config.json").read_text()) \
        if (folder / "config.json").is_file() else {}
    cx = Context("generate", {g: e["inputs"] for g, e in graphs.items()},
                 {g: [o["name"] for o in e["outputs"]] for g, e in graphs.items()}, folder, info)
    try:
        feed = inputs.modality_feed(cx, row)
        how = encoder_decoder.decoding(cx)
    except (EvalDataError, encoder_decoder.GenerationError) as exc:
        raise UsageError(str(exc).replace("eval:", "generate:", 1)) from exc
    if args.new_tokens < 1:
        raise UsageError(f"generate --new-tokens {args.new_tokens}: give 1 or more")
    how = dataclasses.replace(how, most=args.new_tokens)
    try:
        forwards = bundle.forwards(folder, described, target, runs_on["provider_options"])
        config = genai_speech.read(folder, described)  # what onnxruntime-genai reads
    except bundle.BundleError as exc:
        raise UsageError(f"generate: {exc}") from exc
    if config is not None:  # its end token: the one genai stops at
        end = config["model"].get("eos_token_id")
        how = dataclasses.replace(how, eos=end[0] if isinstance(end, list) and end else end)
    start = time.perf_counter()
    ids = encoder_decoder.generate(forwards, feed, cx, how).without_end()
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
