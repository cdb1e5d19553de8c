"""Memory is planned: each step's expected peak and the run's, from the checkpoint's weights
(their files' sizes and dtype, or config.json's widths), the precision and the parts; a plan
that cannot fit run.max_memory is refused in one line before anything runs; the scheduler
keeps steps that run side by side within the budget."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from executors.run.outcome import Work
from executors.run.stepdag import Scheduler, StepDag, expected_peak
from planner.core import memory
from planner.core.ops import OPS
from planner.errors import PlanError
from planner.models import sources
from planner.models.footprint import count_params, read
from planner.planning import plan_from_overrides
from planner.support.units import parse_bytes
from tests.conftest import run_cli
from tests.unit.test_scheduler import Recorder

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 100,
         "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 64, "hidden_act": "silu",
         "rope_theta": 10000.0, "torch_dtype": "float32"}
MB = 2**20


@pytest.fixture(autouse=True)
def digests_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The weight files here are holes of a given size, and planning hashes a checkpoint's
    files for its key (seconds per GiB of holes read); what these tests check is the estimate,
    which reads the files' sizes alone, so a file's digest here is one of its size."""
    monkeypatch.setattr(sources, "file_sha256", lambda path: hashlib.sha256(
        str(path.stat().st_size).encode()).hexdigest())


def checkpoint(tmp_path: Path, name: str, size: int, **config: Any) -> Path:
    """config.json and a weight file of `size` bytes (planning reads its size, not its bytes)."""
    ckpt = tmp_path / name
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({**LLAMA, **config}))
    with (ckpt / "model.safetensors").open("wb") as f:
        f.truncate(size)
    return ckpt


def plan(ckpt: Path, *overrides: str) -> dict[str, Any]:
    return plan_from_overrides(["model=local_hf", f"model.path={ckpt}", "target=cpu",
                                "quant=none", "run.max_memory=1TB", *overrides]).to_json()


def peaks(ir: dict[str, Any]) -> dict[str, int]:
    return {s["id"]: s["memory"]["peak"] for s in ir["steps"] if "memory" in s}


def test_every_step_of_a_causal_lm_is_estimated_in_both_graphs(tmp_path: Path) -> None:
    ir = plan(checkpoint(tmp_path, "lm", 400 * MB))
    got = peaks(ir)
    graphs = {"prefill", "decode"}
    assert {sid.split(".")[0] for sid in got if "." in sid} == graphs
    for op in ("export", "normalize"):  # each graph handles every weight
        assert got[f"prefill.{op}"] == got[f"decode.{op}"] > memory.RUNTIME
    running = {s["id"] for s in ir["steps"] if s["action"] == "run"}
    assert ir["memory"]["peak"] == memory.COORDINATOR + max(got[s] for s in running)
    assert ir["memory"]["step"] in running
    assert got[ir["memory"]["step"]] == ir["memory"]["peak"] - memory.COORDINATOR
    assert ir["memory"]["weights"] == {"params": 100 * MB, "stored": 400 * MB,
                                       "dtype": "float32", "basis": "weight files"}


def test_the_estimate_grows_with_the_weights(tmp_path: Path) -> None:
    small = peaks(plan(checkpoint(tmp_path, "small", 100 * MB)))
    big = peaks(plan(checkpoint(tmp_path, "big", 1000 * MB)))
    assert small.keys() == big.keys()
    for sid, peak in small.items():
        grows = peak - memory.RUNTIME
        assert big[sid] - memory.RUNTIME == pytest.approx(10 * grows, rel=1e-6, abs=10), sid


def test_an_export_scales_with_its_weights_across_2_gib(tmp_path: Path) -> None:
    under = peaks(plan(checkpoint(tmp_path, "under", 1024 * MB)))
    over = peaks(plan(checkpoint(tmp_path, "over", 3072 * MB)))
    # the exporter serializes no weights at any size (executors/runtime/torch_initializers.py):
    # under 2 GiB its peak is the same multiple as over
    assert over["prefill.export"] - memory.RUNTIME == \
        pytest.approx(3 * (under["prefill.export"] - memory.RUNTIME), abs=4)
    assert over["prefill.normalize"] - memory.RUNTIME == \
        pytest.approx(3 * (under["prefill.normalize"] - memory.RUNTIME), abs=4)


def test_a_bf16_checkpoint_counts_its_parameters_as_an_fp32_one_of_twice_its_bytes(
        tmp_path: Path) -> None:
    fp32 = plan(checkpoint(tmp_path, "fp32", 800 * MB))
    bf16 = plan(checkpoint(tmp_path, "bf16", 400 * MB, torch_dtype="bfloat16"))
    assert fp32["memory"]["weights"]["params"] == bf16["memory"]["weights"]["params"]
    assert bf16["memory"]["weights"]["dtype"] == "bfloat16"
    a, b = peaks(fp32), peaks(bf16)
    # export traces the checkpoint as saved, in bf16, its check's feeds from PyTorch's bf16
    # run (llm_bench: Qwen3-0.6B's shape 3.81 GiB step RSS, 5.97 when it converted the model to
    # fp32 first; Llama-3.2-1B's 7.55 GB): 1.3x the fp32 weights and 0.7x the stored checkpoint;
    # normalize reads the fp32 graph
    assert b["prefill.export"] < a["prefill.export"]
    assert b["prefill.export"] - memory.RUNTIME == pytest.approx(
        1.3 * 800 * MB + 0.7 * 400 * MB, rel=0.01)
    assert b["prefill.normalize"] == a["prefill.normalize"]


def test_parameters_from_config_json_alone_match_the_real_models() -> None:
    llama_1b = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                "vocab_size": 128256, "tie_word_embeddings": True, "hidden_act": "silu",
                "rope_theta": 500000.0}
    # transformers counts 1,235,814,400 for LlamaForCausalLM of this config: the norms'
    # 67,584 are the difference
    assert count_params(llama_1b) == 1_235_814_400 - 2048 * 33
    bert = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 128,
            "hidden_act": "gelu"}
    assert count_params(bert) == 2 * (4 * 64 * 64 + 2 * 64 * 128) + 1000 * 64 + 128 * 64
    assert read({"model_type": "vit"}, None) is None  # no widths: no estimate


def test_a_random_init_model_is_estimated_from_its_config() -> None:
    ir = plan_from_overrides(["model=tiny_bert", "target=cpu", "quant=none"]).to_json()
    assert ir["memory"]["weights"]["basis"] in ("config.json", "weight files")
    assert ir["memory"]["peak"] > memory.RUNTIME


def test_compile_is_planned_per_part(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, "lm", 400 * MB)
    whole = peaks(plan(ckpt, "target=qnn_htp", "quant=w8a16_pc"))
    cut = peaks(plan(ckpt, "target=qnn_htp", "quant=w8a16_pc", "export.parts=2"))
    w4 = peaks(plan(ckpt, "target=qnn_htp", "quant=w4a16"))
    assert "prefill.compile" not in cut  # one compile step per part
    for part in (0, 1):
        assert cut[f"prefill.compile.{part}"] - memory.RUNTIME == \
            pytest.approx((whole["prefill.compile"] - memory.RUNTIME) / 2, abs=1)
    assert cut["prefill.quantize"] == whole["prefill.quantize"]
    assert w4["prefill.compile"] < whole["prefill.compile"]


def test_a_plan_over_run_max_memory_is_refused_naming_the_step_and_the_fix(
        tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, "lm", 400 * MB)
    with pytest.raises(PlanError) as got:
        plan(ckpt, "run.max_memory=1GB")
    (line,) = got.value.lines
    fits = peaks(plan(ckpt))
    worst = max(fits, key=fits.get)
    run_peak = memory.COORDINATOR + fits[worst]
    assert line.startswith("the run needs about ") and f"in step {worst} " in line
    assert "run.max_memory=1GB" in line and "nothing was run" in line
    assert f"run.max_memory={-(-run_peak // 2**30)}GB" in line
    plan(ckpt, f"run.max_memory={run_peak}")  # exactly enough: planned
    # a CPU LM saved in bf16: its largest steps are its checks (the deliverable's sessions;
    # export traces it as saved), and leaving them out is named when the rest fit
    big = checkpoint(tmp_path, "big", 2560 * MB, torch_dtype="bfloat16")
    fits = peaks(plan(big))
    checks = {k for k in fits if k.split(".")[-1].startswith("verify")}
    assert max(fits, key=fits.get) in checks and "verify_generation" in checks
    second = memory.COORDINATOR + max(v for k, v in fits.items() if k not in checks)
    with pytest.raises(PlanError, match="set verify=none"):
        plan(big, f"run.max_memory={second + 1}")


def test_a_language_model_over_the_limit_is_told_the_parts_that_fit(tmp_path: Path) -> None:
    """On a target that compiles, each part of a graph in parts is compiled alone and no context
    binary is shared: the refusal names the fewest export.parts whose plan fits, with its peak,
    and that setting is planned within the limit."""
    ckpt = checkpoint(tmp_path, "lm", 2560 * MB, num_hidden_layers=8)
    htp = ["target=qnn_htp", "quant=w8a16_pc"]
    whole = plan(ckpt, *htp)
    cut = {n: plan(ckpt, *htp, f"export.parts={n}") for n in (2, 4)}
    assert cut[2]["memory"]["peak"] < whole["memory"]["peak"]
    cap = cut[2]["memory"]["peak"]  # 2 parts fit exactly
    with pytest.raises(PlanError) as got:
        plan(ckpt, *htp, f"run.max_memory={cap}")
    (line,) = got.value.lines
    assert f"in step {whole['memory']['step']} " in line
    assert "set export.parts=2 (its peak ~" in line and ", or run.max_memory=" in line
    plan(ckpt, *htp, f"run.max_memory={cap}", "export.parts=2")
    # an encoder, which export.parts does not cut, is told no parts
    with pytest.raises(PlanError) as got:
        plan_from_overrides(["model=tiny_bert", "target=qnn_htp", "run.max_memory=10MB"])
    assert "export.parts" not in got.value.lines[0]


def test_parts_that_fit_only_without_the_checks_are_named_with_them(tmp_path: Path) -> None:
    """Parts lower the compile, not the checks that load the whole deliverable beside PyTorch's
    model: under a limit that only those checks pass, the refusal names the parts together with
    the override that leaves the checks out, and that setting is planned within the limit."""
    ckpt = checkpoint(tmp_path, "lm", 1280 * MB, num_hidden_layers=8, torch_dtype="bfloat16")
    htp = ["target=qnn_htp", "quant=w8a16_pc"]
    cut = peaks(plan(ckpt, *htp, "export.parts=2"))
    checks = {k for k in cut if k.split(".")[-1].startswith("verify")}
    rest = memory.COORDINATOR + max(v for k, v in cut.items() if k not in checks)
    assert memory.COORDINATOR + max(cut[k] for k in checks) > rest  # the checks need more
    with pytest.raises(PlanError) as got:
        plan(ckpt, *htp, f"run.max_memory={rest}")
    (line,) = got.value.lines
    assert "set export.parts=2 verify=none (its peak ~" in line
    plan(ckpt, *htp, f"run.max_memory={rest}", "export.parts=2", "verify=none")
    with pytest.raises(PlanError) as got:  # below what the rest needs: no parts named
        plan(ckpt, *htp, f"run.max_memory={rest - 2**20}")
    assert "export.parts" not in got.value.lines[0]
    with pytest.raises(PlanError) as got:  # in parts already: leaving the checks out suffices
        plan(ckpt, *htp, "export.parts=2", f"run.max_memory={rest}")
    (line,) = got.value.lines
    assert "set verify=none (which leaves out " in line and "export.parts" not in line


def test_the_limit_is_not_written_into_the_plan(tmp_path: Path, monkeypatch: Any) -> None:
    ckpt = checkpoint(tmp_path, "lm", 40 * MB)
    overrides = ["model=local_hf", f"model.path={ckpt}", "target=cpu", "quant=none"]
    meminfo = tmp_path / "meminfo"
    plans = []
    for free_kb in (64 * 2**20, 32 * 2**20):
        meminfo.write_text(f"MemTotal: {128 * 2**20} kB\nMemAvailable: {free_kb} kB\n")
        monkeypatch.setattr("planner.support.machine.MEMINFO", meminfo)
        plans.append(plan_from_overrides(overrides).to_json())
    assert plans[0] == plans[1]
    meminfo.write_text("MemAvailable: 1024 kB\n")  # 1 MB free: the default limit refuses
    with pytest.raises(PlanError, match="this machine's available memory"):
        plan_from_overrides(overrides)


def test_sizes_are_read_as_people_write_them() -> None:
    assert parse_bytes("16GB") == parse_bytes("16 GiB") == 16 * 2**30
    assert parse_bytes("512MB") == 512 * MB and parse_bytes(123) == 123
    assert parse_bytes("1.5G") == int(1.5 * 2**30) and parse_bytes("lots") is None


def test_the_cli_refuses_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, "lm", 400 * MB)
    out, store = tmp_path / "plan.json", tmp_path / "store"
    args = ["model=local_hf", f"model.path={ckpt}", "target=cpu", "run.max_memory=600MB",
            "--store", str(store)]
    for argv in (["plan", *args, "-o", str(out)],
                 ["run", *args, "--outputs", str(tmp_path / "outputs")]):
        got = run_cli(*argv)
        assert got.returncode == 2, got.stderr
        lines = got.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("modelplan: error: the run needs "), lines
        assert "run.max_memory=600MB" in lines[0] and "Traceback" not in got.stderr
    assert not out.exists() and not (tmp_path / "outputs").exists()
    assert not [p for p in store.glob("*/*") if p.is_dir()]  # no store entry


class Metered(Recorder):
    """A Recorder that also keeps the most expected memory its running steps held at once."""

    def __init__(self) -> None:
        super().__init__(slots=2, delay=0.02)
        self.held, self.most_held = 0, 0

    def start(self, work: Work) -> Any:
        with self.lock:
            self.held += expected_peak(work.step)
            self.most_held = max(self.most_held, self.held)
        fut = super().start(work)
        fut.add_done_callback(lambda _f: self._release(work))
        return fut

    def _release(self, work: Work) -> None:
        with self.lock:
            self.held -= expected_peak(work.step)


def test_the_scheduler_holds_back_a_step_that_would_pass_the_budget() -> None:
    irs = [plan_from_overrides(["model=tiny_bert", "target=cpu", f"quant={q}"]).to_json()
           for q in ("w8a8", "w8a16")]
    sizes = [s["memory"]["peak"] for ir in irs for s in ir["steps"] if "memory" in s]
    alone = 2 * min(sizes) - 1  # no two steps fit together
    for budget in (alone, 100 * max(sizes)):
        dag = StepDag(list(enumerate(irs)))
        runner = Metered()
        Scheduler(dag, runner, lambda _line: None, lambda _k, _s: Path("/out"),
                  budget=budget).run()
        assert runner.most_held <= max(budget, max(sizes))
        assert len(runner.started) == len(dag.nodes)  # every step still ran
        if budget == alone:
            assert runner.most_held == max(sizes)  # one step at a time
        else:
            assert runner.most_held > max(sizes)  # side by side


def test_a_step_over_the_budget_starts_when_nothing_else_runs() -> None:
    ir = plan_from_overrides(["model=tiny_bert", "target=cpu", "quant=w8a8"]).to_json()
    dag = StepDag([(0, ir)])
    scheduler = Scheduler(dag, Recorder(), lambda _line: None, lambda _k, _s: Path("/out"),
                          budget=1)
    step = next(s for s in ir["steps"] if s["id"] == "export")
    assert scheduler.fits(step)  # nothing runs
    scheduler.running[object()] = ("k", Work(step, "k", {}, None, "[1/1]"))  # type: ignore
    assert not scheduler.fits(step)


def test_a_saved_plan_with_an_edited_estimate_is_refused(tmp_path: Path) -> None:
    from tests.unit.test_bad_input import one_error

    path = tmp_path / "plan.json"
    got = run_cli("plan", "model=tiny_bert", "target=cpu", "quant=w8a8", "--format", "json",
                  "-o", str(path), "--store", str(tmp_path / "store"))
    assert got.returncode == 0, got.stderr
    ir = json.loads(path.read_text())
    quantize = next(s for s in ir["steps"] if s["id"] == "quantize")
    quantize["memory"]["peak"] = 1  # would let the scheduler start anything beside it
    path.write_text(json.dumps(ir))
    one_error(run_cli("apply", str(path), "--store", str(tmp_path / "store"), "--outputs",
                      str(tmp_path / "out")),
              "step quantize is not what the plan's config plans here (memory differs)")


def test_an_onnx_file_counts_the_data_beside_it(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "model.onnx").write_bytes(b"\0" * 1000)
    (tmp_path / "weights" / "blob").write_bytes(b"\0" * 4000)
    (tmp_path / "manifest.json").write_text("{}")  # not weights
    got = read({}, tmp_path / "model.onnx")
    assert got is not None and (got.stored, got.params, got.dtype) == (5000, 1250, "float32")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_saved_half_precision_checkpoint_has_the_parameters_of_its_fp32_twin(
        tmp_path: Path, dtype: str) -> None:
    from tests.checkpoints import text_checkpoint

    fp32 = text_checkpoint(tmp_path / "fp32", "LlamaForCausalLM", "llama")
    half = text_checkpoint(tmp_path / dtype, "LlamaForCausalLM", "llama", dtype=dtype)
    a = read(json.loads((fp32 / "config.json").read_text()), fp32)
    b = read(json.loads((half / "config.json").read_text()), half)
    assert a is not None and b is not None and b.dtype == dtype
    assert b.stored == pytest.approx(a.stored / 2, rel=0.01)
    assert b.params == pytest.approx(a.params, rel=0.01)  # the files' headers differ a little
    counted = count_params(json.loads((fp32 / "config.json").read_text()))
    assert counted == pytest.approx(a.params, rel=0.02)  # config.json alone, norms left out


def test_a_sweeps_budget_is_the_smallest_of_its_jobs_limits() -> None:
    from executors.execution import _budget

    irs = [plan_from_overrides(["model=tiny_bert", "target=cpu", f"run.max_memory={m}"])
           .to_json() for m in ("8GB", "4GB")]
    assert _budget(irs) == 4 * 2**30


def test_a_run_record_holds_the_plans_estimate_beside_the_measured_peak() -> None:
    from executors.run.records import step_record
    from planner.render.run import _cost

    ir = plan_from_overrides(["model=tiny_bert", "target=cpu", "quant=none"]).to_json()
    export = next(s for s in ir["steps"] if s["id"] == "export")
    rec = step_record(export, export["key"], wall_s=1.0, peak_rss_mb=400.0)
    assert rec["planned_peak_mb"] == round(export["memory"]["peak"] / 2**20, 1)
    assert _cost(rec) == ("1.00 s", f"400 MB (plan ~{rec['planned_peak_mb']:.0f})")



def test_quantize_layer_by_layer_is_planned_at_its_own_factor(tmp_path: Path) -> None:
    """quant.layerwise=auto quantizes 1 GiB of weights or more layer by layer
    (executors/onnx/layerwise.py), and the plan estimates it so; never: as a whole."""
    ckpt = checkpoint(tmp_path, "lm", 2048 * MB)
    fp32 = 2048 * MB
    auto = peaks(plan(ckpt, "quant=w8a16_pc"))
    whole = peaks(plan(ckpt, "quant=w8a16_pc", "quant.layerwise=never"))
    quantize = OPS["quantize"].memory
    assert auto["prefill.quantize"] == memory.RUNTIME + int(quantize.layerwise * fp32)
    assert whole["prefill.quantize"] == memory.RUNTIME + int(quantize.weights * fp32)
    small = checkpoint(tmp_path, "small", 512 * MB)  # under the threshold: whole
    assert peaks(plan(small, "quant=w8a16_pc"))["prefill.quantize"] == \
        memory.RUNTIME + int(quantize.weights * 512 * MB)
    forced = peaks(plan(small, "quant=w8a16_pc", "quant.layerwise=always"))
    assert forced["prefill.quantize"] == memory.RUNTIME + int(quantize.layerwise * 512 * MB)
    # a float16 conversion and the repair search handle the whole graph
    fp16 = peaks(plan(ckpt, "quant=fp16"))
    assert fp16["prefill.quantize"] == memory.RUNTIME + int(quantize.weights * fp32)


def test_a_bundle_with_genais_stages_is_planned_without_pytorchs_model(tmp_path: Path) -> None:
    """lm_bundle loads the checkpoint in PyTorch only to scale genai's windowed cache, which a
    bundle with compiled genai stages does not build (Llama-3.2-1B's shape on qnn_htp: 3.97 GB
    measured, 11.2 GB planned when the load was counted)."""
    bf16 = 1024 * MB  # as stored; 2048 MB as fp32
    ckpt = checkpoint(tmp_path, "lm", bf16, torch_dtype="bfloat16")
    bundle = OPS["lm_bundle"].memory
    staged = plan(ckpt, "target=qnn_htp", "quant=w8a16_pc")
    assert "genai_stages" in {s["op"] for s in staged["steps"]}
    assert peaks(staged)["bundle"] == memory.RUNTIME + int(bundle.weights * 2 * bf16)
    windowed = plan(ckpt, "target=qnn_htp", "quant=w8a16_pc", "export.genai_stages=false")
    assert "genai_stages" not in {s["op"] for s in windowed["steps"]}
    assert peaks(windowed)["bundle"] == memory.RUNTIME + int(
        (bundle.weights + bundle.upcast) * 2 * bf16 + bundle.checkpoint * bf16)
