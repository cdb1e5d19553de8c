"""Opens a modelplan deliverable folder with a client library, in the clients' own environment
(.venv-clients: `make clients`), and prints what the client computed as JSON on stdout.

    open_folder.py st FOLDER TEXTS_JSON [REFERENCE_CHECKPOINT]
        sentence-transformers' ONNX backend: the folder's embeddings of the texts (and, given
        a checkpoint, the same model's PyTorch embeddings through sentence-transformers)
    open_folder.py optimum TASK FOLDER FEEDS_NPZ
        Optimum's ORTModel class for the task, fed the arrays in FEEDS_NPZ by input name: its
        outputs by name

Nothing here imports modelplan: the folder must be enough on its own.
"""

from __future__ import annotations

import json
import sys

import numpy as np

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


def main(argv: list[str]) -> None:
    if argv[0] == "st":
        result = sentence_transformers(argv[1], json.loads(argv[2]),
                                       argv[3] if len(argv) > 3 else None)
    elif argv[0] == "optimum":
        result = optimum(argv[1], argv[2], argv[3])
    else:
        raise SystemExit(f"open_folder.py: unknown client {argv[0]!r} (st or optimum)")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
