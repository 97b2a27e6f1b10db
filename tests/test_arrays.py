"""The input affine (shift, scale) and its resolution check at the edges of float64 (V15 #3)."""

import warnings

import numpy as np
import pytest

from sktransfer_cluster.base.arrays import check_resolution, input_affine
from sktransfer_cluster.base.streaming import DaskRows, streamed_affine


def _near_the_float64_limit():
    """Two finite blobs at +-1.2e308, whose column sums overflow float64."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(20, 2)) * 1e306 + 1.2e308, rng.normal(size=(20, 2)) * 1e306 - 1.2e308]
    return X, (X / 1e308).mean(0) * 1e308


def test_input_affine_of_finite_rows_whose_sum_overflows_has_their_mean_as_shift():
    X, mean = _near_the_float64_limit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning either
        shift, scale = input_affine(X, chunk_size=7)
    np.testing.assert_allclose(shift, mean, rtol=1e-12)
    assert np.isfinite(scale) and 1e308 < scale < 1.3e308


def test_streamed_affine_of_finite_rows_whose_sum_overflows_is_input_affines():
    X, _ = _near_the_float64_limit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shift, scale = streamed_affine(X, chunk_size=7)
    expected = input_affine(X, chunk_size=7)
    np.testing.assert_allclose(shift, expected[0], rtol=1e-12)
    assert scale == pytest.approx(expected[1], rel=1e-12)


def test_dask_affine_of_finite_rows_whose_sum_overflows_is_input_affines():
    da = pytest.importorskip("dask.array")
    X, _ = _near_the_float64_limit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shift, scale = DaskRows(da.from_array(X, chunks=(7, -1))).affine()
    expected = input_affine(X, chunk_size=7)
    np.testing.assert_allclose(shift, expected[0], rtol=1e-12)
    assert scale == pytest.approx(expected[1], rel=1e-12)


def test_input_affine_shift_of_ordinary_rows_is_still_the_plain_float64_sum_over_n():
    """The pre-divided sum is a fallback only: ordinary data keeps its shift to the bit."""
    X = np.random.default_rng(1).normal(size=(1000, 7)) * 3 + 5
    shift, _ = input_affine(X, chunk_size=100)
    plain = np.zeros(7)
    for start in range(0, 1000, 100):
        plain += X[start : start + 100].sum(0, dtype=np.float64)
    assert np.array_equal(shift, plain / 1000)


def test_check_resolution_of_float64_data_does_not_say_to_pass_float64():
    with pytest.raises(ValueError, match="cannot be clustered at float64") as info:
        check_resolution(np.float64, np.array([1e20]), 1.0)
    assert "pass float64" not in str(info.value)


def test_check_resolution_of_float32_data_still_says_to_pass_float64():
    with pytest.raises(ValueError, match="or pass float64"):
        check_resolution(np.float32, np.array([1e8]), 1.0)
