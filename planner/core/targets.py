"""Target declarations: what each target is and needs (docs/architecture.md §1), as data.

A target's name is the plan's target id: its EP and its backend (qnn_htp), or the EP alone
(cpu). Executors read these declarations to decide how to quantize for a target, legalize for
it, open sessions on it and profile it; they never compare EP or target names or split them
apart. Like the op declarations, nothing here imports a runtime.

To add a target: declare it in TARGETS below, write conf/target/<name>.yaml with the same
fields the config carries (a unit test keeps the two equal), and write its session adapter,
`executors/runtime/<adapter>.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.errors import ConfigError, PlanFileError


@dataclass(frozen=True)
class QdqProfile:
    """What QDQ quantization for the target needs."""

    # ONNX Runtime's QDQ configuration builder: "qnn_qdq_config" (get_qnn_qdq_config, which
    # knows the ops and types HTP quantizes) or "static_quant_config" (StaticQuantConfig)
    config: str
    # the precision a float node of a QDQ graph (quant.overrides precision: float) runs at on
    # it; fp16 also asks for the target's fp16_provider_options (measured: HTP fails to
    # finalize a mixed QDQ + float graph without enable_htp_fp16_precision)
    float_precision: str = "fp32"
    # whether the repair search may raise weights to 16 bits on it (else it goes from 16-bit
    # activations straight to float)
    weights_16bit: bool = True
    # what the repair search's gate, measured on the CPU, must clear beyond verify's threshold
    # so that verify on the target passes too (the target computes float nodes and QDQ
    # arithmetic its own way)
    search_margin: float = 0.0
    # the ops whose weights a 4-bit precision (weight_type int4) quantizes to 4 bits, per output
    # channel and symmetric; every other weight (embeddings, norms) stays at 8 bits
    four_bit_ops: tuple[str, ...] = ("MatMul", "Gemm", "Conv")


@dataclass(frozen=True)
class SessionSpec:
    """How a session on the target is made: by the module `executors/runtime/<adapter>.py`,
    with these plain options."""

    adapter: str
    log_severity: int  # ORT's log level: 3 keeps the EP's own errors, 4 hides retried failures
    # session config entries that make a session fail rather than run nodes on the CPU EP
    no_fallback: dict[str, str] = field(default_factory=dict)
    # provider options for the EP's own per-op profile; empty: ORT's profiler times every node
    profiling: dict[str, str] = field(default_factory=dict)
    profiling_file: str | None = None  # the provider option naming the EP's profile file
    # the distributions a model built for the target needs to load, besides onnxruntime (the
    # EP's plugin library); its runtime manifest records their versions
    packages: tuple[str, ...] = ()
    backend_option: str | None = None  # the provider option naming the target's backend


@dataclass(frozen=True)
class Target:
    """One target: the fields conf/target/<name>.yaml carries, and what executors need."""

    name: str
    ep: str                 # the config's and the plan's `ep`
    provider: str           # ONNX Runtime's name for the EP
    backend: str | None
    reference: bool         # the host CPU: verify's reference runs on it; nothing to compile
    resource: str | None    # the Ray custom resource of its device; None: any node's CPU
    qdq: QdqProfile
    legalizer: str | None   # the rewrite set executors/onnx/<legalizer>_rewrites.py, or None
    session: SessionSpec
    embed_context: bool = False
    cpu_fallback: bool = True
    provider_options: dict[str, Any] = field(default_factory=dict)
    fp16_provider_options: dict[str, Any] = field(default_factory=dict)  # added for quant=fp16

    @property
    def compiles(self) -> bool:
        """Whether a build for it ends in an EPContext compile step."""
        return not self.reference


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("cpu", "cpu", "CPUExecutionProvider", None, reference=True, resource=None,
           qdq=QdqProfile("static_quant_config"), legalizer="qdq",
           session=SessionSpec("cpu", log_severity=4)),
    Target("qnn_htp", "qnn", "QNNExecutionProvider", "htp", reference=False,
           resource="qnn_htp", qdq=QdqProfile("qnn_qdq_config", float_precision="fp16",
                                                  weights_16bit=False, search_margin=0.005),
           legalizer="htp",
           session=SessionSpec("qnn", log_severity=3,
                               no_fallback={"session.disable_cpu_ep_fallback": "1"},
                               profiling={"profiling_level": "detailed"},
                               profiling_file="profiling_file_path",
                               packages=("onnxruntime-qnn",), backend_option="backend_type"),
           # search_margin: MiniLM w8a8's search met 0.99 on the CPU (0.9901) and verify on the
           # HTP simulator read 0.9866 (measured, soc_model 60 and without)
           embed_context=True, cpu_fallback=False,
           # without a SoC the backend compiles for HTP v68, whose 16-bit activations lose
           # (tiny hubert w8a16_pc: verify 0.9885, 0.9995 with soc_model 60; measured)
           provider_options={"htp_performance_mode": "burst", "soc_model": 60},
           # HTP runs float16 only with these (measured)
           fp16_provider_options={"enable_htp_fp16_precision": 1, "soc_model": 60}),
)}


# every target's EP packages: an op's tools name them all, a step uses its own target's
EP_PACKAGES = frozenset(p for t in TARGETS.values() for p in t.session.packages)


def target_name(ep: str, backend: str | None) -> str:
    """What legality and compilation are for: the EP and its backend (e.g. qnn_htp)."""
    return "_".join(p for p in (ep, backend) if p)


def named(name: str) -> Target:
    """The declaration of target `name`; a plan naming another target cannot be run."""
    try:
        return TARGETS[name]
    except KeyError:
        raise PlanFileError(f"the plan names target {name!r}, which is not declared "
                            f"(declared: {', '.join(TARGETS)})",
                            "plan again with target=" + " or target=".join(TARGETS)) from None


def of_params(params: dict[str, Any]) -> Target:
    """The target a step's params name: `target` (legalize, compile), `profile` (quantize),
    or `ep` and `backend` (verify, perf)."""
    name = params.get("target") or params.get("profile")
    return named(name if name else target_name(params["ep"], params.get("backend")))


def of_config(target: dict[str, Any]) -> Target:
    """The declaration of the config's target (config["target"]), found by its EP and backend."""
    name = target_name(target["ep"], target["backend"])
    if name not in TARGETS:
        raise ConfigError(f"target: ep={target['ep']} backend={target['backend']} ({name}) is "
                          f"not a declared target (declared: {', '.join(TARGETS)})",
                          "use target=" + " or target=".join(TARGETS))
    return TARGETS[name]


def reference() -> Target:
    """The host CPU target: verify's reference and host-side checks run on it."""
    return next(t for t in TARGETS.values() if t.reference)
