"""verify's arithmetic: which vectors it compares (real tokens only for token outputs, one
vector per batch element otherwise) and their cosines, against cosines worked out by hand and
by scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cosine as cosine_distance

from executors.steps.verify import cosines, vectors


def test_cosines_of_known_angles() -> None:
    got = np.array([[1.0, 0.0], [1.0, 2.0], [1.0, 0.0], [3.0, 4.0]])
    want = np.array([[0.0, 1.0], [2.0, 4.0], [-1.0, 0.0], [4.0, 3.0]])
    assert cosines(got, want).tolist() == pytest.approx([0.0, 1.0, -1.0, 24 / 25])


def test_cosines_agree_with_scipy_on_random_rows() -> None:
    rng = np.random.default_rng(0)
    got, want = rng.normal(size=(6, 9)), rng.normal(size=(6, 9)) * 40.0
    assert cosines(got, want).tolist() == pytest.approx(
        [1 - cosine_distance(g, w) for g, w in zip(got, want)])


def test_zero_rows_agree_only_with_zero_rows() -> None:
    zero, some = np.zeros(3), np.array([0.0, 1e-30, 0.0])
    got = cosines(np.stack([zero, zero, some, some]), np.stack([zero, some, zero, some]))
    assert got.tolist() == [1.0, 0.0, 0.0, 1.0]  # a tiny row is a direction, not zero


def test_token_outputs_compare_real_tokens_only() -> None:
    """Padding positions of [batch, seq, hidden] are left out, whatever they hold."""
    want = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3) + 1.0
    got = want.copy()
    got[0, 3] = -want[0, 3]           # padding of row 0: opposite, but not compared
    got[1, 1] = [1.0, 0.0, 0.0]       # a real token of row 1
    valid = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    g, w = vectors(got, want, valid)
    assert g.shape == w.shape == (5, 3)
    np.testing.assert_array_equal(w, want[valid])
    token = want[1, 1] / np.linalg.norm(want[1, 1])
    assert cosines(g, w).tolist() == pytest.approx([1, 1, 1, 1, token[0]])


def test_token_outputs_of_more_dimensions_flatten_each_token() -> None:
    want = np.ones((1, 3, 2, 2))
    got = want.copy()
    got[0, 0, 1] = [1.0, -1.0]
    g, w = vectors(got, want, np.array([[1, 1, 0]], bool))
    assert g.shape == (2, 4)
    assert cosines(g, w).tolist() == pytest.approx([0.5, 1.0])


def test_outputs_not_per_token_are_one_vector_per_batch_element() -> None:
    """A pooled [batch, hidden] output, a [batch] output and a batch-less one ignore the mask."""
    valid = np.array([[1, 1, 0], [1, 0, 0]], bool)
    pooled_want = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]])
    pooled_got = np.array([[2.0, 4.0, 6.0], [1.0, 0.0, 0.0]])
    g, w = vectors(pooled_got, pooled_want, valid)
    assert cosines(g, w).tolist() == pytest.approx([1.0, 0.0])
    g, w = vectors(np.array([3.0, -1.0]), np.array([1.0, 1.0]), valid)
    assert g.shape == (1, 2) and cosines(g, w).tolist() == pytest.approx([2 / np.sqrt(20)])
    # a per-token output whose length is not the mask's (a pooled sequence) is not masked
    g, w = vectors(np.ones((2, 5, 2)), np.ones((2, 5, 2)), valid)
    assert g.shape == (2, 10)


def test_vectors_are_float64_so_float16_outputs_do_not_overflow() -> None:
    big = np.full((1, 2, 4), 60000.0, np.float16)
    g, w = vectors(big, big, np.ones((1, 2), bool))
    assert g.dtype == np.float64 and cosines(g, w).tolist() == pytest.approx([1.0, 1.0])
