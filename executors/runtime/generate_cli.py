"""`modelplan generate BUNDLE "prompt"`: greedy generation with a causal LM's published bundle
on the execution provider it was built for (bundle.json's `runs_on`), its tokenizer reading the
prompt and writing the answer; time to first token and decode tokens per second."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
                    help="speech to transcribe (a speech model's bundle: Whisper)")
    sp.add_argument("--image", metavar="FILE",
                    help="an image to caption (an image-to-text model's bundle)")
    sp.add_argument("--new-tokens", type=int, default=32, metavar="N",
                    help="tokens to generate at most (default 32; fewer at an end token or a "
                    "full cache)")
    sp.add_argument("--json", action="store_true",
                    help="print token ids, text and timings as JSON")
    sp.set_defaults(handler=cmd_generate)


def _bundle(folder: Path) -> dict[str, Any]:
    from executors.runtime.generate import BUNDLE

    if folder.is_file():
        folder = folder.parent
    path = folder / BUNDLE
    if not path.is_file():
        raise UsageError(f"generate: {folder} has no {BUNDLE}; give the published folder of a "
                         "language model's or an encoder-decoder model's build (modelplan run "
                         "prints it as Deliverable)")
    described = json.loads(path.read_text())
    graphs = described.get("graphs", {})
    if "runs_on" not in described or not ({"prefill", "encoder"} & set(graphs)):
        raise UsageError(f"generate: {path} is neither a language model's nor an "
                         "encoder-decoder model's bundle of this version (no runs_on, or no "
                         "prefill or encoder graph); rebuild it with modelplan run")
    return described


def cmd_generate(args: argparse.Namespace) -> int:
    from executors.runtime import generate
    from executors.samples.text import tokenizer
    from planner.core.targets import of_params

    folder = Path(args.bundle).resolve()
    described = _bundle(folder)
    folder = folder if folder.is_dir() else folder.parent
    if "encoder" in described["graphs"]:
        from executors.runtime.seq2seq_cli import transcribe

        return transcribe(folder, described, args)
    if args.new_tokens < 1:
        raise UsageError(f"generate --new-tokens {args.new_tokens}: give 1 or more")
    tok = tokenizer(folder)
    if tok is None:
        raise UsageError(f"generate: {folder} has no tokenizer files to read the prompt; copy "
                         "the checkpoint's tokenizer files (tokenizer.json, ...) beside it")
    ids = list(tok(args.prompt)["input_ids"]) if args.prompt else []
    if not ids:
        raise UsageError("generate: the prompt gives no tokens (and the tokenizer adds none); "
                         "give a prompt with some text")
    runs_on = described["runs_on"]
    runner = generate.open_bundle(folder, of_params(runs_on), runs_on["provider_options"])
    if len(ids) >= runner.context:
        raise UsageError(f"generate: the prompt has {len(ids)} tokens and the cache holds "
                         f"{runner.context}; shorten it or rebuild with a larger "
                         "export.shapes.context_length")
    got = runner.greedy(ids, args.new_tokens, generate.eos_ids(folder))
    text = str(tok.decode(got.tokens, skip_special_tokens=True))
    rate = got.tokens_per_s
    if args.json:
        print(json.dumps({"prompt_ids": ids, "tokens": got.tokens, "text": text,
                          "stopped": got.stopped, "ttft_ms": got.first_token_s * 1000,
                          "tokens_per_s": rate, "ep": runs_on["ep"]}, indent=2))
        return 0
    print(str(tok.decode(ids + got.tokens, skip_special_tokens=True)))
    print(f"{len(got.tokens)} tokens on {runs_on['ep']} ({got.stopped}); time to first token "
          f"{got.first_token_s * 1000:.1f} ms" +
          (f", {rate:.1f} tokens/s" if rate else ""), file=sys.stderr)
    return 0
