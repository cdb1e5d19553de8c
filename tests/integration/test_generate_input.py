"""`modelplan generate` given what it cannot use: each a single line naming what and a fix,
exit 2, never a traceback: a folder that is no bundle, a bundle.json that is not JSON, a JSON
list, a bundle whose lengths are not its graphs', a bundle without its weights, a missing
--audio or --image file, an --audio or --image a language model does not read, no tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoints import text_checkpoint
from tests.conftest import run_cli
from tests.integration.conftest import run_json, step


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("lm")
    ckpt = text_checkpoint(tmp / "llama", "LlamaForCausalLM", "llama")
    code, record, err = run_json("model=local_hf", f"model.path={ckpt}", "target=cpu",
                                 "quant=none", "verify=none", "perf=none",
                                 "export.shapes.prefill_length=8",
                                 "export.shapes.context_length=32",
                                 store=tmp / "store", outputs=tmp / "out")
    assert code == 0, err
    return Path(step(record, "bundle")["outputs"]["bundle.json"]).parent


def broken(bundle: Path, tmp: Path, edit: Any) -> Path:
    folder = tmp / "bundle"
    shutil.copytree(bundle, folder)
    edit(folder)
    return folder


def lengths(value: Any) -> Any:
    def edit(folder: Path) -> None:
        described = json.loads((folder / "bundle.json").read_text())
        described["context_length"] = value
        (folder / "bundle.json").write_text(json.dumps(described))
    return edit


EDITS = {
    "not JSON": (lambda f: (f / "bundle.json").write_text("{not json"), "is not JSON"),
    "a JSON list": (lambda f: (f / "bundle.json").write_text("[1, 2]"), "is neither"),
    "no bundle.json": (lambda f: (f / "bundle.json").unlink(), "has no bundle.json"),
    "context -1": (lengths(-1), "context_length is -1"),
    "context unlike the cache": (lengths(16), "do not match"),
    "no weights": (lambda f: shutil.rmtree(f / "weights"), "does not load"),
    "no graph file": (lambda f: next(f.glob("prefill_model.onnx")).unlink(),
                      "names no model file"),
}


def refused(result: Any, said: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("modelplan: error: generate"), lines
    assert said in lines[0] and "Traceback" not in result.stderr


def test_the_bundle_generates(bundle: Path) -> None:
    result = run_cli("generate", str(bundle), "hello world", "--new-tokens", "3", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["tokens"]) == 3


@pytest.mark.parametrize("case", list(EDITS))
def test_a_malformed_bundle_is_one_line(bundle: Path, tmp_path: Path, case: str) -> None:
    edit, said = EDITS[case]
    refused(run_cli("generate", str(broken(bundle, tmp_path, edit)), "hello"), said)


@pytest.mark.parametrize(("args", "said"), [
    (("--audio", "/no/such.wav"), "no such file"),
    (("--image", "/no/such.png"), "no such file"),
    (("--audio", "/etc/hostname"), "language model's bundle"),
    (("--new-tokens", "0"), "give 1 or more"),
])
def test_arguments_it_cannot_use_are_one_line(bundle: Path, args: tuple[str, ...],
                                              said: str) -> None:
    refused(run_cli("generate", str(bundle), "hello", *args), said)


def test_a_prompt_of_no_tokens_is_one_line(bundle: Path) -> None:
    refused(run_cli("generate", str(bundle), ""), "no tokens")
