"""C2MCluster (Alami, Kaddah & Read): the clique-graph encoder, the set critic, CEM, the estimator."""

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_blobs, make_moons
from sklearn.model_selection import GridSearchCV
from sklearn.svm import LinearSVC

from sktransfer_cluster.cluster.c2m import graph
from sktransfer_cluster.base import compact_labels
from sktransfer_cluster.cluster.c2m.cem import cross_entropy_method
from sktransfer_cluster.cluster.c2m import estimator as c2m
from sktransfer_cluster.cluster.c2m import C2MCluster
from sktransfer_cluster.cluster.c2m.estimator import PAPER_PARAMS
from sktransfer_cluster.datasets import make_c2m_sets
from sktransfer_cluster.cluster.c2m.graph import n_mlp_params, population_logits, score_population, spectral_embedding
from sktransfer_cluster.metrics import clustering_accuracy
from sktransfer_cluster.nn import init_module, knn_indices
from sktransfer_cluster.cluster.c2m.critic import (
    CliqueGAE,
    ClusteringCritic,
    clique_propagate,
    cluster_margin_features,
    cluster_size_features,
    gram_pool,
    neighbour_label_features,
)

torch.set_num_threads(1)

# representation=None: these tests read the rows as they are (the paper's path); the
# neighbour encoder's own tests name representation="auto" or "neighbours".
FAST = dict(
    representation=None,
    critic_dims=(16, 16),
    population=8,
    cem_iter=2,
    max_epochs=1,
    sets_per_epoch=2,
    set_size=40,
    device="cpu",
    random_state=0,
)

# Enough training for the behaviour tests (~15 s on one core).
TRAINED = dict(
    critic_dims=(64, 64),
    population=32,
    cem_iter=10,
    max_epochs=12,
    sets_per_epoch=20,
    device="cpu",
    random_state=0,
)


@pytest.fixture(scope="module")
def trained():
    X, y, groups = make_c2m_sets("blobs", n_sets=10, n_points=400, random_state=0)
    return C2MCluster(**TRAINED).fit(X, y, groups=groups)


def _critic(d=2, seed=0, **kw):
    gen = torch.Generator().manual_seed(seed)
    return init_module(ClusteringCritic(d, critic_dims=(16, 16), **kw), gen).double().eval()


def _dense_propagation(labels):
    """Kipf & Welling's D^-1/2 (A + I) D^-1/2 with A the clique adjacency (test reference)."""
    y = torch.as_tensor(labels)
    A = (y[:, None] == y[None, :]).double() - torch.eye(y.shape[0], dtype=torch.float64)
    A_tilde = A + torch.eye(y.shape[0], dtype=torch.float64)
    d = A_tilde.sum(1).rsqrt()
    return d[:, None] * A_tilde * d[None, :]


# ----------------------------------------------------------- graph encoder
def test_segment_sum_propagation_equals_dense_normalised_clique_adjacency():
    gen = torch.Generator().manual_seed(0)
    H = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 4, (30,), generator=gen)
    dense = _dense_propagation(labels) @ H
    torch.testing.assert_close(clique_propagate(H, labels)[0], dense)


@pytest.mark.parametrize("skip", [False, True], ids=["paper-gcn", "skip"])
def test_graph_encoder_equals_its_dense_adjacency_computation(skip):
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(25, 3, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 5, (25,), generator=gen)
    gae = init_module(CliqueGAE(3, (8, 4), skip=skip), gen).double()
    A_hat = _dense_propagation(labels)
    H = X
    for i, lin in enumerate(gae.propagate):
        out = A_hat @ lin(H)
        if skip:
            out = out + gae.self_loop[i](H)
        H = torch.relu(out) if i < len(gae.propagate) - 1 else out
    torch.testing.assert_close(gae(X, labels)[0], H)


def test_margin_features_are_distances_to_own_and_nearest_other_cluster_mean():
    X = torch.tensor([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0], [20.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 2])
    feats = cluster_margin_features(X, labels)[0]
    # means: 1, 10, 20 on the first axis
    expected = torch.tensor([[1.0, 10.0], [1.0, 8.0], [0.0, 9.0], [0.0, 10.0]], dtype=torch.float64)
    torch.testing.assert_close(feats, expected)


def test_pooled_embedding_size_does_not_depend_on_n():
    gen = torch.Generator().manual_seed(2)
    small = gram_pool(torch.randn(7, 6, generator=gen, dtype=torch.float64))
    large = gram_pool(torch.randn(5000, 6, generator=gen, dtype=torch.float64))
    assert small.shape == large.shape == (6 * 7 // 2,)


def test_pooled_embedding_is_scale_normalised():
    gen = torch.Generator().manual_seed(3)
    Z = torch.randn(50, 4, generator=gen, dtype=torch.float64)
    e = gram_pool(Z)
    # Same value when every point is repeated 20 times (no growth with n) ...
    torch.testing.assert_close(gram_pool(Z.repeat(20, 1)), e)
    # ... or when the encoder's output is scaled; the diagonal sums to 1.
    torch.testing.assert_close(gram_pool(1000.0 * Z), e)
    diag = torch.triu_indices(4, 4)
    assert float(e[diag[0] == diag[1]].sum()) == pytest.approx(1.0)


def test_critic_value_does_not_change_when_every_point_is_duplicated():
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(40, 2, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 3, (40,), generator=gen)
    critic = _critic()
    with torch.no_grad():
        torch.testing.assert_close(critic(X.repeat(3, 1), labels.repeat(3)), critic(X, labels))


# ------------------------------------------------------- batched population
def test_population_is_scored_in_one_batch_exactly_as_one_by_one():
    gen = torch.Generator().manual_seed(5)
    X = torch.randn(60, 2, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 6, (12, 60), generator=gen)
    critic = _critic()
    with torch.no_grad():
        batched = critic(X, labels)
        single = torch.cat([critic(X, labels[p]) for p in range(12)])
    torch.testing.assert_close(batched, single)


def test_population_of_clustering_mlps_gives_the_same_logits_as_each_mlp():
    gen = torch.Generator().manual_seed(6)
    X = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    W = torch.randn(5, n_mlp_params(3, 4, 7), generator=gen, dtype=torch.float64)
    batched = population_logits(X, W, 4, 7)
    for p in range(5):
        w = W[p]
        W1, b1 = w[:12].reshape(3, 4), w[12:16]
        W2, b2 = w[16:44].reshape(4, 7), w[44:]
        torch.testing.assert_close(batched[p], torch.relu(X @ W1 + b1) @ W2 + b2)


def _population_scores(est, Xs, W, chunk_elements=2**22, **critic_kwargs):
    """The estimator's critic on the labellings of ``Xs`` by the MLPs ``W``, in chunks."""
    return score_population(
        est.critic_, Xs, W, Xs, est.cem_hidden, est.max_clusters, width=16, chunk_elements=chunk_elements,
        **critic_kwargs,
    )


def test_estimator_scores_a_cem_population_as_one_by_one():
    est = C2MCluster(**FAST).fit(*make_blobs(60, centers=3, random_state=0))
    gen = torch.Generator().manual_seed(7)
    Xs = torch.randn(50, 2, generator=gen, dtype=est._dtype())
    W = torch.randn(9, n_mlp_params(2, est.cem_hidden, est.max_clusters), generator=gen, dtype=est._dtype())
    with torch.no_grad():
        batched = _population_scores(est, Xs, W)
        chunked = _population_scores(est, Xs, W, chunk_elements=2 * 50 * 16)  # chunks of 2 MLPs
        single = torch.cat([_population_scores(est, Xs, W[p : p + 1]) for p in range(9)])
    torch.testing.assert_close(batched, single)
    torch.testing.assert_close(chunked, single)



# ------------------------------------------------------- k-means candidates
@pytest.mark.parametrize("k", [1, 2, 5, 17])
def test_centroid_weights_make_the_clustering_mlp_assign_each_row_to_its_nearest_centre(k):
    rng = np.random.default_rng(k)
    X = torch.as_tensor(rng.normal(size=(120, 20)))
    centers = torch.as_tensor(rng.normal(size=(k, 20)))
    H = torch.cat([X, torch.as_tensor(rng.normal(size=(120, 3)))], 1)  # extra inputs are ignored
    w = graph.centroid_mlp_weights(centers, 23, 16, 20, X)
    nearest = torch.cdist(X, centers).argmin(1)
    torch.testing.assert_close(graph.mlp_labels(w, H, 16, 20), nearest, rtol=0, atol=0)


def test_kmeans_candidates_cover_every_number_of_clusters_up_to_the_bound():
    X = torch.as_tensor(make_blobs(90, n_features=5, centers=4, random_state=0)[0])
    W = graph.kmeans_candidates(X, 5, 16, 6, np.random.default_rng(0))
    found = [np.unique(graph.mlp_labels(w, X, 16, 6).numpy()).shape[0] for w in W]
    assert found == [1, 2, 3, 4, 5, 6]


def test_search_returns_a_candidate_that_beats_every_cem_proposal():
    """A metric that wants exactly 4 clusters: CEM from random MLPs seldom hits it, the k-means
    candidates do, and the search keeps the best of both."""
    X = torch.as_tensor(make_blobs(80, n_features=3, centers=4, random_state=1)[0])

    def critic(Xs, labels, **kw):
        k = torch.stack([torch.unique(row).numel() * torch.ones((), dtype=Xs.dtype) for row in labels])
        return -(k - 4).abs() - 10.0

    cand = graph.kmeans_candidates(X, 3, 16, 10, np.random.default_rng(0))
    res = graph.cem_clustering(
        critic, X, X, 16, 10, width=16, population=4, n_iter=1, std=1e-3,
        generator=torch.Generator().manual_seed(0), candidates=cand,
    )
    assert res.best_score == -10.0
    assert np.unique(graph.mlp_labels(res.best, X, 16, 10).numpy()).shape[0] == 4

@pytest.mark.parametrize("candidate_fakes", [True, False])
def test_training_fakes_are_the_kmeans_candidates_that_differ_from_the_truth(monkeypatch, candidate_fakes):
    """With ``candidate_fakes`` every critic step learns against the k-means labellings of its set
    for every k (less those equal to the truth); without, against the search's pick and the
    corruptions only. The real labelling is never among the fakes."""
    seen = []
    loss = c2m.wgan_critic_loss

    def spy(critic, Xs, real, fakes, **kw):
        seen.append((real.numpy()[0], fakes.numpy()))
        return loss(critic, Xs, real, fakes, **kw)

    monkeypatch.setattr(c2m, "wgan_critic_loss", spy)
    X, y = make_blobs(60, centers=[[0, 0], [10, 0], [0, 10]], cluster_std=0.5, random_state=0)
    params = {**FAST, "set_size": 60, "augment": False}
    C2MCluster(max_clusters=5, candidate_fakes=candidate_fakes, n_negatives=2, **params).fit(X, y)
    for real, fakes in seen:
        assert not any(clustering_accuracy(real, f) >= 0.99 for f in fakes[1:])
        counts = sorted(np.unique(f).shape[0] for f in fakes[3:])
        # k = 3 is the truth on these separated blobs; k = 1, 2, 4, 5 remain.
        assert counts == ([1, 2, 4, 5] if candidate_fakes else [])


@pytest.mark.parametrize("augment", [True, False])
def test_augmented_training_sets_vary_their_classes_and_orientation(monkeypatch, augment):
    """``augment``: a source that is one data set of 4 classes gives critic steps with 2 to 4 of
    them, each set turned at random; without it every step sees the 4 classes as they lie."""
    seen = []
    loss = c2m.wgan_critic_loss

    def spy(critic, Xs, real, fakes, **kw):
        seen.append((np.unique(real.numpy()).shape[0], Xs.numpy().copy()))
        return loss(critic, Xs, real, fakes, **kw)

    monkeypatch.setattr(c2m, "wgan_critic_loss", spy)
    X, y = make_blobs(80, centers=[[0, 0], [10, 0], [0, 10], [10, 10]], cluster_std=0.5, random_state=0)
    params = {**FAST, "sets_per_epoch": 12, "set_size": 80}
    C2MCluster(max_clusters=5, augment=augment, **params).fit(X, y)
    ks = {k for k, _ in seen}
    if augment:
        assert len(ks) > 1 and min(ks) >= 2 and max(ks) <= 4
    else:
        assert ks == {4}
        # The same 80 rows every step: the same standardised set.
        for _, Xs in seen[1:]:
            np.testing.assert_allclose(Xs, seen[0][1])


def test_smoothing_moves_a_point_to_its_neighbours_label_and_keeps_a_clean_labelling():
    X, y = make_blobs(60, centers=[[0, 0], [10, 0], [0, 10]], cluster_std=0.5, random_state=0)
    nb = knn_indices(torch.as_tensor(X), 5)
    np.testing.assert_array_equal(graph.smooth_labels(y, nb), y)  # already k-NN consistent
    noisy = y.copy()
    noisy[0] = (y[0] + 1) % 3  # a lone point labelled like a far cluster
    np.testing.assert_array_equal(graph.smooth_labels(noisy, nb), y)

@pytest.mark.parametrize(
    "d, gap_critic",
    [
        (2, "auto"),
        (30, "auto"),
        pytest.param(
            30,
            False,
            marks=pytest.mark.xfail(
                strict=True,
                reason="known limit of the main metric alone (docs/notes/c2m.md, 2026-11-23): it reads raw "
                "coordinates, and from four 30-D training sets it scores two far-apart 30-D blobs below one cluster",
            ),
        ),
    ],
)
def test_default_fit_never_returns_one_cluster_on_well_separated_blobs(d, gap_critic):
    """At the defaults, with a short training budget, on labelled blob sets with 2 to 5 clusters:
    new sets of two to four well-separated blobs are never clustered as one. In 30-D it is the
    gap critic's veto (on by default for grouped sources) that splits them."""
    parts = [make_blobs(120, n_features=d, centers=k, center_box=(-20, 20), random_state=d + k) for k in (2, 3, 4, 5)]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] + 10 * i for i, p in enumerate(parts)])
    groups = np.repeat(np.arange(4), 120)
    est = C2MCluster(max_clusters=8, max_epochs=4, gap_critic=gap_critic, random_state=0, device="cpu")
    est.fit(X, y, groups=groups)
    for k in (2, 3, 4):
        Xt, _ = make_blobs(150, n_features=d, centers=k, center_box=(-20, 20), random_state=100 + k)
        est.transfer(Xt)
        assert est.n_clusters_ >= 2, k

# ------------------------------------------------------ neighbour label features
def test_knn_indices_are_the_nearest_other_points_nearest_first():
    X = torch.tensor([[0.0], [1.0], [3.0], [7.0]], dtype=torch.float64)
    np.testing.assert_array_equal(knn_indices(X, 2).numpy(), [[1, 2], [0, 2], [1, 0], [2, 1]])
    assert knn_indices(X, 10).shape == (4, 3)  # capped at n - 1


def test_size_features_are_each_cluster_size_relative_to_an_equal_share():
    labels = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1], [5, 5, 5, 5, 5, 5]])
    f = cluster_size_features(labels)
    assert f.shape == (3, 6, 1)
    assert torch.equal(f[0], torch.zeros(6, 1, dtype=torch.float64))  # equal clusters, and
    assert torch.equal(f[2], torch.zeros(6, 1, dtype=torch.float64))  # one cluster: an equal share
    expected = torch.log(torch.tensor([4 * 2 / 6] * 4 + [2 * 2 / 6] * 2, dtype=torch.float64))
    torch.testing.assert_close(f[1, :, 0], expected)
    # Renaming the clusters changes nothing.
    assert torch.equal(cluster_size_features(torch.tensor([7, 7, 7, 7, 2, 2]))[0], f[1])


def test_neighbour_features_are_agreement_and_run_of_same_label_neighbours():
    X = torch.tensor([[0.0], [1.0], [3.0], [7.0]], dtype=torch.float64)
    labels = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]])
    feats = neighbour_label_features(labels, knn_indices(X, 2))
    # neighbours [[1, 2], [0, 2], [1, 0], [2, 1]]: agreement 1/2, 1/2, 0, 1/2; run 1/2, 1/2, 0, 1/2
    half = [0.5, 0.5, 0.0, 0.5]
    expected = torch.tensor([half, half], dtype=torch.float64).T * 2 - 1
    torch.testing.assert_close(feats[0], expected)
    torch.testing.assert_close(feats[1], torch.ones(4, 2, dtype=torch.float64))


def test_neighbour_critic_is_invariant_to_renaming_and_scores_a_population_as_one_by_one():
    X, y = make_blobs(60, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "n_neighbors": 5, "margin_features": False}).fit(X, y)
    assert est.labels_.shape == (60,)
    assert est.score(X, y) == est.score(X, (y + 1) * 10)
    gen = torch.Generator().manual_seed(7)
    Xs = torch.randn(50, 2, generator=gen, dtype=est._dtype())
    W = torch.randn(9, n_mlp_params(2, est.cem_hidden, est.max_clusters), generator=gen, dtype=est._dtype())
    kw = est._neighbour_kwargs(est.critic_, Xs)
    with torch.no_grad():
        batched = _population_scores(est, Xs, W, **kw)
        single = torch.cat([_population_scores(est, Xs, W[p : p + 1]) for p in range(9)])
    torch.testing.assert_close(batched, single)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


# ------------------------------------------------------------------------ CEM
def test_cem_maximises_a_known_concave_objective():
    target = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=torch.float64)
    calls = []

    def score(W):
        calls.append(W.shape[0])
        return -((W - target) ** 2).sum(1)

    res = cross_entropy_method(
        score, torch.zeros(4, dtype=torch.float64), 2.0, population=50, elite_frac=0.3, n_iter=40,
        generator=torch.Generator().manual_seed(0),
    )
    torch.testing.assert_close(res.best, target, atol=1e-3, rtol=0)
    assert calls[:40] == [50] * 40  # the whole population per call
    best = [h["best"] for h in res.history]
    assert best == sorted(best)  # the best score never decreases


def test_cem_with_the_same_generator_seed_is_deterministic():
    def run():
        return cross_entropy_method(
            lambda W: -(W**2).sum(1), torch.ones(3, dtype=torch.float64), 1.0,
            population=20, n_iter=5, generator=torch.Generator().manual_seed(3),
        ).best

    assert torch.equal(run(), run())


def test_cem_reports_when_every_score_is_nan():
    with pytest.raises(FloatingPointError, match="NaN"):
        cross_entropy_method(
            lambda W: torch.full((W.shape[0],), float("nan")), torch.zeros(2), 1.0,
            population=4, n_iter=2, generator=torch.Generator().manual_seed(0),
        )


# ------------------------------------------------------------- the metric
def test_critic_score_falls_as_more_points_are_mislabelled(trained):
    """The paper's Fig. 2 on held-out blob sets after a short training."""
    X, y, groups = make_c2m_sets("blobs", n_sets=6, random_state=5)
    rng = np.random.default_rng(0)
    levels = [0.0, 0.1, 0.3]
    means = np.zeros((6, len(levels)))
    for s in range(6):
        Xs, ys = X[groups == s], y[groups == s]
        k = ys.max() + 1
        for j, frac in enumerate(levels):
            vals = []
            for _ in range(4):
                z = ys.copy()
                wrong = rng.random(z.shape[0]) < frac
                z[wrong] = (z[wrong] + rng.integers(1, k, wrong.sum())) % k
                vals.append(trained.score(Xs, z))
            means[s, j] = np.mean(vals)
    assert np.all(np.diff(means.mean(0)) < 0)
    assert np.all(means[:, 0] > means[:, 2])  # every set: truth above 30 % mislabelled


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=12, max_size=12),
    st.permutations(list(range(5))),
    st.integers(0, 1000),
)
def test_critic_is_exactly_invariant_to_renaming_cluster_ids(labels, perm, offset):
    X = torch.as_tensor(np.random.default_rng(0).normal(size=(12, 2)))
    critic = _critic()
    y = torch.tensor(labels)
    renamed = torch.tensor([perm[v] * 7 + offset for v in labels])  # ids with gaps
    with torch.no_grad():
        assert torch.equal(critic(X, renamed), critic(X, y))


@settings(max_examples=20, deadline=None)
@given(st.permutations(["a", "b", "c"]))
def test_score_is_invariant_to_renaming_labels_of_any_type(trained, names):
    X, y = make_blobs(60, centers=3, random_state=1)
    named = np.asarray(names)[y]
    assert trained.score(X, named) == trained.score(X, y)


# ---------------------------------------------------------------- estimator
def test_paper_params_construct_and_fit_on_tiny_data():
    X, y = make_blobs(40, centers=3, random_state=0)
    est = C2MCluster(4, population=4, cem_iter=1, device="cpu", random_state=0, **PAPER_PARAMS).fit(X, y)
    assert est.labels_.shape == (40,) and len(est.history_) == PAPER_PARAMS["max_epochs"]
    assert np.isfinite(est.score(X, y))


def test_fit_without_y_is_a_clear_error():
    with pytest.raises(ValueError, match="requires the source labels y"):
        C2MCluster(**FAST).fit(make_blobs(30, random_state=0)[0])


def test_groups_split_the_source_into_labelled_sets():
    X, y, groups = make_c2m_sets("blobs", n_sets=3, n_points=50, random_state=0)
    est = C2MCluster(**FAST).fit(X, y, groups=groups)
    assert len(est.history_) == 1 and est.labels_.shape == (150,)
    with pytest.raises(ValueError, match="inconsistent|samples"):
        C2MCluster(**FAST).fit(X, y, groups=groups[:-1])
    with pytest.raises(ValueError, match="fewer than 2 samples"):
        C2MCluster(**FAST).fit(X[:3], y[:3], groups=[0, 1, 2])


def test_transfer_finds_the_number_of_clusters_on_easy_blobs(trained):
    for seed in range(3):
        X, y = make_blobs(200, centers=[[0, 0], [8, 0], [4, 7]], cluster_std=0.8, random_state=seed)
        labels = trained.transfer(X)
        assert trained.n_clusters_ == 3
        assert clustering_accuracy(y, labels) >= 0.95
        np.testing.assert_array_equal(np.unique(labels), [0, 1, 2])


def test_predict_is_subset_invariant_and_reproduces_labels_of_the_clustered_set(trained):
    X, _ = make_blobs(150, centers=4, random_state=3)
    labels = trained.transfer(X)
    np.testing.assert_array_equal(trained.predict(X), labels)
    np.testing.assert_array_equal(trained.predict(X[:17]), labels[:17])


def test_large_set_is_clustered_through_a_subsample_then_assigned():
    X, y = make_blobs(400, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "max_cem_samples": 50}).fit(X, y)
    assert est.labels_.shape == (400,)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


def test_nan_critic_loss_raises_with_the_epoch(monkeypatch):
    def nan_loss(critic, Xs, real, fakes, *, gp_weight, generator, **critic_kwargs):
        return critic.head(critic.embed(Xs, real, **critic_kwargs)).sum() * float("nan"), 0.0, 0.0

    monkeypatch.setattr(c2m, "wgan_critic_loss", nan_loss)
    with pytest.raises(FloatingPointError, match="critic training loss became nan at epoch 0"):
        C2MCluster(**FAST).fit(*make_blobs(40, random_state=0))


def test_same_random_state_gives_identical_transfer_labels():
    X, y = make_blobs(80, centers=3, random_state=0)
    a = C2MCluster(**FAST).fit(X, y)
    b = C2MCluster(**FAST).fit(X, y)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.transfer(X[::-1]), b.transfer(X[::-1]))


def _intensities(X):
    """Non-negative rows with zeros (pixels, counts): what ``auto_metric`` reads as intensities."""
    return np.maximum(X - X.mean(0), 0.0)


@pytest.mark.parametrize("d", [3, 784])
def test_representation_auto_encodes_one_intensity_data_set_only(d):
    """``representation="auto"`` (the default): a source that is one data set of intensities gets
    a neighbour encoder; a source split into small separate sets by ``groups`` (the paper), or
    rows at an arbitrary origin, are read as they are, whatever the number of columns."""
    X, y = make_blobs(90, n_features=d, centers=3, random_state=0)
    groups = np.repeat([0, 1], 45)
    auto = {**FAST, "representation": "auto"}
    assert C2MCluster(**auto).fit(_intensities(X), y).representation_ is not None
    assert C2MCluster(**auto).fit(_intensities(X), y, groups=groups).representation_ is None
    assert C2MCluster(**auto).fit(X, y).representation_ is None
    assert C2MCluster(**FAST).fit(_intensities(X), y).representation_ is None
    assert C2MCluster(**{**FAST, "representation": "neighbours"}).fit(X, y, groups=groups).representation_ is not None


def test_by_default_one_intensity_data_set_is_read_through_the_encoder_with_the_image_route():
    X, y = make_blobs(90, n_features=4, centers=3, random_state=0)
    defaults = {k: v for k, v in FAST.items() if k != "representation"}
    est = C2MCluster(**defaults).fit(_intensities(X), y)
    assert est.representation_ is not None and est.critic_.size_features


# The "auto" companions, spelled out: the route measured on MNIST, digits and mfeat-pix on the
# codes (docs/notes/c2m.md, sixth session), the previous defaults on the rows.
_ON_CODES = dict(candidate_fakes=True, size_features=True, sets_per_epoch=30, max_cem_samples=5000)
_ON_ROWS = dict(candidate_fakes=False, size_features=False, sets_per_epoch=10, max_cem_samples=60)
_AUTO = dict(candidate_fakes="auto", size_features="auto", sets_per_epoch="auto", max_cem_samples="auto")


def _same_fit(a, b):
    return np.array_equal(a.labels_, b.labels_) and all(
        torch.equal(p, q) for p, q in zip(a.critic_.parameters(), b.critic_.parameters())
    )


def test_auto_companions_on_the_encoders_codes_are_the_image_route():
    """On the codes, "auto" trains against every k-means candidate, reads cluster sizes, takes 30
    critic steps an epoch and searches up to 5,000 rows whole: the same fit, bit for bit."""
    X, y = make_blobs(150, n_features=5, centers=4, random_state=0)
    X = _intensities(X)
    small = {**FAST, "max_clusters": 6, "set_size": 60, "representation": "auto"}
    auto = C2MCluster(**{**small, **_AUTO}).fit(X, y)
    assert auto.representation_ is not None and auto.critic_.size_features
    assert _same_fit(auto, C2MCluster(**{**small, **_ON_CODES}).fit(X, y))
    assert not _same_fit(auto, C2MCluster(**{**small, **_ON_ROWS}).fit(X, y))


@pytest.mark.parametrize("grouped", [True, False])
def test_auto_companions_leave_the_rows_path_as_it_was(grouped):
    """On the rows (grouped sets, or one set at an arbitrary origin), "auto" is the previous
    defaults: no candidate fakes, no size features, 10 steps an epoch, a ``set_size`` search."""
    X, y, groups = make_c2m_sets("blobs", n_sets=3, n_points=150, random_state=0)
    groups = groups if grouped else None
    small = {**FAST, "max_clusters": 6, "set_size": 60}
    auto = C2MCluster(**{**small, **_AUTO}).fit(X, y, groups=groups)
    assert auto.representation_ is None and not auto.critic_.size_features
    assert _same_fit(auto, C2MCluster(**{**small, **_ON_ROWS}).fit(X, y, groups=groups))
    assert not _same_fit(auto, C2MCluster(**{**small, **_ON_CODES}).fit(X, y, groups=groups))


def test_transfer_refines_a_copy_of_the_source_encoder_each_time():
    """Each transfer starts from the encoder fit learned (the source's stays as it was), so the
    same target gives the same labels after a transfer to another target; predict then reads
    the target's encoder and reproduces labels_."""
    X, y = make_blobs(150, n_features=5, centers=3, random_state=0)
    Xt, _ = make_blobs(120, n_features=5, centers=3, random_state=1)
    est = C2MCluster(**{**FAST, "representation": "neighbours"}).fit(X, y)
    source_codes = est.representation_.transform(X)
    first = est.transfer(Xt)
    np.testing.assert_array_equal(est.predict(Xt), first)
    assert est.representation_ is not est._source_representation
    est.transfer(X[:60])
    np.testing.assert_array_equal(est.transfer(Xt), first)
    np.testing.assert_array_equal(est._source_representation.transform(X), source_codes)


@pytest.mark.parametrize(
    "shift, metric", [(-5.0, "euclidean"), (3.0, "euclidean"), ("intensities", "cosine")]
)
def test_encoder_graph_is_euclidean_at_an_arbitrary_origin_and_cosine_for_intensities(shift, metric):
    """Rows with a negative value, or none at zero, have an arbitrary origin: the encoder's graph
    is Euclidean; non-negative rows with zeros (pixels, counts) keep the cosine graph."""
    X, y = make_blobs(90, n_features=6, centers=3, random_state=0)
    X = np.maximum(X - X.mean(0), 0.0) if shift == "intensities" else X - X.min() + shift
    est = C2MCluster(**{**FAST, "representation": "neighbours"}).fit(X, y)
    assert est.representation_.metric == metric


@pytest.mark.parametrize("offset", [1e4, -1e6])
def test_encoder_graph_does_not_move_when_data_at_an_arbitrary_origin_are_shifted(offset):
    """The encoder reads the centred rows: shifting every row by the same vector leaves its k-NN
    graph as it was (the cosine graph did not: its angles are seen from the origin)."""
    X, y = make_blobs(90, n_features=3, centers=3, random_state=0)
    auto = {**FAST, "representation": "neighbours"}
    near = C2MCluster(**auto).fit(X, y).representation_.graph_
    far = C2MCluster(**auto).fit(X + offset * np.array([1.0, -1.0, 0.5]), y).representation_.graph_
    np.testing.assert_array_equal(near.indices, far.indices)
    np.testing.assert_allclose(near.data, far.data, atol=1e-6)


def test_graph_only_critic_scores_do_not_depend_on_where_the_set_lies():
    """Without the coordinates the metric reads the set's k-NN graph only (neighbour agreement and
    spectral embedding): a rotated, scaled and moved copy of a set gets the same score."""
    X, y = make_blobs(80, centers=3, random_state=0)
    est = C2MCluster(critic_coordinates=False, critic_spectral=3, **FAST).fit(X, y)
    angle = 0.7
    R = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    moved = 3.0 * X @ R + 5.0
    for labels in (y, np.zeros_like(y), np.arange(80) % 4):
        assert est.score(moved, labels) == pytest.approx(est.score(X, labels), abs=1e-9)


def test_a_critic_with_no_node_features_is_refused():
    with pytest.raises(ValueError, match="no node features"):
        ClusteringCritic(2, critic_dims=(4,), n_neighbors=None, margin_features=False, coordinates=False)


def test_grid_search_without_scoring_runs_on_the_metric():
    X, y = make_blobs(90, centers=3, random_state=0)
    search = GridSearchCV(C2MCluster(**FAST), {"n_negatives": [0, 2]}, cv=2).fit(X, y)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_separable_blob_pools_are_linearly_separable():
    X, y, groups = make_c2m_sets("blobs", n_sets=4, n_points=300, pool_size=300, separable=True, random_state=3)
    for g in np.unique(groups):
        rows = groups == g
        assert LinearSVC(C=1e3, max_iter=20_000, random_state=0).fit(X[rows], y[rows]).score(X[rows], y[rows]) == 1.0


def test_spectral_embedding_first_vector_separates_two_moons():
    X, y = make_moons(200, noise=0.05, random_state=0)
    emb = spectral_embedding(torch.as_tensor(X), 3, 10)
    assert emb.shape == (200, 3)
    np.testing.assert_allclose(emb.std(0), 1.0)
    assert clustering_accuracy(y, (emb[:, 0] > 0).astype(int)) == 1.0


def test_spectral_embedding_tells_apart_every_component_of_a_disconnected_graph():
    # Four far-apart blobs: eigenvalue 1 has multiplicity 4; every blob needs its own value.
    X, y = make_blobs(200, centers=[[0, 0], [20, 0], [0, 20], [20, 20]], random_state=0)
    emb = spectral_embedding(torch.as_tensor(X), 3, 10)
    means = np.array([emb[y == k].mean(0) for k in range(4)])
    gaps = np.linalg.norm(means[:, None] - means[None], axis=-1)[np.triu_indices(4, 1)]
    assert max(emb[y == k].std(0).max() for k in range(4)) < 1e-3  # constant on a blob
    assert gaps.min() > 1.0  # and a different value on each


def test_spectral_embedding_is_deterministic_and_leaves_the_input_unmodified():
    X = torch.as_tensor(make_moons(300, noise=0.05, random_state=1)[0])
    before = X.clone()
    np.testing.assert_array_equal(spectral_embedding(X, 2, 10), spectral_embedding(X, 2, 10))
    assert torch.equal(X, before)


def test_spectral_features_widen_the_clustering_mlp_inputs():
    X, y = make_blobs(60, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "spectral_features": 2, "spectral_neighbors": 5}).fit(X, y)
    assert est.cem_weights_.shape == (n_mlp_params(2 + 2, est.cem_hidden, est.max_clusters),)


def test_without_spectral_features_the_clustering_mlp_reads_the_coordinates_only():
    X, y = make_blobs(60, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "spectral_features": None}).fit(X, y)
    assert est.cem_weights_.shape == (n_mlp_params(2, est.cem_hidden, est.max_clusters),)


def test_predict_with_spectral_features_reproduces_labels_of_a_subsampled_set():
    X, y = make_blobs(300, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "spectral_features": 2, "max_cem_samples": 50}).fit(X, y)
    labels = est.transfer(X)
    np.testing.assert_array_equal(est.predict(X), labels)
    np.testing.assert_array_equal(est.predict(X[:17]), labels[:17])


# ------------------------------------------------- the shared contract (base.py)
@pytest.mark.parametrize("name", ["gae_dims", "critic_dims"])
@pytest.mark.parametrize("widths", [(0,), (2.5,), (-3,), (16, -1), "32", ()], ids=repr)
def test_bad_layer_widths_raise_a_clear_value_error(name, widths):
    X, y = make_blobs(40, centers=2, random_state=0)
    with pytest.raises(ValueError, match=name):
        C2MCluster(**{**FAST, name: widths}).fit(X, y)


def test_refused_widths_leave_the_estimator_unfitted_and_usable():
    X, y = make_blobs(40, centers=2, random_state=0)
    est = C2MCluster(**{**FAST, "gae_dims": (2.5,)})
    with pytest.raises(ValueError, match=r"gae_dims must be a tuple of positive ints"):
        est.fit(X, y)
    assert not hasattr(est, "critic_") and not hasattr(est, "n_features_in_")
    assert est.get_params()["gae_dims"] == (2.5,)
    est.set_params(gae_dims=(8, 4)).fit(X, y)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


def test_every_history_record_is_phase_epoch_loss_and_the_critic_extras():
    X, y = make_blobs(60, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "max_epochs": 3}).fit(X, y)
    assert [r["epoch"] for r in est.history_] == [0, 1, 2] and est.n_iter_ == 3
    for record in est.history_:
        assert set(record) == {"phase", "epoch", "loss", "real_score", "fake_score", "proposal_accuracy"}
        assert record["phase"] == "critic training"
        assert np.isfinite(record["loss"]) and 0.0 <= record["proposal_accuracy"] <= 1.0


def test_one_sample_is_refused_by_fit_and_by_transfer_naming_n_samples():
    X, y = make_blobs(40, centers=2, random_state=0)
    with pytest.raises(ValueError, match="n_samples=1"):
        C2MCluster(**FAST).fit(X[:1], y[:1])
    est = C2MCluster(**FAST).fit(X, y)
    labels = est.labels_.copy()
    with pytest.raises(ValueError, match="n_samples=1"):
        est.transfer(X[:1])
    np.testing.assert_array_equal(est.labels_, labels)  # the failed transfer left the model as it was


def test_labels_are_the_used_mlp_outputs_in_increasing_order():
    X, y = make_blobs(120, centers=4, random_state=2)
    est = C2MCluster(**FAST).fit(X, y)
    labels = est.transfer(X)
    Xs = ((torch.as_tensor(X) - torch.as_tensor(est.input_mean_)) / est.input_scale_).to(est._dtype())
    H = graph.mlp_inputs(Xs, est._mlp_ref)
    raw = graph.mlp_labels(torch.as_tensor(est.cem_weights_), H, est.cem_hidden, est.max_clusters).numpy()
    expected, used = compact_labels(raw, est.max_clusters)
    np.testing.assert_array_equal(est.cluster_outputs_, used)
    assert np.all(np.diff(est.cluster_outputs_) > 0)
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_array_equal(est.predict(X), labels)


def test_row_chunks_do_not_change_the_mlp_inputs_or_labels(monkeypatch):
    X, y = make_blobs(150, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "spectral_features": 2}).fit(X, y)
    Xs = torch.as_tensor(make_blobs(50, centers=3, random_state=1)[0], dtype=est._dtype())
    W = torch.as_tensor(est.cem_weights_)
    whole_inputs = graph.mlp_inputs(Xs, est._mlp_ref)
    whole_labels = graph.mlp_labels(W, whole_inputs, est.cem_hidden, est.max_clusters)
    real_chunked = graph.chunked
    monkeypatch.setattr(graph, "chunked", lambda fn, X: real_chunked(fn, X, chunk_size=7))
    torch.testing.assert_close(graph.mlp_inputs(Xs, est._mlp_ref), whole_inputs, rtol=0, atol=0)
    assert torch.equal(graph.mlp_labels(W, whole_inputs, est.cem_hidden, est.max_clusters), whole_labels)


def test_interrupt_with_keep_best_keeps_the_critic_of_the_last_finished_epoch(monkeypatch):
    X, y = make_blobs(80, centers=3, random_state=0)
    one_epoch = C2MCluster(**{**FAST, "max_epochs": 1}).fit(X, y)
    step = C2MCluster._critic_step
    calls = []

    def interrupted_step(self, *args):
        calls.append(1)
        if len(calls) == FAST["sets_per_epoch"] + 2:  # epoch 1, after one of its steps
            raise KeyboardInterrupt
        return step(self, *args)

    monkeypatch.setattr(C2MCluster, "_critic_step", interrupted_step)
    est = C2MCluster(**{**FAST, "max_epochs": 3, "keep_best": True})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    assert any("interrupted during critic training" in str(w.message) for w in caught)
    assert est.n_iter_ == 1 and len(est.history_) == 1
    kept, reference = est.critic_.state_dict(), one_epoch.critic_.state_dict()
    assert all(torch.equal(kept[k], reference[k]) for k in reference)
    np.testing.assert_array_equal(est.predict(X), est.labels_)


def test_score_of_one_sample_is_a_clear_error_and_the_model_stays_usable():
    X, y = make_blobs(n_samples=60, centers=3, random_state=0)
    est = C2MCluster(max_clusters=4, max_epochs=1, sets_per_epoch=1, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 samples"):
        est.score(X[:1])
    assert np.isfinite(est.score(X[:2]))


# ------------------------------------------------------ minimum spanning tree (issue 29)
def _rings(seed=0, n=200):
    from sklearn.datasets import make_circles

    return make_circles(n, noise=0.05, factor=0.5, random_state=seed)


def test_spanning_tree_edge_lengths_do_not_depend_on_the_set_scale_or_place():
    X, _ = make_moons(120, noise=0.05, random_state=0)
    a = graph.spanning_tree(torch.as_tensor(X))
    b = graph.spanning_tree(torch.as_tensor(1e3 * X + 7.0))
    assert a["u"].shape == (119,)
    np.testing.assert_allclose(a["w"].numpy(), b["w"].numpy(), atol=1e-9)


def test_tree_features_tell_the_true_moons_from_one_cluster_and_from_a_straight_cut():
    """The truth keeps no long tree edge inside and cuts a long one; one cluster keeps the long
    edge inside (and has no cut); a k-means cut through the moons cuts a short edge."""
    from sklearn.cluster import KMeans

    from sktransfer_cluster.cluster.c2m.critic import tree_label_features

    X, y = make_moons(200, noise=0.05, random_state=1)
    tree = graph.spanning_tree(torch.as_tensor(X))
    km = KMeans(2, n_init=3, random_state=0).fit_predict(X)
    f = tree_label_features(torch.as_tensor(np.stack([y, np.zeros_like(y), km])), tree)[:, 0, 2:]
    (t_in, t_cut, t_split), (o_in, _, o_split), (_, k_cut, _) = f.tolist()
    assert t_split == 1.0 and o_split == 0.0
    assert t_cut > t_in  # single linkage's two clusters
    assert o_in == pytest.approx(t_cut)  # the gap, now inside the one cluster
    assert k_cut < t_cut


def test_tree_features_are_exactly_invariant_to_renaming_clusters():
    from sktransfer_cluster.cluster.c2m.critic import tree_label_features

    X, y = make_blobs(90, centers=3, random_state=0)
    tree = graph.spanning_tree(torch.as_tensor(X))
    renamed = np.array([7, 0, 3])[y]
    a = tree_label_features(torch.as_tensor(y), tree)
    b = tree_label_features(torch.as_tensor(compact_labels(renamed)[0]), tree)
    assert torch.equal(a, b)


def test_tree_cut_columns_put_each_ring_on_its_own_side():
    X, y = _rings()
    cuts = graph.tree_cut_embedding(torch.as_tensor(X), 3)
    assert cuts.shape == (200, 3)
    assert set(np.unique(cuts[:, 0])) == {-1.0, 1.0}
    assert clustering_accuracy(y, (cuts[:, 0] > 0).astype(int)) == 1.0


def test_tree_candidates_include_the_single_linkage_clustering_of_two_rings():
    X, y = _rings(seed=2)
    est = C2MCluster(max_clusters=5, tree_candidates=True, spectral_features=None, representation=None)
    Xs, _, _ = graph.standardize(torch.as_tensor(X))
    H = graph.mlp_inputs(Xs, est._mlp_state(Xs))
    assert H.shape[1] == 2 + 4  # the coordinates and max_clusters - 1 cut columns
    cands = est._candidates(Xs, H, np.random.default_rng(0))
    labels = graph.mlp_labels_population(cands, H, est.cem_hidden, est.max_clusters)
    assert max(clustering_accuracy(y, lab) for lab in labels) == 1.0


def test_a_tree_critic_learned_on_blobs_scores_true_moons_and_rings_above_kmeans_and_one_cluster():
    """Trained on separable blob sets only, the metric with the tree features ranks two moons and
    two rings above one cluster and above KMeans(k) for k = 2..4 (which cut through them)."""
    from sklearn.cluster import KMeans
    from sklearn.datasets import make_circles

    X, y, g = make_c2m_sets("blobs", n_sets=4, n_points=400, separable=True, random_state=0)
    est = C2MCluster(
        tree_features=True, tree_candidates=True, candidate_fakes=True, critic_dims=(32, 32), max_epochs=2,
        population=8, cem_iter=2, representation=None, device="cpu", random_state=0,
    ).fit(X, y, groups=g)
    for Xt, yt in (make_moons(200, noise=0.05, random_state=5), make_circles(200, noise=0.05, factor=0.5, random_state=5)):
        truth = est.score(Xt, yt)
        assert truth > est.score(Xt, np.zeros_like(yt))
        for k in (2, 3, 4):
            assert truth > est.score(Xt, KMeans(k, n_init=3, random_state=0).fit_predict(Xt)), k


def test_gap_veto_takes_a_cut_across_a_gap_and_never_a_merge_of_touching_blobs():
    """One cluster over two rings (or two moons) keeps the gap the truth cuts: vetoed. Two
    touching blobs merged keep no edge the split cuts; a blob cut in two cuts a short edge."""
    from sklearn.cluster import KMeans

    X, y = _rings(seed=3)
    one = np.zeros_like(y)
    assert graph.gap_veto(torch.as_tensor(X), one, y)
    Xm, ym = make_moons(200, noise=0.05, random_state=3)
    assert graph.gap_veto(torch.as_tensor(Xm), np.zeros_like(ym), ym)
    Xb, yb = make_blobs(200, centers=[[0, 0], [2.5, 0]], cluster_std=1.0, random_state=3)
    assert not graph.gap_veto(torch.as_tensor(Xb), yb, np.zeros_like(yb))
    Xg, _ = make_blobs(200, centers=[[0, 0]], cluster_std=1.0, random_state=3)
    halves = KMeans(2, n_init=3, random_state=0).fit_predict(Xg)
    assert not graph.gap_veto(torch.as_tensor(Xg), np.zeros(200, dtype=int), halves)


def test_gap_veto_is_not_moved_by_one_point_labelled_across_a_gap():
    """A labelling that gives the end of the tree edge between two far blobs the other blob's
    label still cuts that gap (one point decides nothing): a fragmenting labelling does not veto it."""
    X, y = make_blobs(200, centers=[[0, 0], [10, 0]], cluster_std=0.8, random_state=1)
    tree = graph.spanning_tree(torch.as_tensor(X))
    e = int(tree["w"].argmax())
    end = int(tree["u"][e])
    wrong = y.copy()
    wrong[end] = 1 - y[end]
    fragments = np.where(X[:, 1] > 0, 2 * y, 2 * y + 1)
    assert not graph.gap_veto(torch.as_tensor(X), wrong, fragments)
    assert graph.gap_veto(torch.as_tensor(X), np.zeros_like(y), fragments)


def test_gap_critic_returns_the_main_clustering_or_the_gap_metrics_and_predict_follows():
    """With gap_critic the main metric is trained as without it; transfer returns its clustering
    unless the veto takes the gap metric's (two rings the main metric leaves whole; never on one
    blob, which has no gap), and predict serves whichever was taken."""
    from sklearn.datasets import make_circles

    X, y, g = make_c2m_sets("blobs", n_sets=4, n_points=400, separable=True, random_state=0)
    kw = dict(critic_dims=(32, 32), max_epochs=2, population=8, cem_iter=2, representation=None, device="cpu",
              random_state=0)
    plain = C2MCluster(gap_critic=False, **kw).fit(X, y, groups=g)
    est = C2MCluster(gap_critic=True, **kw).fit(X, y, groups=g)
    assert est.gap_model_.tree_features and not plain.__dict__.get("gap_model_")
    for (pa, pb) in zip(plain.critic_.parameters(), est.critic_.parameters()):
        assert torch.equal(pa, pb)
    Xr, yr = make_circles(200, noise=0.05, factor=0.5, random_state=5)
    Xb, _ = make_blobs(200, centers=[[0, 0]], cluster_std=1.0, random_state=7)  # no gap to veto across
    seen = set()
    for Xt in (Xr, Xb):
        labels = est.transfer(Xt)
        seen.add(est.gap_vetoed_)
        expected = est.gap_model_.labels_ if est.gap_vetoed_ else plain.transfer(Xt)
        np.testing.assert_array_equal(compact_labels(labels)[0], compact_labels(expected)[0])
        np.testing.assert_array_equal(est.predict(Xt), labels)
    assert seen == {True, False}
    est.set_params(gap_critic=False)  # after fit: transfers without the veto
    np.testing.assert_array_equal(compact_labels(est.transfer(Xr))[0], compact_labels(plain.transfer(Xr))[0])
    assert not est.gap_vetoed_


def test_gap_critic_auto_is_on_for_grouped_rows_only():
    """"auto" learns the gap metric for a source of many small sets read as rows (the paper's
    protocol, where it was measured) and for nothing else: one data set keeps its path."""
    X, y, groups = make_c2m_sets("blobs", n_sets=3, n_points=150, random_state=0)
    small = {**FAST, "max_clusters": 6, "set_size": 60, "representation": None}
    assert C2MCluster(**small).fit(X, y, groups=groups).gap_model_ is not None
    assert C2MCluster(**small).fit(X, y).gap_model_ is None
    assert C2MCluster(**{**small, "representation": "neighbours"}).fit(X, y, groups=groups).gap_model_ is None
    assert C2MCluster(**{**small, "gap_critic": False}).fit(X, y, groups=groups).gap_model_ is None


@pytest.mark.parametrize("d", [2, 64])
def test_nearest_reference_finds_the_same_neighbours_as_knn_indices(d):
    rng = np.random.default_rng(d)
    ref = torch.as_tensor(rng.normal(size=(200, d)))
    query = torch.cat([ref[::3], torch.as_tensor(rng.normal(size=(700, d)))])  # reference rows find themselves
    for k in (1, 10, 500):
        assert torch.equal(graph.nearest_reference(ref, k, query), knn_indices(ref, k, query=query))


def test_mlp_inputs_search_once_and_equal_the_two_separate_searches():
    """The spectral features (k nearest) and the tree cuts (the nearest, the first of them) come
    from one search per chunk, with exactly the values of a k-NN search and a 1-NN search."""
    X, y = make_moons(300, noise=0.05, random_state=0)
    est = C2MCluster(max_clusters=5, spectral_features=2, tree_candidates=True, representation=None)
    Xs, _, _ = graph.standardize(torch.as_tensor(X))
    ref = est._mlp_state(Xs[:200])
    calls = []
    real = graph.nearest_reference
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graph, "nearest_reference", lambda *a: calls.append(a[1]) or real(*a))
        H = graph.mlp_inputs(Xs, ref)
    assert calls == [ref["k"]]
    expected = torch.cat([Xs, ref["emb"][knn_indices(ref["ref"], ref["k"], query=Xs)].mean(1),
                          ref["cuts"][knn_indices(ref["ref"], 1, query=Xs)[:, 0]]], 1)
    assert torch.equal(H, expected)


# ------------------------------------------------------------- streamed fits past LANDMARK_ROWS (issue 31)
STREAM = dict(max_clusters=4, max_epochs=1, sets_per_epoch=2, population=8, cem_iter=2, set_size=100,
              max_cem_samples=300, random_state=0, device="cpu")
# The neighbour encoder's codes (the default on these non-negative rows with zeros) and the rows themselves.
ROUTES = {"codes": {}, "rows": {"representation": None}}


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_fit_past_the_landmark_count_reads_landmarks_sets_and_chunks_never_the_whole_array(
        tmp_path, monkeypatch, route):
    from tests.test_scale import landmark_memmap_reads

    model, largest, chunk = landmark_memmap_reads(
        C2MCluster, lambda: C2MCluster(**STREAM, **ROUTES[route]), tmp_path, monkeypatch, labelled=True)
    assert chunk < 6000
    # Landmarks in pieces, the critic's sets and the CEM subsample by index, statistics and labels in chunks.
    assert largest <= max(500, chunk)
    assert model.labels_.shape == (6000,)
    assert (model.representation_ is not None) == (route == "codes")


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_landmark_fit_on_a_memmap_equals_it_on_the_array_in_memory(tmp_path, monkeypatch, route):
    from tests.test_scale import landmark_fits_on_memmap_and_array

    mapped, in_memory = landmark_fits_on_memmap_and_array(
        lambda: C2MCluster(**STREAM, **ROUTES[route]), tmp_path, monkeypatch, labelled=True)
    np.testing.assert_array_equal(mapped.labels_, in_memory.labels_)
    np.testing.assert_array_equal(mapped.cem_weights_, in_memory.cem_weights_)
    assert mapped.input_scale_ == in_memory.input_scale_


def test_the_critic_trained_on_rows_read_by_index_equals_it_on_the_rows_in_memory(tmp_path, monkeypatch):
    # On the rows the landmark count changes only where a training set's rows come from: RowReader's
    # float64 copies are the tensor's bits, so the critic is the same to the bit.
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, y = _nonnegative_blobs(1500, 30)
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    streamed = C2MCluster(**STREAM, representation=None).fit(np.load(tmp_path / "X.npy", mmap_mode="r"), y)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 1500)
    in_memory = C2MCluster(**STREAM, representation=None).fit(X, y)
    for a, b in zip(streamed.critic_.state_dict().values(), in_memory.critic_.state_dict().values()):
        assert torch.equal(a, b)
    # The clustering's statistics come from a streamed pass: the same to rounding.
    np.testing.assert_allclose(streamed.input_mean_, in_memory.input_mean_, rtol=1e-12, atol=1e-15)
    assert streamed.input_scale_ == pytest.approx(in_memory.input_scale_, rel=1e-12)


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_streamed_path_starts_only_past_the_landmark_count(monkeypatch, route):
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, y = _nonnegative_blobs(600, 30)
    reads = []
    reader = c2m.RowReader

    def counted(X):
        read = reader(X)
        return lambda index: reads.append(len(index)) or read(index)

    monkeypatch.setattr(c2m, "RowReader", counted)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 600)
    at_count = C2MCluster(**STREAM, **ROUTES[route]).fit(X, y)
    assert reads == []  # every row in memory, as before streaming existed
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 10**6)
    np.testing.assert_array_equal(C2MCluster(**STREAM, **ROUTES[route]).fit(X, y).labels_, at_count.labels_)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 599)
    C2MCluster(**STREAM, **ROUTES[route]).fit(X, y)
    assert reads and max(reads) <= 599


def test_a_transfer_past_the_landmark_count_equals_it_on_the_array_in_memory(tmp_path, monkeypatch):
    import copy

    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, y = _nonnegative_blobs(1600, 30, k=4)
    np.save(tmp_path / "target.npy", X[y >= 2])
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    model = C2MCluster(**STREAM).fit(X[y < 2], y[y < 2])
    labels = [copy.deepcopy(model).transfer(data) for data in (np.load(tmp_path / "target.npy", mmap_mode="r"), X[y >= 2])]
    np.testing.assert_array_equal(*labels)


def test_a_transfer_past_the_landmark_count_reads_landmarks_and_chunks_never_the_whole_target(tmp_path, monkeypatch):
    from sktransfer_cluster.base.arrays import chunk_rows
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import RowsTouched, _nonnegative_blobs

    X, y = _nonnegative_blobs(6000, 200)
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 500)
    model = C2MCluster(**STREAM).fit(X[:400], y[:400])
    tensors, tensor, validate = [], C2MCluster._tensor, C2MCluster._validate_input
    monkeypatch.setattr(C2MCluster, "_tensor", lambda self, X: tensors.append(X.shape[0]) or tensor(self, X))
    # Validation hands on a plain view of the memmap: every later read goes through the counting view.
    monkeypatch.setattr(C2MCluster, "_validate_input", lambda self, X, **kw: validate(self, X, **kw).view(RowsTouched))
    RowsTouched.log = []
    labels = model.transfer(np.load(tmp_path / "X.npy", mmap_mode="r"))
    assert RowsTouched.log and labels.shape == (6000,)
    assert max(RowsTouched.log + tensors) <= max(500, chunk_rows(200)) < 6000


# ------------------------------------------------------------- a dask array past LANDMARK_ROWS (issue 31)
def _dask(X, chunks):
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    return da.from_array(X, chunks=(chunks, -1))


def _dask_rows(X, chunks):
    from sktransfer_cluster.base.streaming import DaskRows

    return DaskRows(_dask(X, chunks))


def _uneven_rows(n=1536, d=30, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) * rng.uniform(0.1, 1e3, d) + rng.normal(size=d) * 1e3).astype(np.float32)


@pytest.mark.parametrize("chunks", [512, 300])
def test_the_streamed_standardisation_of_a_dask_array_equals_it_on_the_array(tmp_path, monkeypatch, chunks):
    # Pieces of 256 rows: dask chunks of 512 cut the rows where the array's pieces end (the same bits),
    # chunks of 300 cut pieces in two (another summation order: the same to rounding).
    dask = pytest.importorskip("dask")
    from sktransfer_cluster.base import arrays

    X = _uneven_rows()
    monkeypatch.setattr(arrays, "CHUNK_BYTES", 256 * 8 * X.shape[1])
    with dask.config.set(scheduler="synchronous"):
        mean, scale = c2m._streamed_standardize(_dask_rows(X, chunks))
    np.save(tmp_path / "X.npy", X)
    for rows in (X, np.load(tmp_path / "X.npy", mmap_mode="r")):
        expected_mean, expected_scale = c2m._streamed_standardize(rows)
        if chunks % 256 == 0:
            np.testing.assert_array_equal(mean, expected_mean)
            assert scale == expected_scale
        else:
            np.testing.assert_allclose(mean, expected_mean, rtol=1e-12)
            assert scale == pytest.approx(expected_scale, rel=1e-12)


def test_the_streamed_shift_and_peak_of_a_dask_array_equal_them_on_the_array(monkeypatch):
    dask = pytest.importorskip("dask")
    from sktransfer_cluster.base import arrays

    X = _uneven_rows()
    monkeypatch.setattr(arrays, "CHUNK_BYTES", 256 * 8 * X.shape[1])
    for centre in (True, False):
        with dask.config.set(scheduler="synchronous"):
            shift, peak = c2m._streamed_shift_and_peak(_dask_rows(X, 512), centre)
        expected_shift, expected_peak = c2m._streamed_shift_and_peak(X, centre)
        assert peak == expected_peak
        if centre:
            np.testing.assert_array_equal(shift, expected_shift)
        else:
            assert shift is None and expected_shift is None


@pytest.fixture
def dask_past_landmarks(monkeypatch):
    """Past the landmark count at 400 rows, pieces of 256 rows (dask chunks of 512 align with them)."""
    dask = pytest.importorskip("dask")
    from sktransfer_cluster.base import arrays, streaming
    from sktransfer_cluster.representation import landmarks

    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    monkeypatch.setattr(streaming, "DASK_READ_ROWS", 256)
    monkeypatch.setattr(arrays, "CHUNK_BYTES", 256 * 8 * 30)
    return dask


def test_on_the_codes_route_a_dask_array_reaches_the_client_only_as_landmarks_or_sets(dask_past_landmarks):
    from tests.test_dask_networks import ClientReads, _blobs

    X, y = _blobs()
    reads = ClientReads(X.shape[1])
    with dask_past_landmarks.config.set(scheduler=reads):
        model = C2MCluster(**STREAM).fit(_dask(X, 512), y)
        model.transfer(_dask(X, 512))
    assert model.representation_ is not None
    # Every row's codes, the moments and the labels on the workers: never a chunk of rows on the client.
    assert reads.reads and max(reads.reads) <= 400


def test_on_the_codes_route_a_fit_of_a_dask_array_equals_it_on_the_array(dask_past_landmarks):
    from tests.test_dask_networks import _blobs

    X, y = _blobs()
    with dask_past_landmarks.config.set(scheduler="synchronous"):
        on_dask = C2MCluster(**STREAM).fit(_dask(X, 512), y)
    in_memory = C2MCluster(**STREAM).fit(X, y)
    assert on_dask.representation_ is not None
    np.testing.assert_array_equal(on_dask.input_mean_, in_memory.input_mean_)
    assert on_dask.input_scale_ == in_memory.input_scale_
    np.testing.assert_array_equal(on_dask.labels_, in_memory.labels_)


def test_on_grouped_rows_a_dask_array_is_fitted_and_transferred_with_its_gap_critic_as_the_array(dask_past_landmarks):
    # gap_critic="auto" fits a second estimator on the rows: it takes the dask array as the first one does.
    from tests.test_dask_networks import _blobs

    X, y = _blobs()
    groups = np.arange(y.shape[0]) // 300
    with dask_past_landmarks.config.set(scheduler="synchronous"):
        on_dask = C2MCluster(**STREAM, representation=None).fit(_dask(X, 512), y, groups=groups)
        gap_labels = on_dask.gap_model_.labels_.copy()  # before transfer sets them anew
        labels = on_dask.transfer(_dask(X[::-1], 512)).compute()
    in_memory = C2MCluster(**STREAM, representation=None).fit(X, y, groups=groups)
    np.testing.assert_array_equal(gap_labels, in_memory.gap_model_.labels_)
    np.testing.assert_array_equal(labels, in_memory.transfer(np.ascontiguousarray(X[::-1])))


def test_a_target_of_few_distinct_rows_gives_no_kmeans_warning_from_the_candidates():
    import warnings

    from sklearn.datasets import make_blobs

    X, y = make_blobs(80, centers=3, n_features=5, random_state=0)
    model = C2MCluster(max_clusters=4, **FAST).fit(X, y)
    target = np.repeat(X[:2] + 0.5, 15, axis=0)  # two distinct rows
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels = model.transfer(target)
    assert not [w for w in caught if "sklearn" in w.filename]
    assert np.unique(labels).shape[0] <= 2


def test_a_transfer_after_set_params_builds_its_clustering_mlp_with_the_new_widths_and_predict_follows():
    """cem_hidden and max_clusters set after fit shape the next transfer's clustering MLP (a new
    search); predict serves that MLP, and a set_params after the transfer changes nothing it reads."""
    X, y = make_blobs(200, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "max_clusters": 4}).fit(X, y)
    hidden, n_out = est._mlp_dims()
    assert (hidden, n_out) == (est.cem_hidden, 4)
    n_inputs = (est.cem_weights_.shape[0] - n_out) // hidden - 1 - n_out
    est.set_params(cem_hidden=5, max_clusters=3)
    labels = est.transfer(X + 0.5)
    assert est.cem_weights_.shape[0] == n_mlp_params(n_inputs, 5, 3)
    np.testing.assert_array_equal(est.predict(X + 0.5), labels)
    est.set_params(cem_hidden=7, max_clusters=6)
    np.testing.assert_array_equal(est.predict(X + 0.5), labels)


def test_a_gap_veto_after_set_params_serves_the_gap_metrics_clustering_mlp():
    """The veto takes the gap metric's clustering and its MLP, of the widths that model was fitted
    with, also when cem_hidden was set since: predict serves the labels the transfer returned."""
    from sklearn.datasets import make_circles

    X, y, g = make_c2m_sets("blobs", n_sets=4, n_points=400, separable=True, random_state=0)
    kw = dict(critic_dims=(32, 32), max_epochs=2, population=8, cem_iter=2, representation=None, device="cpu",
              random_state=0)
    est = C2MCluster(gap_critic=True, **kw).fit(X, y, groups=g)
    Xr, _ = make_circles(200, noise=0.05, factor=0.5, random_state=5)
    est.set_params(cem_hidden=7)
    labels = est.transfer(Xr)
    assert est.gap_vetoed_
    assert est._mlp_dims() == (est.gap_model_.cem_hidden, est.gap_model_.max_clusters)
    np.testing.assert_array_equal(est.predict(Xr), labels)


# ------------------------------------------------- the neighbour encoder's device
# Digits 0-4 (first 200 rows) -> 5-9 (first 150), the encoder on by default (intensities).
_DIGITS_SMALL = dict(critic_dims=(32, 32), population=16, cem_iter=4, max_epochs=3, sets_per_epoch=4,
                     set_size=40, max_clusters=6, random_state=0)
# Labels at 329ee0b, before the encoder had a device (it ran on the CPU), on this machine's CPU.
_AT_329EE0B = dict(
    fit="22211201111011121101022222102111111011222011011012112111011222111211111111111211111111211111"
        "011111110121111110111011012101111111122211211112121122121222112201111111222122211111212112121211"
        "211112120111",
    predict="1122222211222211122212121222212212211222222122221122222221222121222221222212222112212121222222"
            "22111121221121222221122222222222212222222221222111222122",
    transfer="20332303333003333203323333330030022333330303302303033333332332333303333030330333333033333333"
             "3303000232333232300303033333333202330302303323031233303233",
)


def _digits_small():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[y < 5][:200], y[y < 5][:200], X[y >= 5][:150]


def _labels(text):
    return np.array([int(c) for c in text])


def test_on_the_cpu_the_encoders_device_leaves_every_label_as_before():
    Xs, ys, Xt = _digits_small()
    est = C2MCluster(**_DIGITS_SMALL, device="cpu").fit(Xs, ys)
    assert est.representation_ is not None
    np.testing.assert_array_equal(est.labels_, _labels(_AT_329EE0B["fit"]))
    np.testing.assert_array_equal(est.predict(Xt), _labels(_AT_329EE0B["predict"]))
    np.testing.assert_array_equal(est.transfer(Xt), _labels(_AT_329EE0B["transfer"]))
    np.testing.assert_array_equal(est.predict(Xt), _labels(_AT_329EE0B["transfer"]))


def test_the_neighbour_encoder_computes_on_the_estimators_device_and_trains_on_the_cpu():
    X, y = make_blobs(90, n_features=4, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "representation": "neighbours"}).fit(X, y)
    assert est.representation_.device_ == est.device_ == torch.device("cpu")
    assert est.representation_.get_params()["device"] == est.device_
    est.transfer(X[:60] + 0.5)
    assert est.representation_.device_ == est.device_
    assert all(p.device.type == "cpu" for p in est.representation_.encoder_.parameters())


def test_a_model_pickled_before_the_encoder_had_a_device_predicts_its_labels():
    import pickle

    X, y = make_blobs(90, n_features=4, centers=3, random_state=0)
    est = C2MCluster(**{**FAST, "representation": "neighbours"}).fit(X, y)
    labels = est.transfer(X[:60] + 0.5)
    state = dict(est.__getstate__())
    for name in ("representation_", "_source_representation"):
        emb = state[name]
        old = type(emb).__new__(type(emb))
        old.__dict__.update({k: v for k, v in emb.__dict__.items() if k not in ("device", "device_")})
        state[name] = old
    before = C2MCluster.__new__(C2MCluster)
    before.__dict__.update(state)
    restored = pickle.loads(pickle.dumps(before))
    assert restored.representation_.device_ == torch.device("cpu")
    np.testing.assert_array_equal(restored.predict(X[:60] + 0.5), labels)
    np.testing.assert_array_equal(restored.transfer(X[:60] + 0.5), labels)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_encoders_codes_are_computed_there_and_agree_with_the_cpus():
    import copy
    import pickle

    Xs, ys, Xt = _digits_small()
    est = C2MCluster(**_DIGITS_SMALL, device="cuda").fit(Xs, ys)
    assert est.representation_.device_.type == "cuda"
    on_cpu = copy.deepcopy(est.representation_)
    on_cpu.device_ = torch.device("cpu")
    rows = est._encoder_rows(Xt)
    np.testing.assert_allclose(est.representation_.transform(rows), on_cpu.transform(rows), rtol=1e-4, atol=1e-4)
    labels = est.transfer(Xt)
    assert np.mean(est.predict(Xt) == labels) > 0.99
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict(Xt), est.predict(Xt))
