"""The commands and code of the README and the docs site run as written.

The pages are README.md, then docs/*.md in the site's order (mkdocs.yml's nav). Every ```sh
block of those pages is split into commands (a trailing `\\` continues a line, `#`
starts a comment). Each `.venv/bin/modelplan` and `.venv/bin/modelplan-job` command runs, in
page order, in one workspace: a fresh directory (a git repository, so `diff --rev HEAD`
works) holding the example files the pages show as "`path`:" followed by a code block, with
`../shared/corpus/winml-recipes` beside it when the recipe corpus is here. The command must
exit 0, or the status its comment names (`# ... exit 1 ...`). A command is not run only by
one of the rules in `skip_reason` (it builds a real model, a sweep, on the HTP simulator or on
Ray; it installs or benchmarks), so a new cheap command that fails makes this test fail.

The Python blocks of "Running the deliverable" (docs/deliverables.md) run against real builds
of tiny_bert, for the CPU and for QNN HTP; the README's "Use what you built" runs against a
real MiniLM build: its pooling on a CPU build of fixed shapes, and (slow) as written on the
QNN HTP build `make run` makes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import minilm_store

ROOT = Path(__file__).resolve().parents[2]


def site_pages() -> list[Path]:
    """README.md, then the docs pages in the order of mkdocs.yml's nav."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [ROOT / "README.md", *(ROOT / "docs" / next(iter(e.values())) for e in nav)]


PAGES = site_pages()
TEXT = "\n\n".join(p.read_text() for p in PAGES)  # every page, in order
FRONT = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in PAGES[1:]}
PROGRAMS = {".venv/bin/modelplan": "planner.cli.main",
            ".venv/bin/modelplan-job": "planner.cli.hydra_app"}
TINY = "model=tiny_bert"
CORPUS = Path(os.environ.get("MODELPLAN_RECIPE_CORPUS")
              or ROOT.parent / "shared" / "corpus" / "winml-recipes")

# Commands that fail today because of a defect in modelplan, not in the README: the README says
# what they should do; each entry is the command as written and why it is not run.
KNOWN_DEFECTS: dict[str, str] = {}


@dataclass(frozen=True)
class Command:
    line: str          # as written, continuations joined
    argv: list[str]
    exit: int          # what the README says it exits with (0 unless its comment says)


def blocks(lang: str) -> list[tuple[str, str]]:
    """(the line before the block, the block's text) for each ```lang block."""
    found = re.finditer(r"(?:^|\n)([^\n]*)\n\n?```" + lang + r"\n(.*?)```", TEXT, re.DOTALL)
    return [(m.group(1).strip(), m.group(2)) for m in found]


def commands() -> list[Command]:
    out = []
    for _, text in blocks("sh"):
        joined = re.sub(r"\\\n\s*", " ", text)
        for line in joined.splitlines():
            if not line.strip():
                continue
            code, _, comment = line.partition(" #")
            status = re.search(r"\bexit (\d+)\b", comment)
            out.append(Command(line.strip(), shlex.split(code),
                               int(status.group(1)) if status else 0))
    return out


def example_files() -> dict[str, str]:
    """The files the README shows as "`path`:" (or "`path` (what it is):") before a block."""
    files = {}
    for lang in ("yaml", "text"):
        for before, text in blocks(lang):
            m = re.fullmatch(r"`([\w./-]+)`(?: \(.*\))?:", before)
            if m:
                files[m.group(1)] = text
    return files


def skip_reason(cmd: Command) -> str | None:
    """Why a command is not run, or None: the rules, in order."""
    argv = cmd.argv
    if argv[0] not in PROGRAMS:
        return f"{argv[0]}: not modelplan (make, pip and benchmarks install or measure)"
    if cmd.line in KNOWN_DEFECTS:
        return KNOWN_DEFECTS[cmd.line]
    builds = ((argv[0].endswith("modelplan-job") or argv[1] in ("run", "apply"))
              and not {"-h", "--help"} & set(argv))
    if builds and "executor=ray" in argv:
        return "starts Ray"
    if builds and ("-m" in argv or "--multirun" in argv):
        return "a sweep builds several models"
    if builds and argv[1] == "run" and TINY not in argv:
        return "builds a real model"
    if builds and any(a.startswith("target=qnn_htp") for a in argv):
        return "builds on the HTP simulator"
    if argv[1] == "review" and "--post" in argv:
        return "posts to GitHub"
    if any("../shared/corpus/" in a for a in argv) and not CORPUS.is_dir():
        return f"the recipe corpus is not at {CORPUS}"
    return None


COMMANDS = commands()


class Workspace:
    """Where the README's commands run, one after another in README order."""

    def __init__(self, root: Path) -> None:
        self.cwd = root / "work" / "project"
        self.cwd.mkdir(parents=True)
        for rel, text in example_files().items():
            (self.cwd / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.cwd / rel).write_text(text)
        if CORPUS.is_dir():
            link = root / "work" / "shared" / "corpus" / "winml-recipes"
            link.parent.mkdir(parents=True)
            link.symlink_to(CORPUS)
        git = ["git", "-C", str(self.cwd), "-c", "user.name=readme", "-c", "user.email=readme@test"]
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "the README's example files"], check=True)
        self.env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache"),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                os.environ.get("PYTHONPATH")]))}
        self.results: dict[int, subprocess.CompletedProcess[str]] = {}

    def run_through(self, index: int) -> subprocess.CompletedProcess[str]:
        """Run every runnable command up to `index` not yet run (later ones read what earlier
        ones wrote: plan.json, outputs/...), and return the result of command `index`."""
        for i, cmd in enumerate(COMMANDS[:index + 1]):
            if i in self.results or skip_reason(cmd):
                continue
            argv = [sys.executable, "-m", PROGRAMS[cmd.argv[0]], *cmd.argv[1:]]
            self.results[i] = subprocess.run(argv, cwd=self.cwd, env=self.env, text=True,
                                             capture_output=True, timeout=600, check=False)
        return self.results[index]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("readme"))


@pytest.mark.parametrize("index", range(len(COMMANDS)),
                         ids=[f"{i:02d} {c.line[:70]}" for i, c in enumerate(COMMANDS)])
def test_a_readme_command_runs_as_written(workspace: Workspace, index: int) -> None:
    cmd = COMMANDS[index]
    reason = skip_reason(cmd)
    if reason:
        pytest.skip(reason)
    done = workspace.run_through(index)
    assert done.returncode == cmd.exit, (
        f"{cmd.line}\nexit {done.returncode}, the README says {cmd.exit}\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    assert "Traceback" not in done.stderr


def test_every_command_is_written_for_a_fresh_clone() -> None:
    """After `make run`, each command runs from the clone: programs from `.venv/bin/`."""
    for cmd in COMMANDS:
        assert cmd.argv[0] == "make" or cmd.argv[0].startswith(".venv/bin/"), cmd.line
    assert [c.line.split("#")[0].strip() for c in COMMANDS[:2]] == ["make run", "make test"]
    assert any(not skip_reason(c) for c in COMMANDS)


def test_known_defects_name_commands_the_readme_has() -> None:
    lines = {c.line for c in COMMANDS}
    assert set(KNOWN_DEFECTS) <= lines, "a known defect names a command the README no longer has"


def test_the_coverage_table_keeps_its_markers() -> None:
    page = DOCS["configs.md"]  # benchmarks/coverage_bench.py --write-docs writes there
    begin, end = page.index("<!-- coverage:begin -->"), page.index("<!-- coverage:end -->")
    assert begin < end and TEXT.count("<!-- coverage:begin -->") == 1


def test_every_docs_page_is_in_the_site() -> None:
    """A page outside the nav would be neither built in order nor have its commands run."""
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md")) == sorted(DOCS)


def test_the_front_page_is_short_and_starts_with_the_two_commands() -> None:
    assert len(FRONT.splitlines()) < 200
    first = re.search(r"```sh\n(.*?)```", FRONT, re.DOTALL)
    assert first and [ln.split("#")[0].strip() for ln in first.group(1).splitlines()] == [
        "make run", "make test"]


# --- Running the deliverable ------------------------------------------------------------------

def deliverable_snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS["deliverables.md"], re.DOTALL)


@pytest.fixture(scope="module")
def delivered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny_bert built as the snippets name it: w8a8 for the CPU, w8a16_pc for QNN HTP."""
    work = tmp_path_factory.mktemp("deliverable")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for build in (("quant=w8a8", "target=cpu"), ("target=qnn_htp",)):
        done = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", TINY, *build,
                               "verify=none", "perf=none", "--store", str(work / "store"),
                               "--outputs", str(work / "outputs"), "--quiet"],
                              cwd=work, env=env, text=True, capture_output=True, timeout=900,
                              check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    return work


def run_python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, text=True, capture_output=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"{code}\n{done.stderr[-3000:]}"
    return done.stdout


def tiny_tokenizer(where: Path) -> Path:
    """A BERT tokenizer whose ids fit tiny_bert's 1,000-word vocabulary."""
    from transformers import BertTokenizer

    vocab = where / "vocab.txt"
    tokens = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "sentence", "to", "em", "##bed",
              ".")
    vocab.write_text("".join(f"{t}\n" for t in tokens))
    BertTokenizer(str(vocab)).save_pretrained(str(where / "tokenizer"))
    return where / "tokenizer"


def test_the_readme_loads_the_deliverable_on_cpu_and_on_htp(delivered: Path) -> None:
    cpu, tokenizer, htp = deliverable_snippets()
    assert 'providers=["CPUExecutionProvider"]' in cpu and "add_provider_for_devices" in htp
    shape = "\nprint(last_hidden_state.shape)\n"
    assert "(1, 128, 64)" in run_python(cpu + shape, delivered)
    checkpoint = f"checkpoint = {str(tiny_tokenizer(delivered))!r}\n"
    tokens = run_python(cpu + checkpoint + tokenizer + shape, delivered).split()
    assert re.fullmatch(r"\(2,\d+,64\)", "".join(tokens[-3:])), tokens  # free axes
    out = run_python(htp + shape + "print(session.get_providers())\n", delivered)
    assert "(1, 128, 64)" in out and "QNNExecutionProvider" in out


def test_the_htp_deliverable_does_not_load_with_providers_alone(delivered: Path) -> None:
    """Why the README registers the plugin library: `providers=[...]` cannot open EPContext."""
    code = ("import onnxruntime as ort\n"
            "try:\n"
            "    ort.InferenceSession('outputs/tiny_bert-w8a16_pc-qnn_htp/model.onnx',\n"
            "                         providers=['QNNExecutionProvider'])\n"
            "except Exception as exc:\n"
            "    print(exc)\n")
    assert "NOT_IMPLEMENTED" in run_python(code, delivered)


# --- Use what you built (the README's MiniLM) --------------------------------------------------

MINILM = "outputs/sentence-transformers--all-MiniLM-L6-v2-w8a16_pc-{target}"


def front_snippets() -> list[str]:
    section = FRONT.split("## Use what you built", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def build_minilm(work: Path, factory: pytest.TempPathFactory, *overrides: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    store = minilm_store(factory)  # the session's MiniLM builds share their steps
    done = subprocess.run([sys.executable, "-m", "planner.cli.main", "run", *overrides,
                           "verify=none", "perf=none", "--store", str(store), "--quiet"],
                          cwd=work, env=env, text=True, capture_output=True, timeout=1800,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def cosines(out: str) -> list[float]:
    last = out.strip().rsplit("[", 1)[1].split("]", 1)[0]
    return [float(x) for x in last.split()]


def test_the_readme_embeds_sentences_as_the_original_does_cpu(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The snippet's padding, pooling and normalization, on a CPU build of fixed shapes (what
    HTP runs), against the PyTorch original: only the session differs from the README's."""
    session, embed, check = front_snippets()
    assert "add_provider_for_devices" in session and MINILM.format(target="qnn_htp") in session
    work = tmp_path / "work"
    work.mkdir()
    build_minilm(work, tmp_path_factory, "target=cpu", "quant=w8a16_pc", "export.shapes.dynamic=false")
    cpu = ("import numpy as np\nimport onnxruntime as ort\n"
           f"folder = {MINILM.format(target='cpu')!r}\n"
           "session = ort.InferenceSession(f'{folder}/model.onnx', "
           "providers=['CPUExecutionProvider'])\n")
    out = run_python(cpu + embed + check, work)
    assert "[[1." in out.replace(" ", "")  # each sentence is most like itself
    assert min(cosines(out)) >= 0.99, out


@pytest.mark.slow
def test_the_readme_embeds_sentences_on_htp_as_written(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The snippets as written, on the build `make run` makes (HTP simulator)."""
    work = tmp_path / "work"
    work.mkdir()
    build_minilm(work, tmp_path_factory)
    out = run_python("".join(front_snippets()), work)
    assert min(cosines(out)) >= 0.99, out
