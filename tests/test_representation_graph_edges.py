"""representation.knn and the graph's helpers at the edges of float32's range, and their memory (V15 #4, #5)."""

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from sktransfer_cluster.representation import knn
from sktransfer_cluster.representation import graph as G
from sktransfer_cluster.representation.landmarks import unit_peak_rows


def _rows_and_true_neighbours():
    X = np.random.default_rng(0).normal(size=(400, 20))
    return X, NearestNeighbors(n_neighbors=11).fit(X).kneighbors(X)


@pytest.mark.parametrize("scale", [1e-30, 1e25, 1e-200, 1e200])
def test_knn_finds_the_same_neighbours_whatever_the_rows_scale(scale):
    """V15 #4: float32 squares underflowed (1e-30) or overflowed (1e25): 1 % of neighbours right."""
    X, (_, ref) = _rows_and_true_neighbours()
    indices, _ = knn(X * scale, 10)
    assert np.array_equal(indices, ref[:, 1:])


@pytest.mark.parametrize("scale", [1e-30, 1e25])
def test_knn_distances_at_any_scale_are_in_the_rows_own_unit(scale):
    X, (ref_d, _) = _rows_and_true_neighbours()
    _, distances = knn(X * scale, 10)
    np.testing.assert_allclose(distances / scale, ref_d[:, 1:], rtol=1e-5)


def test_knn_scales_query_rows_by_the_references_power_of_two():
    X, _ = _rows_and_true_neighbours()
    ref, query = X[:300], X[300:]
    expected = NearestNeighbors(n_neighbors=5).fit(ref).kneighbors(query)[1]
    indices, _ = knn(ref * 1e-30, 5, query=query * 1e-30)
    assert np.array_equal(indices, expected)


def test_knn_of_ordinary_rows_returns_unscaled_float32_distances():
    X, _ = _rows_and_true_neighbours()
    _, distances = knn(X, 10)
    assert distances.dtype == np.float32 and 1 < distances.max() < 10


def test_the_peak_is_the_largest_magnitude_without_an_abs_copy():
    X = np.array([[1.0, -7.5], [3.0, 2.0]], dtype=np.float32)
    assert G._peak(X) == 7.5 and G._peak(np.zeros((0, 3))) == 0.0


def test_chunked_row_norms_are_numpys_to_the_bit():
    """V15 #5: the norms come a chunk at a time (no X-sized temporary), with np.linalg.norm's bits."""
    X = np.random.default_rng(1).random((3000, 784), dtype=np.float32)
    assert np.array_equal(G._row_norms(X), np.linalg.norm(X, axis=1))
    assert np.array_equal(G._row_norms(X, keepdims=True), np.linalg.norm(X, axis=1, keepdims=True))


def test_unit_peak_rows_divides_each_row_by_its_largest_magnitude():
    rows = np.array([[2.0, -4.0], [0.0, 0.0], [-3.0, 1.5]])
    assert unit_peak_rows(rows).tolist() == [[0.5, -1.0], [0.0, 0.0], [-1.0, 0.5]]


def test_chunked_squared_norms_are_the_plain_products_to_the_bit():
    """V15 #5: knn's |r|^2 come a chunk at a time through one buffer, with (R * R).sum(1)'s bits."""
    import torch

    R = torch.as_tensor(np.random.default_rng(2).random((3000, 784), dtype=np.float32))
    assert torch.equal(G._squared_norms(R), (R * R).sum(1))
    assert G._squared_norms(R[:0]).shape == (0,)
