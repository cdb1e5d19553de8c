"""`modelplan import`: winml-cli recipes become primary configs of a user config tree, every
field mapped or reported, bad recipes one line each, and the plan's Markdown says which steps
each recipe field shaped. Planner-side only: nothing is built here."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_cli

RECIPE: dict[str, Any] = {
    "loader": {"task": "text-classification", "model_type": "bert",
               "model_class": "AutoModelForSequenceClassification"},
    "export": {"opset_version": 17, "batch_size": 1, "dynamo": False, "verbose": False,
               "enable_hierarchy_tags": True, "clean_onnx": False,
               "hierarchy_tag_format": "full",
               "input_tensors": [
                   {"name": "input_ids", "dtype": "int32", "shape": [1, 32],
                    "value_range": [0, 1000]},
                   {"name": "attention_mask", "dtype": "int32", "shape": [1, 32],
                    "value_range": [0, 2]}],
               "output_tensors": [{"name": "logits"}]},
    "optim": {"gelu_fusion": True, "bias_softmax_fusion": True, "made_up_flag": True,
              "clamp_constant_values": True},
    "quant": {"mode": "qdq", "weight_type": "uint8", "activation_type": "uint16",
              "per_channel": True, "symmetric": False, "samples": 8,
              "calibration_method": "minmax", "nodes_to_exclude": ["/bert/pooler/dense/MatMul"],
              "model_id": "acme/tiny-bert", "task": "text-classification"},
    "compile": None,
    "eval": {"task": "text-classification",
             "dataset": {"path": "nyu-mll/glue", "name": "sst2", "split": "validation",
                         "samples": 100}},
    "notes": "${not.an.interpolation}",
}
NAME = "acme_tiny-bert-text-classification-w8a16"


def write(root: Path, rel: str, recipe: Any) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(recipe if isinstance(recipe, str) else json.dumps(recipe))
    return path


def leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def covered(path: str, fields: set[str]) -> bool:
    """A recipe leaf is accounted for by a field equal to it or to one of its parents."""
    parts = path.split(".")
    return any(".".join(parts[:i]) in fields for i in range(1, len(parts) + 1))


def config(conf: Path, name: str, *overrides: str) -> dict[str, Any]:
    result = run_cli("config", "--json", "--config-dir", str(conf), "--config-name", name,
                     *overrides)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("recipes")
    recipe = write(root, "acme_tiny-bert/text-classification_w8a16_config.json", RECIPE)
    conf = root / "conf"
    result = run_cli("import", str(recipe), "-o", str(conf), env=no_datasets(root))
    return {"root": root, "conf": conf, "result": result, "recipe": recipe}


def no_datasets(root: Path) -> dict[str, str]:
    """An environment whose Hugging Face caches are empty folders under `root`."""
    return {"HF_HOME": str(root / "hf"), "HF_HUB_CACHE": str(root / "hf" / "hub"),
            "HF_DATASETS_CACHE": str(root / "hf" / "datasets")}


def test_a_recipe_becomes_a_primary_config(imported: dict[str, Any]) -> None:
    result, conf = imported["result"], imported["conf"]
    assert result.returncode == 0, result.stderr
    assert f"--config-dir {conf} --config-name {NAME}" in result.stdout
    cfg = config(conf, NAME)
    assert (cfg["model"]["source"], cfg["model"]["hub_id"], cfg["model"]["task"]) == \
        ("hub_cache", "acme/tiny-bert", "text-classification")
    assert cfg["model"]["model_class"] is None  # the task's Auto class
    # the recipe's samples over the packaged configuration's calibration (its headroom kept)
    assert (cfg["quant"]["name"], cfg["quant"]["calibration"]) == \
        ("w8a16_pc", {"method": "minmax", "samples": 8, "headroom": 1.5})
    assert (cfg["optim"]["name"], cfg["optim"]["flags"]) == ("recipe", ["gelu"])
    assert cfg["target"]["name"] == "qnn_htp"  # a portable quantized recipe: the NPU
    assert cfg["export"]["inputs"][0] == {"name": "input_ids", "dtype": "int32",
                                          "shape": [1, 32], "min": 0, "max": 999}
    assert cfg["export"]["outputs"] == ["logits"]
    assert cfg["verify"]["name"] == "cosine"
    assert cfg["eval"]["name"] == "task"
    assert {k: cfg["eval"]["dataset"][k] for k in ("path", "name", "split", "samples")} == \
        {"path": "nyu-mll/glue", "name": "sst2", "split": "validation", "samples": 100}
    assert "Will not plan yet: dataset nyu-mll/glue is not available offline; `modelplan " \
        "plan` fails until it is saved on this machine (datasets.load_dataset(" \
        "'nyu-mll/glue', 'sst2')" in result.stdout


def test_every_field_is_mapped_or_dropped_with_a_reason(imported: dict[str, Any]) -> None:
    cfg = config(imported["conf"], NAME)
    fields = {f["field"]: f for f in cfg["origin"]["fields"]}
    assert all(covered(p, set(fields)) for p in leaves(RECIPE))
    dropped = {k: f["note"] for k, f in fields.items() if f["outcome"] == "dropped"}
    assert dropped["optim.made_up_flag"] == "not an optimization winml-cli knows either (it " \
        "ignores it)"
    assert "modelplan's: attention, bias_gelu, gelu" in dropped["optim.bias_softmax_fusion"]
    assert fields["quant.nodes_to_exclude"]["config"] == "quant.overrides"
    assert "is not available offline" in fields["eval.dataset.path"]["note"]
    assert fields["eval.dataset.split"]["config"] == "eval.dataset.split"
    assert "not a WinMLBuildConfig section" in dropped["notes"]
    assert fields["notes"]["value"] == '"${not.an.interpolation}"'  # written, not resolved
    assert fields["optim.clamp_constant_values"]["steps"] == ["legalize"]
    assert set(dropped) <= {"optim.made_up_flag", "optim.bias_softmax_fusion", "notes",
                            "export.verbose"}


def test_plan_markdown_says_which_steps_each_field_shaped(imported: dict[str, Any]) -> None:
    result = run_cli("plan", "--config-dir", str(imported["conf"]), "--config-name", NAME,
                     "--symbolic-sources", "--format", "md", env=no_datasets(imported["root"]))
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): line for line in result.stdout.splitlines()
            if line.startswith("| `") and line.count("|") == 6}
    assert "`quantize`" in rows["`quant.per_channel`"]
    assert "`optimize`" in rows["`optim.gelu_fusion`"]
    assert "`legalize`" in rows["`optim.clamp_constant_values`"]
    assert "`export`" in rows["`export.input_tensors`"]
    assert "`compile`" in rows["`(ep/device folder)`"]
    assert "`eval`" in rows["`eval.dataset.path`"] and "`eval`" in rows["`eval.task`"]
    assert "Recipe fields not applied (4)" in result.stdout
    assert "`quantize`" in rows["`quant.nodes_to_exclude`"]
    text = run_cli("plan", "--config-dir", str(imported["conf"]), "--config-name", NAME,
                   "--symbolic-sources")
    assert "From winml-cli recipe acme_tiny-bert/text-classification_w8a16_config.json: " \
           in text.stdout


def test_model_path_reads_a_local_copy_of_the_model(imported: dict[str, Any],
                                                    tmp_path: Path) -> None:
    result = run_cli("plan", "--config-dir", str(imported["conf"]), "--config-name", NAME,
                     f"model.path={tmp_path}")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"modelplan: error: model.path: '{tmp_path}' is not a "
                                     "Hugging Face checkpoint directory (no config.json); "
                                     "point it at one")


def broken(**changes: Any) -> dict[str, Any]:
    recipe = copy.deepcopy(RECIPE)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = recipe
        for p in parents:
            node = node[p]
        node[leaf] = value
    return recipe


BAD = [
    ("not json", "{", "<file>: not valid JSON"),
    ("a list", [1, 2], "<file>: not a winml-cli build recipe"),
    ("no task", broken(loader__task=None), "loader.task: not set"),
    ("a task modelplan lacks", broken(loader__task="translation"),
     "loader.task: 'translation' is not a task modelplan builds"),
    ("dynamic quant", broken(quant__mode="dynamic"),
     "quant.mode: 'dynamic': dynamic quantization"),
    ("bad opset", broken(export__opset_version=12),
     "export.opset_version: 12: modelplan exports opsets 14 to 21"),
    ("bad weight type", broken(quant__weight_type="uint4"),
     "quant.weight_type: 'uint4' is not one of"),
    ("a section that is not one", broken(loader=5),
     "loader: not a section (an object with task, model_class, ...)"),
    ("winml's own model", broken(loader__model_type="wav2vec2_emotion_regression"),
     "loader.model_type: 'wav2vec2_emotion_regression' is winml-cli's own EmotionModel"),
]


@pytest.mark.parametrize("recipe,says", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_recipe_is_one_line_naming_the_field(tmp_path: Path, recipe: Any,
                                                   says: str) -> None:
    path = write(tmp_path, "acme_tiny-bert/text-classification_w8a16_config.json", recipe)
    result = run_cli("import", str(path), "-o", str(tmp_path / "conf"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("modelplan: error: acme_tiny-bert/text-classification_w8a16_"
                               f"config.json: {says}"), lines[0]
    assert not list((tmp_path / "conf").glob("*.yaml"))  # nothing half written


def test_a_recipe_with_no_model_id_and_a_bad_section_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "recipes/text-classification_w8a16_config.json", {"loader": 5})
    result = run_cli("import", str(path), "-o", str(tmp_path / "conf"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        "modelplan: error: recipes/text-classification_w8a16_config.json: quant.model_id: no "
        "model id: the folder 'recipes' is not named org_name and the recipe has no "
        "quant.model_id; pass --model-id ORG/NAME")


def test_a_target_modelplan_lacks_is_refused_unless_one_is_given(tmp_path: Path) -> None:
    path = write(tmp_path, "acme_tiny-bert/dml/gpu/text-classification_fp16_config.json",
                 broken(quant={"mode": "fp16", "model_id": "acme/tiny-bert"}))
    refused = run_cli("import", str(path), "-o", str(tmp_path / "conf"))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "modelplan: error: acme_tiny-bert/dml/gpu/text-classification_fp16_config.json: folder "
        "dml/gpu: DirectML is not a target modelplan builds for; pass --target cpu or --target "
        "qnn_htp to import it for one of those")
    ok = run_cli("import", str(path), "-o", str(tmp_path / "conf"), "--target", "cpu")
    assert ok.returncode == 0, ok.stderr
    assert "(--target) = \"cpu\" -> target  (--target cpu (the recipe says dml/gpu))" \
        in ok.stdout
    cfg = config(tmp_path / "conf", "acme_tiny-bert-text-classification-fp16-dml-gpu")
    assert (cfg["target"]["name"], cfg["quant"]["name"]) == ("cpu", "fp16")


def test_int4_weights_import_as_w4a16(tmp_path: Path) -> None:
    path = write(tmp_path, "acme_tiny-bert/text-classification_w4a16_config.json",
                 broken(quant__weight_type="int4"))
    result = run_cli("import", str(path), "-o", str(tmp_path / "conf"), env=no_datasets(tmp_path))
    assert result.returncode == 0, result.stderr
    cfg = config(tmp_path / "conf", "acme_tiny-bert-text-classification_w4a16")
    assert (cfg["quant"]["name"], cfg["quant"]["weight_type"], cfg["quant"]["per_channel"]) == \
        ("w4a16", "int4", True)


def test_a_config_someone_wrote_is_not_overwritten(imported: dict[str, Any]) -> None:
    ours = imported["conf"] / "ours.yaml"
    target = imported["conf"] / f"{NAME}.yaml"
    again = run_cli("import", str(imported["recipe"]), "-o", str(imported["conf"]))
    assert again.returncode == 0, again.stderr  # its own earlier output is replaced
    ours.write_text(target.read_text().split("\n", 1)[1])  # the same, without the marker
    ours.replace(target)
    refused = run_cli("import", str(imported["recipe"]), "-o", str(imported["conf"]))
    assert refused.returncode == 2
    assert "exists and was not written by modelplan import; pass --force" in refused.stderr
    forced = run_cli("import", str(imported["recipe"]), "-o", str(imported["conf"]), "--force")
    assert forced.returncode == 0, forced.stderr


def test_an_encoder_and_a_decoder_recipe_are_one_config(tmp_path: Path) -> None:
    def part(role: str, tensors: list[dict[str, Any]]) -> dict[str, Any]:
        return {"loader": {"task": "feature-extraction" if role == "encoder" else
                           "text2text-generation", "model_type": "marian",
                           "model_class": f"Marian{role.title()}Wrapper"},
                "export": {"opset_version": 17, "input_tensors": tensors},
                "optim": {"gelu_fusion": role == "encoder", "matmul_add_fusion": True},
                "quant": None}
    write(tmp_path, "Helsinki-NLP_opus-mt-en-de/cpu/cpu/translation_fp32_decoder_config.json",
          part("decoder", [{"name": "decoder_input_ids", "dtype": "int32", "shape": [1, 1]},
                           {"name": "past_0_key", "dtype": "float32", "shape": [1, 8, 64, 64]}]))
    enc = write(tmp_path, "Helsinki-NLP_opus-mt-en-de/cpu/cpu/translation_fp32_encoder_config.json",
                part("encoder", [{"name": "input_ids", "dtype": "int32", "shape": [1, 48]}]))
    result = run_cli("import", str(enc), "-o", str(tmp_path / "conf"))
    assert result.returncode == 0, result.stderr
    cfg = config(tmp_path / "conf", "helsinki-nlp_opus-mt-en-de-translation-fp32-cpu")
    assert cfg["model"]["task"] == "text2text-generation"
    assert (cfg["export"]["shapes"]["sequence_length"],
            cfg["export"]["shapes"]["decoder_sequence_length"]) == (48, 64)
    assert sorted(cfg["optim"]["flags"]) == ["gelu", "matmul_add"]  # both graphs' fusions
    assert len(cfg["origin"]["recipes"]) == 2
    assert any(f["field"] == "decoder:export.input_tensors" and "KV cache" in f["note"]
               for f in cfg["origin"]["fields"])
    assert cfg["export"]["shapes"]["decoder_cache"] is True  # one token over a static cache


def test_blip_captioning_recipes_import_as_one_cached_image_to_text_build(tmp_path: Path
                                                                          ) -> None:
    """A BLIP pair as winml-cli writes its encoder-decoder recipes (its wrappers named by the
    graph they export), and the decoder over a static KV cache."""
    def part(role: str, tensors: list[dict[str, Any]]) -> dict[str, Any]:
        return {"loader": {"task": "image-feature-extraction" if role == "encoder" else
                           "text2text-generation", "model_type": "blip",
                           "model_class": f"Blip{'Vision' if role == 'encoder' else 'Text'}"
                                          f"{role.title()}Wrapper"},
                "export": {"opset_version": 17, "input_tensors": tensors},
                "quant": {"mode": "qdq", "weight_type": "uint8", "activation_type": "uint16",
                          "per_channel": True, "samples": 8,
                          "model_id": "Salesforce/blip-image-captioning-base"},
                "eval": {"task": "image-to-text"}}
    folder = "Salesforce_blip-image-captioning-base/qnn/htp"
    write(tmp_path, f"{folder}/image-to-text_qdq_config_decoder.json",
          part("decoder", [{"name": "decoder_input_ids", "dtype": "int32", "shape": [1, 1]},
                           {"name": "encoder_hidden_states", "dtype": "float32",
                            "shape": [1, 577, 768]},
                           {"name": "past_0_key", "dtype": "float32", "shape": [1, 12, 40, 64]}]))
    enc = write(tmp_path, f"{folder}/image-to-text_qdq_config_encoder.json",
                part("encoder", [{"name": "pixel_values", "dtype": "float32",
                                  "shape": [1, 3, 384, 384]}]))
    result = run_cli("import", str(enc), "-o", str(tmp_path / "conf"), env=no_datasets(tmp_path))
    assert result.returncode == 0, result.stderr
    name = next(p.stem for p in (tmp_path / "conf").glob("*.yaml"))
    cfg = config(tmp_path / "conf", name)
    assert cfg["model"]["hub_id"] == "Salesforce/blip-image-captioning-base"
    assert cfg["model"]["task"] == "image-to-text" and cfg["target"]["name"] == "qnn_htp"
    shapes = cfg["export"]["shapes"]
    assert (shapes["image_size"], shapes["decoder_sequence_length"], shapes["decoder_cache"]) \
        == (384, 40, True)


def test_bart_mnli_imports_as_zero_shot_classification(tmp_path: Path) -> None:
    recipe = {**RECIPE, "loader": {"task": "zero-shot-classification", "model_type": "bart",
                                   "model_class": "BartForSequenceClassification"},
              "quant": {**RECIPE["quant"], "model_id": "facebook/bart-large-mnli",
                        "task": "zero-shot-classification", "nodes_to_exclude": None},
              "eval": None}
    path = write(tmp_path, "facebook_bart-large-mnli/qnn/htp/zero-shot_qdq_config.json", recipe)
    result = run_cli("import", str(path), "-o", str(tmp_path / "conf"), env=no_datasets(tmp_path))
    assert result.returncode == 0, result.stderr
    cfg = config(tmp_path / "conf", next(p.stem for p in (tmp_path / "conf").glob("*.yaml")))
    assert (cfg["model"]["hub_id"], cfg["model"]["task"], cfg["model"]["model_class"]) == (
        "facebook/bart-large-mnli", "zero-shot-classification", "BartForSequenceClassification")


def test_a_directory_is_one_row_per_recipe(tmp_path: Path) -> None:
    root = tmp_path / "recipes"
    write(root, "acme_tiny-bert/text-classification_w8a16_config.json", RECIPE)
    write(root, "acme_tiny-bert/openvino/npu/text-classification_fp16_config.json", RECIPE)
    write(root, "acme_other/cpu/cpu/fill-mask_fp32_config.json", "not json")
    result = run_cli("import", str(root), "-o", str(tmp_path / "conf"), "--report",
                     str(tmp_path / "import.md"))
    assert result.returncode == 1  # not every recipe imported
    rows = [ln for ln in result.stdout.splitlines() if ln.startswith("acme_")]
    assert len(rows) == 3
    assert "failed: <file>: not valid JSON" in rows[0]
    assert "unsupported: folder openvino/npu: OpenVINO is not a target" in rows[1]
    assert f"imported -> {tmp_path / 'conf'}/{NAME}.yaml" in rows[2]
    assert "3 recipes: 1 imported (1 configs), 1 unsupported, 1 failed." in result.stdout
    report = (tmp_path / "import.md").read_text()
    assert report.startswith("| recipe | model id |") and f"### `{NAME}`" in report


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70000) | st.floats(-1e6, 1e6, allow_nan=False)
    | st.text(max_size=12) | st.sampled_from(["${x}", "yes", "null", "1e-05", "a: b", "#c"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3),
    max_leaves=8)
PATHS = ["loader.task", "loader.model_type", "loader.model_class", "loader.trust_remote_code",
         "export.opset_version", "export.batch_size", "export.dynamo", "export.input_tensors",
         "export.output_tensors", "export.clean_onnx", "export.hierarchy_tag_format",
         "optim.gelu_fusion", "optim.clamp_constant_values", "quant", "quant.mode",
         "quant.weight_type", "quant.activation_type", "quant.per_channel", "quant.samples",
         "quant.weight_symmetric", "quant.nodes_to_exclude", "compile", "eval", "eval.dataset",
         "made_up", "optim.some_new_flag"]


tensor_specs = st.lists(st.fixed_dictionaries(
    {"name": st.sampled_from(["input_ids", "attention_mask", "pixel_values", "x.y", ""])},
    optional={"dtype": st.sampled_from(["int32", "int64", "float32", "uint4", None]),
              "shape": st.lists(st.integers(-1, 600) | st.text(max_size=3), max_size=4),
              "value_range": json_values | st.tuples(st.integers(-5, 5), st.integers(-5, 9))
              .map(list)}), max_size=3)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(PATHS), json_values, max_size=4),
       tensors=st.none() | tensor_specs)
def test_any_recipe_imports_or_names_a_field_and_every_field_is_accounted(
        changes: dict[str, Any], tensors: list[dict[str, Any]] | None,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever a recipe holds: one outcome per build, a one-line reason when it does not
    import, every field accounted for when it does, and the config text reads back as meant."""
    from omegaconf import OmegaConf

    from planner.recipes.convert import convert
    from planner.recipes.emit import config_text, values
    from planner.recipes.layout import recipe_file

    recipe = copy.deepcopy(RECIPE)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = recipe
        for p in parents:
            node = node.setdefault(p, {}) if isinstance(node.get(p), dict) else \
                node.__setitem__(p, {}) or node[p]
        node[leaf] = value
    if tensors is not None and isinstance(recipe.get("export"), dict):
        recipe["export"]["input_tensors"] = tensors
    root = tmp_path_factory.mktemp("any")
    build = convert([recipe_file(write(root, "acme_tiny-bert/text-classification_w8a16_config"
                                             ".json", recipe), root)])
    assert build.status in ("imported", "unsupported", "failed")
    if build.status != "imported":
        assert "\n" not in build.message and ": " in build.message
        return
    fields = {e.field for e in build.entries}
    assert all(covered(p, fields) for p in leaves(recipe))
    read = OmegaConf.to_container(OmegaConf.create(config_text(build, "conf")), resolve=True)
    assert isinstance(read, dict)
    read.pop("defaults")
    assert read == values(build)


def test_a_report_that_names_a_folder_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    corpus = ROOT.parent / "shared" / "corpus" / "winml-recipes" / "FacebookAI_roberta-base"
    if not corpus.is_dir():
        pytest.skip("the recipe corpus is not beside this checkout")
    recipe = next(corpus.glob("*.json"))
    folder = tmp_path / "reports"
    folder.mkdir()
    result = run_cli("import", str(recipe), "-o", str(tmp_path / "conf"), "--report",
                     str(folder))
    assert result.returncode == 2 and "--report" in result.stderr and "a folder" in result.stderr
    assert not (tmp_path / "conf").exists() and not any(folder.iterdir())
