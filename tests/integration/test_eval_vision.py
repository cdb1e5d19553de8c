"""`eval` of the vision tasks on tiny random-weight models: segmentation, depth, detection
(softmax and focal-loss heads, zero-shot with text queries), keypoints and zero-shot
classification, on small datasets written here (a save_to_disk folder, JSON Lines with image
paths, an image folder) and on the shipped photographs (agreement with PyTorch). Every run
reports the metric for PyTorch, the fp32 export and the target; on the CPU in fp32 the export
scores what PyTorch scores. Detection, zero-shot detection and keypoints are scored against
objects and keypoints drawn by hand, and PyTorch's score is checked against one worked out here
from transformers' own outputs (faster-coco-eval's mAP, PCK by hand). Segmentation also runs on
QNN HTP (w8a16 per-channel) within a drop of 0.05."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from filelock import FileLock

from planner.models.evaluation import EVAL
from tests.conftest import shared_dir
from tests.integration.conftest import run_json

SAMPLES = "eval.dataset.samples=4"
CPU = ("quant=none", "target=cpu")
HTP = ("quant=w8a16_pc", "target=qnn_htp", "quant.calibration.samples=8")
TEXT = ("export.shapes.sequence_length=16",)   # text queries of a few tokens


def tiny(model_type: str, task: str) -> tuple[str, ...]:
    return ("model=tiny_random", f"model.random_init.model_type={model_type}",
            f"model.task={task}")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module, whichever xdist worker builds a model first."""
    path = shared_dir(tmp_path_factory) / "eval-vision-store"
    path.mkdir(exist_ok=True)
    return path


def evaluate(store: Path, out: Path, *args: str) -> dict[str, Any]:
    """The eval step's metrics of `modelplan run ARGS eval=task`."""
    code, record, err = run_json(*args, "verify=none", "perf=none", "eval=task", SAMPLES,
                                 store=store, outputs=out)
    assert code == 0, err
    return next(s for s in record["steps"] if s["op"] == "eval")["metrics"]


def last_record(out: Path) -> dict[str, Any]:
    """The run record `evaluate` left under `out`."""
    return json.loads(next(out.rglob("run.json")).read_text())


def checkpoint_of(record: dict[str, Any]) -> Path:
    """The checkpoint `resolve` wrote for a run."""
    resolve = next(s for s in record["steps"] if s["op"] == "resolve")
    return Path(resolve["outputs"]["source.json"]).parent / "checkpoint"


PERFECT = {"abs_rel": 0.0}   # PyTorch against itself; 1.0 for the others


def three_ways(metrics: dict[str, Any], task: str) -> dict[str, dict[str, float]]:
    """Every declared metric for PyTorch, the fp32 export and the target."""
    scores = metrics["scores"]
    assert set(scores) == {"pytorch", "fp32_onnx", "target"}
    for which in scores.values():
        assert set(which) == set(EVAL[task].metrics)
        assert all(np.isfinite(v) for v in which.values())
    return scores


def agreement(metrics: dict[str, Any], task: str) -> dict[str, dict[str, float]]:
    """Scores of a run on the shipped photographs: PyTorch's predictions are the truth."""
    assert not metrics["labelled"] and metrics["against"] == "PyTorch's predictions"
    scores = three_ways(metrics, task)
    assert scores["pytorch"] == {m: PERFECT.get(m, 1.0) for m in EVAL[task].metrics}
    return scores


def same_in_fp32(scores: dict[str, dict[str, float]], tol: float = 1e-6) -> None:
    for name, value in scores["pytorch"].items():
        assert scores["fp32_onnx"][name] == pytest.approx(value, abs=tol), name
        assert scores["target"][name] == pytest.approx(value, abs=tol), name


# --- datasets the tests write ---------------------------------------------------------------

def _photo(i: int, size: tuple[int, int] = (40, 56)) -> np.ndarray:
    """A small image with structure (gradients and a bright square) that differs per i."""
    h, w = size
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // w + 40 * i) % 256, (y * 255 // h) % 256,
                    np.full((h, w), (60 * i) % 256)], axis=-1).astype(np.uint8)
    img[h // 4: h // 2, w // 4 + i: w // 2 + i] = 255
    return img


def _save_png(array: np.ndarray, path: Path) -> str:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return str(path)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def segmentation_set(root: Path) -> Path:
    """save_to_disk: image + annotation (a grey class-id image: 0 left, 1 right, 255 border)."""
    import datasets
    from PIL import Image

    images, masks = [], []
    for i in range(4):
        mask = np.zeros((40, 56), np.uint8)
        mask[:, 28 + i:] = 1
        mask[:2], mask[-2:] = 255, 255
        images.append(Image.fromarray(_photo(i)))
        masks.append(Image.fromarray(mask, mode="L"))
    features = datasets.Features({"image": datasets.Image(), "annotation": datasets.Image()})
    table = datasets.Dataset.from_dict({"image": images, "annotation": masks}, features=features)
    table.save_to_disk(str(root / "seg"))
    return root / "seg"


def depth_set(root: Path) -> Path:
    """JSON Lines: image path + 16-bit PNG depth in millimetres (0 = no measurement)."""
    rows = []
    for i in range(4):
        depth = np.tile(np.linspace(500, 3000, 56, dtype=np.float64), (40, 1)) + 100 * i
        depth[:3] = 0
        rows.append({"image": _save_png(_photo(i), root / f"img{i}.png"),
                     "depth": _save_png(depth.astype(np.uint16), root / f"depth{i}.png")})
    return _jsonl(root / "depth.jsonl", rows)


# the tiny detectors' input sizes: images written at that size are resized by nothing, so the
# image processor of transformers and eval's see the same pixels
DETECTOR_SIZE = {"yolos": 32, "rt_detr": 64}
# objects written by hand, as fractions of the image (x, y, w, h) and a class id: of both
# classes, large ones in the lower half (where these random detectors' boxes gather) and small
# ones elsewhere, so that some are found and some missed
DRAWN = [[(0.0, 0.5, 0.65, 0.45, 0), (0.1, 0.1, 0.3, 0.1, 1)],
         [(0.0, 0.45, 0.6, 0.4, 0), (0.45, 0.8, 0.25, 0.12, 1)],
         [(0.35, 0.6, 0.3, 0.4, 0), (0.3, 0.2, 0.07, 0.07, 1)],
         [(0.2, 0.5, 0.5, 0.45, 1)]]


def detection_set(root: Path, size: int) -> tuple[Path, list[str]]:
    """JSON Lines: square images of `size` pixels and the objects DRAWN on them, as the HF
    detection datasets write them ({bbox: [[x, y, w, h]], category: [...]})."""
    paths = [_save_png(_photo(i, (size, size)), root / f"img{i}.png") for i in range(4)]
    rows = [{"image": path, "objects": {
        "bbox": [[x * size, y * size, w * size, h * size] for x, y, w, h, _ in drawn],
        "category": [c for *_, c in drawn]}} for path, drawn in zip(paths, DRAWN, strict=True)]
    return _jsonl(root / "detection.jsonl", rows), paths


def coco_scores(detections: list[dict[str, np.ndarray]], size: int,
                drawn_objects: list[list[tuple[float, float, float, float, int]]] = DRAWN,
                ) -> dict[str, float]:
    """COCO mAP@[.5:.95] and mAP@.5 of per-image detections (xyxy pixels, scores, labels)
    against objects drawn by hand, by faster-coco-eval's COCOeval here."""
    from faster_coco_eval import COCO, COCOeval_faster

    anns = [{"id": n + 1, "image_id": i + 1, "category_id": c + 1, "iscrowd": 0,
             "bbox": [x * size, y * size, w * size, h * size], "area": w * h * size * size}
            for i, drawn in enumerate(drawn_objects) for n, (x, y, w, h, c) in
            enumerate(drawn, start=10 * i)]
    dets = [{"image_id": i + 1, "category_id": int(c) + 1, "score": float(s),
             "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)]}
            for i, d in enumerate(detections)
            for (x0, y0, x1, y1), s, c in zip(d["boxes"], d["scores"], d["labels"], strict=True)]
    cats = sorted({a["category_id"] for a in anns} | {d["category_id"] for d in dets})
    gt = COCO({"images": [{"id": i + 1} for i in range(len(drawn_objects))], "annotations": anns,
               "categories": [{"id": c} for c in cats]})
    ev = COCOeval_faster(gt, gt.loadRes(dets), iouType="bbox")
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return {"map": float(ev.stats[0]), "map_50": float(ev.stats[1])}


def transformers_detections(checkpoint: Path, paths: list[str],
                            size: int) -> list[dict[str, np.ndarray]]:
    """Each image's detections by transformers itself: its image processor, the model and the
    processor's post-processing with no score threshold."""
    import torch
    import transformers
    from PIL import Image

    processor = transformers.AutoImageProcessor.from_pretrained(str(checkpoint))
    model = transformers.AutoModelForObjectDetection.from_pretrained(str(checkpoint)).eval()
    out = []
    for path in paths:
        with torch.inference_mode():
            found = model(**processor(images=Image.open(path).convert("RGB"),
                                      return_tensors="pt"))
        kept = processor.post_process_object_detection(found, threshold=0.0,
                                                       target_sizes=[(size, size)])[0]
        out.append({k: v.numpy() for k, v in kept.items()})
    return out


# two persons an image in boxes (x, y, w, h) of the tiny ViTPose's input size (48 x 64: the
# crop is resized by nothing), and their two keypoints (x, y, visibility) drawn by hand
PERSON_BOXES = [(4, 8, 48, 64), (56, 10, 48, 64)]
DRAWN_POINTS = [[[(10, 12, 2), (30, 40, 2)], [(66, 14, 2), (80, 50, 0)]],
                [[(20, 20, 2), (42, 48, 2)], [(98, 40, 2), (82, 14, 2)]],
                [[(12, 64, 2), (28, 30, 2)], [(70, 50, 2), (60, 12, 1)]],
                [[(30, 40, 2), (14, 68, 2)], [(62, 70, 0), (80, 30, 2)]]]


def keypoint_set(root: Path) -> tuple[Path, list[str]]:
    """JSON Lines: image path + COCO-style persons {keypoints: flat x, y, v; bbox}, the
    persons of PERSON_BOXES with the keypoints of DRAWN_POINTS."""
    paths = [_save_png(_photo(i, (80, 112)), root / f"img{i}.png") for i in range(4)]
    rows = [{"image": path, "keypoints": [
        {"keypoints": [float(v) for point in points for v in point], "bbox": list(box)}
        for points, box in zip(drawn, PERSON_BOXES, strict=True)]}
        for path, drawn in zip(paths, DRAWN_POINTS, strict=True)]
    return _jsonl(root / "keypoints.jsonl", rows), paths


def pck_by_hand(checkpoint: Path, paths: list[str]) -> float:
    """PCK@0.05 of the drawn keypoints: transformers' ViTPose on each person's box, normalized
    with the checkpoint's image statistics, each heatmap's best cell taken at its centre; a
    visible keypoint counts as found within 0.05 of the box's diagonal."""
    import torch
    import transformers
    from PIL import Image

    model = transformers.VitPoseForPoseEstimation.from_pretrained(str(checkpoint)).eval()
    stats = json.loads((checkpoint / "preprocessor_config.json").read_text())
    mean, std = np.array(stats["image_mean"]), np.array(stats["image_std"])
    found = counted = 0
    for path, drawn in zip(paths, DRAWN_POINTS, strict=True):
        image = np.asarray(Image.open(path).convert("RGB"), np.float64) / 255
        for (x0, y0, w, h), points in zip(PERSON_BOXES, drawn, strict=True):
            crop = (image[y0:y0 + h, x0:x0 + w] - mean) / std
            with torch.inference_mode():
                maps = model(pixel_values=torch.from_numpy(
                    crop.transpose(2, 0, 1)[None].astype(np.float32))).heatmaps[0].numpy()
            for heatmap, (x, y, seen) in zip(maps, points, strict=True):
                row, col = np.unravel_index(heatmap.argmax(), heatmap.shape)
                at = (x0 + (col + 0.5) * w / heatmap.shape[1],
                      y0 + (row + 0.5) * h / heatmap.shape[0])
                if seen:
                    counted += 1
                    found += math.dist(at, (x, y)) <= 0.05 * math.hypot(w, h)
    return found / counted


QUERIES = ["a cat", "a rocket", "a cup of coffee"]
OWL_SIZE = 32  # the tiny OWL-ViT's input: images of this size are resized by nothing
# objects drawn by hand on the cells of OWL-ViT's 4 x 4 patch grid, where its boxes sit (see
# _save_text_image), as fractions (x, y, w, h) and the index of a query
DRAWN_QUERIES = [[(0.375, 0.375, 0.25, 0.25, 0), (0.125, 0.125, 0.25, 0.25, 2)],
                 [(0.375, 0.125, 0.25, 0.25, 1), (0.625, 0.375, 0.25, 0.25, 0)],
                 [(0.125, 0.625, 0.25, 0.25, 2)],
                 [(0.375, 0.625, 0.25, 0.25, 1), (0.125, 0.375, 0.25, 0.25, 0)]]


def zero_shot_detection_set(root: Path) -> tuple[Path, list[str]]:
    """JSON Lines: image path, three text queries, and as objects (a list of {bbox, category})
    DRAWN_QUERIES, their categories naming the queries."""
    paths = [_save_png(_photo(i, (OWL_SIZE, OWL_SIZE)), root / f"img{i}.png") for i in range(4)]
    rows = [{"image": path, "text": QUERIES, "objects": [
        {"bbox": [x * OWL_SIZE, y * OWL_SIZE, w * OWL_SIZE, h * OWL_SIZE],
         "category": QUERIES[c]} for x, y, w, h, c in drawn]}
        for path, drawn in zip(paths, DRAWN_QUERIES, strict=True)]
    return _jsonl(root / "zsd.jsonl", rows), paths


def transformers_zero_shot(checkpoint: Path, paths: list[str]) -> list[dict[str, np.ndarray]]:
    """Each image's detections for QUERIES by transformers itself (its processor, the model with
    the three queries at once, the processor's post-processing with no score threshold)."""
    import torch
    import transformers
    from PIL import Image

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    processor = transformers.OwlViTImageProcessor.from_pretrained(str(checkpoint))
    model = transformers.OwlViTForObjectDetection.from_pretrained(str(checkpoint)).eval()
    text = tokenizer(QUERIES, padding=True, return_tensors="pt")
    out = []
    for path in paths:
        pixels = processor(images=Image.open(path).convert("RGB"), return_tensors="pt")
        with torch.inference_mode():
            found = model(input_ids=text["input_ids"], attention_mask=text["attention_mask"],
                          pixel_values=pixels["pixel_values"])
        kept = processor.post_process_object_detection(
            found, threshold=0.0, target_sizes=[(OWL_SIZE, OWL_SIZE)])[0]
        out.append({k: v.numpy() for k, v in kept.items()})
    return out


def class_folder(root: Path) -> Path:
    """An image folder with one subfolder per class (labels: a ClassLabel of the names)."""
    for i in range(4):
        _save_png(_photo(i), root / "classes" / ("cat" if i % 2 else "rocket") / f"{i}.png")
    return root / "classes"


def text_image_checkpoint(dest: Path, model_type: str, cls: str) -> Path:
    """A tiny random `cls` (CLIP or OWL-ViT towers) with the packaged MiniLM's tokenizer, made
    once per test session (under the store's parent, which every xdist worker sees)."""
    with FileLock(f"{dest}.lock"):  # xdist workers: one builds it, the others wait
        if not (dest / "config.json").is_file():
            _save_text_image(dest, model_type, cls)
    return dest


def _save_text_image(dest: Path, model_type: str, cls: str) -> None:
    import torch
    import transformers

    from planner.models.tiny import TINY
    from tests.checkpoints import TOKENIZER_FILES, minilm_dir

    torch.manual_seed(0)
    config = json.loads(json.dumps(TINY[model_type]))
    vocab = sum(1 for _ in (minilm_dir() / "vocab.txt").open())
    config["text_config"].update(vocab_size=vocab, pad_token_id=0, bos_token_id=101,
                                 eos_token_id=102)  # [CLS] and [SEP] of the WordPiece vocab
    model = getattr(transformers, cls)(transformers.AutoConfig.for_model(model_type, **config))
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    if hasattr(model, "box_head"):
        # a random OWL-ViT's heads saturate: boxes past the image's edges, scores of exactly 1
        # that tie. Without their last layers, boxes are the patch grid's cells (the model's
        # box bias) and scores the sigmoid of the queries' cosines, which vary and do not tie
        with torch.no_grad():
            for layer in (model.box_head.dense2, model.class_head.logit_scale,
                          model.class_head.logit_shift):
                layer.weight.zero_()
                layer.bias.zero_()
        transformers.OwlViTImageProcessor(
            size={"height": OWL_SIZE, "width": OWL_SIZE},
            crop_size={"height": OWL_SIZE, "width": OWL_SIZE}).save_pretrained(str(tmp))
    model.eval().save_pretrained(str(tmp))
    for name in TOKENIZER_FILES:
        if (minilm_dir() / name).is_file():
            shutil.copy(minilm_dir() / name, tmp / name)
    tmp.rename(dest)


# --- labelled datasets, CPU fp32 ------------------------------------------------------------

def test_segmentation_against_masks(store: Path, tmp_path: Path) -> None:
    metrics = evaluate(store, tmp_path / "out", *tiny("segformer", "image-segmentation"), *CPU,
                       f"eval.dataset.path={segmentation_set(tmp_path)}")
    assert metrics["labelled"] and metrics["against"] == "labels" and metrics["passed"]
    scores = three_ways(metrics, "image-segmentation")
    assert 0.0 < scores["pytorch"]["miou"] < 1.0
    same_in_fp32(scores)


def test_depth_against_depth_maps(store: Path, tmp_path: Path) -> None:
    metrics = evaluate(store, tmp_path / "out", *tiny("dpt", "depth-estimation"), *CPU,
                       f"eval.dataset.path={depth_set(tmp_path)}")
    assert metrics["labelled"] and not metrics["higher_is_better"]
    scores = three_ways(metrics, "depth-estimation")
    assert scores["pytorch"]["abs_rel"] > 0.0
    same_in_fp32(scores)


@pytest.mark.slow  # ~55 s each: two eval runs and transformers' own detections
@pytest.mark.parametrize("model_type", ["yolos", "rt_detr"])
def test_detection_against_pytorch_then_against_objects(model_type: str, store: Path,
                                                        tmp_path: Path) -> None:
    """A softmax head with a no-object class (YOLOS) and a focal-loss one (RT-DETR): on the
    shipped photographs, then on objects drawn by hand, where PyTorch's mAP is the one
    faster-coco-eval gives transformers' own detections (its image processor, model and
    post-processing) against the same objects."""
    model = (*tiny(model_type, "object-detection"),
             # wider random weights: detections that differ in score and place
             "+model.random_init.config.initializer_range=0.2")
    same_in_fp32(agreement(evaluate(store, tmp_path / "shipped", *model, *CPU),
                           "object-detection"))
    size = DETECTOR_SIZE[model_type]
    dataset, paths = detection_set(tmp_path / "data", size)
    metrics = evaluate(store, tmp_path / "out", *model, *CPU, f"eval.dataset.path={dataset}")
    assert metrics["labelled"]
    scores = three_ways(metrics, "object-detection")
    checkpoint = checkpoint_of(last_record(tmp_path / "out"))
    want = coco_scores(transformers_detections(checkpoint, paths, size), size)
    assert want["map_50"] > 0.0, want  # some drawn object is found: the score is not vacuous
    assert scores["pytorch"] == pytest.approx(want, abs=1e-6)
    same_in_fp32(scores)


def test_keypoints_against_pytorch_then_against_persons(store: Path, tmp_path: Path) -> None:
    """On the shipped photographs, then on persons whose keypoints are drawn by hand, where
    PyTorch's PCK is the one worked out here from transformers' own heatmaps."""
    model = tiny("vitpose", "keypoint-detection")
    same_in_fp32(agreement(evaluate(store, tmp_path / "shipped", *model, *CPU),
                           "keypoint-detection"))
    dataset, paths = keypoint_set(tmp_path / "data")
    metrics = evaluate(store, tmp_path / "out", *model, *CPU, f"eval.dataset.path={dataset}")
    assert metrics["labelled"] and metrics["samples"] == 4  # rows, of two persons each
    scores = three_ways(metrics, "keypoint-detection")
    checkpoint = checkpoint_of(last_record(tmp_path / "out"))
    want = pck_by_hand(checkpoint, paths)
    assert 0.0 < want < 1.0  # some drawn keypoints found, some not
    assert scores["pytorch"]["pck"] == pytest.approx(want, abs=1e-9)
    same_in_fp32(scores)


@pytest.mark.parametrize("model", [tiny("segformer", "image-segmentation"),
                                   tiny("dpt", "depth-estimation")], ids=["segformer", "dpt"])
def test_shipped_photographs_agree_with_pytorch(model: tuple[str, ...], store: Path,
                                                tmp_path: Path) -> None:
    task = model[-1].split("=")[1]
    scores = agreement(evaluate(store, tmp_path / "out", *model, *CPU), task)
    # AbsRel is itself a relative error: the runtimes' float32 roundoff on a random DPT's tiny
    # depths (about 1e-9) shows as about 2e-6
    same_in_fp32(scores, 1e-5 if task == "depth-estimation" else 1e-6)


def test_zero_shot_classification_prompts_the_class_names(store: Path, tmp_path: Path) -> None:
    """CLIP exported with one text per image: the two class prompts ("a photo of a cat",
    "a photo of a rocket", from the folder names) go through it in two runs per image; on the
    shipped photographs, the shipped queries in eight."""
    ckpt = text_image_checkpoint(store.parent / "eval-vision-clip", "clip", "CLIPModel")
    args = ("model=local_hf", f"model.path={ckpt}", "model.task=zero-shot-image-classification",
            *CPU, *TEXT)
    metrics = evaluate(store, tmp_path / "out", *args,
                       f"eval.dataset.path={class_folder(tmp_path)}")
    assert metrics["labelled"] and metrics["samples"] == 4  # rows, two runs each
    same_in_fp32(three_ways(metrics, "zero-shot-image-classification"))
    same_in_fp32(agreement(evaluate(store, tmp_path / "shipped", *args),
                           "zero-shot-image-classification"))


@pytest.mark.slow  # ~50 s: two eval runs of OWL-ViT
def test_zero_shot_detection_with_the_rows_queries(store: Path, tmp_path: Path) -> None:
    """OWL-ViT exported for two queries per image, rows with three: two runs per image;
    categories name the queries. Against objects drawn by hand, PyTorch's mAP is the one
    faster-coco-eval gives transformers' own detections (all three queries at once)."""
    ckpt = text_image_checkpoint(store.parent / "eval-vision-owlvit", "owlvit",
                                 "OwlViTForObjectDetection")
    args = ("model=local_hf", f"model.path={ckpt}", "model.task=zero-shot-object-detection",
            *CPU, *TEXT)
    same_in_fp32(agreement(evaluate(store, tmp_path / "shipped", *args),
                           "zero-shot-object-detection"))
    dataset, paths = zero_shot_detection_set(tmp_path / "data")
    labelled = evaluate(store, tmp_path / "labelled", *args, f"eval.dataset.path={dataset}",
                        "eval.max_drop=0.05")
    assert labelled["labelled"] and labelled["passed"]
    scores = three_ways(labelled, "zero-shot-object-detection")
    want = coco_scores(transformers_zero_shot(ckpt, paths), OWL_SIZE, DRAWN_QUERIES)
    assert 0.0 < want["map_50"] < 1.0, want  # some drawn objects found, some not
    assert scores["pytorch"] == pytest.approx(want, abs=1e-6)
    same_in_fp32(scores)


@pytest.mark.slow  # ~60 s: the HTP simulator
def test_segmentation_on_htp(store: Path, tmp_path: Path) -> None:
    """The deliverable quantized w8a16 per-channel and compiled for HTP: its mIoU against the
    labels beside PyTorch's and the fp32 export's, within a drop users set (0.05), on masks
    where the random SegFormer predicts both classes (it beats any one-class answer)."""
    metrics = evaluate(store, tmp_path / "out", *tiny("segformer", "image-segmentation"), *HTP,
                       f"eval.dataset.path={segmentation_set(tmp_path)}", "eval.max_drop=0.05")
    scores = three_ways(metrics, "image-segmentation")
    assert metrics["ep"] == "qnn" and metrics["labelled"]
    assert metrics["passed"] and metrics["eval_verdict"] == "PASS", metrics["verdict_line"]
    assert scores["fp32_onnx"]["miou"] == pytest.approx(scores["pytorch"]["miou"], abs=1e-6)
    # segmentation_set's labelled pixels: 36 rows of 28 + i columns of class 0 and 28 - i of
    # class 1 (i = 0..3); one class everywhere scores at most 118 / 224 right, and its mIoU is
    # half that (the other class's IoU is 0)
    for which in ("pytorch", "target"):
        assert scores[which]["pixel_accuracy"] > 118 / 224, which
        assert scores[which]["miou"] > 118 / 448, which
    assert metrics["eval_drop"] == pytest.approx(
        scores["pytorch"]["miou"] - scores["target"]["miou"], abs=1e-6)
    assert metrics["eval_drop"] <= 0.05
