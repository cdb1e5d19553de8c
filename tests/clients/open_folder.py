"""Opens a modelplan deliverable folder with a client library, in the clients' own environment
(.venv-clients: `make clients`), and prints what the client computed as JSON on stdout.

    open_folder.py st FOLDER TEXTS_JSON [REFERENCE_CHECKPOINT]
        sentence-transformers' ONNX backend: the folder's embeddings of the texts (and, given
        a checkpoint, the same model's PyTorch embeddings through sentence-transformers)
    open_folder.py optimum TASK FOLDER FEEDS_NPZ
        Optimum's ORTModel class for the task, fed the arrays in FEEDS_NPZ by input name: its
        outputs by name
    open_folder.py optimum-generate FOLDER FILE PROMPT NEW_TOKENS
        Optimum's ORTModelForCausalLM on the graph FILE of a causal LM that keeps no cache
        (use_cache=False): the prompt's ids through the folder's tokenizer and the tokens its
        greedy `generate` gave after them, at most NEW_TOKENS
    open_folder.py genai FOLDER PROMPTS_JSON NEW_TOKENS [EP_LIBRARY]
        onnxruntime-genai as its README runs a model folder (`og.Model(folder)`, a greedy
        `Generator`): for each prompt (a list of token ids, or a text its tokenizer encodes)
        the prompt's ids and the tokens it generated, at most NEW_TOKENS of them; or the
        error genai raised, on one line, as `error`. EP_LIBRARY: a plugin EP's library
        (onnxruntime-qnn's), registered with genai first for a folder that names the QNN EP.
        With OPEN_FOLDER_LOGITS=PATH.npz in the environment, each run's logits before each of
        its tokens are saved there (arr_0, arr_1, ...: [tokens, vocab])
    open_folder.py genai-speech FOLDER FEATURES_NPY PROMPT_JSON NEW_TOKENS
        onnxruntime-genai's Whisper runner on the folder: the log-mel features in FEATURES_NPY
        and the decoder prompt (token ids: the start and forced tokens) set as the generator's
        inputs, greedy: the tokens it generated after the prompt, at most NEW_TOKENS

Nothing here imports modelplan: the folder must be enough on its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

LOGITS = "OPEN_FOLDER_LOGITS"  # genai: a .npz path for each run's logits (arr_0, arr_1, ...)

OPTIMUM = {
    "feature-extraction": ("ORTModelForFeatureExtraction", "last_hidden_state"),
    "text-classification": ("ORTModelForSequenceClassification", "logits"),
    "token-classification": ("ORTModelForTokenClassification", "logits"),
    "image-classification": ("ORTModelForImageClassification", "logits"),
}


def sentence_transformers(folder: str, texts: list[str], reference: str | None) -> dict:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, backend="onnx", device="cpu")
    out = {"embeddings": model.encode(texts).tolist(),
           "backend": type(model[0].auto_model).__name__}
    if reference:
        torch_model = SentenceTransformer(reference, device="cpu")
        out["reference"] = torch_model.encode(texts).tolist()
    return out


def optimum(task: str, folder: str, feeds_path: str) -> dict:
    import torch
    from optimum import onnxruntime as ortm

    cls_name, output = OPTIMUM[task]
    model = getattr(ortm, cls_name).from_pretrained(folder)
    feeds = {k: torch.from_numpy(v) for k, v in np.load(feeds_path).items()}
    got = model(**feeds)
    return {"class": cls_name, output: getattr(got, output).detach().numpy().tolist()}


def optimum_generate(folder: str, file_name: str, prompt: str, new_tokens: int) -> dict:
    from optimum.onnxruntime import ORTModelForCausalLM
    from transformers import AutoTokenizer

    model = ORTModelForCausalLM.from_pretrained(folder, file_name=file_name, use_cache=False,
                                                use_io_binding=False)
    read = AutoTokenizer.from_pretrained(folder)(prompt, return_tensors="pt")
    ids = read["input_ids"]
    out = model.generate(input_ids=ids, attention_mask=read["attention_mask"],
                         max_new_tokens=new_tokens, do_sample=False)
    return {"class": type(model).__name__, "prompt_ids": ids[0].tolist(),
            "tokens": out[0, ids.shape[1]:].tolist()}


def genai(folder: str, prompts: list, new_tokens: int, library: str | None = None) -> dict:
    import onnxruntime_genai as og

    if library:  # the QNN EP is a plugin: genai loads it by its library's path
        og.register_execution_provider_library("QNNExecutionProvider", library)
    try:
        return _genai(og, folder, prompts, new_tokens)
    except RuntimeError as exc:
        return {"version": og.__version__, "error": " ".join(str(exc).split())}


def _genai(og: object, folder: str, prompts: list, new_tokens: int) -> dict:
    model = og.Model(folder)
    tokenizer = og.Tokenizer(model) if any(isinstance(p, str) for p in prompts) else None
    runs, kept = [], []
    for prompt in prompts:
        ids = [int(i) for i in tokenizer.encode(prompt)] if isinstance(prompt, str) else prompt
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=_read(folder, ids) + new_tokens)
        generator = og.Generator(model, params)
        generator.append_tokens(ids)
        tokens, logits = [], []
        while not generator.is_done():
            if os.environ.get(LOGITS):  # the logits the next token is picked from
                logits.append(np.asarray(generator.get_logits(), np.float32).reshape(-1))
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        kept.append(np.stack(logits) if logits else np.zeros((0,), np.float32))
        runs.append({"prompt_ids": ids, "tokens": tokens,
                     **({"text": tokenizer.decode(tokens)} if tokenizer else {})})
    if os.environ.get(LOGITS):  # each run's logits, step by step, for a caller to compare
        np.savez(os.environ[LOGITS], *kept)
    return {"version": og.__version__, "runs": runs}


def _read(folder: str, ids: list[int]) -> int:
    """The tokens genai's sequence holds once it has read the prompt: with a sliding window (over
    the inputs, or over a pipeline's prompt stage), the prompt padded to a whole number of
    windows."""
    window = json.loads((Path(folder) / "genai_config.json").read_text())["model"]["decoder"] \
        .get("sliding_window") or {}
    if not window:
        return len(ids)
    size = window["window_size"]
    return -(-len(ids) // size) * size


def genai_speech(folder: str, features: str, prompt: list[int], new_tokens: int) -> dict:
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + new_tokens)
    generator = og.Generator(model, params)
    inputs = og.NamedTensors()
    name = json.loads((Path(folder) / "genai_config.json").read_text())[
        "model"]["encoder"]["inputs"]["audio_features"]  # genai looks extra inputs up by it
    inputs[name] = np.load(features)
    inputs["input_ids"] = np.asarray([prompt], np.int32)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return {"version": og.__version__, "tokens": tokens,
            "sequence": [int(t) for t in generator.get_sequence(0)]}


def main(argv: list[str]) -> None:
    if argv[0] == "st":
        result = sentence_transformers(argv[1], json.loads(argv[2]),
                                       argv[3] if len(argv) > 3 else None)
    elif argv[0] == "optimum":
        result = optimum(argv[1], argv[2], argv[3])
    elif argv[0] == "optimum-generate":
        result = optimum_generate(argv[1], argv[2], argv[3], int(argv[4]))
    elif argv[0] == "genai":
        result = genai(argv[1], json.loads(argv[2]), int(argv[3]), *argv[4:5])
    elif argv[0] == "genai-speech":
        result = genai_speech(argv[1], argv[2], json.loads(argv[3]), int(argv[4]))
    else:
        raise SystemExit(f"open_folder.py: unknown client {argv[0]!r} (st, optimum, "
                         "optimum-generate, genai or genai-speech)")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
