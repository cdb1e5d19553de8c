"""The GitHub Action: `modelplan review` (its command) writes the comment body; the action's
own shell step runs it as a workflow would; posting goes to a local stand-in for the GitHub
API (the real one is not reachable here) and updates one comment in place."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from planner.review.ghcomment import LIMIT, fit
from tests.conftest import ROOT, run_cli
from tests.teamconf import review_repo

CONFIGS = "model=our_model quant=ours optim=ours\n-m model=our_model quant=ours,w8a8\n"


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = review_repo(tmp_path / "project")
    (tmp_path / "configs.txt").write_text(CONFIGS)
    return root


def test_review_writes_one_comment_body(repo: Path) -> None:
    body = repo.parent / "body.md"
    result = run_cli("review", "--rev", "HEAD~1", "--config-dir", "conf", "--configs",
                     str(repo.parent / "configs.txt"), "-o", str(body), cwd=repo)
    assert result.returncode == 0, result.stderr
    md = body.read_text()
    assert md.startswith("## modelplan review\n\n2 config(s) reviewed: 2 with changes, "
                         "0 error(s).")
    assert md.count("### modelplan diff: `HEAD~1`") == 2
    assert "#### `model=our_model quant=ours optim=ours`" in md
    assert "| changed | `quantize` | activation_type: uint8 -> uint16" in md
    assert "no longer elided by idempotent-elision" in md
    assert md.count("<details><summary>Plan DAG at the head</summary>") == 3  # 1 + 2 jobs
    assert "~ quantize   activation_type: uint8 -> uint16" in result.stdout  # the job log


def test_a_bad_configs_line_is_in_the_body_and_fails(repo: Path) -> None:
    configs = repo.parent / "configs.txt"
    configs.write_text(CONFIGS + "quant=w8a9  # a typo\n")
    body = repo.parent / "body.md"
    result = run_cli("review", "--rev", "HEAD~1", "--config-dir", "conf", "--configs",
                     str(configs), "-o", str(body), cwd=repo)
    assert result.returncode == 2
    assert result.stderr.startswith("modelplan: error: quant=w8a9: quant: 'w8a9' is not one")
    assert "> **error:** quant: 'w8a9' is not one of" in body.read_text()
    configs.write_text("# nothing here\n")
    empty = run_cli("review", "--rev", "HEAD~1", "--config-dir", "conf", "--configs",
                    str(configs), cwd=repo)
    assert empty.returncode == 2 and "no configs in it" in empty.stderr


class FakeGitHub(BaseHTTPRequestHandler):
    """The three issue-comment endpoints of the GitHub REST API, in memory."""

    comments: ClassVar[list[dict[str, Any]]] = []
    calls: ClassVar[list[str]] = []
    status = 200

    def _reply(self, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _body(self) -> str:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))["body"]

    def do_GET(self) -> None:  # http.server's names
        self.calls.append(f"GET {self.path}")
        assert self.headers["Authorization"] == "Bearer t0ken"
        self._reply([] if "page=2" in self.path else self.comments)

    def do_POST(self) -> None:
        self.calls.append(f"POST {self.path}")
        n = len(self.comments) + 1
        self.comments.append({"id": n, "body": self._body(),
                              "html_url": f"https://github.invalid/pr/7#c{n}"})
        self._reply(self.comments[-1])

    def do_PATCH(self) -> None:
        self.calls.append(f"PATCH {self.path}")
        cid = int(self.path.rsplit("/", 1)[1])
        comment = next(c for c in self.comments if c["id"] == cid)
        comment["body"] = self._body()
        self._reply(comment)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def github(tmp_path: Path) -> Iterator[dict[str, str]]:
    FakeGitHub.comments = [{"id": 99, "body": "LGTM", "html_url": "x"}]
    FakeGitHub.calls, FakeGitHub.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    yield {"GITHUB_API_URL": f"http://127.0.0.1:{server.server_port}", "GITHUB_TOKEN": "t0ken",
           "GITHUB_REPOSITORY": "team/models", "GITHUB_EVENT_PATH": str(event)}
    server.shutdown()


def action_step(name: str) -> dict[str, Any]:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    return next(s for s in action["runs"]["steps"] if s.get("name", "").startswith(name))


def run_action_step(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The action's review step, as the runner runs it (bash -eo pipefail)."""
    step = action_step("Plan both revisions")
    runner = repo.parent / "runner"
    runner.mkdir(exist_ok=True)
    workflow = {"RUNNER_TEMP": str(runner), "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
                "GITHUB_OUTPUT": str(runner / "output.txt"), "BASE": "HEAD~1",
                "CONFIGS": CONFIGS, "CONFIG_DIR": "conf", "COMMENT_KEY": "",
                "MODELPLAN": str(Path(sys.executable).parent / "modelplan"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                          env={**workflow, **env}, cwd=repo, capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_action_step_posts_then_updates_one_comment(repo: Path,
                                                        github: dict[str, str]) -> None:
    first = run_action_step(repo, {**github, "COMMENT": "true"})
    assert first.returncode == 0, first.stderr
    runner = repo.parent / "runner"
    body = (runner / "modelplan-review.md").read_text()
    assert (runner / "summary.md").read_text() == body
    assert (runner / "output.txt").read_text() == f"body={runner / 'modelplan-review.md'}\n"
    assert "Review comment: https://github.invalid/pr/7#c2" in first.stdout
    posted = FakeGitHub.comments[-1]["body"]
    assert posted == f"<!-- modelplan-review -->\n{body}"
    (repo / "conf" / "optim" / "ours.yaml").write_text("name: ours\nflags: []\n")
    second = run_action_step(repo, {**github, "COMMENT": "true"})
    assert second.returncode == 0, second.stderr
    assert [c.split("?")[0] for c in FakeGitHub.calls] == [
        "GET /repos/team/models/issues/7/comments", "POST /repos/team/models/issues/7/comments",
        "GET /repos/team/models/issues/7/comments", "PATCH /repos/team/models/issues/comments/2"]
    assert len(FakeGitHub.comments) == 2 and "LGTM" == FakeGitHub.comments[0]["body"]
    assert "optim.flags" not in FakeGitHub.comments[1]["body"]  # the update shows the new head


def test_without_comment_the_step_only_writes_the_summary(repo: Path) -> None:
    result = run_action_step(repo, {"COMMENT": "false"})
    assert result.returncode == 0, result.stderr
    assert "Review comment" not in result.stdout
    assert (repo.parent / "runner" / "summary.md").read_text().startswith("## modelplan review")


def test_a_read_only_token_is_one_clear_line(repo: Path, github: dict[str, str]) -> None:
    FakeGitHub.status = 403
    result = run_action_step(repo, {**github, "COMMENT": "true"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        (f"modelplan: error: GitHub API GET {github['GITHUB_API_URL']}/repos/team/models/issues/7/"
        "comments?per_page=100&page=1: 403 Forbidden; give the workflow `permissions: "
        "pull-requests: write` (a pull request from a fork gets a read-only token)")]
    assert (repo.parent / "runner" / "summary.md").is_file()  # the review is still there


def test_the_action_installs_the_planning_core_from_its_own_checkout() -> None:
    install = action_step("Install the modelplan planning core")["run"]
    assert 'pip install --quiet "$GITHUB_ACTION_PATH"' in install and "[run]" not in install
    fetch = action_step("Fetch the base revision")["run"]
    assert 'git fetch --no-tags --depth=1 origin "$BASE"' in fetch


def test_the_docs_workflow_uses_the_action_as_it_is() -> None:
    readme = (ROOT / "docs" / "review.md").read_text()
    block = re.search(r"```yaml\n(# \.github/workflows/[^\n]+\n.*?)```", readme, re.DOTALL)
    assert block, "docs/review.md has no example workflow"
    workflow = yaml.safe_load(block.group(1))
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    uses = next(s for s in steps if "modelplan" in s.get("uses", ""))
    inputs = yaml.safe_load((ROOT / "action.yml").read_text())["inputs"]
    assert set(uses["with"]) <= set(inputs)
    assert {"pull-requests": "write"}.items() <= workflow["permissions"].items()


def test_a_long_body_drops_its_dags_first() -> None:
    dag = "<details><summary>Plan DAG at the head</summary>\n" + "x" * 40_000 + "</details>"
    body = fit(f"# review\n{dag}\n{dag}\nend\n")
    assert len(body) <= LIMIT and body.count("Plan DAG at the head") == 1 and "end" in body
    assert len(fit("y" * 100_000)) < LIMIT + 200
