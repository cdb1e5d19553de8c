"""A team's own config tree, as a project would keep it next to its code (used by tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

FILES = {
    # a new model option that extends a packaged one with one change
    "model/our_model.yaml": """\
defaults:
  - tiny_bert
  - _self_
name: our_model
random_init:
  config:
    hidden_size: 32
""",
    # a plain new option (no defaults list): the sweep composer swaps it in without Hydra
    "model/our_plain.yaml": """\
name: our_plain
source: random_init
package: null
path: null
hub_id: null
task: feature-extraction
model_class: BertModel
trust_remote_code: false
random_init:
  model_type: bert
  seed: 1
  config:
    hidden_size: 32
    num_hidden_layers: 1
    num_attention_heads: 2
    intermediate_size: 64
    vocab_size: 500
    max_position_embeddings: 128
  preprocessor: {}
""",
    "quant/our_int8.yaml": """\
defaults:
  - w8a8
  - _self_
name: our_int8
symmetric: true
""",
    # an experiment: several groups and values at once, `+experiment=int8_cpu`
    "experiment/int8_cpu.yaml": """\
# @package _global_
defaults:
  - override /quant: w8a8
  - override /target: cpu
export:
  opset: 18
""",
    # a primary config of the team's own: `--config-name ours`
    "ours.yaml": """\
defaults:
  - config
  - override model: our_model
  - override target: cpu
  - _self_
export:
  shapes:
    sequence_length: 64
""",
}


def write_team_conf(root: Path, files: dict[str, str] | None = None) -> Path:
    """Write the team's config tree under root/conf and return that directory."""
    conf = root / "conf"
    for rel, text in (FILES if files is None else files).items():
        (conf / rel).parent.mkdir(parents=True, exist_ok=True)
        (conf / rel).write_text(text)
    return conf


# A project repository for config review: a base commit, then w8a8 -> w8a16 and a gelu
# fusion flag added (see review_repo).
REVIEW_BASE = {
    "model/our_model.yaml": "defaults:\n  - tiny_bert\n  - _self_\nname: our_model\n",
    "quant/ours.yaml": "defaults:\n  - w8a8\n  - _self_\nname: ours\n",
    "optim/ours.yaml": "name: ours\nflags: []\n",
}
REVIEW_HEAD = {
    "quant/ours.yaml": "defaults:\n  - w8a16\n  - _self_\nname: ours\n",
    "optim/ours.yaml": "name: ours\nflags: [gelu]\n",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", message)


def review_repo(root: Path) -> Path:
    """A git repository at root with the base commit and the change committed on top."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    write_team_conf(root, REVIEW_BASE)
    commit_all(root, "base")
    write_team_conf(root, REVIEW_HEAD)
    commit_all(root, "w8a16 and gelu fusion")
    return root
