"""What verify_generation reports: a teacher-forced run of the deliverable against the run it
followed (PyTorch's), per prompt and in all."""

from __future__ import annotations

import numpy as np

from executors.generation.loop import Generated
from executors.steps.verify import cosines


def compare(want: Generated, got: Generated) -> dict[str, object]:
    steps = min(len(want.tokens), len(got.tokens))
    same = [want.tokens[i] == got.tokens[i] for i in range(steps)]
    cos = cosines(np.stack(got.logits[:steps]).astype(np.float64),
                  np.stack(want.logits[:steps]).astype(np.float64))
    return {"steps": steps, "agree": int(sum(same)),
            "first_divergence": same.index(False) if False in same else steps,
            "cosines": cos.tolist(), "pytorch": want.tokens[:steps],
            "deliverable": got.tokens[:steps]}


def summarize(rows: list[dict], threshold: float, origin: str) -> dict[str, object]:
    every = [c for r in rows for c in r["cosines"]]
    steps = sum(r["steps"] for r in rows)
    firsts = [r["first_divergence"] for r in rows]
    return {"cosine_mean": float(np.mean(every)), "cosine_min": float(np.min(every)),
            "token_agreement": sum(r["agree"] for r in rows) / max(steps, 1),
            "first_divergence": float(np.mean(firsts)), "first_divergence_min": min(firsts),
            "exact_prompts": sum(r["agree"] == r["steps"] for r in rows),
            "prompts": len(rows), "new_tokens": steps, "threshold": threshold,
            "passed": float(np.mean(every)) >= threshold, "data": origin,
            "per_prompt": [{k: r[k] for k in ("steps", "agree", "first_divergence", "pytorch",
                                              "deliverable")} for r in rows]}
