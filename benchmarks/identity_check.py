"""Identity check: two checkouts of modelplan plan and build the same things, byte for byte.

A change that must not change behaviour (a refactor, a move of modules) is checked by running
the same cases with a baseline checkout and a candidate checkout and comparing what each wrote:

* the plan, as text (`modelplan plan`) and as JSON (`plan --format json`), exactly;
* for runs, every store entry by key: the set of keys, each entry's manifest (without the
  times it records) and each of its files' SHA-256; the weight blob pool, the elision proofs
  and the lock names; the folder the run publishes to (`--outputs`, or `--sweep-dir` for a
  sweep) file by file; the stable part of the run records.

Known to vary between two runs of the same code, hence compared in part only:

* the EPContext payload of a compiled model: any `.onnx` file with an `EPContext` node (the
  compile step's `model.onnx` with `embed_context: true`, a `*_ctx.onnx` without it, and the
  published deliverable) is compared as its graph with each EPContext node's
  `ep_cache_context` attribute emptied and the ORT partition hash in its node name and
  `partition_name` replaced (ORT derives it per session); a context binary beside it (`*.bin`,
  with `embed_context: false`, or any file an EPContext node of the entry names in its
  `ep_cache_context` with `embed_mode: 0`) by its name only. The manifest gives their
  digests, which are left out of the manifest comparison too, and so do run records (below).
  A causal LM's share_context step (its `prefill_ctx.onnx`, `decode_ctx.onnx` and the one
  binary they share, `prefill_ctx_qnn.bin`, copied into the bundle's `device/`) needs this:
  it compiles copies staged in its build's temporary folder, whose name has the pid and a
  random part, ORT's partition hash is derived from the model's path, and the binary embeds
  the hash (measured: nothing else differs; its size, `binary_bytes`, is padded to 4 KiB and
  stays the same);
* a manifest's `created` time and `verified` stamps (size, mtime, inode);
* run records (`run.json`, `<store>/runs/*.json`, a sweep's `sweep.json`): times, run ids,
  peak memory, workers and per-module times vary; each step's id, op, key, action, planned
  action, status, error, proof check, output names, digests (a compile or share_context
  step's by name only, elsewhere without those of the EPContext models and context binaries
  found in either store) and metrics (perf's as below) are compared, with the names of its
  fields, the record's status, overrides and deliverable;
* perf, which measures this machine and is not cacheable (its outputs are in the published
  folder under `perf/`, not in the store): its metrics are compared without the values of keys
  that name a measurement (with the word ms, cycles, percent or latency, e.g. `self_ms`,
  `total_cycles`, `coverage_percent`, `latency_ms_p90`; and `session_s`), so the EP, the
  iteration counts, node counts, module tags and the profile's structure are compared;
  a QNN profile CSV without its timestamp and time columns. A sweep's results table is
  compared without `latency_ms_median`, and without `size_bytes` of compiled deliverables;
* the store's ONNX Runtime session cache (`session_cache/`, not a store entry): its slots are
  named by a model's path and mtime, so the sorted list of (file name, SHA-256) across slots
  is compared; the writer's pid, which the name of an optimized model's external data file
  keeps (`optimized.<pid>.data`; `.writing.<pid>.onnx.data` before), is masked in names and
  in the model's data locations; `tmp/`, `leases/` and `quarantine/` by their number of
  files;
* the model card (`README.md` in the published folder): its line naming the run (`run
  <run id>`, its start time) is compared with both masked; the card of a run with perf (a
  `perf/` folder beside it) is compared with every number masked and its lines sorted, as it
  repeats perf's measurements (latency, the per-module time tables, whose rows are in order
  of time, the sizes of the perf files); its other figures come from `run.json` and
  `metrics.json`, compared as above.

Absolute paths are written into plans (a `--store` path is part of the config digest) and run
records, so each side runs at the same path, `<workdir>/<case>/live`, which is then renamed to
`<workdir>/<case>/<side>`: the stores are fresh and separate, the paths the same.

Cases (`--cases`, comma-separated; default: all, run one after another):

  default   `modelplan run` as it is: the packaged MiniLM for QNN HTP, w8a16_pc, verify, perf
  cpu       model=tiny_bert target=cpu verify=none perf=none
  htp       model=tiny_bert target=qnn_htp verify=none perf=none
  sweep     run -m model=tiny_bert quant=w8a8,w8a16 target=cpu,qnn_htp verify=none perf=none
  ray       model=tiny_bert target=cpu verify=none perf=none executor=ray (a Ray of the run's own)

Generation builds (model=tiny_random, verify on so verify_generation runs, perf=none; w8a16_pc):
  llama_cpu    model_type=llama export.shapes.prefill_length=8 context_length=32 target=cpu
  llama_htp    the same for target=qnn_htp
  whisper_cpu  model_type=whisper target=cpu (the cached decoder, its default)
  whisper_htp  the same for target=qnn_htp with export.shapes.decoder_sequence_length=8
  blip_cpu     model_type=blip model.task=image-to-text target=cpu (a captioner, cached decoder)

Each checkout is run with the same Python (`--python`, default this one) as
`python -m planner.cli.main` (or `python -m planner.cli` in the layout before
planner/cli/ became a package), with `PYTHONPATH=<checkout>` and the checkout as working
directory; the script first checks that `planner` and `executors` import from the checkout.
`DIR@REV` runs git revision REV of the repository at DIR, exported with `git archive` into
the work dir (a checkout whose working tree has edits under way is then left out of it).

Run:
  python benchmarks/identity_check.py --baseline ../baseline [--candidate .] [--cases cpu,htp]
      [--workdir DIR] [--keep] [--python PY]

Prints one row per case and comparison (identical, or differs with the first difference) and
exits 1 if anything differs or a command fails. The work dir (stores, published folders, each
side's plans and command log) is removed at the end unless `--keep` is given or something
differs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model=tiny_bert"]
QUIET = ["verify=none", "perf=none"]


def tiny(model_type: str) -> list[str]:
    """A tiny random-weight model of a type (planner/models/tiny.py)."""
    return ["model=tiny_random", f"model.random_init.model_type={model_type}"]


# a causal LM at the shapes tests/integration/test_text_generation.py builds it with
LM = [*tiny("llama"), "export.shapes.prefill_length=8", "export.shapes.context_length=32"]
# verify on (cosine, with verify_generation), no perf, no eval
GEN = ["quant=w8a16_pc", "verify=cosine", "eval=none", "perf=none"]


@dataclass(frozen=True)
class Case:
    name: str
    overrides: list[str]
    multirun: bool = False
    what: str = ""


CASES = [
    Case("default", [], what="modelplan run as it is (MiniLM, qnn_htp, w8a16_pc, verify, perf)"),
    Case("cpu", [*TINY, "target=cpu", *QUIET], what="tiny_bert for cpu"),
    Case("htp", [*TINY, "target=qnn_htp", *QUIET], what="tiny_bert for qnn_htp"),
    Case("sweep", [*TINY, "quant=w8a8,w8a16", "target=cpu,qnn_htp", *QUIET], multirun=True,
         what="4-job sweep: quant=w8a8,w8a16 x target=cpu,qnn_htp"),
    Case("ray", [*TINY, "target=cpu", *QUIET, "executor=ray"], what="tiny_bert for cpu on Ray"),
    Case("llama_cpu", [*LM, "target=cpu", *GEN], what="tiny llama for cpu, verify_generation"),
    Case("llama_htp", [*LM, "target=qnn_htp", *GEN],
         what="tiny llama for qnn_htp, verify_generation"),
    Case("whisper_cpu", [*tiny("whisper"), "target=cpu", *GEN],
         what="tiny whisper (cached decoder) for cpu, verify_generation"),
    Case("whisper_htp", [*tiny("whisper"), "export.shapes.decoder_sequence_length=8",
                         "target=qnn_htp", *GEN],
         what="tiny whisper (cached decoder, 8 slots) for qnn_htp, verify_generation"),
    Case("blip_cpu", [*tiny("blip"), "model.task=image-to-text", "target=cpu", *GEN],
         what="tiny BLIP captioner (cached decoder) for cpu, verify_generation"),
]

# A Ray of the run's own: no telemetry, loopback only, a token of this check's own.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex}

# Store layout (planner/core/storelayout.py, executors/store/weights.py)
MANIFEST, POOL, SESSION_CACHE = "manifest.json", "blobs", "session_cache"
MANIFEST_VARIES = ("created", "verified")
COUNTED = ("tmp", "leases", "quarantine")
RUN_RECORDS = {"run.json"}
PERF_DIR = "perf"
# perf metrics: a key with one of these words names a measurement of this machine
MEASURED = re.compile(r"(^|_)(ms|cycles|percent|latency|session_s)(_|$)")
# ORT names an EPContext node <EP>_<EP>_<hash>_<n>_<m>; the hash is per session
PARTITION_HASH = re.compile(r"_\d+(_\d+_\d+)$")
PROFILE_VARIES = ("Msg Timestamp", "Time")
# the session cache names an optimized model's external data for its writer:
# optimized.<pid>.data (before: its temporary name, .writing.<pid>.onnx.data)
WRITER_PID = re.compile(r"((?:\.writing|^optimized)\.)\d+(\.)")
RESULTS_VARIES = ("latency_ms_median",)
# ops whose outputs are EPContext models and context binaries (binaries: compared by name)
COMPILES = ("compile", "share_context")
# the model card names its run: "Built by modelplan (run `<run id>`, <start time>)"
CARD = "README.md"
CARD_RUN = re.compile(r"(Built by modelplan \(run )`[^`]*`, [^)]*\)")
NUMBER = re.compile(r"\d+(\.\d+)?")


# -- running a checkout ------------------------------------------------------------------------
@dataclass
class Side:
    label: str          # baseline | candidate
    spec: str           # as given: DIR or DIR@REV
    path: Path          # the code that runs
    module: str = ""    # planner.cli.main or planner.cli
    describe: str = ""  # commit and state, for the report

    def env(self) -> dict[str, str]:
        return {**os.environ, **RAY_ENV, "PYTHONPATH": str(self.path),
                "PYTHONDONTWRITEBYTECODE": "1"}


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def prepare(label: str, spec: str, work: Path, python: str) -> Side:
    """The code a side runs: a directory, or a git revision of one exported into `work`."""
    where, _, rev = spec.partition("@")
    repo = Path(where).resolve()
    if not repo.is_dir():
        sys.exit(f"--{label}: {repo} is not a directory")
    if rev:
        commit = git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
        if not commit:
            sys.exit(f"--{label}: {rev} is not a revision of {repo}")
        path = work / "src" / f"{label}-{commit[:12]}"
        if not path.is_dir():
            tar = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                                 capture_output=True, check=True).stdout
            with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
                tf.extractall(path, filter="data")
        describe = f"{commit[:12]} (git archive of {repo})"
    else:
        path = repo
        commit = git(repo, "rev-parse", "HEAD")
        dirty = git(repo, "status", "--porcelain")
        describe = f"{commit[:12] or 'no git'}{' + uncommitted changes' if dirty else ''} ({repo})"
    side = Side(label, spec, path, describe=describe)
    side.module = "planner.cli.main" if (path / "planner" / "cli" / "main.py").is_file() \
        else "planner.cli"
    probe = ("import planner, executors, conf, schemas; "
             "print('\\n'.join(m.__file__ for m in (planner, executors, conf, schemas)))")
    out = subprocess.run([python, "-c", probe], cwd=path, env=side.env(), capture_output=True,
                         text=True, check=False)
    files = out.stdout.split()
    if out.returncode != 0 or not all(Path(f).resolve().is_relative_to(path) for f in files):
        sys.exit(f"--{label}: the packages do not import from {path}:\n{out.stdout}{out.stderr}")
    return side


def cli(side: Side, python: str, args: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    """`modelplan ARGS` with this side's code; stdout and stderr are kept in `log`."""
    t0 = time.perf_counter()
    out = subprocess.run([python, "-m", side.module, *args], cwd=side.path, env=side.env(),
                         capture_output=True, text=True, check=False)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"$ modelplan {' '.join(args)}\n# exit {out.returncode} in "
                 f"{time.perf_counter() - t0:.1f} s\n{out.stdout}\n# stderr\n{out.stderr}\n")
    return out


@dataclass
class Outcome:
    """What one side did for one case, at its final place."""

    dir: Path
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def store(self) -> Path:
        return self.dir / "store"

    @property
    def published(self) -> Path:
        return self.dir / "published"


def run_case(case: Case, side: Side, python: str, work: Path) -> Outcome:
    """Plan (text, JSON) and run `case` with `side`'s code at <work>/<case>/live, then move
    it to <work>/<case>/<side>."""
    live, final = work / case.name / "live", work / case.name / side.label
    for old in (live, final):
        if old.exists():
            shutil.rmtree(old)
    live.mkdir(parents=True)
    store, published = live / "store", live / "published"
    log = live / "commands.log"
    multi = ["-m"] if case.multirun else []
    errors = []
    t0 = time.perf_counter()
    for fmt, name in (([], "plan.txt"), (["--format", "json"], "plan.json")):
        out = cli(side, python, ["plan", *multi, *case.overrides, *fmt, "--store", str(store)],
                  log)
        (live / name).write_text(out.stdout)
        if out.returncode != 0:
            errors.append(f"plan {' '.join(fmt)} exited {out.returncode}: {_tail(out.stderr)}")
    where = ["--sweep-dir", str(published)] if case.multirun else ["--outputs", str(published)]
    print(f"  {side.label}: running {case.name} ...", flush=True)
    out = cli(side, python, ["run", *multi, *case.overrides, "--store", str(store), *where,
                             "--quiet"], log)
    (live / "run.txt").write_text(out.stdout)
    if out.returncode != 0:
        errors.append(f"run exited {out.returncode}: {_tail(out.stderr)}")
    seconds = time.perf_counter() - t0
    live.rename(final)
    return Outcome(final, errors, seconds)


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


# -- comparing --------------------------------------------------------------------------------
class Differs(Exception):
    """The first difference found."""


_hashes: dict[tuple[int, int], str] = {}


def sha256(path: Path) -> str:
    """A file's SHA-256 (once per inode: the store hard-links blobs)."""
    st = path.stat()
    ident = (st.st_dev, st.st_ino)
    if ident not in _hashes:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        _hashes[ident] = h.hexdigest()
    return _hashes[ident]


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) \
        if root.is_dir() else []


def same_set(what: str, a: list[str] | set[str], b: list[str] | set[str]) -> None:
    sa, sb = set(a), set(b)
    if sa != sb:
        only_a, only_b = sorted(sa - sb), sorted(sb - sa)
        raise Differs(f"{what}: {len(only_a)} only in baseline {_few(only_a)}, "
                      f"{len(only_b)} only in candidate {_few(only_b)}")


def _few(items: list[str]) -> str:
    return "[" + ", ".join(items[:3]) + (", ..." if len(items) > 3 else "") + "]"


def same_value(what: str, a: Any, b: Any, path: str = "") -> None:
    """Equal JSON-like values; the first differing path otherwise."""
    if isinstance(a, dict) and isinstance(b, dict):
        same_set(f"{what}{path or ''}: keys", list(a), list(b))
        for k in sorted(a):
            same_value(what, a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            raise Differs(f"{what}{path}: {len(a)} items vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_value(what, x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        raise Differs(f"{what}{path}: {_short(a)} vs {_short(b)}")


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def same_text(what: str, a: str, b: str) -> None:
    if a == b:
        return
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb, strict=False)):
        if x != y:
            raise Differs(f"{what} line {i + 1}: {x.strip()[:50]!r} vs {y.strip()[:50]!r}")
    raise Differs(f"{what}: {len(la)} lines vs {len(lb)}")


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


# EPContext models and context binaries
def has_epcontext(path: Path) -> bool:
    return path.suffix == ".onnx" and any(n.op_type == "EPContext" for n in _graph(path).node)


def _graph(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def masked_onnx(path: Path) -> str:
    """The SHA-256 of a model with each EPContext node's payload emptied and its per-session
    partition hash replaced; the rest of the graph, its metadata and attributes as they are."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for node in model.graph.node:
        if node.op_type != "EPContext":
            continue
        node.name = PARTITION_HASH.sub(r"_#\1", node.name)
        for attr in node.attribute:
            if attr.name == "ep_cache_context":
                attr.s = b""
            elif attr.name == "partition_name":
                attr.s = PARTITION_HASH.sub(r"_#\1", attr.s.decode()).encode()
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def is_context_binary(rel: str, op: str | None, named: set[str]) -> bool:
    """A compile step's `.bin`, or a file an EPContext node of the entry names."""
    return (op in COMPILES and rel.endswith(".bin")) or rel in named


def named_binaries(entry: Path, names: list[str]) -> set[str]:
    """The files (relative to `entry`) that the EPContext nodes of its models name as their
    context binary (`embed_mode` 0)."""
    import onnx

    out = set()
    for rel in names:
        if not rel.endswith(".onnx"):
            continue
        for node in _graph(entry / rel).node:
            if node.op_type != "EPContext":
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
                     if a.name in ("embed_mode", "ep_cache_context")}
            if attrs.get("embed_mode", 1) == 0 and attrs.get("ep_cache_context"):
                out.add((Path(rel).parent / attrs["ep_cache_context"].decode()).as_posix())
    return out


# the SHA-256 of every EPContext model and context binary in the stores compared (run records
# give these files' digests; see note_compiled)
COMPILED: set[str] = set()


def note_compiled(store: Path) -> None:
    """Add the digests of `store`'s EPContext models and context binaries to COMPILED."""
    for key in sorted(_entries(store)):
        entry = store / key[:2] / key
        names = files_under(entry)
        named, op = named_binaries(entry, names), _op(entry)
        for rel in names:
            path = entry / rel
            if is_context_binary(rel, op, named) or (path.suffix == ".onnx"
                                                     and has_epcontext(path)):
                COMPILED.add(sha256(path))


def perf_view(value: Any) -> Any:
    """perf metrics without the values that measure this machine."""
    if isinstance(value, dict):
        return {k: "<measured>" if MEASURED.search(k) else perf_view(v) for k, v in value.items()}
    if isinstance(value, list):
        return [perf_view(v) for v in value]
    return value


def run_record_view(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a run record that two runs of the same plan share."""
    steps = []
    for s in record.get("steps", []):
        view = {k: s.get(k) for k in ("id", "op", "key", "action", "planned_action", "status",
                                      "error", "proof_check")}
        view["keys"] = sorted(s)
        view["quarantined"] = s.get("quarantined") is not None
        view["outputs"] = sorted(s.get("outputs") or {})
        view["digests"] = sorted(s.get("digests") or {}) if s.get("op") in COMPILES \
            else {rel: "<compiled>" if d in COMPILED else d
                  for rel, d in (s.get("digests") or {}).items()}
        view["metrics"] = perf_view(s.get("metrics")) if s.get("op") == "perf" \
            else s.get("metrics")
        steps.append(view)
    top = {k: record.get(k) for k in ("format_version", "status", "executor", "overrides",
                                      "deliverable", "error")}
    return {**top, "keys": sorted(record), "steps": steps}


# one comparison: a row of the table
@dataclass
class Row:
    case: str
    compared: str
    result: str = "identical"
    detail: str = ""

    @property
    def differs(self) -> bool:
        return self.result != "identical"


def check(case: str, compared: str, fn: Callable[[], str]) -> Row:
    try:
        return Row(case, compared, detail=fn())
    except Differs as exc:
        return Row(case, compared, "differs", str(exc))
    except (OSError, ValueError, KeyError) as exc:  # missing or unreadable output
        return Row(case, compared, "differs", f"{type(exc).__name__}: {exc}")


def compare_plan(a: Outcome, b: Outcome, name: str) -> str:
    same_text(name, (a.dir / name).read_text(), (b.dir / name).read_text())
    text = (a.dir / name).read_text()
    if not text.strip():
        raise Differs(f"{name}: empty on both sides")
    return f"{len(text.splitlines())} lines"


def compare_store(a: Path, b: Path) -> str:
    """Every entry by key: its manifest and files (EPContext payloads masked)."""
    keys_a, keys_b = _entries(a), _entries(b)
    same_set("store entries", keys_a, keys_b)
    files = masked = raw_same = 0
    for key in sorted(keys_a):
        ea, eb = a / key[:2] / key, b / key[:2] / key
        names_a, names_b = files_under(ea), files_under(eb)
        same_set(f"entry {key[:12]} files", names_a, names_b)
        op = _op(ea)
        named = named_binaries(ea, names_a) | named_binaries(eb, names_b)
        varies: set[str] = set()
        for rel in names_a:
            if rel == MANIFEST:
                continue
            files += 1
            pa, pb = ea / rel, eb / rel
            if is_context_binary(rel, op, named) or (pa.suffix == ".onnx" and has_epcontext(pa)):
                varies.add(rel)
                masked += 1
                raw_same += sha256(pa) == sha256(pb)
                if pa.suffix == ".onnx" and masked_onnx(pa) != masked_onnx(pb):
                    raise Differs(f"entry {key[:12]} ({op}) {rel}: the graph differs "
                                  "(EPContext payload masked)")
            elif sha256(pa) != sha256(pb):
                raise Differs(f"entry {key[:12]} ({op}) {rel}: sha256 differs")
        ma, mb = (_manifest_view(e / MANIFEST, varies) for e in (ea, eb))
        same_value(f"entry {key[:12]} ({op}) manifest", ma, mb)
    return (f"{len(keys_a)} entries, {files} files: {files - masked} by sha256, {masked} "
            f"EPContext model(s)/binaries masked ({raw_same} byte-identical too)")


def _entries(root: Path) -> set[str]:
    return {p.name for p in root.glob("[0-9a-f][0-9a-f]/*") if p.is_dir()}


def _op(entry: Path) -> str | None:
    try:
        return load_json(entry / MANIFEST).get("op")
    except (OSError, ValueError):
        return None


def _manifest_view(path: Path, varies: set[str]) -> dict[str, Any]:
    manifest = load_json(path)
    for k in MANIFEST_VARIES:
        manifest.pop(k, None)
    manifest["files"] = {rel: "<varies>" if rel in varies else digest
                         for rel, digest in manifest.get("files", {}).items()}
    return manifest


def compare_store_rest(a: Path, b: Path) -> str:
    """What a store holds besides its entries: the blob pool, proofs, locks, the session
    cache, run records (their stable part), and leftovers."""
    same_set("store top level", [p.name for p in a.iterdir()], [p.name for p in b.iterdir()])
    same_set("blob pool", files_under(a / POOL), files_under(b / POOL))
    for rel in files_under(a / POOL):
        if sha256(a / POOL / rel) != sha256(b / POOL / rel):
            raise Differs(f"blob {rel}: sha256 differs")
    for sub in ("proofs", "locks"):
        same_set(sub, files_under(a / sub), files_under(b / sub))
    for rel in files_under(a / "proofs"):
        if sha256(a / "proofs" / rel) != sha256(b / "proofs" / rel):
            raise Differs(f"proofs/{rel}: sha256 differs")
    cache_a, cache_b = session_cache_view(a), session_cache_view(b)
    if cache_a != cache_b:
        names_a, names_b = [n for n, _ in cache_a], [n for n, _ in cache_b]
        if names_a != names_b:
            raise Differs(f"session cache: {names_a} vs {names_b}")
        first = next(x for x, y in zip(cache_a, cache_b, strict=True) if x != y)
        raise Differs(f"session cache {first[0]}: content differs")
    for sub in COUNTED:
        na, nb = len(files_under(a / sub)), len(files_under(b / sub))
        if na != nb:
            raise Differs(f"{sub}/: {na} files vs {nb}")
    runs_a, runs_b = (sorted((s / "runs").glob("*.json")) for s in (a, b))
    if len(runs_a) != len(runs_b):
        raise Differs(f"runs/: {len(runs_a)} run records vs {len(runs_b)}")
    views_a = sorted(json.dumps(run_record_view(load_json(p)), sort_keys=True) for p in runs_a)
    views_b = sorted(json.dumps(run_record_view(load_json(p)), sort_keys=True) for p in runs_b)
    for va, vb in zip(views_a, views_b, strict=True):
        same_value("store run record", json.loads(va), json.loads(vb))
    return (f"{len(files_under(a / POOL))} blobs, {len(files_under(a / 'proofs'))} proofs, "
            f"{len(cache_a)} session-cache files, {len(runs_a)} run records (stable part)")


def session_cache_view(store: Path) -> list[tuple[str, str]]:
    """The ONNX Runtime session cache's files across its slots (named by a model's path and
    mtime): (name, digest), the writer's pid in a name and in an external-data location
    replaced."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    out = []
    for path in (store / SESSION_CACHE).rglob("*"):
        if not path.is_file():
            continue
        digest = sha256(path)
        if path.suffix == ".onnx":
            model = onnx.load(str(path), load_external_data=False)
            for tensor in _get_all_tensors(model):
                for entry in tensor.external_data:
                    if entry.key == "location":
                        entry.value = WRITER_PID.sub(r"\1<pid>\2", entry.value)
            digest = hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
        out.append((WRITER_PID.sub(r"\1<pid>\2", path.name), digest))
    return sorted(out)


def compare_published(a: Path, b: Path) -> str:
    """The folder a run publishes to (or a sweep's folder), file by file."""
    names_a, names_b = files_under(a), files_under(b)
    if not names_a:
        raise Differs(f"{a}: nothing published")
    same_set("published files", names_a, names_b)
    notes: dict[str, int] = {}
    for rel in names_a:
        how = _compare_published_file(a, b, rel)
        notes[how] = notes.get(how, 0) + 1
    return ", ".join(f"{n} {how}" for how, n in sorted(notes.items()))


def _compare_published_file(a: Path, b: Path, rel: str) -> str:
    pa, pb = a / rel, b / rel
    name, parts = pa.name, Path(rel).parts
    if name in RUN_RECORDS:
        same_value(rel, run_record_view(load_json(pa)), run_record_view(load_json(pb)))
        return "run records (stable part)"
    if name == "sweep.json":
        same_value(rel, _sweep_view(load_json(pa)), _sweep_view(load_json(pb)))
        return "sweep records (stable part)"
    if name in ("results.json", "results.csv"):
        same_value(rel, _results_view(pa), _results_view(pb))
        return "sweep results (no latency, no compiled size)"
    if PERF_DIR in parts[:-1] and pa.suffix == ".json":
        same_value(rel, perf_view(load_json(pa)), perf_view(load_json(pb)))
        return "perf metrics (no measurements)"
    if PERF_DIR in parts[:-1] and pa.suffix == ".csv":
        same_value(rel, _profile_view(pa), _profile_view(pb))
        return "perf profiles (no times)"
    if name == "metrics.json" and PERF_DIR not in parts:
        ma, mb = load_json(pa), load_json(pb)
        for m in (ma, mb):
            if PERF_DIR in m:
                m[PERF_DIR] = perf_view(m[PERF_DIR])
        same_value(rel, ma, mb)
        return "step metrics (perf's without measurements)"
    if name == CARD:
        measured = (pa.parent / PERF_DIR).is_dir()
        same_text(rel, _card_view(pa, measured), _card_view(pb, measured))
        return "model cards (run named" + (", numbers masked, lines sorted)" if measured
                                           else ")")
    if pa.suffix == ".onnx" and has_epcontext(pa):
        if masked_onnx(pa) != masked_onnx(pb):
            raise Differs(f"{rel}: the graph differs (EPContext payload masked)")
        return "EPContext models (payload masked)"
    if pa.suffix == ".bin":
        return "context binaries (name only)"
    if sha256(pa) != sha256(pb):
        raise Differs(f"{rel}: sha256 differs")
    return "by sha256"


def _card_view(path: Path, measured: bool) -> str:
    """A model card without its run id and start time (and, after perf, its numbers, its
    lines sorted)."""
    text = CARD_RUN.sub(r"\1`<run id>`, <started>)", path.read_text())
    return "\n".join(sorted(NUMBER.sub("#", text).splitlines())) if measured else text


def _sweep_view(sweep: dict[str, Any]) -> dict[str, Any]:
    jobs = [{"index": j.get("index"), "overrides": j.get("overrides"), "status": j.get("status"),
             "error": j.get("error"),
             "record": run_record_view(j["record"]) if j.get("record") else None}
            for j in sweep.get("jobs", [])]
    return {"keys": sorted(sweep), "executor": sweep.get("executor"), "jobs": jobs,
            "steps": sweep.get("steps"), "rewrites": sweep.get("rewrites")}


def _results_view(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".csv":
        rows: list[dict[str, Any]] = list(csv.DictReader(path.open()))
    else:
        rows = load_json(path)
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k not in RESULTS_VARIES}
        artifact = Path(str(row.get("artifact") or ""))  # <sweep dir>/<job>/model.onnx
        here = path.parent / artifact.parent.name / artifact.name
        if artifact.suffix == ".onnx" and here.is_file() and has_epcontext(here):
            row["size_bytes"] = "<compiled>"
        out.append(row)
    return out


def _profile_view(path: Path) -> list[list[str]]:
    rows = list(csv.reader(path.open()))
    if not rows:
        return []
    keep = [i for i, col in enumerate(rows[0]) if col not in PROFILE_VARIES]
    return [[r[i] for i in keep if i < len(r)] for r in rows]


def compare_case(case: Case, a: Outcome, b: Outcome) -> list[Row]:
    COMPILED.clear()
    for side in (a, b):
        try:
            note_compiled(side.store)
        except (OSError, ValueError):  # an unreadable entry: the comparison says which
            pass
    rows = [check(case.name, "plan text", lambda: compare_plan(a, b, "plan.txt")),
            check(case.name, "plan JSON", lambda: compare_plan(a, b, "plan.json"))]
    for side in (a, b):
        for err in side.errors:
            rows.append(Row(case.name, f"commands ({side.dir.name})", "failed", err))
    rows += [check(case.name, "store entries", lambda: compare_store(a.store, b.store)),
             check(case.name, "store: pool, proofs, records",
                   lambda: compare_store_rest(a.store, b.store)),
             check(case.name, "published folder",
                   lambda: compare_published(a.published, b.published))]
    return rows


# -- main ---------------------------------------------------------------------------------------
def print_table(rows: list[Row]) -> None:
    headers = ("case", "compared", "result", "detail (first difference)")
    cells = [(r.case, r.compared, r.result, r.detail) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers[:3])]
    line = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    print(line.format(*headers))
    for c in cells:
        print(line.format(*c))


def args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, metavar="DIR[@REV]",
                   help="the checkout before the change (or a git revision of it)")
    p.add_argument("--candidate", default=str(ROOT), metavar="DIR[@REV]",
                   help="the checkout after the change (default: this checkout)")
    p.add_argument("--cases", default=",".join(c.name for c in CASES),
                   help=f"comma-separated, of: {', '.join(c.name for c in CASES)} (default: all)")
    p.add_argument("--workdir", metavar="DIR",
                   help="where stores and outputs go (default: a new temporary directory)")
    p.add_argument("--keep", action="store_true",
                   help="keep the stores and outputs (otherwise removed, unless something "
                   "differs)")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter both checkouts run with (default: this one)")
    return p


def selected(names: str) -> Iterator[Case]:
    by_name = {c.name: c for c in CASES}
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name not in by_name:
            sys.exit(f"--cases: unknown case {name!r} (cases: {', '.join(by_name)})")
        yield by_name[name]


def cleanup(work: Path, cases: list[Case], fresh: bool) -> None:
    """Remove what this check wrote: the whole work dir if it made it, else its cases."""
    if fresh:
        shutil.rmtree(work, ignore_errors=True)
        return
    for path in [work / "src", *(work / c.name for c in cases)]:
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = args_parser().parse_args(argv)
    cases = list(selected(args.cases))
    work = Path(args.workdir).resolve() if args.workdir else \
        Path(tempfile.mkdtemp(prefix="modelplan-identity-"))
    work.mkdir(parents=True, exist_ok=True)
    sides = [prepare("baseline", args.baseline, work, args.python),
             prepare("candidate", args.candidate, work, args.python)]
    for s in sides:
        print(f"{s.label:<9}  {s.describe}  [python -m {s.module}]")
    print(f"work dir   {work}\n")
    rows: list[Row] = []
    for case in cases:
        print(f"{case.name}: {case.what}", flush=True)
        outcomes = [run_case(case, s, args.python, work) for s in sides]
        print("  " + ", ".join(f"{s.label} {o.seconds:.0f} s"
                               for s, o in zip(sides, outcomes, strict=True)), flush=True)
        rows += compare_case(case, *outcomes)
    print()
    print_table(rows)
    bad = [r for r in rows if r.differs]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} comparisons identical"
          + (f"; {len(bad)} differ or failed" if bad else ""))
    if args.keep or bad:
        print(f"kept: {work} (<case>/<side>/: plan.txt, plan.json, run.txt, commands.log, "
              "store/, published/)")
    else:
        cleanup(work, cases, fresh=not args.workdir)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
