"""genai's windowed uint8 cache over a bundle of fixed shapes (executors/generation/windowed.py):
the uint8 steps, the If graph over stand-ins of the prefill and decode graphs (its numbers
against theirs), what genai_config.json says of it, and the bundles it is not made for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from executors.generation import genai, windowed
from executors.generation.bundle import BundleError

WINDOW, SLOTS, HEADS, WIDTH = 4, 11, 2, 3  # genai's context: 12 = the slots and the token
CONFIG = {"model_type": "llama", "vocab_size": 1, "hidden_size": 12, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": HEADS, "head_dim": WIDTH,
          "eos_token_id": 2, "bos_token_id": 1}


def value(name: str, kind: int, shape: list[int]) -> Any:
    return helper.make_tensor_value_info(name, kind, shape)


def save(path: Path, nodes: list[Any], inputs: list[Any], outputs: list[Any],
         inits: list[Any]) -> None:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def stand_ins(folder: Path) -> dict[str, Any]:
    """A decode graph that gives back, as the token's new entries, the past's last slot (keys)
    and first slot (values) plus its position, and its mask as logits; a prefill graph that
    gives back its positions as every entry (plus, for the keys, the past's sum over its slots)
    and its mask (the slots' and the window's) as logits. bundle.json of the two."""
    ints = [value(n, TensorProto.INT64, s) for n, s in (
        ("input_ids", [1, 1]), ("position_ids", [1, 1]), ("attention_mask", [1, SLOTS + 1]))]
    past = [value(f"past_key_values.0.{p}", TensorProto.FLOAT, [1, HEADS, SLOTS, WIDTH])
            for p in ("key", "value")]
    present = [value(f"present.0.{p}", TensorProto.FLOAT, [1, HEADS, 1, WIDTH])
               for p in ("key", "value")]
    const = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in
             (("last", SLOTS - 1), ("end", SLOTS), ("zero", 0), ("one", 1), ("axis", 2))]
    save(folder / "decode_model.onnx", [
        helper.make_node("Cast", ["position_ids"], ["at"], to=TensorProto.FLOAT),
        helper.make_node("Slice", ["past_key_values.0.key", "last", "end", "axis"], ["k"]),
        helper.make_node("Slice", ["past_key_values.0.value", "zero", "one", "axis"], ["v"]),
        helper.make_node("Add", ["k", "at"], ["present.0.key"]),
        helper.make_node("Add", ["v", "at"], ["present.0.value"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "zero"], ["logits"])],
        ints + past, [value("logits", TensorProto.FLOAT, [1, 1, SLOTS + 1]), *present], const)
    window = [value(n, TensorProto.INT64, [1, WINDOW]) for n in ("input_ids", "position_ids")]
    window.append(value("attention_mask", TensorProto.INT64, [1, SLOTS + WINDOW]))
    shape = helper.make_tensor("shape", TensorProto.INT64, [4], [1, HEADS, WINDOW, WIDTH])
    save(folder / "prefill_model.onnx", [
        helper.make_node("Cast", ["position_ids"], ["at"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["at", "flat"], ["at4"]),
        helper.make_node("Expand", ["at4", "shape"], ["at_all"]),
        # the keys: positions + the past's sum over its slots (genai's, then the empty ones)
        helper.make_node("ReduceSum", ["past_key_values.0.key", "axis"], ["seen"], keepdims=1),
        helper.make_node("Add", ["at_all", "seen"], ["present.0.key"]),
        helper.make_node("Identity", ["at_all"], ["present.0.value"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "zero"], ["logits"])],
        window + past, [value("logits", TensorProto.FLOAT, [1, 1, SLOTS + WINDOW]),
                        *(value(f"present.0.{p}", TensorProto.FLOAT, [1, HEADS, WINDOW, WIDTH])
                          for p in ("key", "value"))],
        [shape, helper.make_tensor("flat", TensorProto.INT64, [4], [1, 1, WINDOW, 1]),
         helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
         helper.make_tensor("axis", TensorProto.INT64, [1], [2])])
    specs = [{"name": v.name, "shape": [d.dim_value for d in v.type.tensor_type.shape.dim]}
             for v in ints + past]
    return {"graphs": {"prefill": {"model": "prefill_model.onnx", "inputs": specs,
                                   "outputs": [{"name": "logits"}]},
                       "decode": {"model": "decode_model.onnx", "inputs": specs,
                                  "outputs": [{"name": "logits"}]}},
            "prefill_length": WINDOW, "context_length": SLOTS,
            "runs_on": {"ep": "cpu", "backend": None, "provider_options": {}}}


SCALES = {"past_key_values.0.key": 0.02, "past_key_values.0.value": 0.025}


def test_the_uint8_cache_is_within_half_a_step_of_fp32_and_saturates() -> None:
    rng = np.random.default_rng(0)
    scale = 0.01
    x = rng.uniform(-1.27, 1.27, 1000).astype(np.float32)
    back = windowed.dequantize(windowed.quantize(x, scale), scale)
    assert np.abs(back - x).max() <= scale / 2 + 1e-6
    assert windowed.quantize(np.zeros(3, np.float32), scale).tolist() == [128] * 3
    assert windowed.quantize(np.array([9.0, -9.0], np.float32), scale).tolist() == [255, 0]
    assert windowed.scales({"past_key_values.0.key": 2.54})["past_key_values.0.key"] == \
        pytest.approx(2.54 * windowed.MARGIN / 127)


def test_the_windowed_graph_runs_the_decode_graph_on_the_dequantized_past(
        tmp_path: Path) -> None:
    """One token over genai's past of context - 1 slots in uint8: the decode graph's own
    entries for it, in genai's layout and uint8, within one step of the fp32 graph's on the
    fp32 past; the decode graph reads genai's whole mask."""
    described = stand_ins(tmp_path)
    made = windowed.write(tmp_path, described, SCALES)
    assert made["context_length"] == SLOTS + 1 and made["window"] == WINDOW
    rng = np.random.default_rng(1)
    past = {n: rng.uniform(-1, 1, (1, HEADS, SLOTS, WIDTH)).astype(np.float32) for n in SCALES}
    mask = (np.arange(SLOTS + 1) >= 5).astype(np.int64)[None]
    feed = {"input_ids": np.array([[7]]), "position_ids": np.array([[1]]),
            "attention_mask": mask}
    genai_feed = {n: windowed.to_genai(n, windowed.quantize(x, SCALES[n]))
                  for n, x in past.items()}
    assert genai_feed["past_key_values.0.key"].shape == (HEADS, 1, WIDTH, SLOTS)
    got = run(tmp_path / windowed.GRAPH, {**feed, **genai_feed})
    want = run(tmp_path / "decode_model.onnx", {**feed, **past})
    assert got["present.0.key"].dtype == np.uint8
    assert got["present.0.key"].shape == (HEADS, 1, WIDTH, 1)
    assert got["present.0.value"].shape == (HEADS, 1, 1, WIDTH)
    for name, scale in SCALES.items():
        present = name.replace("past_key_values", "present")
        back = windowed.dequantize(windowed.to_genai(name, got[present]), scale)
        assert np.abs(back - want[present]).max() <= scale + 1e-6, name  # past's and own
    assert (got["logits"] == want["logits"]).all()


def test_the_windowed_graph_runs_the_prefill_graph_on_the_window(tmp_path: Path) -> None:
    """The prompt's window (left-padded, genai's layout) runs the prefill graph after genai's
    past of context - window slots and window - 1 empty ones: its mask is genai's past columns,
    zeros, then the window's; its entries come back in genai's layout, one step from fp32."""
    windowed.write(tmp_path, stand_ins(tmp_path), SCALES)
    mask = np.zeros((1, SLOTS + 1), np.int64)
    mask[0, -3:] = 1
    mask[0, :2] = 1  # two slots of genai's past filled (a second window)
    filled = 130  # the past's keys: 2 uint8 steps above the zero point in every slot
    past = SLOTS + 1 - WINDOW
    feed = {"input_ids": np.array([[0, 5, 6, 7]]), "position_ids": np.array([[0, 0, 1, 2]]),
            "attention_mask": mask,
            **{n: np.full((HEADS, 1, WIDTH, past) if n.endswith("key") else
                          (HEADS, 1, past, WIDTH), filled if n.endswith("key") else 128,
                          np.uint8)
               for n in SCALES}}
    got = run(tmp_path / windowed.GRAPH, feed)
    assert got["logits"].tolist() == [[[1, 1, *[0] * (past - 2), *[0] * (WINDOW - 1),
                                        0, 1, 1, 1]]]
    assert got["present.0.key"].shape == (HEADS, 1, WIDTH, WINDOW)
    scale = SCALES["past_key_values.0.key"]
    key = windowed.dequantize(got["present.0.key"], scale)
    seen = past * (filled - windowed.ZERO_POINT) * scale  # genai's slots; the empty ones 0
    assert np.abs(key[0, 0, 0] - np.add([0, 0, 1, 2], seen)).max() <= scale / 2 + 1e-6


def run(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {i.name: feed[i.name]
                                               for i in session.get_inputs()}), strict=True))


def test_genai_config_names_the_windowed_graph_as_genais_decoder(tmp_path: Path) -> None:
    described = stand_ins(tmp_path)
    described["genai"] = windowed.write(tmp_path, described, SCALES)
    made = genai.config_for(CONFIG, described, {}, tmp_path)
    model = made["model"]
    assert model["type"] == "decoder" and model["decoder"]["filename"] == windowed.GRAPH
    assert model["context_length"] == made["search"]["max_length"] == SLOTS + 1
    assert model["decoder"]["sliding_window"] == {
        "window_size": WINDOW, "pad_value": 128, "alignment": "right",
        "slide_key_value_cache": True, "slide_inputs": True}
    (tmp_path / genai.GENAI_CONFIG).write_text(json.dumps(made))
    assert genai.read(tmp_path, described)["model"]["context_length"] == SLOTS + 1
    del described["genai"]  # a bundle.json that does not name the graph
    with pytest.raises(BundleError, match="names 'genai_model.onnx', which is not one of"):
        genai.read(tmp_path, described)


def test_a_bundle_whose_prompt_graph_reads_no_cache_is_refused_in_one_line(
        tmp_path: Path) -> None:
    """A bundle built before prompts were read a window at a time over the cache (its prefill
    graph takes no past): `modelplan generate` would feed it the buffers; it says to rebuild."""
    from executors.generation import bundle

    described = stand_ins(tmp_path)
    (tmp_path / "bundle.json").write_text(json.dumps(described))
    assert bundle.read(tmp_path)["prefill_length"] == WINDOW
    prefill = described["graphs"]["prefill"]
    prefill["inputs"] = [s for s in prefill["inputs"] if not s["name"].startswith("past_")]
    (tmp_path / "bundle.json").write_text(json.dumps(described))
    with pytest.raises(BundleError, match="prefill graph reads no key/value cache .* rebuild "
                                          "the bundle with modelplan run") as err:
        bundle.read(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("change", "why"), [
    ({"host": {"head": "head_model.onnx"}}, "on the host"),
    ({"context_length": 2 * WINDOW - 2}, "less than two windows"),
    ({"graphs": {"decode": {"model": "decode_model.onnx", "parts": 2}}}, "split in parts"),
    ({"runs_on": {"ep": "qnn", "backend": "htp", "provider_options": {}}}, "context binaries")])
def test_bundles_the_windowed_graph_does_not_cover_say_why(
        tmp_path: Path, change: dict[str, Any], why: str) -> None:
    described = {**stand_ins(tmp_path), **change}
    assert why in windowed.fits(described, tmp_path)
    assert windowed.fits(stand_ins(tmp_path), tmp_path) is None


def test_a_cache_scale_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no cache scale for past_key_values.0.value"):
        windowed.write(tmp_path, stand_ins(tmp_path), {"past_key_values.0.key": 0.1})
    assert not (tmp_path / windowed.GRAPH).exists()
