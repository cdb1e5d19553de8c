"""Where the accuracy goes, for people: `modelplan diagnose`'s per-module SQNR and cosine as a
ranked table (worst SQNR first) and as a module tree."""

from __future__ import annotations

from typing import Any

TOP = 15  # modules in the ranked table unless --top says otherwise


def depth(tag: str) -> int:
    return tag.strip("/").count("/") + 1 if tag.startswith("/") else 1


def _cells(r: dict[str, Any], name: str) -> tuple[str, ...]:
    return (name, r["class"], str(r["nodes"]), f"{r['sqnr_db']:.2f}", f"{r['cosine']:.5f}")


def _columns(table: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [f"  {row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  "
            + "  ".join(c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True))
            for row in table]


HEAD = ("class", "nodes", "sqnr_db", "cosine")


def ranked(rows: list[dict[str, Any]], limit: int | None = TOP) -> list[str]:
    """The modules by SQNR, worst first (a tie: the deeper module first)."""
    order = sorted(rows, key=lambda r: (r["sqnr_db"], -depth(r["tag"])))
    shown = order if limit is None else order[:limit]
    lines = _columns([("module", *HEAD), *(_cells(r, r["tag"]) for r in shown)])
    if len(shown) < len(rows):
        lines.append(f"  ({len(rows) - len(shown)} more modules; --top 0 lists them all)")
    return lines


def tree(rows: list[dict[str, Any]]) -> list[str]:
    """Every module in tree order, indented by depth; the top level by its full tag."""
    base = min((depth(r["tag"]) for r in rows), default=1)
    cells = [_cells(r, "  " * (depth(r["tag"]) - base)
                    + (r["tag"] if depth(r["tag"]) == base else r["tag"].rsplit("/", 1)[-1]))
             for r in rows]
    return _columns([("module", *HEAD), *cells])


def text(result: dict[str, Any], limit: int | None = TOP) -> str:
    whole = result["graph"]
    lines = [(f"Accuracy per module: {result['candidate_step']} (quantized) against "
             f"{result['reference_step']} (fp32), {result['samples']} samples "
             f"({result['data']}), {result['tensors']} tensors compared on the CPU EP"),
             f"Graph outputs: sqnr {whole['sqnr_db']:.2f} dB, cosine {whole['cosine']:.5f}",
             "", "Worst modules (SQNR of their outputs, dB):", *ranked(result["modules"], limit),
             "", "Module tree:", *tree(result["modules"])]
    worst = min(result["modules"], key=lambda r: r["sqnr_db"], default=None)
    if worst:
        lines += ["", (f"Worst: {worst['tag']} at {worst['sqnr_db']:.2f} dB "
                      f"(cosine {worst['cosine']:.5f}).")]
    return "\n".join(lines) + "\n"
