"""What `eval` measures per task, as data: the metrics (the first is the verdict's unless
`eval.metric` names another), which are lower-is-better, the dataset roles the task reads and
the roles that carry the truth. Executors compute these metrics (executors/evaluation/); a test
holds the two sides to each other.

Roles are task-level names for a dataset's columns (`eval.dataset.columns` maps them);
winml-cli's `columns_mapping` names are accepted and mapped to roles here, per task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import ConfigError


@dataclass(frozen=True)
class TaskMetrics:
    metrics: tuple[str, ...]               # first = the default verdict metric
    roles: tuple[str, ...]                 # the dataset columns the task reads, by role
    truth: tuple[str, ...]                 # roles holding labels: absent = agreement metrics
    lower_is_better: frozenset[str] = frozenset()


_CLASSIFY_TEXT = TaskMetrics(("accuracy", "f1_macro"), ("text", "text_pair", "label"), ("label",))
_SIMILARITY = TaskMetrics(("spearman", "retrieval_agreement"),
                          ("text", "text_pair", "score", "audio"), ("score",))
_GENERATE = frozenset({"cer", "wer"})

EVAL: dict[str, TaskMetrics] = {
    "text-classification": _CLASSIFY_TEXT,
    "zero-shot-classification": _CLASSIFY_TEXT,
    "token-classification": TaskMetrics(("f1", "precision", "recall", "accuracy"),
                                        ("tokens", "label"), ("label",)),
    "question-answering": TaskMetrics(("f1", "exact_match"), ("question", "context", "answers",
                                                              "id"), ("answers",)),
    "fill-mask": TaskMetrics(("accuracy", "top5_accuracy"), ("text",), ("text",)),
    "feature-extraction": _SIMILARITY,
    "sentence-similarity": _SIMILARITY,
    "image-classification": TaskMetrics(("accuracy", "top5_accuracy"), ("image", "label"),
                                        ("label",)),
    "audio-classification": TaskMetrics(("accuracy", "top5_accuracy"), ("audio", "label"),
                                        ("label",)),
    "zero-shot-image-classification": TaskMetrics(("accuracy",), ("image", "label"),
                                                  ("label",)),
    "image-feature-extraction": TaskMetrics(("retrieval_agreement", "spearman"), ("image",), ()),
    "image-segmentation": TaskMetrics(("miou", "pixel_accuracy"), ("image", "mask"), ("mask",)),
    "depth-estimation": TaskMetrics(("abs_rel", "delta1"), ("image", "depth"), ("depth",),
                                    frozenset({"abs_rel"})),
    "object-detection": TaskMetrics(("map", "map_50"), ("image", "boxes"), ("boxes",)),
    "zero-shot-object-detection": TaskMetrics(("map", "map_50"), ("image", "text", "boxes"),
                                              ("boxes",)),
    "keypoint-detection": TaskMetrics(("pck",), ("image", "keypoints"), ("keypoints",)),
    "automatic-speech-recognition": TaskMetrics(("wer", "cer"), ("audio", "transcript"),
                                                ("transcript",), _GENERATE),
    "text2text-generation": TaskMetrics(("bleu", "cer", "exact_match"), ("text", "target"),
                                        ("target",), _GENERATE),
    "image-to-text": TaskMetrics(("cer", "bleu", "exact_match"), ("image", "target"),
                                 ("target",), _GENERATE),
    # language modelling on the texts: their own next tokens are the truth
    "text-generation": TaskMetrics(("next_token_accuracy", "perplexity"), ("text",), ("text",),
                                   frozenset({"perplexity"})),
}

ROLES = ("text", "text_pair", "label", "score", "question", "context", "answers", "id", "image",
         "audio", "tokens", "boxes", "mask", "depth", "keypoints", "transcript", "target")

# winml-cli's columns_mapping names: the role they stand for, by the task's needs.
WINML_COLUMNS = {"input_column_1": "text", "input_column_2": "text_pair",
                 "second_input_column": "text_pair", "score_column": "score",
                 "question_column": "question", "context_column": "context",
                 "id_column": "id"}
_INPUT_ROLE = ("text", "image", "audio", "tokens")         # input_column: the task's first
_LABEL_ROLE = ("label", "answers", "transcript", "target", "mask", "depth", "keypoints", "boxes")


def task_metrics(task: str) -> TaskMetrics:
    return EVAL[task]


def verdict_metric(task: str, metric: str | None) -> str:
    """The metric the verdict is on: `eval.metric`, checked against what the task reports."""
    tm = EVAL[task]
    if metric is None:
        return tm.metrics[0]
    if metric not in tm.metrics:
        raise ConfigError(f"eval.metric: {task} reports {', '.join(tm.metrics)}, not "
                          f"{metric!r}; set eval.metric to one of them (or null)")
    return metric


def roles(task: str, columns: dict[str, str]) -> dict[str, str]:
    """`eval.dataset.columns` as task roles (winml-cli names mapped), sorted; a role the task
    does not read is one error line."""
    tm = EVAL[task]
    out: dict[str, str] = {}
    for name, column in columns.items():
        role = _role_of(name, tm)
        if role not in tm.roles:
            raise ConfigError(f"eval.dataset.columns.{name}: {task} reads "
                              f"{', '.join(tm.roles)}, not {role}; map those roles to the "
                              "dataset's columns")
        out[role] = column
    return dict(sorted(out.items()))


def _role_of(name: str, tm: TaskMetrics) -> str:
    if name in WINML_COLUMNS:
        return WINML_COLUMNS[name]
    if name == "input_column":
        return next(r for r in (*tm.roles, "text") if r in _INPUT_ROLE)
    if name in ("label_column", "annotation_column"):
        return next((r for r in tm.roles if r in _LABEL_ROLE), "label")
    return name


_KIND = {"file": "local file", "folder": "local folder", "saved": "save_to_disk folder",
         "hub_cache": "cached hub dataset"}


def summary(params: dict[str, Any]) -> str:
    """An eval step's data in words, as the plan shows it: where the rows come from (and the
    subset, split, how many and in which order), what they are scored against, the digest of
    local data."""
    task, kind, where = params["task"], params["dataset_kind"], params["dataset"]
    n = params["samples"]
    if kind == "shipped":
        roles = EVAL[task].roles
        what = "photographs" if "image" in roles else "synthesized speech" if "audio" in roles \
            else "sentence pairs" if "text_pair" in roles else "sentences"
        truth = "the masked words as labels" if task == "fill-mask" else \
            "no labels: agreement with PyTorch's predictions"
        return f"{n} of the shipped {what} ({truth})"
    subset = f" ({params['dataset_name']})" if params.get("dataset_name") else ""
    if kind == "symbolic":
        return (f"{where}{subset}, not available on this machine (its key holds its name, not "
                f"its content; the eval step fails until it is saved locally): {_rows(params)}")
    digest = params["dataset_digest"]
    shown = f"; digest {digest[:12]}" if len(digest) == 64 else ""
    return f"{_KIND.get(kind, kind)} {where}{subset}: {_rows(params)}{shown}"


def _rows(params: dict[str, Any]) -> str:
    """Which rows and columns are read, and what they are scored against."""
    split = f"split {params['split']}" if params.get("split") else "the file" \
        if params["dataset_kind"] == "file" else "split test (else validation, else the first)"
    order = f"shuffled with seed {params['seed']}, " if params.get("shuffle") else ""
    columns = params.get("columns") or {}
    mapped = f"; columns {', '.join(f'{r}={c}' for r, c in columns.items())}" if columns else ""
    truth = [columns[r] for r in EVAL[params["task"]].truth if r in columns]
    roles = " or ".join(EVAL[params["task"]].truth)
    scored = f"labels from {', '.join(truth)}" if truth else \
        "no label column in the data: agreement with PyTorch's predictions" \
        if params.get("columns_checked") and roles else \
        f"labels from a {roles} column if it has one (found by name), else agreement with " \
        "PyTorch's predictions" if roles else "agreement with PyTorch's predictions"
    return f"{order}first {params['samples']} rows of {split}{mapped}; {scored}"


def gate(params: dict[str, Any]) -> str:
    """The accuracy an eval step promises: its verdict metric's largest drop against PyTorch."""
    metric = params["metric"]
    worse = "rise" if metric in EVAL[params["task"]].lower_is_better else "drop"
    return (f"{metric} ({params['task']}) of the deliverable on {params['ep']} may {worse} at "
            f"most {params['max_drop']:g} against PyTorch, else the run fails")
