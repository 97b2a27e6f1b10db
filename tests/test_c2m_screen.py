"""C2M's predict screen (issue 31, item 4): float32 labels proved equal to the float64 path's,
``certified_labels`` for the rows the screen leaves, and the float64 path for what neither proves.

The float64 path is ``C2MCluster._exact_predict`` (the predict of before the screen, kept as
it was); every test compares ``predict`` with it, chunk by chunk as predict cuts the rows."""

import copy
import math

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, make_blobs, make_moons

from sktransfer_cluster.cluster.c2m import C2MCluster, graph
from sktransfer_cluster.cluster.c2m import estimator as c2m
from sktransfer_cluster.base import chunk_rows

torch.set_num_threads(1)


def _fitted(X, y, **params):
    params = {"representation": None, **params}
    return C2MCluster(critic_dims=(16, 16), population=8, cem_iter=2, max_epochs=1, sets_per_epoch=2,
                      max_clusters=10, device="cpu", random_state=0, **params).fit(X, y)


def _exact(est, X):
    """predict's labels by the float64 path alone, in predict's chunks."""
    X = np.asarray(X)
    step = chunk_rows(X.shape[1])
    return np.concatenate([est._exact_predict(est._encode(X[s : s + step])) for s in range(0, X.shape[0], step)])


def _reading_the_features(est, seed, spectral_gain=30.0):
    """The fitted model with random MLP weights that lean on the spectral (and cut) columns, every
    output used: the fitted weights of these short fits often ignore those columns."""
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(est._cem_w.shape, generator=g, dtype=est._cem_w.dtype)
    d, h = est._input_mean.shape[0], est.cem_hidden  # the MLP reads the codes' width under a representation
    n_in = (W.shape[0] - h * est.max_clusters - est.max_clusters - h) // h
    W[: n_in * h].view(n_in, h)[d:] *= spectral_gain
    est._cem_w = W
    est._outputs = torch.arange(est.max_clusters)
    return est


def _copy(models, name):
    est, X = models[name]
    return copy.deepcopy(est), X


@pytest.fixture(scope="module")
def models():
    X, y = load_digits(return_X_y=True)
    Xb, yb = make_blobs(1500, n_features=64, centers=8, random_state=0)
    Xm, ym = make_moons(1200, noise=0.05, random_state=0)
    return {
        "digits": (_fitted(X[:900], y[:900]), X),
        "blobs": (_fitted(Xb[:750], yb[:750]), Xb),
        "moons": (_fitted(Xm[:600], ym[:600]), Xm),
        "blobs, tree cuts": (_fitted(Xb[:750], yb[:750], tree_candidates=True), Xb),
    }


@pytest.mark.parametrize("name", ["digits", "blobs", "moons", "blobs, tree cuts"])
def test_predict_equals_the_float64_path_for_fitted_and_feature_reading_weights(models, name):
    est, X = _copy(models, name)
    for seed in (None, 0, 1):
        if seed is not None:
            _reading_the_features(est, seed)
        for rows in (X, X.astype(np.float32)):
            np.testing.assert_array_equal(est.predict(rows), _exact(est, rows))


@pytest.mark.parametrize("name", ["digits", "blobs", "moons", "blobs, tree cuts"])
def test_rows_the_screen_proves_carry_the_float64_label(models, name):
    """The screen alone, without the probe or the fallbacks: every proved row is right."""
    est, X = _copy(models, name)
    for seed in (0, 1, 2):
        _reading_the_features(est, seed, spectral_gain=3.0 * seed)
        labels, proved = graph.screen_labels(est._predict_screen(), X.astype(np.float32))
        exact = _exact(est, X)
        assert proved.any() or seed  # without the features' weights (gain 0) every data set has proved rows
        np.testing.assert_array_equal(labels.numpy()[proved.numpy()], exact[proved.numpy()])


def test_the_screen_proves_most_rows_of_separated_blobs_whose_features_it_reads():
    X, y = make_blobs(3000, n_features=16, centers=5, cluster_std=0.5, random_state=1)
    est = _reading_the_features(_fitted(X[:1000], y[:1000]), 0)
    _, proved = graph.screen_labels(est._predict_screen(), X)
    assert float(proved.float().mean()) > 0.9


@pytest.mark.parametrize("name", ["digits", "moons", "blobs, tree cuts"])
def test_the_ball_level_by_leading_bits_equals_the_binary_search(models, name):
    """``_screen_level`` (a table over B's leading bits, one step up) gives torch.bucketize's level,
    clamped to the last, for every kind of float32 B: random bit patterns over the whole range,
    the radii and their float32 neighbours, zeros, subnormals, inf and NaN."""
    est, _ = _copy(models, name)
    screen = est._predict_screen()
    radii, last = screen["radii"], screen["levels"] - 1
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=g, dtype=torch.int64).to(torch.int32)
    positive = torch.exp(torch.rand(100_000, generator=g) * 12 - 6) * radii[radii.shape[0] // 2]
    edges = torch.cat([radii, torch.nextafter(radii, torch.zeros(1)), torch.nextafter(radii, torch.full((1,), math.inf))])
    special = torch.tensor([0.0, -0.0, 1e-45, 1e-40, 1.2e-38, 3.4e38, math.inf, -math.inf, math.nan, -1.0])
    B = torch.cat([bits.view(torch.float32), positive, edges, special]).contiguous()
    expected = torch.bucketize(B, radii).clamp_(max=last)
    torch.testing.assert_close(graph._screen_level(screen, B.clone()), expected, rtol=0, atol=0)


def test_far_huge_and_tiny_rows_beside_ordinary_ones_keep_the_float64_labels(models):
    est, X = _copy(models, "blobs")
    _reading_the_features(est, 3)
    rng = np.random.default_rng(0)
    rows = X[rng.integers(0, X.shape[0], 3000)].copy()
    rows[1::7] *= 1e18  # float32 rows whose squared norm overflows
    rows[2::7] *= 1e-30
    rows[3::7] += 1e6
    rows[4::7] *= 1e30
    wide = rows.copy()
    wide[::7] *= 1e40  # float64 rows beyond float32: the screen's copy overflows, the float64 path does not
    for R in (wide, rows.astype(np.float32)):
        np.testing.assert_array_equal(est.predict(R), _exact(est, R))


def test_rows_equidistant_from_reference_rows_keep_the_float64_labels(models):
    """Rows at the midpoint of two reference rows (raw units), and reference rows themselves,
    across a chunk boundary: ties in the neighbour ranking are the float64 path's to break."""
    est, X = _copy(models, "blobs, tree cuts")
    _reading_the_features(est, 4)
    ref = est._mlp_ref["ref"].numpy() * est.input_scale_ + est._input_mean.numpy()
    rng = np.random.default_rng(1)
    mid = 0.5 * (ref[rng.integers(0, ref.shape[0], 300)] + ref[rng.integers(0, ref.shape[0], 300)])
    step = chunk_rows(X.shape[1])
    rows = np.concatenate([X[rng.integers(0, X.shape[0], step - 150)], mid, ref])
    np.testing.assert_array_equal(est.predict(rows), _exact(est, rows))


def test_a_tie_between_two_outputs_is_left_to_the_float64_path(models, monkeypatch):
    """Two used outputs with identical weights tie on every row: neither certificate proves a
    row, so each chunk is labelled by the float64 path (the first of the tied outputs)."""
    est, X = _copy(models, "blobs")
    _reading_the_features(est, 5)
    h, n_out = est.cem_hidden, est.max_clusters
    n_in = (est._cem_w.shape[0] - h * n_out - n_out - h) // h
    o = n_in * h + h
    W2 = est._cem_w[o : o + h * n_out].view(h, n_out)
    b2 = est._cem_w[o + h * n_out :]
    top = est._exact_predict(X[:1])[0]
    other = (top + 1) % n_out
    W2[:, other], b2[other] = W2[:, top], b2[top]
    calls = []
    real = c2m.C2MCluster._exact_predict
    monkeypatch.setattr(c2m.C2MCluster, "_exact_predict", lambda self, rows: calls.append(1) or real(self, rows))
    labels = est.predict(X)
    monkeypatch.setattr(c2m.C2MCluster, "_exact_predict", real)
    np.testing.assert_array_equal(labels, _exact(est, X))
    assert calls


def test_certified_labels_proves_distinct_rows_and_refuses_a_tie_at_the_kth_neighbour():
    ref = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 3.0], [0.0, -5.0]], dtype=torch.float64)
    reference = {"ref": ref, "emb": torch.tensor([[0.0], [1.0], [2.0], [3.0], [4.0]], dtype=torch.float64), "k": 2}
    hidden, n_out = 2, 2
    W = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    W = torch.cat([W, torch.zeros(graph.n_mlp_params(3, hidden, n_out) - W.shape[0], dtype=torch.float64)])
    rows = torch.tensor([[0.0, 0.0], [0.9, 0.1]], dtype=torch.float64)  # the origin: (1, 0) and (-1, 0) tie
    _, proved = graph.certified_labels(rows, reference, W, hidden, n_out, torch.arange(n_out))
    assert proved.tolist() == [False, True]


def test_predict_falls_back_to_the_float64_path_where_the_probe_proves_few_rows(models, monkeypatch):
    est, X = _copy(models, "digits")
    _reading_the_features(est, 1)
    _, proved = graph.screen_labels(est._predict_screen(), X[: c2m._SCREEN_PROBE])
    assert float(proved.float().mean()) < c2m._SCREEN_MIN_PROVED  # these weights read varying features
    calls = []
    real = c2m.C2MCluster._exact_predict
    monkeypatch.setattr(c2m.C2MCluster, "_exact_predict", lambda self, rows: calls.append(rows.shape[0]) or real(self, rows))
    labels = est.predict(X)
    monkeypatch.setattr(c2m.C2MCluster, "_exact_predict", real)
    assert calls == [X.shape[0]]
    np.testing.assert_array_equal(labels, _exact(est, X))


def test_the_screen_follows_the_model_that_transfer_and_refit_leave(models):
    est, X = _copy(models, "moons")
    screen = est._predict_screen()
    assert est._predict_screen() is screen  # cached while the predict state is the same
    est.transfer(X[600:] + 0.1)
    assert est._predict_screen() is not screen
    np.testing.assert_array_equal(est.predict(X), _exact(est, X))


def test_the_screen_bounds_the_neighbours_mean_where_it_decides_the_label():
    """1-D reference rows whose spectral feature is their position; the label says whether the
    mean position of a row's k nearest reference rows exceeds the row's own position: rows near
    that boundary are proved only where every neighbour set the ball allows agrees."""
    rng = np.random.default_rng(3)
    pos = np.sort(rng.uniform(-10, 10, 40))
    ref = torch.as_tensor(np.stack([pos, np.zeros_like(pos)], 1))
    reference = {"ref": ref, "emb": torch.as_tensor(pos[:, None]), "k": 5}
    hidden, n_out = 2, 2
    W1 = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # x and the mean position
    b1 = torch.tensor([20.0, 20.0], dtype=torch.float64)  # both positive on these rows: relu is the identity
    W2 = torch.eye(2, dtype=torch.float64)
    W = torch.cat([W1.reshape(-1), b1, W2.reshape(-1), torch.zeros(2, dtype=torch.float64)])
    rows = np.stack([rng.uniform(-12, 12, 20000), rng.normal(0, 0.3, 20000)], 1)
    screen = graph.predict_screen(reference, W, hidden, n_out, torch.arange(2), torch.zeros(2, dtype=torch.float64), 1.0)
    labels, proved = graph.screen_labels(screen, rows)
    Xs = torch.as_tensor(rows)
    exact = graph.population_logits(graph.mlp_inputs(Xs, reference), W.unsqueeze(0), hidden, n_out)[0].argmax(1)
    assert 0.1 < float(proved.float().mean()) < 1.0
    np.testing.assert_array_equal(labels[proved].numpy(), exact[proved].numpy())


def test_after_a_failed_probe_the_next_chunks_go_to_the_float64_path_unprobed(models, monkeypatch):
    est, X = _copy(models, "digits")
    _reading_the_features(est, 1)
    step = chunk_rows(X.shape[1])
    rows = np.resize(X, (step * (c2m._SCREEN_SKIP + 2), X.shape[1]))
    calls = []
    real = c2m.screen_labels
    monkeypatch.setattr(c2m, "screen_labels", lambda screen, r: calls.append(r.shape[0]) or real(screen, r))
    labels = est.predict(rows)
    monkeypatch.setattr(c2m, "screen_labels", real)
    assert calls == [c2m._SCREEN_PROBE, c2m._SCREEN_PROBE]  # the first chunk's probe, then the (SKIP + 2)-th's
    np.testing.assert_array_equal(labels, _exact(est, rows))


def test_predict_of_a_read_only_memmap_gives_the_float64_labels_without_warnings(models, tmp_path):
    import warnings

    est, X = _copy(models, "blobs")
    path = tmp_path / "rows.npy"
    np.save(path, X.astype(np.float32))
    rows = np.load(path, mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels = est.predict(rows)
    np.testing.assert_array_equal(labels, _exact(est, np.asarray(rows)))


def test_predict_through_the_neighbour_encoder_equals_the_float64_path():
    """Under a representation the screen reads the codes, as the float64 path does."""
    X, y = make_blobs(1200, n_features=20, centers=5, random_state=3)
    est = _fitted(X[:600], y[:600], representation="neighbours")
    assert est.representation_ is not None
    for seed in (None, 0):
        if seed is not None:
            _reading_the_features(est, seed)
        for rows in (X, X.astype(np.float32)):
            np.testing.assert_array_equal(est.predict(rows), _exact(est, rows))
