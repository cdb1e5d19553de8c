"""A deliverable's model card (`README.md` in its outputs folder), from its run record: Hugging
Face model-card metadata (base model, library, pipeline tag, tags for the target and the
precision), what was built and how, its accuracy against PyTorch, its latency per module, how
each client opens the folder, and the command that rebuilds it."""

from __future__ import annotations

import json
from typing import Any

from planner.core.ops import OPS, Trait
from planner.core.targets import of_config
from planner.models.generation import (
    GENAI_DECODER,
    GENAI_PIPELINE,
    GENAI_WHISPER,
    GENAI_WHISPER_FRAMES,
    GENAI_WINDOWED_GRAPH,
)
from planner.models.identity import display_name, model_id
from planner.models.roles import CACHE, ROLES, Kind, Trace, kind_of, uncached_graph
from planner.render import accuracy, module_error, modules
from planner.render.run import note, results
from planner.support.units import human_bytes

SENTENCE_TRANSFORMERS = "modules.json"  # a sentence-transformers model's module list
# the Optimum ONNX Runtime class that opens a one-graph deliverable of each task
OPTIMUM = {
    "feature-extraction": "ORTModelForFeatureExtraction",
    "text-classification": "ORTModelForSequenceClassification",
    "zero-shot-classification": "ORTModelForSequenceClassification",
    "token-classification": "ORTModelForTokenClassification",
    "question-answering": "ORTModelForQuestionAnswering",
    "fill-mask": "ORTModelForMaskedLM",
    "image-classification": "ORTModelForImageClassification",
    "audio-classification": "ORTModelForAudioClassification",
    "image-segmentation": "ORTModelForSemanticSegmentation",
}
PRECISIONS = {"none": "fp32 weights and activations", "fp16": "float16"}


def facts(ir: dict[str, Any]) -> dict[str, Any]:
    """What the deliverable is, for its model card: the model's id and name, task, target,
    precision, and the tool versions the plan's keys used."""
    config = ir["config"]
    resolve = next((s for s in ir["steps"] if s["op"] == "resolve"), None)
    task = resolve["params"]["task"] if resolve else config["model"].get("task")
    exports = [s["params"] for s in ir["steps"] if s["op"] == "export"]
    inputs = [f"{i['name']}: {i['dtype']}[{'x'.join(map(str, i['shape']))}]"
              for i in (exports[0]["inputs"] if len(exports) == 1
                        and isinstance(exports[0]["inputs"], list) else [])]
    return {"id": model_id(config["model"]), "name": display_name(config["model"]),
            "task": task, "target": str(config["target"]["name"]),
            "precision": str(config["quant"]["name"]), "tools": dict(ir.get("tools") or {}),
            "inputs": inputs, "dynamic": bool(exports and exports[0].get("dynamic")) and not any(
                s["op"] == "fix_shapes" for s in ir["steps"]),
            "compiled": of_config(config["target"]).compiles,
            "genai": genai_layout(exports),
            "provider_options": provider_options(ir),
            "rules": [f"{rw['rule']} ({rw['action']} {rw['step']}): {rw['conclusion']}"
                      for rw in ir.get("rewrites") or []]}


def genai_layout(exports: list[dict[str, Any]]) -> str | None:
    """The onnxruntime-genai model type a bundle's genai_config.json names: its plain decoder
    where a causal LM's token graph has a free past, else its decoder pipeline; its Whisper
    runner where an encoder also gives the cross keys and values (genai's Whisper layout);
    None for other models."""
    graphs = {e.get("graph"): e for e in exports if e.get("graph") in ROLES}
    if any(ROLES[g].trace is Trace.ENCODER and any(
            str(o).startswith(CACHE.cross + ".") for o in e.get("outputs") or [])
            for g, e in graphs.items()):
        return GENAI_WHISPER
    if kind_of(list(graphs)) is not Kind.DECODER_ONLY or uncached_graph(list(graphs)):
        return None  # genai's decoders run over a cache
    free = any(ROLES[g].reads_cache and e.get("dynamic") for g, e in graphs.items())
    return GENAI_DECODER if free else GENAI_PIPELINE


def provider_options(ir: dict[str, Any]) -> dict[str, Any]:
    """The provider options the deliverable was built with and is opened with: those of the
    last step that makes a model on the EP (compile, a shared context, a bundle's runs_on)."""
    made = [s for s in ir["steps"] if "provider_options" in s["params"]
            and not OPS[s["op"]].has(Trait.SINK)]
    return dict(made[-1]["params"]["provider_options"]) if made else {}


def card(record: dict[str, Any], files: dict[str, int], license_: str | None = None,
         unfed: tuple[str, ...] = ()) -> str:
    """The card's text. `files`: the folder's files (relative name -> bytes); `unfed`: the
    checkpoint's encoders of other inputs that its graphs leave out (lm_classes.unfed_towers)."""
    model = record["model"]
    if any((s.get("metrics") or {}).get("axes_fixed") for s in record.get("steps") or []):
        model = {**model, "dynamic": False}  # its export found the graph holds at one length
    lines = [*_front_matter(model, files, license_), "", *_intro(record, model), ""]
    if unfed:
        lines += [(f"The graphs generate from token ids alone, as transformers' `generate` does "
                   f"given no other input: the checkpoint's {' and '.join(unfed)} encoders are "
                   "not in them, and images or audio are not fed."), ""]
    lines += ["## Files", "", *_files(files), ""]
    lines += ["## Accuracy and speed", "", *_figures(record), ""]
    lines += ["## Use it", "", *_use(model, files), ""]
    lines += ["## How it was built", "", *_steps(record), "", *_rules(model), ""]
    lines += ["## Runtime", "", *_runtime(record.get("runtime")), ""]
    lines += ["## Rebuild it", "", "```sh", rebuild_command(record), "```", "",
              "Tools the plan's keys were made with: " +
              ", ".join(f"{k} {v}" for k, v in sorted(model["tools"].items())) + "."]
    return "\n".join(lines).rstrip() + "\n"


def _runtime(found: dict[str, Any] | None) -> list[str]:
    """What the graphs need to load (runtime.json), and how to check an environment for it."""
    if not found:
        return ["(no runtime manifest)"]
    needs = [f"{k} {v}" for k, v in sorted(found["packages"].items())]
    sdk = found.get("sdk")
    if sdk:
        needs.append(f"{sdk['name']} {sdk['version']} (backend build {sdk['build']})")
    out = [f"Its graphs load with {', '.join(needs)} on `{found['provider']}`" +
           (f" with provider options `{json.dumps(found['provider_options'], sort_keys=True)}`"
            if found["provider_options"] else "") + "; `runtime.json` says so for tools."]
    for name, g in sorted(found["graphs"].items()):
        made = [(f"compiled for HTP arch {g.get('htp_arch') or 'the backend default'}, "
                f"SoC model {g.get('soc_model') or 'none'}")] if "htp_arch" in g else []
        where = {"host": "on the host CPU", "device": "for the device"}.get(g["runs_on"], "")
        out.append(f"- `{name}`: {g['kind']}" + "".join(f", {m}" for m in (*made, where) if m))
    out += ["", ("Check an environment before loading (one line and exit 2 when a version "
            "differs; each graph loaded in a child process otherwise):"), "", "```sh",
            "modelplan check path/to/this/folder", "```"]
    return out


def _front_matter(model: dict[str, Any], files: dict[str, int],
                  license_: str | None) -> list[str]:
    meta = ["---"]
    if model["id"]:
        meta.append(f"base_model: {model['id']}")
        if model["precision"] != "none":
            meta.append("base_model_relation: quantized")
    # an EPContext model opens only on the EP that compiled it, not in sentence-transformers
    opens_in_st = SENTENCE_TRANSFORMERS in files and not model.get("compiled")
    meta.append("library_name: " + ("sentence-transformers" if opens_in_st else "onnx"))
    if license_:
        meta.append(f"license: {license_}")
    tag = "sentence-similarity" if SENTENCE_TRANSFORMERS in files else model["task"]
    if tag:
        meta.append(f"pipeline_tag: {tag}")
    tags = ["onnx", "modelplan", model["target"], model["precision"]]
    tags += ["npu", "epcontext"] if model.get("compiled") else []
    meta += ["tags:", *[f"- {t}" for t in dict.fromkeys(tags)], "---"]
    return meta


def _intro(record: dict[str, Any], model: dict[str, Any]) -> list[str]:
    source = f"[{model['id']}](https://huggingface.co/{model['id']})" if model["id"] \
        else f"`{model['name']}`"
    precision = PRECISIONS.get(model["precision"], f"quantized ({model['precision']})")
    return [f"# {model['name']} — {model['precision']} for {model['target']}", "",
            (f"{source} as ONNX for `{model['target']}`, {precision}, task "
            f"`{model['task']}`. Built by modelplan (run `{record['run_id']}`, "
            f"{record['started']}); `run.json` is the whole record, `metrics.json` every "
            "step's figures.")]


def _files(files: dict[str, int]) -> list[str]:
    blobs = {n: b for n, b in files.items() if n.startswith("weights/")}
    rows = [f"- `{n}` ({human_bytes(b)})" for n, b in sorted(files.items()) if n not in blobs]
    if blobs:
        rows.append(f"- `weights/`: {len(blobs)} weight file(s), {human_bytes(sum(blobs.values()))}, "
                    "named by their content (the graphs read them as external data)")
    return rows


def _figures(record: dict[str, Any]) -> list[str]:
    out = [f"- {line}" for line in results(record)] or ["- (no verify, eval or perf step ran)"]
    out += accuracy.markdown(record)
    out += module_error.record_markdown(record)
    out += modules.markdown(record)
    return out


def _use(model: dict[str, Any], files: dict[str, int]) -> list[str]:
    shape = ("Its batch and sequence axes are free: tokenize as you like." if model["dynamic"]
             else "Its inputs have fixed shapes (" + "; ".join(model["inputs"]) + "): pad and "
             "truncate to them (e.g. `padding=\"max_length\"`)." if model["inputs"] else "")
    if "bundle.json" in files:
        return _bundle(model, files)
    if model.get("compiled"):
        return [
            f"This folder holds EPContext models compiled for `{model['target']}`: they run on "
            "ONNX Runtime with the QNN execution provider (`onnxruntime-qnn`) on a device with "
            "its NPU (or its simulator), not on the CPU EP. Clients that open sessions with the default providers "
            "(Optimum's ORTModel classes, sentence-transformers' ONNX backend, "
            "transformers.js) cannot run it without that EP. " + shape, "",
            "```python", "import onnxruntime as ort, onnxruntime_qnn",
            ('ort.register_execution_provider_library("QNNExecutionProvider", '
            "onnxruntime_qnn.get_library_path())"),
            "options = ort.SessionOptions()",
            ("devices = [d for d in ort.get_ep_devices() if d.ep_name == "
            '"QNNExecutionProvider"]'),
            'options.add_provider_for_devices(devices, {"backend_type": "htp"})',
            'session = ort.InferenceSession("model.onnx", options)', "```"]
    out = [shape, ""] if shape else []
    if SENTENCE_TRANSFORMERS in files:
        out += ["sentence-transformers (ONNX backend):", "", "```python",
                "from sentence_transformers import SentenceTransformer",
                'model = SentenceTransformer("path/to/this/folder", backend="onnx")',
                'embeddings = model.encode(["a sentence", "another one"])', "```", ""]
    cls = OPTIMUM.get(model["task"] or "")
    if cls and "model.onnx" in files:
        out += ["Optimum (optimum-onnx):", "", "```python",
                f"from optimum.onnxruntime import {cls}",
                f'model = {cls}.from_pretrained("path/to/this/folder")', "```", ""]
    out += ["ONNX Runtime:", "", "```python", "import onnxruntime as ort",
            'session = ort.InferenceSession("model.onnx")', "```"]
    return out


# onnxruntime-genai over a folder with a sliding window: the prompt counted padded to whole
# windows, the text read after them
_WINDOW_RUN = ['folder = "path/to/this/folder"',
               'with open(f"{folder}/genai_config.json") as f:',
               '    window = json.load(f)["model"]["decoder"]["sliding_window"]["window_size"]',
               "model = og.Model(folder)", "tokenizer = og.Tokenizer(model)",
               'ids = tokenizer.encode("a prompt")',
               "padded = -(-len(ids) // window) * window  # the prompt's whole windows",
               "params = og.GeneratorParams(model)",
               "params.set_search_options(do_sample=False, max_length=padded + 16)",
               "generator = og.Generator(model, params)",
               "generator.append_tokens(ids)",
               "while not generator.is_done():", "    generator.generate_next_token()",
               "print(tokenizer.decode(generator.get_sequence(0)[padded:]))  # after the prompt",
               "```"]


def _genai_stages(target: str) -> list[str]:
    """How onnxruntime-genai runs a compiled bundle: its pipeline over the compiled stages."""
    return ["", (f"onnxruntime-genai (0.18) runs the folder on the EP it was built for "
                 f"(`{target}`; `genai_config.json`: its decoder pipeline over "
                 "`prompt_stage_ctx.onnx` and `token_stage_ctx.onnx`, the graphs compiled "
                 "over genai's key/value cache of fixed length, with the build's provider "
                 "options). The QNN EP is a plugin: register its library first. genai reads "
                 "a prompt of up to `context_length` tokens a window (`prefill_length` "
                 "tokens) at a time, and counts it padded to whole windows in `max_length`:"),
            "", "```python", "import json", "", "import onnxruntime_genai as og",
            "import onnxruntime_qnn  # pip install onnxruntime-qnn", "",
            'og.register_execution_provider_library("QNNExecutionProvider",',
            "                                        onnxruntime_qnn.get_library_path())",
            *_WINDOW_RUN]


def _genai_windowed() -> list[str]:
    """How onnxruntime-genai runs a bundle of fixed shapes: the windowed graph over them."""
    return ["", (f"onnxruntime-genai (0.18) runs the folder on the CPU (`genai_config.json`: its "
                 f"decoder over `{GENAI_WINDOWED_GRAPH}`, which runs `prefill_model.onnx` on "
                 "the prompt and `decode_model.onnx` on each token, with genai's windowed "
                 "key/value cache in uint8: `bundle.json`'s `genai` gives its scales). The "
                 "prompt must fit in one window (`prefill_length` tokens: genai 0.18 feeds a "
                 "longer one whole, which the window does not take), and genai counts it "
                 "padded to the window in `max_length`:"),
            "", "```python", "import json", "", "import onnxruntime_genai as og", "",
            *_WINDOW_RUN]


def _uncached(model: dict[str, Any]) -> list[str]:
    """A causal LM's one graph on the whole prefix: no genai layout; Optimum on the CPU."""
    out = ["", ("One graph, `uncached_model.onnx`, run on all the tokens so far for each new one "
                "(the model keeps no key/value cache, or was built with "
                "`export.shapes.decoder_cache=false`): onnxruntime-genai runs decoders over a "
                "cache, so there is no `genai_config.json`.")]
    if model.get("compiled") or not model.get("dynamic"):
        return out + ["", ("Its token axis is fixed (a target that compiles, or a trace that "
                           "holds at its own length only): `modelplan generate` feeds it the "
                           "tokens right-padded to that length and reads the last real one's "
                           "logits; a client that feeds the prompt as it is (Optimum's "
                           "ORTModelForCausalLM) does not run it.")]
    return out + ["", ("Its token axis is free: Optimum's ORTModelForCausalLM runs it without "
                       "a cache:"), "", "```python",
                  "from optimum.onnxruntime import ORTModelForCausalLM",
                  "from transformers import AutoTokenizer", "",
                  ('model = ORTModelForCausalLM.from_pretrained("path/to/this/folder", '
                  'file_name="uncached_model.onnx",'),
                  ("                                            use_cache=False, "
                  "use_io_binding=False)"),
                  'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")',
                  'read = tokenizer("a prompt", return_tensors="pt")',
                  ('out = model.generate(input_ids=read["input_ids"], '
                  'attention_mask=read["attention_mask"],'),
                  "                     max_new_tokens=32, do_sample=False)",
                  "print(tokenizer.decode(out[0]))", "```"]


def _bundle(model: dict[str, Any], files: dict[str, int]) -> list[str]:
    """A generation bundle: graphs over a static cache, run by modelplan's own loop."""
    where = (f"on the EP it was built for (`{model['target']}`)" if model.get("compiled")
             else "on the CPU")
    out = [("A bundle of graphs (`bundle.json` lists them with their inputs, outputs and cache "
           f"geometry) that runs {where} with modelplan's greedy loop:"), "", "```sh",
           'modelplan generate path/to/this/folder "a prompt"', "```"]
    if "uncached_model.onnx" in files:
        return out + _uncached(model)
    if model.get("genai") == GENAI_DECODER and "genai_config.json" in files:
        out += ["", ("onnxruntime-genai (0.18) runs the folder as it is (`genai_config.json`: "
                     "its decoder over `decode_model.onnx`, whose cache grows with the prompt):"),
                "", "```python", "import onnxruntime_genai as og", "",
                'model = og.Model("path/to/this/folder")',
                "tokenizer = og.Tokenizer(model)", "params = og.GeneratorParams(model)",
                "params.set_search_options(do_sample=False, max_length=64)",
                "generator = og.Generator(model, params)",
                'generator.append_tokens(tokenizer.encode("a prompt"))',
                "while not generator.is_done():", "    generator.generate_next_token()",
                "print(tokenizer.decode(generator.get_sequence(0)))", "```"]
    elif model.get("genai") in (GENAI_DECODER, GENAI_PIPELINE) and \
            "genai_config.json" not in files:
        out += ["", ("No `genai_config.json`: onnxruntime-genai's decoder gives every layer's "
                "keys and values one geometry (`num_key_value_heads` heads of `head_size`), and "
                "this model's cache has its own (`bundle.json` gives each buffer's shape: "
                "layers of their own width, keys and values of different widths, or layers "
                "without a cache), or some of its layers keep a recurrent state (`bundle.json`'s "
                "`lm_state` inputs), for which genai has no input: run it with "
                "`modelplan generate`.")]
    elif model.get("genai") == GENAI_PIPELINE and GENAI_WINDOWED_GRAPH in files:
        out += _genai_windowed()
    elif model.get("genai") == GENAI_PIPELINE and "genai_config.json" in files and \
            any(f.endswith("_stage_ctx.onnx") for f in files):
        out += _genai_stages(model["target"])
    elif model.get("genai") == GENAI_PIPELINE:
        out += ["", ("`genai_config.json` describes the graphs as onnxruntime-genai's decoder "
                "pipeline, which onnxruntime-genai 0.18 does not run over graphs of fixed "
                "shapes and a cache of new entries (docs/generation.md says why): run it with "
                "`modelplan generate`. A build for a target that compiles adds the stages "
                "genai runs unless its graphs are cut in parts or `export.genai_stages=false`.")]
    elif model.get("genai") == GENAI_WHISPER and "genai_config.json" in files:
        out += _genai_whisper()
    elif model.get("genai") == GENAI_WHISPER:
        out += ["", ("The graphs are in onnxruntime-genai's Whisper layout, but its runner "
                f"feeds the encoder {GENAI_WHISPER_FRAMES} log-mel frames (30 s) and this "
                "encoder takes another length: no `genai_config.json`; run it with "
                "`modelplan generate`.")]
    else:
        out += ["", ("onnxruntime-genai has no runner for this bundle's layout (its Whisper "
                "runner reads the layout a Whisper build gets on the CPU in fp32; its "
                "`marian-ssru` type is Marian NMT's recurrent decoder, not MarianMT's; it runs "
                "no other encoder-decoder): run it with `modelplan generate`.")]
    return out


def _genai_whisper() -> list[str]:
    """How onnxruntime-genai transcribes with a Whisper bundle in its layout."""
    return ["", ("onnxruntime-genai (0.18) runs the folder as it is (`genai_config.json`: "
            "its Whisper runner over `encoder_model.onnx`, which also gives the cross keys "
            "and values, and `decoder_model.onnx`, whose cache grows with the transcript); "
            "feed it 30 s of log-mel features and the start and forced tokens (with the "
            "checkpoint's tokenizer, `model.create_multimodal_processor()` computes both "
            "from an audio file and `audio_processor_config.json`):"),
            "", "```python", "import numpy as np", "import onnxruntime_genai as og", "",
            'model = og.Model("path/to/this/folder")', "params = og.GeneratorParams(model)",
            "params.set_search_options(do_sample=False, max_length=64)",
            "generator = og.Generator(model, params)", "inputs = og.NamedTensors()",
            'inputs["input_features"] = features  # float32 [1, mel bins, 3000]',
            'inputs["input_ids"] = np.array([start_and_forced_tokens], np.int32)',
            "generator.set_inputs(inputs)",
            "while not generator.is_done():", "    generator.generate_next_token()",
            "print(generator.get_sequence(0))", "```"]


def _steps(record: dict[str, Any]) -> list[str]:
    """Each step of the plan, what happened to it, and for an elided step the proof's check."""
    out = ["| step | op | action | result |", "|---|---|---|---|"]
    for s in record["steps"]:
        check = s.get("proof_check") or {}
        why = f"elided: {check['detail']}" if s["action"] == "elided" and check.get("held") \
            else note(s)
        out.append(f"| `{s['id']}` | {s['op']} | {s['action']} | {why} |")
    return out


def _rules(model: dict[str, Any]) -> list[str]:
    rules = model.get("rules") or []
    return ["What the planner's rules did (each proved in `modelplan plan`):", "",
            *[f"- {r}" for r in rules]] if rules else []


GROUPS = ("model", "optim", "quant", "target", "verify", "eval", "perf")


def rebuild_command(record: dict[str, Any]) -> str:
    """The run's config as a command: every group's choice, then its other overrides."""
    choices = record.get("choices") or {}
    picked = [f"{g}={choices[g]}" for g in GROUPS if g in choices]
    rest = [o for o in record.get("overrides") or []
            if o.partition("=")[0].lstrip("+~") not in GROUPS]
    return " ".join(["modelplan run", *picked, *rest])
