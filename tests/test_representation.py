"""Behaviour of sktransfer_cluster.representation (graph, encoder, NeighbourEmbedding)."""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from sktransfer_cluster.representation import (
    NeighbourEmbedding,
    encode,
    knn,
    make_encoder,
    neighbour_graph,
    shifted_images,
    steps_per_epoch,
    train_neighbour_encoder,
    umap_curve,
)

SMALL = dict(hidden_dims=(32,), n_epochs=10, batch_size=2048, random_state=0)


def blobs(n=300, seed=0):
    return make_blobs(n, n_features=8, centers=3, cluster_std=1.0, random_state=seed)


def test_graph_is_symmetric_and_does_not_bridge_separated_clusters():
    X, y = blobs()
    G = neighbour_graph(X, 10, shared_neighbours=True)
    assert abs(G - G.T).max() < 1e-12
    assert G.diagonal().sum() == 0
    coo = G.tocoo()
    assert np.all(y[coo.row] == y[coo.col])
    assert coo.data.min() > 0 and coo.data.max() <= 1


def test_shift_invariant_knn_finds_a_translated_copy():
    rs = np.random.default_rng(0)
    X = rs.random((20, 36)).astype(np.float32)
    X.reshape(20, 6, 6)[:, [0, -1], :] = 0  # blank borders, so a one-pixel shift loses nothing
    X.reshape(20, 6, 6)[:, :, [0, -1]] = 0
    moved = shifted_images(torch.as_tensor(X[:1]), (6, 6), 1, -1).numpy()
    ref = np.r_[X[1:], moved]
    idx, dist = knn(ref, 1, query=X[:1], image_shape=(6, 6), max_shift=1)
    assert idx[0, 0] == ref.shape[0] - 1 and dist[0, 0] < 1e-3
    idx0, dist0 = knn(ref, 1, query=X[:1])
    assert dist0[0, 0] > 0.1


def test_flat_array_does_not_switch_to_image_behaviour():
    # Image options are ignored without image_shape, whatever the number of columns.
    rs = np.random.default_rng(0)
    X = rs.random((60, 784))
    a = NeighbourEmbedding(max_shift=1, blur=1.0, **SMALL)._graph(X)
    b = NeighbourEmbedding(max_shift=0, blur=0.0, **SMALL)._graph(X)
    assert (a != b).nnz == 0


def test_held_out_rows_map_into_their_training_cluster():
    X, y = blobs(330)
    X_train, y_train, X_new, y_new = X[:300], y[:300], X[300:], y[300:]
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X_train)
    Z = emb.transform(X_train)
    centres = np.stack([Z[y_train == c].mean(0) for c in range(3)])
    Zn = emb.transform(X_new)
    nearest = ((Zn[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
    assert np.mean(nearest == y_new) >= 0.95


def test_fixed_random_state_is_deterministic_and_inputs_are_not_modified():
    X, _ = blobs(200)
    X0 = X.copy()
    state = torch.random.get_rng_state()
    Z1 = NeighbourEmbedding(n_components=3, **SMALL).fit_transform(X)
    Z2 = NeighbourEmbedding(n_components=3, **SMALL).fit_transform(X)
    np.testing.assert_array_equal(Z1, Z2)
    np.testing.assert_array_equal(X, X0)
    assert torch.equal(state, torch.random.get_rng_state())  # global torch RNG untouched


def test_transform_of_float32_rows_in_blocks_equals_transform_of_their_float64_copy(monkeypatch):
    from sktransfer_cluster.representation import transformer

    X, _ = blobs(200)
    X32 = X.astype(np.float32)
    X0 = X32.copy()
    emb = NeighbourEmbedding(n_components=3, **SMALL).fit(X)
    whole = emb.transform(X32.astype(np.float64))
    np.testing.assert_array_equal(emb.transform(X32), whole)
    np.testing.assert_array_equal(X32, X0)
    # Blocks that do not divide the rows: the same codes, up to the encoder's float32 products,
    # whose rounding depends on how many rows one product holds.
    monkeypatch.setattr(transformer, "_TRANSFORM_ROWS", 7)
    np.testing.assert_allclose(emb.transform(X32), whole, rtol=1e-5, atol=1e-5)


def test_refine_continues_from_the_fitted_encoder_on_the_new_graph():
    X, _ = blobs(200)
    Xt, _ = blobs(150, seed=1)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    before = [p.detach().clone() for p in emb.encoder_.parameters()]
    n_fit = len(emb.loss_curve_)
    emb.refine(Xt, n_epochs=3)
    assert len(emb.loss_curve_) == n_fit + 3
    assert emb.graph_.shape == (150, 150)
    assert any(not torch.equal(a, b) for a, b in zip(before, emb.encoder_.parameters()))
    with pytest.raises(ValueError, match="features"):
        emb.refine(X[:, :5])


def test_functional_core_trains_an_encoder_in_place():
    X, y = blobs(200)
    G = neighbour_graph(X, 10)
    gen = torch.Generator().manual_seed(0)
    enc = make_encoder(8, 2, (16,), generator=gen)
    losses = train_neighbour_encoder(enc, X / X.std(), G, n_epochs=10, batch_size=1024, generator=gen)
    assert losses[-1] < losses[0]
    assert encode(enc, X).shape == (200, 2)


def test_umap_curve_of_min_dist_zero():
    a, b = umap_curve(0.0)
    assert a == pytest.approx(1.93, abs=0.02) and b == pytest.approx(0.79, abs=0.01)


def _reconstruction_error(enc, dec, X):
    with torch.no_grad():
        Xt = torch.as_tensor(X, dtype=torch.float32)
        return float(((dec(enc(Xt)) - Xt) ** 2).mean())


def test_a_decoder_trained_beside_the_graph_loss_learns_to_reconstruct():
    X, y = blobs(200)
    X = (X - X.mean(0)) / X.std()
    G = neighbour_graph(X, 10)
    gen = torch.Generator().manual_seed(0)
    enc, dec = make_encoder(8, 3, (32,), generator=gen), make_encoder(3, 8, (32,), generator=gen)
    before = _reconstruction_error(enc, dec, X)
    train_neighbour_encoder(enc, X, G, n_epochs=60, batch_size=1024, generator=gen, decoder=dec)
    assert _reconstruction_error(enc, dec, X) < 0.5 * before
    assert not enc.training and not dec.training
    # The codes still keep the graph's clusters apart: each row's nearest class mean is its own.
    Z = encode(enc, X)
    centres = np.stack([Z[y == c].mean(0) for c in range(3)])
    assert np.mean(((Z[:, None] - centres[None]) ** 2).sum(-1).argmin(1) == y) >= 0.95


def test_neighbour_weight_zero_trains_the_reconstruction_alone():
    X, _ = blobs(200)
    X = (X - X.mean(0)) / X.std()
    G = neighbour_graph(X, 10)
    seen = []

    def node_loss(Z, nodes):
        seen.append(nodes.clone())
        return Z.sum() * 0.0

    gen = torch.Generator().manual_seed(0)
    enc, dec = make_encoder(8, 3, (32,), generator=gen), make_encoder(3, 8, (32,), generator=gen)
    losses = train_neighbour_encoder(
        enc, X, G, n_epochs=3, batch_size=1024, generator=gen, decoder=dec, neighbour_weight=0.0, node_loss=node_loss
    )
    # Every step's loss is the batch's mean squared reconstruction error, a few tenths to 1 for unit-scale rows.
    assert all(0.0 < v < 2.0 for v in losses)
    assert seen and all(n.max() < 200 and torch.equal(n, n.unique()) for n in seen)


def test_node_loss_trains_its_extra_parameters_with_the_encoder():
    X, _ = blobs(200)
    G = neighbour_graph(X, 10)
    gen = torch.Generator().manual_seed(0)
    enc = make_encoder(8, 2, (16,), generator=gen)
    centre = torch.nn.Parameter(torch.full((2,), 50.0))
    train_neighbour_encoder(
        enc, X / X.std(), G, n_epochs=5, batch_size=1024, generator=gen,
        node_loss=lambda Z, nodes: ((Z - centre) ** 2).sum(1).mean(), extra_params=(centre,),
    )
    assert float(centre.detach().abs().max()) < 50.0  # pulled towards the codes


def test_neighbour_graph_searches_on_one_thread_and_gives_the_callers_threads_back(monkeypatch):
    from threadpoolctl import threadpool_info

    from sktransfer_cluster.representation import graph as graph_module

    seen = []
    original = graph_module.knn

    def recording(*args, **kwargs):
        seen.append((torch.get_num_threads(), {pool["num_threads"] for pool in threadpool_info()}))
        return original(*args, **kwargs)

    monkeypatch.setattr(graph_module, "knn", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        neighbour_graph(blobs()[0], 5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and all(t == 1 and pools <= {1} for t, pools in seen)


def test_steps_per_epoch_is_one_pass_over_the_edges_and_at_least_one_step():
    assert steps_per_epoch(10_000, 4096) == 2  # round(10000 / 4096)
    assert steps_per_epoch(100, 4096) == 1  # a batch never holds more edges than the graph
    assert steps_per_epoch(0, 4096) == 1


def test_an_encoder_epoch_is_steps_per_epoch_adam_steps():
    X, _ = blobs(120)
    G = neighbour_graph(X, 10)
    steps = []
    losses = train_neighbour_encoder(
        make_encoder(8, 2, (8,), generator=torch.Generator().manual_seed(0)), X, G, n_epochs=3, batch_size=256,
        generator=torch.Generator().manual_seed(0), callback=lambda i, loss: steps.append(i),
    )
    assert len(losses) == 3
    assert len(steps) == 3 * steps_per_epoch(int((G.data > 0).sum()), 256)


def test_auto_metric_separates_two_clusters_on_one_ray_from_the_origin():
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal([1.0, 1.0], 0.1, (40, 2)), rng.normal([5.0, 5.0], 0.1, (40, 2))]
    X[0, 0] = -0.2  # a signed value: the origin is arbitrary
    G = neighbour_graph(X, 10, metric="auto")
    assert G[:40, 40:].nnz == 0  # Euclidean: no edge between the clusters
    # The cosine sees only the direction from the origin, the same for both clusters.
    assert neighbour_graph(X, 10, metric="cosine")[:40, 40:].nnz > 0


def test_auto_metric_is_cosine_only_for_non_negative_values_with_zeros():
    from sktransfer_cluster.representation import auto_metric

    X = np.abs(blobs()[0])
    X[0, 0] = 0.0
    assert auto_metric(X) == "cosine"  # intensities / counts
    assert auto_metric(blobs()[0]) == "euclidean"  # signed
    assert auto_metric(X + 1e3) == "euclidean"  # positive at an offset: the origin means nothing


def test_shrink_towards_mixes_each_weight_with_the_fresh_network_and_checks_shapes():
    from sktransfer_cluster.representation import shrink_towards

    trained = make_encoder(4, 2, (8,), generator=torch.Generator().manual_seed(0))
    fresh = make_encoder(4, 2, (8,), generator=torch.Generator().manual_seed(1))
    before = [p.detach().clone() for p in trained.parameters()]
    shrink_towards(trained, fresh, 0.25)
    for p, w, w0 in zip(trained.parameters(), before, fresh.parameters()):
        torch.testing.assert_close(p.detach(), 0.25 * w + 0.75 * w0.detach())
    with pytest.raises(ValueError, match="same parameter shapes"):
        shrink_towards(trained, make_encoder(4, 3, (8,)), 0.5)
    with pytest.raises(ValueError, match="keep"):
        shrink_towards(trained, fresh, 1.5)


def test_union_graph_keeps_each_set_apart_and_gives_each_its_share_of_the_edges():
    from sktransfer_cluster.representation import keep_rows, union_graph

    Xa, Xb = blobs(60)[0], blobs(90, seed=1)[0]
    Ga, Gb = neighbour_graph(Xa, 5), neighbour_graph(Xb, 5)
    G = union_graph([Ga, Gb], shares=(0.3, 0.7))
    assert G.shape == (150, 150) and G[:60, 60:].nnz == 0 and G[60:, :60].nnz == 0
    assert np.isclose(G[:60, :60].sum(), 0.3) and np.isclose(G[60:, 60:].sum(), 0.7)
    rows, sub = keep_rows(Xb, Gb, 30)
    assert rows.shape == (30, 8) and sub.shape == (30, 30)


def test_the_codes_do_not_depend_on_the_process_thread_count():
    """umap-learn's numba raised OpenMP's threads to the cores in the same process, and the
    codes (C2M's representation) changed with it; training and encoding run on one thread."""
    import torch
    from sklearn.datasets import make_blobs

    from sktransfer_cluster.representation import NeighbourEmbedding

    X, _ = make_blobs(300, n_features=8, centers=3, random_state=0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = NeighbourEmbedding(n_components=2, hidden_dims=(32,), n_epochs=3, random_state=0).fit_transform(X)
        torch.set_num_threads(2)
        two = NeighbourEmbedding(n_components=2, hidden_dims=(32,), n_epochs=3, random_state=0).fit_transform(X)
        assert torch.get_num_threads() == 2  # the caller's count comes back
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(one, two)


# ------------------------------------------------------------------ landmarks: fits past memory (issue 31)
def test_landmark_indices_are_every_row_up_to_the_count_and_a_sorted_draw_beyond():
    from sktransfer_cluster.representation import landmark_indices, uses_landmarks

    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(landmark_indices(50, rng, max_rows=50), np.arange(50))
    idx = landmark_indices(1000, rng, max_rows=50)
    assert idx.shape == (50,) and np.all(np.diff(idx) > 0) and idx.max() < 1000
    assert not uses_landmarks(50, max_rows=50) and uses_landmarks(51, max_rows=50)


@pytest.fixture
def memmap_rows(tmp_path):
    X = np.random.default_rng(0).normal(3.0, 2.0, size=(900, 12)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    return X, np.load(tmp_path / "X.npy", mmap_mode="r")


def test_read_landmarks_normalises_as_the_estimators_do_to_the_bit(memmap_rows):
    from sktransfer_cluster.representation import read_landmarks

    X, on_disk = memmap_rows
    shift, scale = X.astype(np.float64).mean(0), 1.7
    idx = np.array([0, 5, 6, 899])
    ref = ((torch.as_tensor(X[idx], dtype=torch.float64) - torch.from_numpy(shift)) / scale).float().numpy()
    np.testing.assert_array_equal(read_landmarks(on_disk, idx, shift, scale), ref)
    np.testing.assert_array_equal(read_landmarks(on_disk, idx), X[idx])


def test_encode_chunks_of_a_memmap_equals_the_encoder_on_each_chunk_in_memory(memmap_rows):
    from sktransfer_cluster.representation import encode_chunks, normalise_rows

    X, on_disk = memmap_rows
    shift = X.astype(np.float64).mean(0)
    enc = make_encoder(12, 3, (16,), generator=torch.Generator().manual_seed(0))
    Z = encode_chunks(enc, on_disk, shift, 2.0, chunk_size=256)
    rows = torch.from_numpy(normalise_rows(X, shift, 2.0))
    with torch.no_grad():
        ref = torch.cat([enc(rows[s : s + 256]) for s in range(0, 900, 256)])
    torch.testing.assert_close(Z, ref, rtol=0, atol=0)


def test_training_from_a_row_reader_equals_training_from_the_array(memmap_rows):
    from sktransfer_cluster.representation import normalise_rows, row_reader

    X, on_disk = memmap_rows
    G = neighbour_graph(X, 5)
    shift = X.astype(np.float64).mean(0)
    runs = []
    for inputs in (normalise_rows(X, shift, 2.0), row_reader(on_disk, shift, 2.0)):
        enc = make_encoder(12, 2, (16,), generator=torch.Generator().manual_seed(0))
        runs.append(train_neighbour_encoder(enc, inputs, G, n_epochs=2, batch_size=256,
                                            generator=torch.Generator().manual_seed(1)))
        runs.append(encode(enc, normalise_rows(X, shift, 2.0)))
    assert runs[0] == runs[2]
    np.testing.assert_array_equal(runs[1], runs[3])


def test_shared_neighbour_weights_scale_each_edge_by_the_overlap_of_the_two_neighbourhoods():
    from sktransfer_cluster.representation import fuzzy_graph, shared_neighbour_weights

    X, _ = blobs(200)
    idx, dist = knn(X, 6)
    G = fuzzy_graph(idx, dist)
    hoods = [set(row) | {i} for i, row in enumerate(idx.tolist())]
    S = shared_neighbour_weights(G, idx).tocoo()
    assert S.nnz == G.nnz
    for i, j, w in zip(S.row, S.col, S.data):
        assert w == G[i, j] * (len(hoods[i] & hoods[j]) / 7.0)


# ----------------------------------------------------------------- review V11 (helper F3)
def _neighbour_sets(idx):
    return [set(row.tolist()) for row in idx]


def _same_graph(G, H):
    """The same edges, with weights equal up to float32's rounding of the distances."""
    return ((G != 0) != (H != 0)).nnz == 0 and abs(G - H).max() < 1e-3


@pytest.mark.parametrize("offset", [1e3, 1e4, 1e7])
def test_knn_finds_the_same_neighbours_whatever_the_datas_offset(offset):
    X, _ = blobs(300)
    X = X - X.mean(0)
    idx, _ = knn(X, 10)
    moved, _ = knn(X + offset, 10)
    assert _neighbour_sets(moved) == _neighbour_sets(idx)


def test_knn_measures_query_rows_at_an_offset_from_the_same_centre_as_the_reference():
    X, _ = blobs(300)
    X = X - X.mean(0)
    idx, dist = knn(X[:250], 5, query=X[250:])
    moved, moved_dist = knn(X[:250] + 1e5, 5, query=X[250:] + 1e5)
    assert _neighbour_sets(moved) == _neighbour_sets(idx)
    np.testing.assert_allclose(moved_dist, dist, rtol=1e-4)


def test_euclidean_neighbour_graph_does_not_depend_on_the_offset():
    X, _ = blobs(300)
    G = neighbour_graph(X, 10, metric="euclidean")
    moved = neighbour_graph(X + 1e5, 10, metric="euclidean")
    assert _same_graph(G, moved)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_knn_refuses_rows_that_are_not_finite(value):
    X, _ = blobs(50)
    X[3, 2] = value
    with pytest.raises(ValueError, match="NaN or infinite.*impute"):
        knn(X, 5)
    with pytest.raises(ValueError, match="NaN or infinite.*impute"):
        knn(blobs(50)[0], 5, query=X)


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "auto"])
def test_neighbour_graph_refuses_rows_that_are_not_finite(metric):
    X, _ = blobs(50)
    X[7, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite.*impute"):
        neighbour_graph(X, 5, metric=metric)


def test_cosine_graph_of_rows_beyond_float32s_range_is_the_graph_of_the_same_directions():
    X = np.abs(blobs(200)[0])
    G = neighbour_graph(X, 10, metric="cosine")
    big = neighbour_graph(X * 1e300, 10, metric="cosine")
    assert _same_graph(G, big)


def test_euclidean_graph_of_rows_beyond_float32s_range_is_the_graph_of_the_same_rows():
    X, _ = blobs(200)
    G = neighbour_graph(X, 10, metric="euclidean")
    for scale in (1e300, 1e-300):
        scaled = neighbour_graph(X * scale, 10, metric="euclidean")
        assert _same_graph(G, scaled)


def test_neighbour_embedding_fits_cosine_rows_beyond_float32s_range():
    X = np.abs(blobs(200)[0]) * 1e300
    X[:, 0] = 0.0
    emb = NeighbourEmbedding(n_components=2, metric="cosine", **SMALL).fit(X)
    assert np.isfinite(emb.transform(X)).all()


@pytest.mark.parametrize(
    "param, value",
    [
        ("learning_rate", np.nan),
        ("learning_rate", 0.0),
        ("n_epochs", -1),
        ("refine_epochs", -1),
        ("n_components", 0),
        ("batch_size", 0),
        ("n_neighbors", 0),
        ("hidden_dims", (0,)),
        ("hidden_dims", "256"),
        ("metric", "manhattan"),
        ("max_shift", -1),
        ("blur", -1.0),
        ("shared_neighbours", "yes"),
        ("image_shape", "28x28"),
        ("n_components", "10"),
    ],
)
def test_neighbour_embedding_refuses_invalid_parameters_at_fit(param, value):
    X, _ = blobs(60)
    with pytest.raises(ValueError, match=param):
        NeighbourEmbedding(**{**SMALL, param: value}).fit(X)


def _state(emb):
    return (emb.n_features_in_, emb.shift_.copy(), emb.scale_.copy(), emb.encoder_, list(emb.loss_curve_), emb.graph_)


def test_a_failed_fit_leaves_the_embedding_as_it_was(monkeypatch):
    from sktransfer_cluster.representation import transformer

    X, _ = blobs(200)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    Z, state = emb.transform(X), _state(emb)

    def failing(*args, **kwargs):
        raise RuntimeError("training failed")

    monkeypatch.setattr(transformer, "train_neighbour_encoder", failing)
    with pytest.raises(RuntimeError, match="training failed"):
        emb.fit(blobs(150, seed=1)[0][:, :5] + 7.0)
    after = _state(emb)
    assert after[0] == state[0] and after[3] is state[3] and after[4] == state[4] and after[5] is state[5]
    np.testing.assert_array_equal(after[1], state[1])
    np.testing.assert_array_equal(after[2], state[2])
    np.testing.assert_array_equal(emb.transform(X), Z)


def test_a_failed_refine_leaves_the_embedding_as_it_was(monkeypatch):
    from sktransfer_cluster.representation import encoder as encoder_module

    X, _ = blobs(200)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    Z, state = emb.transform(X), _state(emb)
    original = encoder_module._Adam.step
    calls = []

    def failing_later(self):
        calls.append(1)
        if len(calls) > 3:  # after some parameters have been updated
            raise RuntimeError("training failed")
        return original(self)

    monkeypatch.setattr(encoder_module._Adam, "step", failing_later)
    with pytest.raises(RuntimeError, match="training failed"):
        emb.refine(blobs(150, seed=1)[0], n_epochs=5)
    after = _state(emb)
    assert after[4] == state[4] and after[5] is state[5]
    np.testing.assert_array_equal(emb.transform(X), Z)


def test_edges_beyond_multinomials_category_limit_are_drawn_in_proportion_to_their_weight(monkeypatch):
    from sktransfer_cluster.representation import encoder as encoder_module

    weights = torch.tensor([0.0, 1.0, 3.0, 0.0, 4.0, 2.0], dtype=torch.float64)
    monkeypatch.setattr(encoder_module, "MULTINOMIAL_CATEGORIES", 4)
    draws = encoder_module.draw_edges(weights, 200_000, torch.Generator().manual_seed(0))
    counts = np.bincount(draws.numpy(), minlength=6) / 200_000
    assert counts[0] == 0 and counts[3] == 0
    np.testing.assert_allclose(counts, (weights / weights.sum()).numpy(), atol=5e-3)


def test_edges_below_multinomials_category_limit_are_torch_multinomials_draws():
    from sktransfer_cluster.representation import encoder as encoder_module

    weights = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    drawn = encoder_module.draw_edges(weights, 500, torch.Generator().manual_seed(2))
    expected = torch.multinomial(weights, 500, replacement=True, generator=torch.Generator().manual_seed(2))
    assert torch.equal(drawn, expected)


def test_training_on_more_edges_than_multinomials_limit_runs_and_learns(monkeypatch):
    from sktransfer_cluster.representation import encoder as encoder_module

    monkeypatch.setattr(encoder_module, "MULTINOMIAL_CATEGORIES", 16)
    X, _ = blobs(200)
    G = neighbour_graph(X, 10)
    gen = torch.Generator().manual_seed(0)
    enc = make_encoder(8, 2, (16,), generator=gen)
    losses = train_neighbour_encoder(enc, X / X.std(), G, n_epochs=10, batch_size=1024, generator=gen)
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def test_neighbour_embedding_names_its_output_features_and_follows_set_output():
    pd = pytest.importorskip("pandas")
    X, _ = blobs(100)
    emb = NeighbourEmbedding(n_components=3, **SMALL).set_output(transform="pandas")
    Z = emb.fit_transform(pd.DataFrame(X, columns=[f"c{i}" for i in range(8)]))
    assert list(Z.columns) == ["neighbourembedding0", "neighbourembedding1", "neighbourembedding2"]
    assert list(emb.feature_names_in_) == [f"c{i}" for i in range(8)]
    assert list(emb.get_feature_names_out()) == list(Z.columns)


def test_neighbour_embedding_reports_another_width_in_scikit_learns_words():
    X, _ = blobs(100)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    with pytest.raises(ValueError, match="X has 5 features, but NeighbourEmbedding is expecting 8 features"):
        emb.transform(X[:, :5])


def test_default_metric_is_resolved_at_fit_by_the_package_rule():
    X, _ = blobs(100)  # negative values: Euclidean
    emb = NeighbourEmbedding(n_components=2, **SMALL)
    assert emb.metric == "auto"
    assert emb.fit(X).metric_ == "euclidean"
    counts = np.abs(X).round()
    counts[:, 0] = 0.0  # non-negative with zeros: cosine
    assert emb.fit(counts).metric_ == "cosine"


def test_an_explicit_metric_is_kept_as_given():
    X, _ = blobs(100)
    assert NeighbourEmbedding(n_components=2, metric="cosine", **SMALL).fit(X).metric_ == "cosine"
    counts = np.abs(X).round()
    counts[:, 0] = 0.0
    assert NeighbourEmbedding(n_components=2, metric="euclidean", **SMALL).fit(counts).metric_ == "euclidean"


def test_the_default_metric_gives_the_explicit_metrics_embedding():
    X, _ = blobs(100)
    auto = NeighbourEmbedding(n_components=2, **SMALL).fit_transform(X)
    np.testing.assert_array_equal(auto, NeighbourEmbedding(n_components=2, metric="euclidean", **SMALL).fit_transform(X))


def _small_embedding():
    return NeighbourEmbedding(n_components=2, hidden_dims=(8,), n_epochs=2, batch_size=256, random_state=0)


def test_neighbour_embedding_passes_scikit_learns_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    failures = check_estimator(_small_embedding(), on_fail=None)
    bad = [(f["check_name"], str(f["exception"])[:200]) for f in failures if f["status"] == "failed"]
    assert not bad


def test_training_refuses_inputs_whose_squares_overflow_float32_before_any_step():
    X, _ = blobs(60)
    G = neighbour_graph(X, 5)
    enc = make_encoder(8, 2, (8,), generator=torch.Generator().manual_seed(0))
    before = [p.detach().clone() for p in enc.parameters()]
    with pytest.raises(ValueError, match="outside the scale.*Rescale them to the source's units"):
        train_neighbour_encoder(enc, X * 1e25, G, n_epochs=1)
    assert all(torch.equal(a, b) for a, b in zip(before, enc.parameters()))


def test_transform_keeps_the_fitted_width_after_set_params():
    # V12 4: set_params(n_components=3) after fit broke transform (a (n, 3) buffer for 2 codes).
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    expected = emb.transform(X)
    emb.set_params(n_components=3)
    np.testing.assert_array_equal(emb.transform(X), expected)


# ------------------------------------------------------------------ device
def test_device_is_a_parameter_that_clone_and_get_params_keep():
    from sklearn.base import clone

    emb = NeighbourEmbedding(device="cpu", **SMALL)
    assert NeighbourEmbedding().get_params()["device"] == "auto"
    assert emb.get_params()["device"] == "cpu"
    assert clone(emb).get_params() == emb.get_params()
    assert clone(NeighbourEmbedding(device=torch.device("cpu"))).device == torch.device("cpu")


def test_fit_resolves_the_device_and_keeps_the_encoder_on_the_cpu():
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, device="cpu", **SMALL).fit(X)
    assert emb.device_ == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in emb.encoder_.parameters())


@pytest.mark.parametrize("device, message", [("tpu", "device"), ("cuda:99", "not available|device")])
def test_an_invalid_or_unavailable_device_is_refused_at_fit_and_the_embedding_stays_as_it_was(device, message):
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, device="cpu", **SMALL).fit(X)
    expected = emb.transform(X)
    with pytest.raises(ValueError, match=message):
        emb.set_params(device=device).fit(X)
    assert emb.device_ == torch.device("cpu")
    np.testing.assert_array_equal(emb.transform(X), expected)


def test_transform_before_fit_is_not_fitted_whatever_the_device():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        NeighbourEmbedding(device="cuda:99").transform(np.ones((4, 3)))


def test_set_params_device_after_fit_leaves_where_transform_runs():
    # As every estimator's device_: set_params(device=...) after fit changes nothing until the next fit.
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, device="cpu", **SMALL).fit(X)
    expected = emb.transform(X)
    emb.set_params(device="cuda:99")
    np.testing.assert_array_equal(emb.transform(X), expected)


def test_the_accelerator_path_run_on_the_cpu_gives_the_cpus_codes_in_blocks(monkeypatch):
    # The code of transform on a GPU (blocks sent in their own dtype, the affine in float64,
    # the encoder's copy), run here on the CPU: the CPU path's codes up to float32 products'
    # rounding, which depends on how many rows one product holds.
    from sktransfer_cluster.representation import transformer

    X, _ = blobs(200)
    emb = NeighbourEmbedding(n_components=3, device="cpu", **SMALL).fit(X)
    X32 = X.astype(np.float32)
    X0 = X32.copy()
    expected = emb.transform(X32)
    monkeypatch.setattr(transformer, "_TRANSFORM_ROWS", 7)
    monkeypatch.setattr(transformer, "_DEVICE_BLOCK_BYTES", 7 * 8 * X.shape[1])
    for rows in (X32, X, X32[::-1], np.asfortranarray(X32)):
        got = emb._transform_on(rows, torch.device("cpu"))
        assert got.dtype == np.float64 and got.shape == (200, 3)
        np.testing.assert_allclose(got, emb.transform(rows), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(emb._transform_on(X32, torch.device("cpu")), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(X32, X0)


def test_the_accelerator_copy_of_the_encoder_follows_refine_and_in_place_changes():
    X, _ = blobs(120)
    emb = NeighbourEmbedding(n_components=2, device="cpu", **SMALL).fit(X)
    cpu = torch.device("cpu")
    first = emb._encoder_on(cpu)
    assert emb._encoder_on(cpu) is first  # made once
    assert first is not emb.encoder_
    emb.refine(X[::-1], n_epochs=1)
    np.testing.assert_allclose(emb._transform_on(X, cpu), emb.transform(X), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        emb.encoder_[0].weight.mul_(2.0)
    np.testing.assert_allclose(emb._transform_on(X, cpu), emb.transform(X), rtol=1e-5, atol=1e-5)


def _pickled_before_the_device_parameter(emb):
    """An embedding as pickled before ``device`` existed: neither ``device`` nor ``device_``."""
    import pickle

    state = dict(emb.__getstate__())  # a copy: it may be the embedding's own __dict__
    state.pop("device"), state.pop("device_")
    old = NeighbourEmbedding.__new__(NeighbourEmbedding)
    old.__dict__.update(state)
    return pickle.loads(pickle.dumps(old))


def test_an_embedding_pickled_before_the_device_parameter_loads_on_the_cpu_and_gives_its_codes():
    from sklearn.base import clone

    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, device="cpu", **SMALL).fit(X)
    old = _pickled_before_the_device_parameter(emb)
    assert old.device == "cpu" and old.device_ == torch.device("cpu")
    np.testing.assert_array_equal(old.transform(X), emb.transform(X))
    assert clone(old).get_params() == emb.get_params()


@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates a CUDA-fitted embedding on a CPU-only machine")
def test_an_embedding_fitted_on_a_gpu_loads_on_the_cpu_with_a_warning():
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, device="cpu", **SMALL).fit(X)
    state = dict(emb.__getstate__())
    state["device_"] = torch.device("cuda")  # what a GPU-fitted embedding pickles (its encoder is on the CPU)
    restored = NeighbourEmbedding.__new__(NeighbourEmbedding)
    with pytest.warns(UserWarning, match="not available here; it was loaded on the CPU"):
        restored.__setstate__(state)
    assert restored.device_ == torch.device("cpu")
    np.testing.assert_array_equal(restored.transform(X), emb.transform(X))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_transform_on_cuda_gives_the_cpus_codes_within_float32_rounding():
    import pickle

    X, _ = blobs(300)
    X = np.abs(X).astype(np.float32)
    cpu = NeighbourEmbedding(n_components=3, device="cpu", **SMALL).fit(X)
    cuda = NeighbourEmbedding(n_components=3, device="cuda", **SMALL).fit(X)
    assert cuda.device_.type == "cuda"
    # Training runs on the CPU: the same encoder; only transform's arithmetic moved.
    assert all(torch.equal(p, q) for p, q in zip(cpu.encoder_.parameters(), cuda.encoder_.parameters()))
    codes = cuda.transform(X)
    np.testing.assert_allclose(codes, cpu.transform(X), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(cuda)).transform(X), codes)
    assert all(p.device.type == "cpu" for p in cuda.encoder_.parameters())


# ------------------------------------------- V14's findings 2 and 11 (tenth session, helper F8)
def test_transform_refuses_rows_whose_normalised_values_overflow_float32():
    # Before: all-NaN codes and only numpy's "overflow encountered in cast".
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    far = X * 1e40
    with pytest.raises(ValueError, match=r"beyond float32's largest value.*Rescale them to its units"):
        emb.transform(far)
    np.testing.assert_array_equal(far, X * 1e40)
    np.testing.assert_array_equal(emb.transform(X), NeighbourEmbedding(n_components=2, **SMALL).fit(X).transform(X))


def test_the_accelerator_path_refuses_rows_whose_normalised_values_overflow_float32():
    # transform's device path (_transform_on), run here on the CPU.
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    with pytest.raises(ValueError, match=r"beyond float32's largest value.*Rescale them to its units"):
        emb._transform_on(X * 1e40, torch.device("cpu"))


def test_transform_embeds_rows_far_beyond_the_fitted_scale_that_float32_holds():
    X, _ = blobs(60)
    emb = NeighbourEmbedding(n_components=2, **SMALL).fit(X)
    assert np.isfinite(emb.transform(X * 1e30)).all()


def test_an_image_shape_of_non_integers_is_refused_at_fit_not_truncated():
    # Before, (2.9, 2.9) was taken as (2, 2).
    X = np.random.default_rng(0).random((30, 4))
    with pytest.raises(ValueError, match=r"image_shape must be \(h, w\) or \(c, h, w\) with positive ints"):
        NeighbourEmbedding(image_shape=(2.9, 2.9), n_epochs=1).fit(X)
    assert NeighbourEmbedding(image_shape=(2, 2), n_epochs=1).fit(X).transform(X).shape == (30, 10)
