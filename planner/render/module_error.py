"""Where the accuracy goes, for people: `modelplan diagnose`'s per-module error as a ranked
table (worst own error first: the module to repair, its cumulative figure beside), a module
tree, and the same short table for a run record whose gate failed.

Own error: the module's piece run alone on the fp32 graph's values at its inputs. Cumulative:
its outputs in the whole QDQ graph (the error of every module before it included).
Inherited: the dB the cumulative figure loses beyond the module's own."""

from __future__ import annotations

import math
import shlex
from typing import Any

TOP = 15  # modules in the ranked table unless --top says otherwise
HEAD = ("class", "nodes", "own_db", "own_cos", "cum_db", "cum_cos", "inherited")


def depth(tag: str) -> int:
    return tag.strip("/").count("/") + 1 if tag.startswith("/") else 1


def _db(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) and value > 0 else f"{value:.2f}"


def _cos(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def _cells(r: dict[str, Any], name: str) -> tuple[str, ...]:
    return (name, r["class"], str(r["nodes"]), _db(r.get("own_sqnr_db")),
            _cos(r.get("own_cosine")), _db(r["sqnr_db"]), _cos(r["cosine"]),
            _db(r.get("inherited")))


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [f"  {row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  "
            + "  ".join(c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True))
            for row in table]


def own_db(r: dict[str, Any]) -> float:
    """What a module is ranked by: its own SQNR, else (no piece ran) its cumulative one."""
    own = r.get("own_sqnr_db")
    value = own if own is not None else r["sqnr_db"]
    return math.inf if value is None else value


def innermost(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The modules no other row lies inside: a parent's piece holds its children's, so its own
    error is theirs too and would top every ranking; the tree shows every level."""
    tags = [r["tag"] for r in rows]
    return [r for r in rows if not any(t.startswith(r["tag"] + "/") for t in tags)]


def worst_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The innermost modules by own SQNR, worst first (a tie: the deeper module first)."""
    return sorted(innermost(rows), key=lambda r: (own_db(r), -depth(r["tag"])))


def common_root(tags: list[str]) -> str:
    """The longest module path every tag lies under ("" when they share none)."""
    parts = [t.strip("/").split("/") for t in tags]
    shared = []
    for segments in zip(*parts, strict=False):
        if len(set(segments)) != 1:
            break
        shared.append(segments[0])
    return "/" + "/".join(shared) if shared else ""


def relative(tag: str, root: str) -> str:
    """`tag` below `root`, as the ranked table shows it (the root itself as ".")."""
    return "." if tag == root else tag.removeprefix(root + "/") if root else tag


def ranked(rows: list[dict[str, Any]], limit: int | None = TOP,
           more: str = "--top 0 lists them all") -> list[str]:
    order = worst_first(rows)
    shown = order if limit is None else order[:limit]
    root = common_root([r["tag"] for r in shown]) if len(shown) > 1 else ""
    head = f"module (under {root})" if root else "module"
    lines = _columns([(head, *HEAD), *(_cells(r, relative(r["tag"], root)) for r in shown)])
    if len(shown) < len(order):
        lines.append(f"  ({len(order) - len(shown)} more innermost modules; {more})")
    return lines


def tree(rows: list[dict[str, Any]]) -> list[str]:
    """Every module in tree order, indented by depth; the top level by its full tag."""
    base = min((depth(r["tag"]) for r in rows), default=1)
    cells = [_cells(r, "  " * (depth(r["tag"]) - base)
                    + (r["tag"] if depth(r["tag"]) == base else r["tag"].rsplit("/", 1)[-1]))
             for r in rows]
    return _columns([("module", *HEAD), *cells])


def on_target(result: dict[str, Any]) -> list[str]:
    """The worst modules' pieces on the target beside the same pieces on the CPU EP."""
    found = result.get("target_pieces")
    if not found:
        return []
    lines = ["", (f"On the target ({found['target']}), each piece fed the fp32 values, outputs "
                  f"through their Q/DQ ({found['samples']} samples):")]
    table = [("module", "cpu_db", "cpu_cos", "target_db", "target_cos", "lost_db")]
    for r in found["modules"]:
        lost = None if r.get("target_sqnr_db") is None or r.get("cpu_sqnr_db") is None \
            else r["cpu_sqnr_db"] - r["target_sqnr_db"]
        table.append((r["tag"], _db(r.get("cpu_sqnr_db")), _cos(r.get("cpu_cosine")),
                      _db(r.get("target_sqnr_db")), _cos(r.get("target_cosine")), _db(lost)))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines += ["  " + "  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in
                                zip(row[1:], widths[1:], strict=True))]) for row in table]
    lines += [f"  {r['tag']}: {r['error']}" for r in found["modules"] if r.get("error")]
    return lines


def text(result: dict[str, Any], limit: int | None = TOP) -> str:
    whole = result["graph"]
    built = f"quant={result['quant']}, target={result['target']}; " if "quant" in result else ""
    lines = [(f"Accuracy per module: {result['candidate_step']} ({built}quantized) against "
             f"{result['reference_step']} (fp32), {result['samples']} samples "
             f"({result['data']}), {result['tensors']} tensors compared on the CPU EP"),
             f"Graph outputs: sqnr {whole['sqnr_db']:.2f} dB, cosine {whole['cosine']:.5f}",
             "", ("Worst innermost modules by own error (dB; cum: as the whole graph has it; "
             "inherited: own - cum):"), *ranked(result["modules"], limit), *on_target(result),
             "", "Module tree:", *tree(result["modules"])]
    worst = worst_first(result["modules"])[:1]
    if worst:
        w = worst[0]
        lines += ["", (f"Worst: {w['tag']}, own {_db(w.get('own_sqnr_db'))} dB "
                      f"(cumulative {_db(w['sqnr_db'])} dB, cosine {w['cosine']:.5f}).")]
    return "\n".join(lines) + "\n"


RECORD_TOP = 5  # rows in a failed run's table


def record_lines(record: dict[str, Any], limit: int = RECORD_TOP) -> list[str]:
    """A failed gate's short table: the `limit` modules with the worst own error."""
    rows = record.get("accuracy") or []
    if record.get("accuracy_error"):
        return ["", (f"Where the accuracy goes: {record['accuracy_error']}; run "
                     f"`{diagnose_command(record)}`")]
    if not rows:
        return []
    lines = ["", (f"Where the accuracy goes ({len(innermost(rows))} innermost modules, CPU EP, "
                  "worst own error first; own: the module fed the fp32 values):")]
    return lines + ranked(rows, limit, f"`{diagnose_command(record)}` lists them all")


def diagnose_command(record: dict[str, Any]) -> str:
    """`modelplan diagnose` of the build the record ran: its overrides and its store."""
    store = ["--store", record["store"]] if record.get("store") else []
    return shlex.join(["modelplan", "diagnose", *store, *(record.get("overrides") or [])])


def record_markdown(record: dict[str, Any], limit: int = RECORD_TOP) -> list[str]:
    rows = record.get("accuracy") or []
    if not rows:
        return []
    inner = innermost(rows)
    lines = ["", (f"#### Where the accuracy goes ({min(limit, len(inner))} worst of {len(inner)} "
             "innermost modules by own error, CPU EP)"), "",
             "| module | class | nodes | own dB | own cos | cum dB | cum cos | inherited dB |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in worst_first(rows)[:limit]:
        c = _cells(r, r["tag"])
        lines.append(f"| `{c[0]}` | " + " | ".join(c[1:]) + " |")
    return lines
