"""Config directories as they are at a git revision, read with git (the working tree and the
index are never touched): `git ls-tree` names the files, one `git cat-file --batch` reads them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from planner.errors import UsageError


@dataclass(frozen=True)
class Revision:
    repo: Path       # the work tree's top level
    rev: str         # as the user wrote it
    commit: str      # full sha


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                              check=False, env=_env())
    except FileNotFoundError as exc:
        raise UsageError("--rev: git is not installed here; install git, or diff two saved "
                         "plans (modelplan diff OLD.json NEW.json)") from exc
    if done.returncode != 0:
        said = (done.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
        raise GitError(f"git {args[0]} in {repo}: {said}")
    return done.stdout


class GitError(UsageError):
    """A git command failed (its last line of stderr is the message)."""


def _env() -> dict[str, str]:
    import os

    # Never prompt, never take a lock the user's own git might be waiting on.
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


def revision(directory: Path, rev: str) -> Revision:
    """The commit `rev` names in the repository that holds `directory`."""
    try:
        top = Path(_git(directory, "rev-parse", "--show-toplevel").decode().strip())
    except GitError as exc:
        raise UsageError(f"--rev {rev}: {directory} is not in a git repository; --rev reads "
                         "--config-dir as it is at a revision, so keep it in git") from exc
    try:
        commit = _git(top, "rev-parse", "--verify", "--quiet", "--end-of-options",
                      f"{rev}^{{commit}}").decode().strip()
    except GitError as exc:
        shallow = _git(top, "rev-parse", "--is-shallow-repository").decode().strip() == "true"
        hint = (f"this is a shallow clone: fetch the base first (git fetch --depth=1 origin "
                f"{rev})" if shallow else "give a branch, tag or commit of this repository")
        raise UsageError(f"--rev {rev}: no such revision in {top}; {hint}") from exc
    return Revision(top.resolve(), rev, commit)


def materialize(rev: Revision, directory: Path, into: Path) -> Path | None:
    """Write the *.yaml files under `directory` as they are at `rev` into `into`; return
    `into`, or None when the directory does not exist at that revision."""
    try:
        rel = directory.resolve().relative_to(rev.repo).as_posix()
    except ValueError as exc:
        raise UsageError(f"--rev: {directory} is outside the repository {rev.repo}") from exc
    listing = _git(rev.repo, "ls-tree", "-r", "-z", "--full-tree", rev.commit, "--",
                   rel if rel != "." else ".")
    blobs: list[tuple[str, str]] = []
    for entry in filter(None, listing.split(b"\0")):
        meta, _, name = entry.decode().partition("\t")
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000" and name.endswith(".yaml"):
            blobs.append((sha, name))
    if not blobs:
        return None
    contents = _cat(rev.repo, [sha for sha, _ in blobs])
    for (sha, name), data in zip(blobs, contents, strict=True):
        target = into / (Path(name).relative_to(rel) if rel != "." else Path(name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return into


def _cat(repo: Path, shas: list[str]) -> list[bytes]:
    """The contents of blobs, read by one `git cat-file --batch`."""
    out = _git(repo, "cat-file", "--batch", stdin="".join(f"{s}\n" for s in shas).encode())
    contents, pos = [], 0
    for _ in shas:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        contents.append(out[header_end + 1: header_end + 1 + size])
        pos = header_end + 1 + size + 1
    return contents
