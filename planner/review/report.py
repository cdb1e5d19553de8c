"""A config review (`modelplan diff --rev`) as text, or as Markdown for a pull-request comment:
per job the config changes, the steps added, removed and changed with the rules' reasons, and
the head plan's DAG folded."""

from __future__ import annotations

from typing import Any

from planner.render import mermaid
from planner.render.common import SYMBOLIC
from planner.review import diff as plan_diff


def title(data: dict[str, Any]) -> str:
    base = data["base"]
    dirs = ", ".join(data["config_dirs"])
    name = f", --config-name {data['config_name']}" if data["config_name"] != "config" else ""
    return f"{base['rev']} ({base['commit'][:10]}) -> working tree, --config-dir {dirs}{name}"


def notes(job: dict[str, Any]) -> list[str]:
    """What a reader must know before the diff: a side that does not plan, symbolic keys."""
    out = []
    if job["base"]["error"]:
        new = " (every step is new)" if not job["head"]["error"] else ""
        out.append(f"base does not plan: {job['base']['error']}{new}")
    if job["head"]["error"]:
        out.append(f"head does not plan: {job['head']['error']}")
    symbolic = {x["reason"] for side in ("base", "head")
                for x in job[side]["symbolic_sources"]}
    out += [f"symbolic source key ({why}): {SYMBOLIC.split(': ', 1)[1]}"
            for why in sorted(symbolic)]
    return out


def job_label(job: dict[str, Any]) -> str:
    return " ".join(job["overrides"]) or "the default config"


def render_text(data: dict[str, Any]) -> str:
    lines = [f"modelplan diff {title(data)}"]
    for job in data["jobs"]:
        lines += ["", f"job {job['index']}: {job_label(job)}" if len(data["jobs"]) > 1
                  else f"overrides: {job_label(job)}"]
        lines += [f"  ! {n}" for n in notes(job)]
        if job["diff"] is not None:
            lines += ["", plan_diff.render_text(job["diff"]).rstrip("\n")]
    if len(data["jobs"]) > 1:
        lines += ["", summary(data)]
    return "\n".join(lines) + "\n"


def summary(data: dict[str, Any]) -> str:
    s = data["summary"]
    jobs = f"{s['jobs']} job" + ("s" if s["jobs"] != 1 else "")
    return (f"Review: {jobs}, {s['changed']} changed, "
            f"{s['head_errors']} that do not plan at the head.")


def render_md(data: dict[str, Any], plans: dict[int, dict[str, Any]] | None = None) -> str:
    """plans: the head Plan IR of each job, by index, for its folded Mermaid DAG."""
    lines = [f"### modelplan diff: {_md_title(data)}"]
    for job in data["jobs"]:
        lines += ["", f"#### `{job_label(job)}`" if job["overrides"] else
                  "#### the default config", ""]
        lines += [ln for n in notes(job)
                  for ln in (f"> **{n.split(':', 1)[0]}:**{n.split(':', 1)[1]}", "")]
        if job["diff"] is not None:
            lines.append(plan_diff.render_md(job["diff"], title=None).rstrip("\n"))
        ir = (plans or {}).get(job["index"])
        if ir is not None:
            lines += ["", "<details><summary>Plan DAG at the head</summary>", "",
                      "```mermaid", mermaid.render(ir).rstrip("\n"), "```", "", "</details>"]
    if len(data["jobs"]) > 1:
        lines += ["", f"**{summary(data)}**"]
    return "\n".join(lines) + "\n"


def _md_title(data: dict[str, Any]) -> str:
    base = data["base"]
    dirs = ", ".join(f"`{d}`" for d in data["config_dirs"])
    return f"`{base['rev']}` (`{base['commit'][:10]}`) → this branch, configs in {dirs}"

