"""Tests of shared torch building blocks in ``sktransfer_cluster.nn`` not owned by one estimator."""

import numpy as np
import pytest
import torch

from sktransfer_cluster.nn import knn_indices


def _brute_force_neighbours(X, k):
    d = np.linalg.norm(X[:, None, :] - X[None, :, :], axis=-1)
    np.fill_diagonal(d, np.inf)
    return np.argsort(d, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("n_features", [2, 10, 11])
def test_knn_indices_match_brute_force_on_both_paths(n_features):
    # 10 features use the KD-tree, 11 the chunked cdist path.
    X = np.random.default_rng(0).normal(size=(300, n_features))
    got = knn_indices(torch.from_numpy(X), 7, chunk_elements=1000).numpy()
    np.testing.assert_array_equal(got, _brute_force_neighbours(X, 7))


def test_knn_indices_never_lists_a_point_as_its_own_neighbour_with_duplicates():
    X = torch.tensor([[0.0, 0.0], [0.0, 0.0], [5.0, 5.0], [5.0, 5.0]])
    got = knn_indices(X, 1).numpy().ravel()
    np.testing.assert_array_equal(got, [1, 0, 3, 2])


def test_knn_indices_of_a_single_point_is_empty():
    assert knn_indices(torch.zeros(1, 2), 5).shape == (1, 0)


def test_knn_indices_leave_the_input_unmodified():
    X = torch.randn(50, 3, generator=torch.Generator().manual_seed(0))
    before = X.clone()
    knn_indices(X, 4)
    assert torch.equal(X, before)


@pytest.mark.parametrize("n_features", [2, 11])
def test_knn_indices_of_query_rows_match_brute_force_on_both_paths(n_features):
    rng = np.random.default_rng(1)
    X, Q = rng.normal(size=(200, n_features)), rng.normal(size=(30, n_features))
    got = knn_indices(torch.from_numpy(X), 5, chunk_elements=500, query=torch.from_numpy(Q)).numpy()
    d = np.linalg.norm(Q[:, None, :] - X[None, :, :], axis=-1)
    np.testing.assert_array_equal(got, np.argsort(d, axis=1, kind="stable")[:, :5])


def test_knn_indices_query_row_in_the_reference_finds_itself_first():
    X = torch.randn(40, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = knn_indices(X, 3, query=X[:10])
    np.testing.assert_array_equal(got[:, 0].numpy(), np.arange(10))
    assert knn_indices(X, 100, query=X[:2]).shape == (2, 40)  # capped at n


def test_knn_indices_run_on_one_thread_and_give_the_callers_threads_back(monkeypatch):
    import sktransfer_cluster.nn as nn_module

    seen = []
    original = torch.cdist

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(nn_module.torch, "cdist", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        knn_indices(torch.randn(50, 20, generator=torch.Generator().manual_seed(0)), 3)  # > 10 features: cdist path
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
