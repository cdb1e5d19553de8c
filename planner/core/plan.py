"""The plan: steps in run order, the rewrites that shaped it, and graph edits with rewiring."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.core import facts as F
from planner.core.ops import OPS, Op, Trait
from planner.models.footprint import Weights
from planner.support.memo import remembered

FORMAT_VERSION = 1
ACTIONS = ("run", "cached", "elided")
MAIN_GRAPH = "model"  # the one graph of most models; encoder-decoders have two others


def graph_step_id(graph: str, op: str) -> str:
    """A step's id in a graph's chain: `export`, or `decoder.export` for a second graph."""
    return op if graph == MAIN_GRAPH else f"{graph}.{op}"


def graph_of(step_id: str) -> str:
    """The graph a step id belongs to (MAIN_GRAPH for unprefixed ids such as `legalize.2`)."""
    head, _, rest = step_id.partition(".")
    return head if rest and not rest.isdigit() else MAIN_GRAPH


@dataclass
class Rewrite:
    """One rule application: what it did to which step, on what premises, concluding what."""

    rule: str
    action: str  # elide | insert | reorder | drop | reject
    step: str
    premises: list[dict[str, Any]]
    conclusion: str
    anchor: str | None = None          # insert/reorder: the step it goes after
    new_step: Step | None = None       # insert: the step to add

    def record(self) -> dict[str, Any]:
        return {"rule": self.rule, "action": self.action, "step": self.step,
                "premises": self.premises, "conclusion": self.conclusion}

    def proof(self) -> dict[str, Any]:
        return {"rule": self.rule, "premises": self.premises, "conclusion": self.conclusion}


@dataclass
class Step:
    id: str
    op: str
    params: dict[str, Any]
    inputs: dict[str, str] = field(default_factory=dict)  # role -> step id
    action: str = "run"
    reason: str = ""
    key: str = ""
    proof: dict[str, Any] | None = None
    inserted_by: dict[str, Any] | None = None
    moved_by: dict[str, Any] | None = None
    via: dict[str, str] = field(default_factory=dict)  # role -> elided step it stands in for
    memory: int | None = None  # its expected peak in bytes (planner/core/memory.py)

    @property
    def decl(self) -> Op:
        return OPS[self.op]

    @property
    def chain_input(self) -> str | None:
        return self.inputs.get(self.decl.chain_role)


@dataclass
class Plan:
    config: dict[str, Any]
    config_digest: str
    steps: list[Step]
    deliverable: str
    rewrites: list[Rewrite] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)
    symbolic_sources: list[dict[str, str]] = field(default_factory=list)  # {step, reason}
    weights: Weights | None = None    # the checkpoint's, as read before any step
    cuttable: bool = False            # export.parts may cut its graphs into more parts
    memory: dict[str, Any] | None = None  # the run's expected peak (planner/core/memory.py)
    # what the rules read of the lowered plan (rules.rule_inputs), when it was rewritten in a
    # memo session: plans rewritten from equal inputs have equal facts
    rewritten_from: bytes | None = None

    # -- lookups -------------------------------------------------------------------------
    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    def live(self) -> list[Step]:
        return [s for s in self.steps if s.action != "elided"]

    def chain_after(self, step_id: str) -> list[Step]:
        """Steps downstream of `step_id` along chain inputs, in plan order."""
        reached, out = {step_id}, []
        for s in self.steps:
            if s.action != "elided" and s.chain_input in reached:
                reached.add(s.id)
                out.append(s)
        return out

    def chain_before(self, step_id: str) -> list[Step]:
        """Live steps upstream of `step_id` along chain inputs, nearest first."""
        out, cur = [], self.step(step_id).chain_input
        while cur is not None:
            s = self.step(cur)
            out.append(s)
            cur = s.chain_input
        return out

    def facts(self) -> dict[str, F.Facts]:
        """Facts of every step's output (an elided step's output is its input)."""
        known: dict[str, F.Facts] = {}
        for s in self.steps:
            base = known.get(s.chain_input, {}) if s.chain_input else {}
            known[s.id] = dict(base) if s.action == "elided" else F.apply(base, s.decl, s.params, s.id)
        return known

    def input_facts(self, s: Step, known: dict[str, F.Facts], role: str | None = None) -> F.Facts:
        src = s.inputs.get(role or s.decl.chain_role)
        return known.get(src, {}) if src else {}

    def facts_by_role(self, s: Step, known: dict[str, F.Facts]) -> dict[str, F.Facts]:
        """The facts of each of the step's inputs, by input role."""
        return {role: self.input_facts(s, known, role) for role in s.inputs}

    def sinks(self) -> list[str]:
        return [s.id for s in self.live() if s.decl.has(Trait.SINK)] + [self.deliverable]

    def new_id(self, op: str, near: str | None = None) -> str:
        """A fresh id for an `op` step in the graph chain of step `near`."""
        base = graph_step_id(graph_of(near), op) if near else op
        taken = {s.id for s in self.steps}
        if base not in taken:
            return base
        n = 2
        while f"{base}.{n}" in taken:
            n += 1
        return f"{base}.{n}"

    # -- edits (used by the rule engine only) --------------------------------------------
    def _rewire_chain(self, old: str, new: str, skip: str) -> None:
        """Chain consumers of `old` (except `skip`) read `new` instead."""
        for s in self.live():
            if s.id == skip:
                continue
            for role in (s.decl.chain_role, *s.decl.delivers):
                if s.inputs.get(role) == old:
                    s.inputs[role] = new
                    s.via.pop(role, None)

    def elide(self, rw: Rewrite) -> None:
        s = self.step(rw.step)
        s.action, s.proof = "elided", rw.proof()
        upstream = s.chain_input
        assert upstream is not None, f"cannot elide source step {s.id}"
        for c in self.live():
            for role, src in c.inputs.items():
                if src == s.id:
                    c.inputs[role] = upstream
                    c.via[role] = s.id
        if self.deliverable == s.id:
            self.deliverable = upstream

    def insert_after(self, rw: Rewrite) -> None:
        assert rw.new_step is not None and rw.anchor is not None
        new = rw.new_step
        new.inserted_by = rw.proof()
        self._read_after(new, rw.anchor)
        self._rewire_chain(rw.anchor, new.id, skip=new.id)
        if self.deliverable == rw.anchor:
            self.deliverable = new.id
        self.steps.insert(self._slot_after(rw.anchor), new)

    def move_after(self, rw: Rewrite) -> None:
        assert rw.anchor is not None
        s = self.step(rw.step)
        upstream = s.chain_input
        assert upstream is not None
        self._rewire_chain(s.id, upstream, skip=s.id)
        if self.deliverable == s.id:
            self.deliverable = upstream
        self.steps.remove(s)
        self._read_after(s, rw.anchor)
        s.moved_by = rw.proof()
        self._rewire_chain(rw.anchor, s.id, skip=s.id)
        if self.deliverable == rw.anchor:
            self.deliverable = s.id
        self.steps.insert(self._slot_after(rw.anchor), s)

    def _elided_after(self, anchor: str) -> list[Step]:
        """The elided steps that directly follow `anchor` in the list and read it."""
        i = self.steps.index(self.step(anchor)) + 1
        reads, out = {anchor}, []
        while i < len(self.steps) and self.steps[i].action == "elided" \
                and self.steps[i].chain_input in reads:
            reads.add(self.steps[i].id)
            out.append(self.steps[i])
            i += 1
        return out

    def _slot_after(self, anchor: str) -> int:
        """List position right after `anchor` and the elided steps that directly follow it."""
        return self.steps.index(self.step(anchor)) + 1 + len(self._elided_after(anchor))

    def _read_after(self, s: Step, anchor: str) -> None:
        """`s` reads `anchor`; if elided steps follow it, `s` stands in for the last of them
        (so an executor that must run them after all knows who reads their output)."""
        role = s.decl.chain_role
        s.inputs[role] = anchor
        tail = self._elided_after(anchor)
        if tail:
            s.via[role] = tail[-1].id
        else:
            s.via.pop(role, None)

    def drop(self, rw: Rewrite) -> None:
        self.steps.remove(self.step(rw.step))

    # -- output --------------------------------------------------------------------------
    def summary(self) -> dict[str, int]:
        return {a: sum(1 for s in self.steps if s.action == a) for a in ACTIONS}

    def facts_json(self) -> dict[str, dict[str, Any]]:
        """The facts of every step's output as the Plan IR gives them (made once for plans
        rewritten from equal rule inputs in a memo session; readers do not change them)."""
        def made() -> dict[str, dict[str, Any]]:
            return {sid: F.to_json(facts) for sid, facts in self.facts().items()}

        return made() if self.rewritten_from is None else \
            remembered("facts-json", self.rewritten_from, made)

    def to_json(self) -> dict[str, Any]:
        known = self.facts_json()
        symbolic = {"symbolic_sources": self.symbolic_sources} if self.symbolic_sources else {}
        memory = {"memory": self.memory} if self.memory else {}
        return {
            "format_version": FORMAT_VERSION,
            "planner_version": _version(),
            "config_digest": self.config_digest,
            "deliverable": self.deliverable,
            "tools": dict(sorted(self.tools.items())),
            "steps": [_step_json(s, known[s.id]) for s in self.steps],
            "rewrites": [rw.record() for rw in self.rewrites],
            "summary": self.summary(),
            **symbolic,
            **memory,
            "config": self.config,
        }


def _step_json(s: Step, facts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": s.id, "op": s.op, "op_version": s.decl.version, "params": s.params,
        "inputs": dict(s.inputs), "key": s.key, "action": s.action, "reason": s.reason,
        "tools": list(s.decl.tools_for(s.params)), "facts": facts,
    }
    for name in ("proof", "inserted_by", "moved_by"):
        if getattr(s, name) is not None:
            out[name] = getattr(s, name)
    if s.via:
        out["via"] = dict(sorted(s.via.items()))
    if s.memory is not None:
        out["memory"] = {"peak": s.memory}
    return out


def _version() -> str:
    from planner import __version__

    return __version__
