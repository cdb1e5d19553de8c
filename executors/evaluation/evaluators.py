"""Which family evaluates which task (planner/models/evaluation.py declares the metrics)."""

from __future__ import annotations

from executors.evaluation.base import EvalDataError, Evaluator
from executors.evaluation.classify import Classify
from executors.evaluation.depth import Depth
from executors.evaluation.detect import Detect, ZeroShotDetect
from executors.evaluation.fillmask import FillMask
from executors.evaluation.generation import Causal, Generation
from executors.evaluation.keypoints import Keypoints
from executors.evaluation.qa import QuestionAnswering
from executors.evaluation.segment import Segment
from executors.evaluation.similarity import Similarity
from executors.evaluation.speech import Speech
from executors.evaluation.tokens import TokenTags
from executors.evaluation.zeroshot import ZeroShotClassify

FAMILIES: tuple[Evaluator, ...] = (Classify(), Similarity(), TokenTags(), QuestionAnswering(),
                                   FillMask(), Speech(), Generation(), Segment(), Depth(),
                                   Detect(), ZeroShotDetect(), Keypoints(), ZeroShotClassify(),
                                   Causal())
BY_TASK: dict[str, Evaluator] = {t: f for f in FAMILIES for t in f.tasks}


def evaluator(task: str) -> Evaluator:
    if task not in BY_TASK:
        raise EvalDataError(f"eval: modelplan does not evaluate {task} yet; set eval=none")
    return BY_TASK[task]
