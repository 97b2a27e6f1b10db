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
