"""Post a review as one pull-request comment, updated in place on every push: the comment is
found by a hidden marker. Uses the token and repository the GitHub workflow provides."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from planner.errors import UsageError

LIMIT = 65_000  # GitHub refuses comment bodies over 65,536 characters
FOLD_START, FOLD_END = "<details><summary>Plan DAG", "</details>"


def marker(key: str = "") -> str:
    return f"<!-- modelplan-review{':' + key if key else ''} -->"


def fit(body: str) -> str:
    """The body within GitHub's limit: drop the folded DAGs first, then cut the end."""
    while len(body) > LIMIT and FOLD_START in body:
        start = body.rindex(FOLD_START)
        end = body.find(FOLD_END, start)
        body = body[:start] + "(plan DAG left out: the comment is too long)" + \
            (body[end + len(FOLD_END):] if end >= 0 else "")
    if len(body) > LIMIT:
        body = body[:LIMIT] + "\n\n(cut here: the review is too long for one comment; the " \
                              "job summary has all of it)\n"
    return body


def pr_number(explicit: int | None) -> int:
    """--pr N, else the pull request of the workflow's event."""
    if explicit:
        return explicit
    path = os.environ.get("GITHUB_EVENT_PATH")
    event = json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}
    number = (event.get("pull_request") or {}).get("number") or event.get("number")
    if not number:
        raise UsageError("--post: no pull request here (GITHUB_EVENT_PATH has none); run it "
                         "on pull_request events or pass --pr N")
    return int(number)


def post(body: str, key: str, pr: int) -> str:
    """Create or update the review comment on pull request `pr`; return its URL."""
    token = os.environ.get("GITHUB_TOKEN")
    repo = os.environ.get("GITHUB_REPOSITORY")
    if not token or not repo:
        raise UsageError("--post: GITHUB_TOKEN and GITHUB_REPOSITORY must be set (the workflow "
                         "provides them: env: GITHUB_TOKEN: ${{ github.token }})")
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    tag = marker(key)
    body = fit(f"{tag}\n{body}")
    mine = next((c for c in _comments(api, repo, pr, token) if tag in c.get("body", "")), None)
    if mine:
        done = _call("PATCH", f"{api}/repos/{repo}/issues/comments/{mine['id']}", token, body)
    else:
        done = _call("POST", f"{api}/repos/{repo}/issues/{pr}/comments", token, body)
    return str(done.get("html_url", ""))


def _comments(api: str, repo: str, pr: int, token: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in range(1, 100):
        batch = _call("GET", f"{api}/repos/{repo}/issues/{pr}/comments?per_page=100&page={page}",
                      token)
        out += batch
        if len(batch) < 100:
            break
    return out


def _call(method: str, url: str, token: str, body: str | None = None) -> Any:
    data = json.dumps({"body": body}).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "modelplan-review",
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        hint = ("give the workflow `permissions: pull-requests: write` (a pull request from a "
                "fork gets a read-only token)" if exc.code in (401, 403, 404) else "try again")
        raise UsageError(f"GitHub API {method} {url}: {exc.code} {exc.reason}; {hint}") from exc
    except (urllib.error.URLError, TimeoutError, ValueError) as exc:
        raise UsageError(f"GitHub API {method} {url}: {exc}; check GITHUB_API_URL") from exc
