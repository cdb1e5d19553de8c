"""Config review: plan a project's config dirs as they are at a git revision (base) and in the
working tree (head), for the same overrides (job by job for a sweep), and diff the plans.

Sources that cannot be read here get symbolic keys on both sides, so a review machine without
weights still shows what a change does to the plan's structure."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from planner.config.conftree import ConfigTree
from planner.errors import ConfigError, ModelplanError, UsageError
from planner.review.diff import diff
from planner.review.gitrev import Revision, materialize, revision

NO_PLAN: dict[str, Any] = {"steps": [], "config": {}}


@dataclass
class Side:
    """One job planned on one side: its Plan IR, or why it could not be planned."""

    ir: dict[str, Any] | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        ir = self.ir or {}
        return {"error": self.error, "summary": ir.get("summary"),
                "symbolic_sources": ir.get("symbolic_sources", [])}


@dataclass
class JobReview:
    index: int
    overrides: list[str]
    base: Side
    head: Side

    @cached_property
    def diff(self) -> dict[str, Any] | None:
        """The plan diff. A base that does not plan (a config new in the change) counts as a
        plan with no steps; a head that does not plan has no diff, only its error."""
        if self.head.ir is None:
            return None
        d = diff(self.base.ir or NO_PLAN, self.head.ir)
        d.pop("symbolic", None)  # a review says so once per job, for both sides
        if self.base.ir is None:
            d["config"] = []  # every key would be listed as new
        return d

    @property
    def changed(self) -> bool:
        d = self.diff
        return d is None or bool(d["config"] or d["added"] or d["removed"] or d["changed"])

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "overrides": self.overrides, "base": self.base.to_json(),
                "head": self.head.to_json(), "diff": self.diff}


@dataclass
class Review:
    rev: Revision
    config_dirs: list[str]
    config_name: str
    jobs: list[JobReview] = field(default_factory=list)

    @property
    def head_errors(self) -> list[str]:
        return [f"{_job_name(j)}: {j.head.error}" for j in self.jobs if j.head.error]

    def to_json(self) -> dict[str, Any]:
        return {"format_version": 1,
                "base": {"rev": self.rev.rev, "commit": self.rev.commit},
                "head": "working tree", "config_dirs": self.config_dirs,
                "config_name": self.config_name,
                "jobs": [j.to_json() for j in self.jobs],
                "summary": {"jobs": len(self.jobs),
                            "changed": sum(j.changed for j in self.jobs),
                            "head_errors": len(self.head_errors)}}


def _job_name(job: JobReview) -> str:
    return " ".join(job.overrides) or "the default config"


def review(rev_text: str, overrides: list[str], tree: ConfigTree, multirun: bool = False,
           store: str | None = None) -> Review:
    """Plan `overrides` with the tree's user dirs at `rev_text` and as they are now; diff."""
    if not tree.user_dirs:
        raise UsageError("--rev: give --config-dir DIR, the config tree your repository keeps "
                         "(the packaged groups come from the installed modelplan)")
    rev = revision(tree.user_dirs[0], rev_text)
    with tempfile.TemporaryDirectory(prefix="modelplan-rev-") as tmp:
        try:
            base = plan_side(tree_at(rev_text, tree, Path(tmp)), overrides, multirun, store)
        except ConfigError as exc:  # the base tree itself is broken: every job says so
            base = [Side(None, "; ".join(exc.lines))] * len(_jobs(overrides, multirun))
    head = plan_side(tree, overrides, multirun, store)
    jobs = [JobReview(i, o, b, h) for i, (o, b, h) in
            enumerate(zip(_jobs(overrides, multirun), base, head, strict=True))]
    same = [j for j in jobs if j.head.error and j.base.error
            and j.head.error == j.base.error.replace(f"{rev_text}:", "")]
    if same:  # fails the same way at both revisions: the command line is wrong, not the change
        raise ConfigError(*(f"{_job_name(j)}: {j.head.error}" if multirun else j.head.error
                            for j in same[:3]))
    return Review(rev, [tree.display(d) for d in tree.user_dirs], tree.config_name, jobs)


def tree_at(rev_text: str, tree: ConfigTree, tmp: Path) -> ConfigTree:
    """The tree with each user dir as it is at `rev_text` (a dir missing there is left out)."""
    dirs, labels = [], []
    for i, d in enumerate(tree.user_dirs):
        into = materialize(revision(d, rev_text), d, tmp / str(i))
        if into is not None:
            dirs.append(into)
            labels.append((into, f"{rev_text}:{tree.display(d)}"))
    base = ConfigTree(tuple(dirs), tree.config_name, tuple(labels))
    if not base.packaged_only:
        base.check()
    return base


def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    from planner.core.sweep import expand

    return expand(overrides) if multirun else [list(overrides)]


def plan_side(tree: ConfigTree, overrides: list[str], multirun: bool,
              store: str | None) -> list[Side]:
    """Every job planned with `tree`, symbolic sources allowed; errors are kept per job."""
    from planner.planning import plan_from_overrides, plan_jobs

    if multirun:
        sweep = plan_jobs(_jobs(overrides, True), store, tree=tree, symbolic=True)
        return [Side(j.ir, j.error) for j in sweep.jobs]
    try:
        return [Side(plan_from_overrides(overrides, store, tree, symbolic=True).to_json())]
    except ModelplanError as exc:
        return [Side(None, "; ".join(exc.lines))]
