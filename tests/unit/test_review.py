"""`modelplan diff --rev BASE`: a real git repository with a team's configs, a committed
change, the plans at both revisions and their diff as text, Markdown and JSON; symbolic
source keys where a checkpoint cannot be read; shallow clones."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.teamconf import REVIEW_BASE, commit_all, git, review_repo, write_team_conf

BASE = REVIEW_BASE
REVIEW = ("--config-dir", "conf", "model=our_model", "quant=ours", "optim=ours")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return review_repo(tmp_path)


def test_diff_rev_names_the_changed_steps_and_the_reasons(repo: Path) -> None:
    result = run_cli("diff", "--rev", "HEAD~1", *REVIEW, cwd=repo)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("modelplan diff HEAD~1 (")
    assert "quant.activation_type: uint8 -> uint16" in out
    assert "optim.flags: [] -> ['gelu']" in out
    assert "~ quantize   activation_type: uint8 -> uint16" in out
    assert "~ optimize   flags: [] -> ['gelu']" in out
    assert "action: elided -> run (no longer elided by idempotent-elision)" in out
    assert "~ legalize   reads model: normalize -> optimize" in out
    assert "inserted by target-legalize: legalize{target=qnn_htp} inserted after optimize" in out
    assert out.rstrip().endswith("unchanged.")

    md = run_cli("diff", "--rev", "HEAD~1", *REVIEW, "--format", "md", cwd=repo).stdout
    assert md.startswith("### modelplan diff: `HEAD~1`")
    rows = {ln.split("|")[2].strip(): ln for ln in md.splitlines() if ln.startswith("| changed")}
    assert "activation_type: uint8 -> uint16" in rows["`quantize`"]
    assert "no longer elided by idempotent-elision" in rows["`optimize`"]
    assert "<details><summary>Plan DAG at the head</summary>" in md
    assert "```mermaid\nflowchart TD" in md


def test_working_tree_changes_are_the_head_and_nothing_is_touched(repo: Path) -> None:
    (repo / "conf" / "quant" / "ours.yaml").write_text(
        BASE["quant/ours.yaml"] + "per_channel: true\n")
    before = git(repo, "status", "--porcelain"), git(repo, "stash", "list")
    result = run_cli("diff", "--rev", "HEAD", *REVIEW, "--format", "json", cwd=repo)
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)["jobs"][0]
    assert {"path": "quant.per_channel", "old": False, "new": True} in job["diff"]["config"]
    assert {"path": "quant.weight_type", "old": "uint8", "new": "uint8"} not in \
        job["diff"]["config"]
    assert (git(repo, "status", "--porcelain"), git(repo, "stash", "list")) == before


def test_a_config_new_in_the_change_and_a_broken_head(repo: Path) -> None:
    write_team_conf(repo, {"model/our_vit.yaml": "defaults:\n  - tiny_bert\n  - _self_\n"
                                                 "name: our_vit\n"})
    new = run_cli("diff", "--rev", "HEAD", "--config-dir", "conf", "model=our_vit", cwd=repo)
    assert new.returncode == 0, new.stderr
    assert "base does not plan: model: 'our_vit' is not one of" in new.stdout
    assert "(every step is new)" in new.stdout and "+ resolve" in new.stdout

    write_team_conf(repo, {"quant/ours.yaml": "defaults:\n  - w8a8\n  - _self_\nname: ours\n"
                                              "per_channel: maybe\n"})
    out = repo / "review.md"
    broken = run_cli("diff", "--rev", "HEAD", *REVIEW, "--format", "md", "-o", str(out),
                     cwd=repo)
    assert broken.returncode == 2
    assert "> **head does not plan:** conf/quant/ours.yaml: quant.per_channel: 'maybe' is " \
           "not true or false" in out.read_text()
    assert "| removed |" not in out.read_text()
    assert broken.stderr.strip().splitlines() == [(
        "modelplan: error: model=our_model quant=ours optim=ours: conf/quant/ours.yaml: "
        "quant.per_channel: 'maybe' is not true or false")]


def test_mistakes_are_one_line(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    def one_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
        assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], result.stderr

    one_error(run_cli("diff", "--rev", "HEAD~1", *REVIEW, "quant=w8a9", cwd=repo),
              "quant: 'w8a9' is not one of")  # fails at both revisions: the command is wrong
    one_error(run_cli("diff", "--rev", "nope", *REVIEW, cwd=repo), "--rev nope: no such revision")
    one_error(run_cli("diff", "--rev", "HEAD", "model=tiny_bert", cwd=repo), "give --config-dir")
    elsewhere = write_team_conf(tmp_path_factory.mktemp("not-git"), BASE)
    one_error(run_cli("diff", "--rev", "HEAD", "--config-dir", str(elsewhere), cwd=repo),
              "is not in a git repository")
    one_error(run_cli("diff", "a.json", cwd=repo), "give two saved plans")


def test_sweeps_are_diffed_job_by_job(repo: Path) -> None:
    result = run_cli("diff", "--rev", "HEAD~1", "-m", "--config-dir", "conf", "model=our_model",
                     "quant=ours,w8a8", "optim=ours", "--format", "json", cwd=repo)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [j["overrides"] for j in data["jobs"]] == [
        ["model=our_model", "quant=ours", "optim=ours"],
        ["model=our_model", "quant=w8a8", "optim=ours"]]
    changed = [{s["id"]: s["changes"] for s in j["diff"]["changed"]} for j in data["jobs"]]
    assert "activation_type: uint8 -> uint16" in changed[0]["quantize"]
    assert changed[1]["quantize"] == ["input legalize changed"]  # w8a8 on both sides
    assert "flags: [] -> ['gelu']" in changed[0]["optimize"] == changed[1]["optimize"]
    assert data["summary"] == {"jobs": 2, "changed": 2, "head_errors": 0}


def test_unreadable_sources_plan_with_symbolic_keys(repo: Path) -> None:
    write_team_conf(repo, {"model/site.yaml": "defaults:\n  - local_hf\n  - _self_\n"
                                              "name: site\npath: /no/weights/here\n"})
    commit_all(repo, "a model whose weights live elsewhere")
    write_team_conf(repo, {"model/site.yaml": "defaults:\n  - local_hf\n  - _self_\n"
                                              "name: site\npath: /no/weights/here\n"
                                              "task: fill-mask\n"})
    result = run_cli("diff", "--rev", "HEAD", "--config-dir", "conf", "model=site",
                     "--format", "json", cwd=repo)
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)["jobs"][0]
    assert job["base"]["symbolic_sources"][0]["step"] == "resolve"
    assert "'/no/weights/here' does not exist" in job["head"]["symbolic_sources"][0]["reason"]
    assert {s["id"] for s in job["diff"]["changed"]} >= {"resolve", "export"}
    text = run_cli("diff", "--rev", "HEAD", "--config-dir", "conf", "model=site", cwd=repo)
    assert "! symbolic source key (model.path: '/no/weights/here'" in text.stdout
    assert "task: null -> fill-mask" in text.stdout


def test_symbolic_plans_are_marked_everywhere_and_apply_refuses_them(tmp_path: Path) -> None:
    args = ("plan", "model=hub_cache", "model.hub_id=org/absent", "--symbolic-sources",
            "--store", str(tmp_path))
    assert run_cli(*args[:3], "--store", str(tmp_path)).returncode == 2  # not without the flag
    outputs = {fmt: run_cli(*args, "--format", fmt).stdout for fmt in ("text", "md", "mermaid")}
    assert "! symbolic source key for resolve: model.hub_id: 'org/absent'" in outputs["text"]
    assert "Symbolic source keys: for review only" in outputs["text"].splitlines()[-1]
    assert "> **Note:** symbolic source key for resolve" in outputs["md"]
    assert 'resolve["resolve<br/>run symbolic ' in outputs["mermaid"]
    saved = tmp_path / "plan.json"
    assert run_cli(*args, "--format", "json", "-o", str(saved)).returncode == 0
    ir = json.loads(saved.read_text())
    assert ir["symbolic_sources"][0]["step"] == "resolve"
    assert ir["steps"][1]["params"]["inputs"] == "<from the checkpoint>"
    diffed = run_cli("diff", str(saved), str(saved))
    assert diffed.returncode == 0, diffed.stderr
    assert diffed.stdout.startswith("! old plan has symbolic source keys (model.hub_id:")
    refused = run_cli("apply", str(saved), "--store", str(tmp_path / "store"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "planned with symbolic source keys" in refused.stderr
    assert not (tmp_path / "store").exists()


def test_a_shallow_checkout_works_once_the_base_is_fetched(repo: Path, tmp_path: Path) -> None:
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    base = git(repo, "rev-parse", "HEAD~1").strip()
    clone = tmp_path / "ci"
    subprocess.run(["git", "clone", "-q", "--depth=1", f"file://{repo}", str(clone)], check=True)
    before = run_cli("diff", "--rev", base, *REVIEW, cwd=clone)
    assert before.returncode == 2
    assert "shallow clone: fetch the base first (git fetch --depth=1 origin" in before.stderr
    git(clone, "fetch", "-q", "--depth=1", "origin", base)
    after = run_cli("diff", "--rev", base, *REVIEW, cwd=clone)
    assert after.returncode == 0, after.stderr
    assert "~ quantize   activation_type: uint8 -> uint16" in after.stdout


def test_rev_with_the_packaged_tree_as_config_dir_says_what_it_is() -> None:
    """In modelplan's own checkout `--config-dir conf` is the packaged tree: the error says so
    (it used to ask for the --config-dir that was given)."""
    said = run_cli("diff", "--rev", "HEAD", "--config-dir", str(ROOT / "conf"), "model=tiny_bert")
    assert said.returncode == 2 and "Traceback" not in said.stderr
    last = said.stderr.strip().splitlines()[-1]
    assert "is the config tree modelplan itself ships" in last and "give --config-dir" not in last
