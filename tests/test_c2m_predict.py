"""C2M's predict-time neighbour search (issue 31, item 4): the sorted float32 keys of
``graph.nearest_reference`` must return exactly what ``topk`` of the float64 distances returns."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, make_blobs

from sktransfer_cluster.cluster.c2m import C2MCluster, graph

torch.set_num_threads(1)


def topk_nearest(ref, k, query):
    """The search before the sorted keys: ``topk`` of ``|r|^2 - 2 q.r`` in 655-row ``addmm`` blocks."""
    k = min(k, ref.shape[0])
    norms = (ref * ref).sum(1)
    return torch.cat([torch.addmm(norms, query[s : s + 655], ref.T, alpha=-2.0).topk(k, 1, largest=False).indices
                      for s in range(0, query.shape[0], 655)])


def searched_again(monkeypatch):
    """Rows that the sorted keys left to topk, per block."""
    calls = []
    real = graph._unproved

    def recording(*args):
        mask = real(*args)
        calls.append(int(mask.sum()))
        return mask

    monkeypatch.setattr(graph, "_unproved", recording)
    return calls


def _sets():
    rng = np.random.default_rng(0)
    normal = torch.as_tensor(rng.normal(size=(200, 64)))
    far = torch.cat([normal[::7], torch.as_tensor(rng.normal(size=(900, 64))),
                     1e4 * torch.as_tensor(rng.normal(size=(40, 64))), 1e-9 * torch.as_tensor(rng.normal(size=(40, 64)))])
    grid = torch.as_tensor(rng.integers(0, 3, size=(200, 4)).astype(np.float64))  # exact ties everywhere
    twice = torch.as_tensor(rng.normal(size=(100, 8)))
    return {
        "64-D, reference rows, far and tiny rows": (normal, far),
        "2-D": (torch.as_tensor(rng.normal(size=(150, 2))), torch.as_tensor(rng.normal(size=(1000, 2)))),
        "integer grid (ties)": (grid, torch.as_tensor(rng.integers(0, 3, size=(800, 4)).astype(np.float64))),
        "duplicated reference rows": (torch.cat([twice, twice]), torch.as_tensor(rng.normal(size=(800, 8)))),
        "float32": (normal.float(), far.float()),
    }


@pytest.mark.parametrize("name", list(_sets()))
def test_nearest_reference_returns_topk_of_the_float64_distances_row_for_row(name):
    ref, query = _sets()[name]
    for k in (1, 10, ref.shape[0]):
        assert torch.equal(graph.nearest_reference(ref, k, query), topk_nearest(ref, k, query)), k


def test_rows_with_tied_distances_are_ranked_by_topk_itself(monkeypatch):
    """An exact tie at the k-th neighbour proves nothing from the keys: such rows go to topk."""
    ref = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 3.0], [0.0, -5.0]], dtype=torch.float64)
    query = torch.cat([torch.zeros(1, 2, dtype=torch.float64), torch.tensor([[0.1, 2.0]]).double().expand(15, 2)])
    calls = searched_again(monkeypatch)
    nb = graph.nearest_reference(ref, 2, query)
    assert torch.equal(nb, topk_nearest(ref, 2, query))
    assert calls == [1]  # the origin alone (its second neighbour: (1, 0) or (-1, 0))


def test_a_near_tie_below_the_float32_keys_resolution_is_ranked_by_topk(monkeypatch):
    """The second and third reference rows 2e-12 apart in squared distance, 0.75 beyond the first:
    float32 keys (relative to the nearest) cannot order them, float64 distances can."""
    ref = torch.tensor([[0.5, 0.0], [1.0, 0.0], [-1.0 - 1e-12, 0.0], [0.0, 4.0], [0.0, -4.0]], dtype=torch.float64)
    query = torch.zeros(10, 2, dtype=torch.float64)
    calls = searched_again(monkeypatch)
    nb = graph.nearest_reference(ref, 2, query)
    assert calls == [10]  # every row
    assert torch.equal(nb, topk_nearest(ref, 2, query)) and nb[0].tolist() == [0, 1]


def test_most_rows_of_continuous_data_are_settled_by_the_sorted_keys(monkeypatch):
    rng = np.random.default_rng(1)
    ref, query = torch.as_tensor(rng.normal(size=(200, 16))), torch.as_tensor(rng.normal(size=(4000, 16)))
    calls = searched_again(monkeypatch)
    graph.nearest_reference(ref, 10, query)
    assert sum(calls) < query.shape[0] // 10


def _fitted(X, y):
    return C2MCluster(representation=None, critic_dims=(16, 16), population=8, cem_iter=2, max_epochs=1, sets_per_epoch=2,
                      max_clusters=10, device="cpu", random_state=0).fit(X, y)


@pytest.mark.parametrize("data", ["digits", "blobs"])
def test_predict_labels_equal_the_topk_search_for_float64_and_float32_rows(data, monkeypatch):
    if data == "digits":
        X, y = load_digits(return_X_y=True)
    else:
        X, y = make_blobs(1500, n_features=64, centers=8, random_state=0)
    est = _fitted(X[: X.shape[0] // 2], y[: X.shape[0] // 2])
    assert est._mlp_ref is not None and est._mlp_ref["ref"].shape[0] == 200  # the CEM subset, set_size
    rows = (X, X.astype(np.float32))
    new = [est.predict(R) for R in rows]
    monkeypatch.setattr(graph, "nearest_reference", topk_nearest)
    old = [est.predict(R) for R in rows]
    for a, b in zip(new, old):
        np.testing.assert_array_equal(a, b)


def test_near_ties_among_wide_rows_are_ranked_on_the_distances_of_their_own_block():
    """784 columns: MKL rounds a product of a few rows otherwise than the whole block's, so a
    near-tied row must be ranked on its block's distances, whatever rows came with it."""
    rng = np.random.default_rng(2)
    ref = torch.as_tensor(rng.random(size=(200, 784)))
    ties = 0.5 * (ref[rng.integers(0, 100, 12)] + ref[rng.integers(100, 200, 12)])  # equidistant from two rows
    query = torch.cat([torch.as_tensor(rng.random(size=(1298, 784))), ties])[torch.as_tensor(rng.permutation(1310))]
    for dtype in (torch.float64, torch.float32):
        assert torch.equal(graph.nearest_reference(ref.to(dtype), 1, query.to(dtype)),
                           topk_nearest(ref.to(dtype), 1, query.to(dtype))), dtype


def test_the_search_runs_under_autograd_and_returns_indices_only():
    ref = torch.randn(50, 3, dtype=torch.float64, requires_grad=True)
    query = torch.randn(40, 3, dtype=torch.float64, requires_grad=True)
    assert torch.equal(graph.nearest_reference(ref, 5, query), topk_nearest(ref.detach(), 5, query.detach()))
