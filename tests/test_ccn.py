"""CCNCluster (Hsu, Lv & Kira): the KCL loss, the pair-enumeration network G, the estimator."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import make_blobs

import sktransfer_cluster.cluster.ccn.estimator as ccn_module
from sktransfer_cluster.base import chunked, minibatches
from sktransfer_cluster.cluster.ccn import CCNCluster
from sktransfer_cluster.cluster.ccn.estimator import PAPER_PARAMS
from sktransfer_cluster.datasets import load_digits_transfer
from sktransfer_cluster.cluster.ccn.losses import kcl_loss, mcl_loss, pairwise_kl_detached
from sktransfer_cluster.metrics import clustering_accuracy, n_dominant_clusters
from sktransfer_cluster.nn import init_module
from sktransfer_cluster.cluster.ccn.networks import SimilarityNetwork, pair_enumerate
from sktransfer_cluster.cluster.ccn.pairs import dominant_outputs, neighbor_pairs, second_order

torch.set_num_threads(1)

# The mechanics of G and f on the rows themselves (representation="input"); the default
# neighbour representation has tests of its own below.
FAST = dict(
    representation="input",
    hidden_dims=(16,),
    similarity_hidden_dims=(16,),
    pair_hidden=16,
    similarity_epochs=20,
    clustering_epochs=40,
    n_similarity_nets=1,  # one G keeps the tests fast (the default is 3)
    batch_size=40,
    device="cpu",
    random_state=0,
)

# P = (0.5, 0.5), Q = (0.9, 0.1):
# KL(P||Q) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1);  KL(Q||P) = 0.9 ln 1.8 + 0.1 ln 0.2
KL_PQ = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
KL_QP = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
OFF_DIAGONAL = ~torch.eye(2, dtype=torch.bool)


def _two_distributions():
    return torch.tensor([[0.5, 0.5], [0.9, 0.1]], dtype=torch.float64, requires_grad=True)


def _blob_task(seed=0):
    centers = np.array([[0, 0], [6, 0], [0, 6], [6, 6], [-6, 0], [0, -6]], dtype=float)
    X, y = make_blobs(n_samples=300, centers=centers, cluster_std=0.7, random_state=seed)
    return X[y < 3], y[y < 3], X[y >= 3], y[y >= 3]


# ------------------------------------------------------------------------ KCL loss
def test_kcl_similar_pair_value_and_gradient_match_hand_computation():
    prob = _two_distributions()
    loss = kcl_loss(prob.log(), torch.ones(2, 2), mask=OFF_DIAGONAL, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(KL_PQ + KL_QP)
    # d KL(P*||Q) / dq = -p / q and d KL(Q*||P) / dp = -q / p.
    expected = torch.tensor([[-0.9 / 0.5, -0.1 / 0.5], [-0.5 / 0.9, -0.5 / 0.1]], dtype=torch.float64)
    torch.testing.assert_close(prob.grad, expected)


def test_kcl_dissimilar_pair_value_and_gradient_match_hand_computation():
    prob = _two_distributions()
    loss = kcl_loss(prob.log(), torch.zeros(2, 2), mask=OFF_DIAGONAL, margin=2.0, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx((2.0 - KL_PQ) + (2.0 - KL_QP))
    expected = torch.tensor([[0.9 / 0.5, 0.1 / 0.5], [0.5 / 0.9, 0.5 / 0.1]], dtype=torch.float64)
    torch.testing.assert_close(prob.grad, expected)


def test_kcl_hinge_is_zero_with_zero_gradient_beyond_the_margin():
    prob = torch.tensor([[0.999, 0.001], [0.001, 0.999]], dtype=torch.float64, requires_grad=True)
    loss = kcl_loss(prob.log(), torch.zeros(2, 2), mask=OFF_DIAGONAL, margin=2.0, reduction="sum")
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(prob.grad == 0)


def _paper_lco(logits, S, sigma):
    """Eq. (1)-(5) of the paper, one unordered pair at a time (self-pairs once)."""
    P = torch.softmax(logits, 1)
    total = 0.0
    n = P.shape[0]

    def kl(target, pred):
        target = target.detach()
        return (target * (target.log() - pred.log())).sum()

    for p in range(n):
        for q in range(p, n):
            a, b = kl(P[p], P[q]), kl(P[q], P[p])
            if p == q:  # the ordered self-pair counts once
                a, b = a, torch.zeros((), dtype=P.dtype)
                cost = a if S[p, q] else torch.clamp(sigma - a, min=0) + 0 * b
            elif S[p, q]:
                cost = a + b
            else:
                cost = torch.clamp(sigma - a, min=0) + torch.clamp(sigma - b, min=0)
            total = total + cost
    return total


def test_kcl_equals_the_paper_formulation_on_a_random_batch_value_and_gradient():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 4, generator=gen, dtype=torch.float64) * 2
    S = torch.randint(0, 2, (7, 7), generator=gen)
    S = torch.triu(S) + torch.triu(S, 1).T  # symmetric similarity, as G predicts both orders
    a = logits.clone().requires_grad_(True)
    ours = kcl_loss(F.log_softmax(a, 1), S, margin=2.0, reduction="sum")
    ours.backward()
    b = logits.clone().requires_grad_(True)
    ref = _paper_lco(b, S, 2.0)
    ref.backward()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(a.grad, b.grad)


def test_kcl_mean_averages_over_known_pairs_only():
    log_p = F.log_softmax(torch.randn(5, 3, dtype=torch.float64), 1)
    S = torch.ones(5, 5)
    mask = torch.zeros(5, 5, dtype=torch.bool)
    mask[:3, :3] = True
    torch.testing.assert_close(
        kcl_loss(log_p, S, mask=mask), kcl_loss(log_p[:3], S[:3, :3])
    )


def test_kcl_unknown_pairs_are_masked_not_treated_as_dissimilar():
    # Small seeded logits: every KL lies well inside the margin, so a dissimilar pair costs > 0
    # (unseeded unit-scale logits made the check below fail now and then, with KL >= margin).
    gen = torch.Generator().manual_seed(0)
    logits = (0.1 * torch.randn(4, 3, dtype=torch.float64, generator=gen)).requires_grad_()
    S = torch.ones(4, 4)
    S[0, 3] = S[3, 0] = 0  # only meaningful if known
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[0, 3] = mask[3, 0] = False
    masked = kcl_loss(F.log_softmax(logits, 1), S, mask=mask, reduction="none")
    assert masked[0, 3] == 0 and masked[3, 0] == 0
    as_dissimilar = kcl_loss(F.log_softmax(logits, 1), S, reduction="none")
    assert as_dissimilar[0, 3] > 0
    # A fully masked batch contributes nothing (and no NaN from 0 / 0).
    empty = kcl_loss(F.log_softmax(logits, 1), S, mask=torch.zeros(4, 4, dtype=torch.bool))
    assert empty.item() == 0.0


def test_pairwise_kl_matrix_matches_definition_and_is_zero_on_the_diagonal():
    log_p = F.log_softmax(torch.randn(4, 5, dtype=torch.float64), 1)
    D = pairwise_kl_detached(log_p)
    P = log_p.exp()
    ref = (P[:, None, :] * (log_p[:, None, :] - log_p[None, :, :])).sum(-1)
    torch.testing.assert_close(D, ref)
    torch.testing.assert_close(torch.diagonal(D), torch.zeros(4, dtype=torch.float64))


# --------------------------------------------------------------- pair enumeration / G
def test_pair_enumeration_gives_all_ordered_pairs_with_self_pairs():
    a = torch.arange(6.0).reshape(3, 2)
    b = torch.arange(10.0, 18.0).reshape(4, 2)
    out = pair_enumerate(a, b)
    assert out.shape == (12, 4)
    for i in range(3):
        for j in range(4):
            torch.testing.assert_close(out[i * 4 + j], torch.cat([a[i], b[j]]))
    assert pair_enumerate(torch.zeros(10, 512)).shape == (100, 1024)


def _graph_size(t):
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return len(seen)


def test_pair_enumeration_is_vectorised_not_a_loop_over_pairs():
    small = pair_enumerate(torch.randn(3, 4, requires_grad=True))
    large = pair_enumerate(torch.randn(60, 4, requires_grad=True))
    assert _graph_size(small) == _graph_size(large)  # constant number of ops, whatever n


def test_similarity_network_returns_logits_for_every_ordered_pair():
    g = init_module(SimilarityNetwork(5, (8, 6), pair_hidden=7), torch.Generator().manual_seed(0))
    g.eval()
    x, x2 = torch.randn(4, 5), torch.randn(3, 5)
    assert g(x).shape == (4, 4, 2)
    assert g(x, x2).shape == (4, 3, 2)
    with torch.no_grad():
        torch.testing.assert_close(g(x)[1, 2], g(x[[1]], x[[2]])[0, 0])


def test_symmetric_similarity_network_scores_both_orders_of_a_pair_equally():
    g = init_module(SimilarityNetwork(5, (8, 6), 7, symmetric=True), torch.Generator().manual_seed(0))
    g.eval()
    x = torch.randn(6, 5)
    with torch.no_grad():
        logits = g(x)
    assert logits.shape == (6, 6, 2)
    torch.testing.assert_close(logits, logits.transpose(0, 1))


def test_symmetric_similarity_network_with_raw_features_appends_the_input():
    g = init_module(
        SimilarityNetwork(5, (8, 6), 7, symmetric=True, raw_features=True), torch.Generator().manual_seed(0)
    )
    g.eval()
    x = torch.randn(4, 5)
    with torch.no_grad():
        h = g.backbone(x)
    assert h.shape == (4, 6 + 5)
    torch.testing.assert_close(h[:, 6:], x)


@pytest.mark.parametrize(
    "pair_features, symmetric, raw", [("concat", False, False), ("symmetric", True, False), ("symmetric+raw", True, True)]
)
def test_pair_features_selects_the_pair_layer_of_g(pair_features, symmetric, raw):
    Xs, ys, _, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=1)
    g = CCNCluster(n_clusters=3, pair_features=pair_features, **params).fit(Xs, ys).similarity_net_
    assert g.pair_enum.symmetric is symmetric
    with torch.no_grad():
        assert g.backbone(torch.as_tensor(Xs[:2], dtype=torch.float32)).shape[1] == 16 + raw * Xs.shape[1]


def test_similarity_hidden_dims_sizes_g_and_leaves_f_on_hidden_dims():
    Xs, ys, _, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=1)
    params["similarity_hidden_dims"] = (12,)
    est = CCNCluster(n_clusters=3, **params).fit(Xs, ys)
    g_widths = [m.out_features for m in est.similarity_net_.backbone.modules() if isinstance(m, torch.nn.Linear)]
    f_widths = [m.out_features for m in est.clustering_net_.modules() if isinstance(m, torch.nn.Linear)]
    assert g_widths == [12]
    assert f_widths == [16, 3]


def test_balanced_similar_weight_gives_both_pair_classes_equal_total_weight():
    est = CCNCluster(similar_weight="balanced")
    est.device_ = torch.device("cpu")
    target = torch.tensor([1, 0, 0, 0, 0, 1, 0, 0, 0, 0])
    w = est._pair_class_weight(target)
    n_sim = int(target.sum())
    assert (w[1] * n_sim).item() == pytest.approx((w[0] * (target.numel() - n_sim)).item())
    assert (w[1] * n_sim + w[0] * (target.numel() - n_sim)).item() == pytest.approx(target.numel())
    est.set_params(similar_weight=0.5)
    torch.testing.assert_close(est._pair_class_weight(target), torch.tensor([1.0, 0.5], dtype=torch.float32))


def test_similarity_network_learns_same_versus_different_class_on_blobs():
    Xs, ys, _, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    Xn, yn, _, _ = _blob_task(seed=1)  # fresh draws of the same classes
    S = est.pairwise_similarity(Xn) > 0.5
    same = yn[:, None] == yn[None, :]
    assert (S == same).mean() > 0.95


# ------------------------------------------------------------------------ estimator
def test_fit_without_y_raises_a_clear_error():
    with pytest.raises(ValueError, match="requires the source labels y"):
        CCNCluster(**FAST).fit(np.zeros((10, 2)))


def test_fit_sets_labels_by_training_f_with_the_learned_similarity():
    Xs, ys, _, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    assert clustering_accuracy(ys, est.labels_) > 0.95
    assert est.n_iter_ == FAST["similarity_epochs"] + FAST["clustering_epochs"]
    assert {h["phase"] for h in est.history_} == {"similarity", "fit"}


def test_transfer_to_unseen_digit_classes_beats_chance():
    task = load_digits_transfer()
    rs = np.random.RandomState(0)
    src = rs.choice(task.X_source.shape[0], 400, replace=False)
    tgt = rs.choice(task.X_target.shape[0], 300, replace=False)
    est = CCNCluster(
        n_clusters=5,
        hidden_dims=(64,),
        pair_hidden=32,
        similarity_epochs=5,
        clustering_epochs=20,
        batch_size=100,
        device="cpu",
        random_state=0,
    ).fit(task.X_source[src], task.y_source[src])
    labels = est.transfer(task.X_target[tgt])
    # Chance (everything in the largest class) is about 0.2.
    assert clustering_accuracy(task.y_target[tgt], labels) > 0.5


def _digit_images(seed=0):
    task = load_digits_transfer()
    rs = np.random.RandomState(seed)
    src = rs.choice(task.X_source.shape[0], 400, replace=False)
    tgt = rs.choice(task.X_target.shape[0], 300, replace=False)
    return task.X_source[src], task.y_source[src], task.X_target[tgt], task.y_target[tgt]


def test_image_shape_gives_g_and_f_a_conv_stem_that_transfers_to_unseen_digits():
    Xs, ys, Xt, yt = _digit_images()
    params = dict(hidden_dims=(64,), similarity_epochs=5, clustering_epochs=20, n_similarity_nets=1,
                  representation="input")
    est = CCNCluster(5, image_shape=(8, 8), conv_channels=(8,), device="cpu", random_state=0, **params)
    labels = est.fit(Xs, ys).transfer(Xt)
    convs = [m for m in est.similarity_net_.backbone.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [m.out_channels for m in convs] == [8]
    assert [m.out_channels for m in est.clustering_net_.modules() if isinstance(m, torch.nn.Conv2d)] == [8]
    # G's features keep the first backbone width, f ends on n_clusters logits.
    assert est.similarity_net_.backbone(torch.as_tensor(Xt[:3], dtype=torch.float32)).shape == (3, 128)
    assert est.predict(Xt[:7]).shape == (7,)
    # Chance (everything in the largest class) is about 0.2.
    assert clustering_accuracy(yt, labels) > 0.5


def test_without_image_shape_no_network_has_a_convolution():
    Xs, ys, _, _ = _blob_task()
    est = CCNCluster(3, **dict(FAST, similarity_epochs=1, clustering_epochs=1)).fit(Xs, ys)
    for net in (est.similarity_net_, est.clustering_net_):
        assert not any(isinstance(m, torch.nn.Conv2d) for m in net.modules())


@pytest.mark.parametrize(
    "params, match",
    [
        ({"image_shape": (8, 9)}, "72 pixels but X has 64"),
        ({"image_shape": (8,)}, "image_shape must be"),
        ({"image_shape": (8, 8), "conv_channels": ()}, "conv_channels"),
        ({"image_shape": (8, 8), "conv_channels": (0,)}, "conv_channels"),
        ({"image_shape": (8, 8), "hidden_dims": ()}, "hidden_dims"),
    ],
)
def test_bad_image_options_raise_a_clear_error_before_training(params, match):
    Xs, ys, _, _ = _digit_images()
    est = CCNCluster(5, **dict(FAST, similarity_epochs=1, clustering_epochs=1, **params))
    with pytest.raises(ValueError, match=match):
        est.fit(Xs, ys)
    assert not hasattr(est, "labels_")


def test_n_clusters_is_estimated_with_an_over_large_upper_bound():
    Xs, ys, Xt, yt = _blob_task()
    est = CCNCluster(n_clusters=12, estimate_n_clusters=True, **FAST).fit(Xs, ys)
    labels = est.transfer(Xt)
    assert est.n_clusters_ == 3
    assert clustering_accuracy(yt, labels) > 0.9


def test_with_the_number_of_clusters_known_every_cluster_is_used():
    Xs, ys, Xt, yt = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    labels = est.transfer(Xt)
    assert np.unique(labels).tolist() == [0, 1, 2]
    assert est.n_clusters_ == 3
    assert clustering_accuracy(yt, labels) > 0.9


@pytest.mark.parametrize(
    "estimate, neighbors, balance", [(False, 10, 1.0), (True, 10, 0.0)]  # 150 rows: ceil(150 / 15)
)
def test_auto_settings_follow_whether_n_clusters_is_exact_or_an_upper_bound(estimate, neighbors, balance):
    Xs, ys, Xt, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=1)
    est = CCNCluster(n_clusters=4, estimate_n_clusters=estimate, **params).fit(Xs, ys)
    assert est.get_params()["similar_neighbors"] == "auto"
    assert (est.similar_neighbors_, est.balance_weight_) == (neighbors, balance)
    # transfer resolves them again from the current parameters.
    est.set_params(estimate_n_clusters=not estimate).transfer(Xt)
    assert est.similar_neighbors_ == neighbors and est.balance_weight_ != balance


def test_auto_neighbours_of_a_known_number_of_clusters_grow_with_the_rows_clustered():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **dict(FAST, similarity_epochs=1, clustering_epochs=1)).fit(Xs, ys)
    est.transfer(Xt[:91])
    assert est.similar_neighbors_ == 7  # ceil(91 / 15)


@pytest.mark.parametrize("estimate", [False, True])
def test_explicit_neighbours_and_balance_weight_are_used_as_given(estimate):
    Xs, ys, _, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=1)
    est = CCNCluster(4, estimate_n_clusters=estimate, similar_neighbors=None, balance_weight=0.5, **params)
    est.fit(Xs, ys)
    assert (est.similar_neighbors_, est.balance_weight_) == (None, 0.5)


def test_paper_params_give_the_papers_kcl_path_with_one_g():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(3, **{**FAST, **PAPER_PARAMS, "similarity_epochs": 1}).fit(Xs, ys)
    est.transfer(Xt)
    assert est.criterion == "kcl" and isinstance(est.similarity_net_, SimilarityNetwork)
    assert (est.similar_neighbors_, est.balance_weight_) == (None, 0.0)
    assert est.n_iter_ == PAPER_PARAMS["clustering_epochs"] == 40
    # The defaults depart from exactly these parameters.
    defaults = CCNCluster().get_params()
    assert all(defaults[name] != value for name, value in PAPER_PARAMS.items())


def test_labels_are_consecutive_in_output_order_and_predict_reuses_the_map():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=12, estimate_n_clusters=True, **FAST).fit(Xs, ys)
    labels = est.transfer(Xt)
    counts = np.bincount(labels)
    np.testing.assert_array_equal(np.unique(labels), np.arange(counts.shape[0]))
    # Label l is the l-th smallest output unit of f that won a sample (base.compact_labels).
    assert np.all(np.diff(est.cluster_outputs_) > 0)
    with torch.no_grad():
        logits = est.clustering_net_(est._tensor(Xt)).numpy()
    outputs = dominant_outputs(logits, logits.argmax(1), 12)  # an upper bound: dominant outputs only
    np.testing.assert_array_equal(est.cluster_outputs_[labels], outputs)
    np.testing.assert_array_equal(est.cluster_outputs_, np.unique(outputs))
    assert counts.shape[0] == est.cluster_outputs_.shape[0]
    np.testing.assert_array_equal(est.predict(Xt), labels)
    # Unused outputs never show up: far-away points still get one of the used labels.
    far = np.random.RandomState(0).uniform(-50, 50, size=(200, 2))
    assert set(np.unique(est.predict(far))) <= set(range(counts.shape[0]))


def _raw_outputs(est, X):
    with torch.no_grad():
        logits = est.clustering_net_(est._tensor(X)).numpy()
    return logits, logits.argmax(1)


def test_upper_bound_labels_only_the_dominant_outputs_so_n_clusters_is_the_papers_estimate():
    Xs, ys, Xt, _ = _blob_task()
    # Two epochs of KCL without neighbours: an output still wins a few rows, which must move.
    params = dict(FAST, clustering_epochs=2, criterion="kcl", similar_neighbors=None)
    est = CCNCluster(n_clusters=12, estimate_n_clusters=True, **params).fit(Xs, ys)
    labels = est.transfer(Xt)
    logits, raw = _raw_outputs(est, Xt)
    sizes = np.bincount(raw, minlength=12)
    dominant = np.flatnonzero(sizes >= Xt.shape[0] / 12)
    assert np.unique(raw).shape[0] > dominant.shape[0]  # minor outputs exist
    assert est.n_dominant_clusters_ == dominant.shape[0] == n_dominant_clusters(raw, n_clusters=12)
    assert est.n_clusters_ == np.unique(labels).shape[0] == est.n_dominant_clusters_
    np.testing.assert_array_equal(est.cluster_outputs_, dominant)
    keep = np.isin(raw, dominant)
    np.testing.assert_array_equal(est.cluster_outputs_[labels[keep]], raw[keep])
    moved = ~keep
    best = dominant[logits[moved][:, dominant].argmax(1)]
    np.testing.assert_array_equal(est.cluster_outputs_[labels[moved]], best)
    np.testing.assert_array_equal(est.predict(Xt), labels)


def test_with_k_known_n_clusters_counts_the_labels_and_keeps_every_output_that_wins_a_row():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=12, **dict(FAST, clustering_epochs=1)).fit(Xs, ys)
    labels = est.transfer(Xt)
    _, raw = _raw_outputs(est, Xt)
    np.testing.assert_array_equal(est.cluster_outputs_[labels], raw)  # no row moved
    assert est.n_clusters_ == np.unique(labels).shape[0] == np.unique(raw).shape[0]
    assert est.n_dominant_clusters_ == n_dominant_clusters(labels, n_clusters=12) < est.n_clusters_


def test_ccn_plus_mode_trains_with_labelled_source_rows_in_the_batch():
    Xs, ys, _, _ = _blob_task()
    Xd = Xs + np.array([0.5, -0.5])  # same classes, shifted domain
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    labels = est.transfer(Xd, source=(Xs, ys))
    assert clustering_accuracy(ys, labels) > 0.9
    # The cross-entropy ties output units to source classes.
    np.testing.assert_array_equal(est.cluster_outputs_[labels], ys)


def test_ccn_plus_rejects_more_source_classes_than_outputs():
    Xs, ys, _, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    with pytest.raises(ValueError, match="3 classes but n_clusters=2"):
        est.set_params(n_clusters=2).transfer(Xs, source=(Xs, ys))


@pytest.mark.parametrize("bad, message", [
    (lambda Xs, ys: (Xs, np.arange(len(ys)) % 7), "7 classes but n_clusters=3"),
    (lambda Xs, ys: (Xs[:, :1], ys), "source=.*features"),
    (lambda Xs, ys: (Xs, ys[:10]), "source=.*inconsistent numbers of samples"),
    (lambda Xs, ys: (Xs, np.where(np.arange(len(ys)) == 3, np.nan, ys.astype(float))), "source=.*NaN"),
], ids=["classes", "width", "length", "nan-label"])
def test_a_bad_ccn_plus_source_is_refused_before_any_training(bad, message):
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    phases = []

    class Phases:
        def on_phase_begin(self, run):
            phases.append(run.phase)

    est.set_params(callbacks=[Phases()])
    with pytest.raises(ValueError, match=message):
        est.transfer(Xt, source=bad(Xs, ys))
    assert phases == []


def test_a_ccn_plus_source_without_labels_is_refused_with_a_plain_message():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    labels = est.labels_.copy()
    with pytest.raises(ValueError, match=r"source=\(X_source, None\): CCN\+ needs the source labels y_source.*"
                                         "leave source out"):
        est.transfer(Xt, source=(Xs, None))
    np.testing.assert_array_equal(est.labels_, labels)  # still the source model


def test_estimating_k_takes_fewer_rows_than_the_n_clusters_bound():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=20, estimate_n_clusters=True, **FAST).fit(Xs[:15], ys[:15])
    assert est.transfer(Xt[:12]).shape == (12,) and est.n_clusters_ <= 12


def test_score_is_minus_the_kcl_loss_of_f_under_g():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **FAST).fit(Xs, ys)
    est.transfer(Xt)
    Xtt = est._tensor(Xt)  # the input as the networks see it (normalised)
    with torch.no_grad():
        g = est.target_similarity_net_
        S = g(Xtt).argmax(-1)
        expected = -kcl_loss(F.log_softmax(est.clustering_net_(Xtt), 1), S, margin=est.sigma)
    assert est.score(Xt) == pytest.approx(expected.item())


def test_nan_loss_raises_floating_point_error_naming_the_epoch():
    Xs, ys, _, _ = _blob_task()
    # The input is normalised at fit, so huge values no longer overflow: a huge step does.
    with pytest.raises(FloatingPointError, match="epoch 0"):
        CCNCluster(n_clusters=3, **dict(FAST, learning_rate=1e30)).fit(Xs, ys)


# ------------------------------------------------ G ensemble and second-order pair labels
def test_similarity_ensemble_averages_the_members_probabilities():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **{**FAST, "clustering_epochs": 2, "similarity_epochs": 3, "n_similarity_nets": 3})
    est.fit(Xs, ys)
    g = est.similarity_net_
    assert len(g.members) == 3
    assert [h["phase"] for h in est.history_].count("similarity") == 3 * 3
    x = est._tensor(Xt[:7])  # as the networks see it (normalised)
    with torch.no_grad():
        expected = sum(torch.softmax(m(x), -1) for m in g.members) / 3
        torch.testing.assert_close(torch.softmax(g(x), -1), expected)
        x2 = est._tensor(Xt[7:12])
        torch.testing.assert_close(g(x, x2)[2, 3], g(x[[2]], x2[[3]])[0, 0])
    # pairwise_similarity and score go through the same backbone / pair_logits interface.
    est.transfer(Xt)
    P = est.pairwise_similarity(Xt[:7])
    with torch.no_grad():
        np.testing.assert_allclose(P, torch.softmax(est.target_similarity_net_(x), -1)[..., 1].numpy())
    assert np.isfinite(est.score(Xt))


def test_second_order_labels_join_pairs_with_the_same_neighbours():
    # 0-1-2 is a chain: G missed (0, 2); 3 is alone.
    S = torch.tensor(
        [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=torch.float64
    )
    out = second_order(S, 0.5)
    # cos(0, 2) = |{1}| / sqrt(2 * 2) = 0.5 -> not above 0.5; cos(0, 1) = 2 / sqrt(6) > 0.5.
    assert out[0, 1] == 1 and out[0, 2] == 0 and out[3, 3] == 1 and out[0, 3] == 0
    torch.testing.assert_close(out, out.T)
    assert second_order(S, 0.4)[0, 2] == 1


def test_second_order_threshold_trains_and_defaults_keep_the_paper_labels():
    Xs, ys, Xt, yt = _blob_task()
    base = CCNCluster(n_clusters=12, estimate_n_clusters=True, **FAST).fit(Xs, ys)
    ref = base.transfer(Xt)
    same = CCNCluster(n_clusters=12, estimate_n_clusters=True, second_order_threshold=None, **FAST).fit(Xs, ys)
    np.testing.assert_array_equal(same.transfer(Xt), ref)
    est = CCNCluster(n_clusters=12, estimate_n_clusters=True, second_order_threshold=0.5, **FAST).fit(Xs, ys)
    labels = est.transfer(Xt)
    assert est.n_clusters_ == 3
    assert clustering_accuracy(yt, labels) > 0.9


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_second_order_threshold_must_lie_strictly_between_0_and_1(bad):
    Xs, ys, _, _ = _blob_task()
    with pytest.raises(ValueError, match="second_order_threshold"):
        CCNCluster(second_order_threshold=bad, **FAST).fit(Xs, ys)


# ------------------------------------------------------------------------ MCL loss
# P = (0.6, 0.4), Q = (0.9, 0.1): s = P . Q = 0.54 + 0.04 = 0.58.
MCL_P, MCL_Q, MCL_S = (0.6, 0.4), (0.9, 0.1), 0.58


def _mcl_pair():
    return torch.tensor([MCL_P, MCL_Q], dtype=torch.float64, requires_grad=True)


def test_mcl_similar_pair_value_and_gradient_match_hand_computation():
    prob = _mcl_pair()
    loss = mcl_loss(prob.log(), torch.ones(2, 2), mask=OFF_DIAGONAL, reduction="sum")
    loss.backward()
    # Ordered pairs (0, 1) and (1, 0): 2 * -log s; d(-log s)/dp = -q / s for each of the two.
    assert loss.item() == pytest.approx(-2 * math.log(MCL_S))
    expected = -2 / MCL_S * torch.tensor([MCL_Q, MCL_P], dtype=torch.float64)
    torch.testing.assert_close(prob.grad, expected)


def test_mcl_dissimilar_pair_value_and_gradient_match_hand_computation():
    prob = _mcl_pair()
    loss = mcl_loss(prob.log(), torch.zeros(2, 2), mask=OFF_DIAGONAL, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(-2 * math.log(1 - MCL_S))
    expected = 2 / (1 - MCL_S) * torch.tensor([MCL_Q, MCL_P], dtype=torch.float64)
    torch.testing.assert_close(prob.grad, expected)


def test_mcl_soft_target_is_the_binary_cross_entropy_against_the_probability():
    prob = _mcl_pair()
    y = torch.full((2, 2), 0.3, dtype=torch.float64)
    loss = mcl_loss(prob.log(), y, mask=OFF_DIAGONAL, reduction="sum")
    assert loss.item() == pytest.approx(-2 * (0.3 * math.log(MCL_S) + 0.7 * math.log(1 - MCL_S)))


def test_mcl_mean_averages_over_known_pairs_and_matches_the_per_pair_definition():
    gen = torch.Generator().manual_seed(0)
    log_p = F.log_softmax(torch.randn(5, 3, dtype=torch.float64, generator=gen), 1)
    S = torch.randint(0, 2, (5, 5), generator=gen)
    P = log_p.exp()
    ref = torch.stack(
        [
            torch.stack([F.binary_cross_entropy(P[i] @ P[j], S[i, j].double()) for j in range(5)])
            for i in range(5)
        ]
    )
    torch.testing.assert_close(mcl_loss(log_p, S, reduction="none"), ref)
    mask = torch.zeros(5, 5, dtype=torch.bool)
    mask[:3, :3] = True
    torch.testing.assert_close(mcl_loss(log_p, S, mask=mask), ref[:3, :3].mean())
    assert mcl_loss(log_p, S, mask=torch.zeros(5, 5, dtype=torch.bool)).item() == 0.0


def test_criterion_mcl_clusters_unseen_blobs_and_finds_their_number():
    Xs, ys, Xt, yt = _blob_task()
    est = CCNCluster(n_clusters=12, estimate_n_clusters=True, criterion="mcl", **FAST).fit(Xs, ys)
    labels = est.transfer(Xt)
    assert est.n_clusters_ == 3
    assert clustering_accuracy(yt, labels) > 0.9


def test_neighbor_pairs_are_symmetric_with_the_diagonal():
    knn = torch.tensor([[1], [2], [1], [0]])  # 0 -> 1, 1 -> 2, 2 -> 1, 3 -> 0
    nb = neighbor_pairs(knn, torch.tensor([0, 2, 3]))
    expected = torch.tensor([[1, 0, 1], [0, 1, 0], [1, 0, 1]], dtype=torch.bool)
    torch.testing.assert_close(nb, expected)


def test_similar_neighbors_clusters_unseen_blobs():
    Xs, ys, Xt, yt = _blob_task()
    est = CCNCluster(n_clusters=3, similar_neighbors=20, **FAST).fit(Xs, ys)
    labels = est.transfer(Xt)
    assert clustering_accuracy(yt, labels) > 0.9


@pytest.mark.parametrize(
    "params, name",
    [
        ({"criterion": "bce"}, "criterion"),
        ({"similar_neighbors": 0}, "similar_neighbors"),
        ({"balance_weight": -1.0}, "balance_weight"),
        ({"n_init": 0}, "n_init"),
        ({"balance_weight": "on"}, "balance_weight"),
        ({"similar_neighbors": "all"}, "similar_neighbors"),
        ({"estimate_n_clusters": "yes"}, "estimate_n_clusters"),
    ],
)
def test_new_parameters_are_validated(params, name):
    Xs, ys, _, _ = _blob_task()
    with pytest.raises(ValueError, match=name):
        CCNCluster(**params, **FAST).fit(Xs, ys)


def test_balance_weight_spreads_samples_that_g_calls_all_similar_over_the_outputs():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, balance_weight=0.0, similar_neighbors=None, **FAST).fit(Xs, ys)
    # A G that calls every pair similar: the pair loss alone puts everything in one cluster.
    est._pair_targets = lambda g, xb, fb=None: torch.ones(xb.shape[0], xb.shape[0], dtype=torch.long)
    est.set_params(criterion="mcl")
    assert np.bincount(est.transfer(Xt)).max() > 0.9 * Xt.shape[0]
    est.set_params(balance_weight=5.0)
    assert np.bincount(est.transfer(Xt), minlength=3).min() > 0.1 * Xt.shape[0]


def test_n_init_keeps_the_clustering_network_of_lowest_target_loss():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, n_init=3, **FAST).fit(Xs, ys)
    seen = []
    target_loss = est._target_loss

    def recording(f, *args):
        seen.append((target_loss(f, *args), f))
        return seen[-1][0]

    est._target_loss = recording
    est.transfer(Xt)
    assert len(seen) == 3 and len({id(f) for _, f in seen}) == 3
    assert est.clustering_net_ is min(seen, key=lambda s: s[0])[1]
    inits = [h["init"] for h in est.history_ if h["phase"] == "transfer"]
    assert inits == [i for i in range(3) for _ in range(FAST["clustering_epochs"])]
    assert est.n_iter_ == 3 * FAST["clustering_epochs"]


def test_batch_loss_from_gs_features_computed_once_equals_the_loss_from_the_rows():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **dict(FAST, n_similarity_nets=2, clustering_epochs=2)).fit(Xs, ys)
    est.transfer(Xt)
    g, f, X = est.target_similarity_net_, est.clustering_net_, est._tensor(Xt)
    est._resolve_auto(X.shape[0])
    knn = ccn_module.knn_indices(X, est.similar_neighbors_)
    feats = chunked(g.backbone, X)
    assert feats.shape == (X.shape[0], 2 * 16)  # n x width: no n x n array
    idx = torch.arange(40, 90)
    with torch.no_grad():
        direct = est._batch_loss(f, X[idx], idx, g, knn)
        cached = est._batch_loss(f, X[idx], idx, g, knn, feats=feats)
    assert cached.item() == pytest.approx(direct.item(), rel=1e-12)


def test_target_loss_is_the_training_objective_over_the_target_in_row_order():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, criterion="mcl", balance_weight=0.5, **FAST).fit(Xs, ys)
    est.transfer(Xt)
    g, f, X = est.target_similarity_net_, est.clustering_net_, est._tensor(Xt)
    b = FAST["batch_size"]
    rows = [torch.arange(i, min(i + b, len(X))) for i in range(0, len(X), b)]
    with torch.no_grad():
        losses = [est._batch_loss(f, X[idx], idx, g, None) for idx in rows]
    assert est._target_loss(f, X, g, None) == pytest.approx(torch.stack(losses).mean().item())


# ------------------------------------------------------- shared contract (base.py)
@pytest.mark.parametrize("name", ["hidden_dims", "similarity_hidden_dims"])
@pytest.mark.parametrize("bad", [(0,), (2.5,), (-3,), "abc"])
def test_bad_layer_widths_raise_a_clear_error_and_leave_the_estimator_usable(name, bad):
    Xs, ys, _, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=1)
    est = CCNCluster(n_clusters=3, **params).set_params(**{name: bad})
    with pytest.raises(ValueError, match=name):
        est.fit(Xs, ys)
    assert not hasattr(est, "labels_") and not hasattr(est, "n_features_in_")
    assert est.get_params()[name] == bad
    est.set_params(**{name: (8,)}).fit(Xs, ys)
    assert est.labels_.shape == (Xs.shape[0],)


def test_similarity_hidden_dims_none_uses_hidden_dims():
    Xs, ys, _, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=1, similarity_hidden_dims=None)
    est = CCNCluster(n_clusters=3, **params).fit(Xs, ys)
    backbone = est.similarity_net_.backbone
    widths = [m.out_features for m in backbone.modules() if isinstance(m, torch.nn.Linear)]
    assert widths == list(FAST["hidden_dims"])


def test_every_history_record_has_phase_epoch_and_loss_and_fs_records_their_start():
    Xs, ys, Xt, _ = _blob_task()
    params = dict(FAST, similarity_epochs=2, clustering_epochs=3)
    est = CCNCluster(n_clusters=3, n_init=2, **dict(params, n_similarity_nets=2)).fit(Xs, ys)
    est.transfer(Xt)
    assert all({"phase", "epoch", "loss"} <= set(h) for h in est.history_)
    assert all(isinstance(h["loss"], float) and math.isfinite(h["loss"]) for h in est.history_)
    g_records = [h for h in est.history_ if h["phase"] == "similarity"]
    f_records = [h for h in est.history_ if h["phase"] in ("fit", "transfer")]
    assert [h["epoch"] for h in g_records] == [0, 1, 0, 1]
    assert all("init" not in h for h in g_records)
    assert [(h["phase"], h["init"], h["epoch"]) for h in f_records] == [
        (phase, init, epoch) for phase in ("fit", "transfer") for init in range(2) for epoch in range(3)
    ]


@pytest.mark.parametrize("n", [41, 81])
def test_a_one_row_tail_joins_the_previous_minibatch(n):
    # n % batch_size == 1: batch norm cannot train on one row, and no row is dropped.
    X, y = make_blobs(n_samples=n, centers=[[0, 0], [6, 0]], cluster_std=0.5, random_state=0)
    est = CCNCluster(n_clusters=2, **dict(FAST, batch_size=40, similarity_epochs=2, clustering_epochs=2))
    est.fit(X, y)
    assert est.transfer(X + 0.5).shape == (n,)
    batches = est._row_batches(n)
    assert [len(b) for b in batches] == [40] * (n // 40 - 1) + [41]
    assert torch.equal(torch.cat(batches), torch.arange(n))
    assert [b.tolist() for b in batches] == [b.tolist() for b in minibatches(torch.arange(n), 40)]


def test_labels_do_not_depend_on_the_chunk_size_of_the_assignment(monkeypatch):
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=12, **FAST).fit(Xs, ys)
    whole = est.transfer(Xt)
    monkeypatch.setattr(ccn_module, "chunked", lambda fn, X: chunked(fn, X, chunk_size=7))
    np.testing.assert_array_equal(est.transfer(Xt), whole)


@pytest.mark.parametrize("call", ["fit", "transfer"])
def test_one_sample_raises_a_clear_error_and_leaves_the_estimator_unchanged(call):
    Xs, ys, _, _ = _blob_task()
    est = CCNCluster(n_clusters=1, **dict(FAST, similarity_epochs=1, clustering_epochs=1))
    if call == "fit":
        with pytest.raises(ValueError, match="n_samples=1"):
            est.fit(Xs[:1], ys[:1])
        assert not hasattr(est, "labels_")
    else:
        est.fit(Xs, ys)
        before = est.labels_.copy()
        with pytest.raises(ValueError, match="n_samples=1"):
            est.transfer(Xs[:1])
        np.testing.assert_array_equal(est.labels_, before)


def test_transfer_checks_n_clusters_against_the_target_size():
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **dict(FAST, similarity_epochs=1, clustering_epochs=1)).fit(Xs, ys)
    with pytest.raises(ValueError, match="n_samples=2 should be >= n_clusters=3"):
        est.transfer(Xt[:2])


@pytest.mark.parametrize("bad", [0, 2.7])
def test_transfer_rejects_fewer_than_one_or_a_fractional_number_of_epochs(bad):
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **dict(FAST, similarity_epochs=1, clustering_epochs=1)).fit(Xs, ys)
    with pytest.raises(ValueError, match="epochs' parameter of CCNCluster.transfer must be an int in the range \\[1, inf\\)"):
        est.transfer(Xt, epochs=bad)


def test_a_non_finite_minibatch_loss_stops_transfer_before_the_step_naming_the_phase(monkeypatch):
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(n_clusters=3, **dict(FAST, similarity_epochs=1, clustering_epochs=2)).fit(Xs, ys)
    state_before = {k: v.clone() for k, v in est.clustering_net_.state_dict().items()}
    history_before = list(est.history_)
    steps = []
    adam_step = torch.optim.Adam.step
    counting = lambda opt, *a, **k: steps.append(1) or adam_step(opt, *a, **k)  # noqa: E731
    monkeypatch.setattr(torch.optim.Adam, "step", counting)
    est._batch_loss = lambda *args: torch.zeros((), dtype=torch.float64, requires_grad=True) * math.nan
    with pytest.raises(FloatingPointError, match="the transfer loss became nan at epoch 0 of 2"):
        est.transfer(Xt)
    assert steps == []  # raised at the first minibatch, before any optimiser step
    assert est.history_ == history_before  # rolled back
    for name, value in est.clustering_net_.state_dict().items():
        torch.testing.assert_close(value, state_before[name])


def _interrupt_once(fn, when):
    """``fn`` that raises KeyboardInterrupt the first time ``when()`` holds."""
    state = {"done": False}

    def wrapped(*args):
        if not state["done"] and when():
            state["done"] = True
            raise KeyboardInterrupt
        return fn(*args)

    return wrapped


def test_an_interrupt_of_g_is_rolled_back_even_with_keep_best():
    # G alone clusters nothing, so there is no usable model to keep yet (issue 19.3: this
    # used to return a never-trained clustering network with a "kept" warning).
    Xs, ys, _, _ = _blob_task()
    params = dict(FAST, similarity_epochs=3, clustering_epochs=2, keep_best=True)
    est = CCNCluster(n_clusters=3, n_init=3, **dict(params, n_similarity_nets=3))
    # Interrupt in the second epoch of the first G.
    est._pair_class_weight = _interrupt_once(est._pair_class_weight, lambda: len(est.history_) == 1)
    with pytest.raises(KeyboardInterrupt):
        est.fit(Xs, ys)
    assert not hasattr(est, "labels_") and not hasattr(est, "similarity_net_")  # unfitted
    del est._pair_class_weight  # the instance attribute set above
    assert est.fit(Xs, ys).labels_.shape == (Xs.shape[0],)  # and usable


def test_a_kept_interrupt_of_f_starts_no_further_clustering_network():
    Xs, ys, Xt, _ = _blob_task()
    params = dict(FAST, similarity_epochs=1, clustering_epochs=2, keep_best=True)
    est = CCNCluster(n_clusters=3, n_init=3, **params).fit(Xs, ys)
    # Interrupt in the second epoch of the second start.
    started = lambda: any(h.get("init") == 1 for h in est.history_ if h["phase"] == "transfer")  # noqa: E731
    est._batch_loss = _interrupt_once(est._batch_loss, started)
    with pytest.warns(UserWarning, match="interrupted during transfer"):
        labels = est.transfer(Xt)
    assert [h["init"] for h in est.history_ if h["phase"] == "transfer"] == [0, 0, 1]
    assert est.n_iter_ == 3
    assert labels.shape == (Xt.shape[0],)


# ----------------------------------------------- pairs.dominant_outputs (the labels under an upper bound)
def test_rows_of_minor_outputs_move_to_their_most_probable_dominant_output():
    rng = np.random.default_rng(0)
    n, k = 200, 10
    scores = rng.normal(size=(n, k))
    scores[:90, 2] += 5.0  # outputs 2 and 7 dominate, the others win a few rows each
    scores[90:180, 7] += 5.0
    outputs = scores.argmax(1)
    result = dominant_outputs(scores, outputs, k)
    dominant = np.flatnonzero(np.bincount(outputs, minlength=k) >= n / k)
    assert set(np.unique(result)) == set(dominant)
    assert np.unique(result).shape[0] == n_dominant_clusters(outputs, n_clusters=k)
    keep = np.isin(outputs, dominant)
    np.testing.assert_array_equal(result[keep], outputs[keep])
    np.testing.assert_array_equal(result[~keep], dominant[scores[~keep][:, dominant].argmax(1)])


def test_without_minor_outputs_nothing_moves():
    scores = np.eye(4)[[0, 1, 2, 3] * 5]
    outputs = scores.argmax(1)
    np.testing.assert_array_equal(dominant_outputs(scores, outputs, 4), outputs)


# ------------------------------------------------------------ fold_batch_norm (G and f at inference)
def test_fold_batch_norm_gives_the_eval_output_and_leaves_the_module_alone():
    from sktransfer_cluster.nn import inference_forward, mlp
    from sktransfer_cluster.cluster.ccn.networks import fold_batch_norm

    torch.manual_seed(0)
    net = mlp([6, 16, 8, 3], batch_norm=True).double()
    net.train()
    for _ in range(3):  # give the running statistics something to hold
        net(torch.randn(50, 6, dtype=torch.float64) * 3 + 1)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.weight.uniform_(0.5, 2.0)
                m.bias.uniform_(-1.0, 1.0)
    folded = fold_batch_norm(net)
    assert net.training  # the original is untouched
    assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in folded.modules())
    x = torch.randn(200, 6, dtype=torch.float64)
    with torch.no_grad():
        expected = net.eval()(x)
    torch.testing.assert_close(folded(x), expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(inference_forward(folded, x, rows=64), expected, atol=1e-12, rtol=1e-12)


# ------------------------------------------------------- 2026-11-27: issue 29 and issue 30 (S3, R3)
def _separated_blobs(sizes=(34, 33, 33), seed=0):
    X, y = make_blobs(n_samples=list(sizes), centers=[[0, 0], [8, 0], [0, 8]], cluster_std=0.6, random_state=seed)
    return X, y


def test_default_neighbour_codes_cluster_unseen_blobs_and_predict_reuses_the_target_encoder():
    Xs, ys, Xt, yt = _blob_task()
    est = CCNCluster(3, device="cpu", random_state=0).fit(Xs, ys)
    assert est.representation == "neighbours" and est.graph_metric_ == "euclidean"  # blobs: arbitrary origin
    labels = est.transfer(Xt)
    assert clustering_accuracy(yt, labels) > 0.95
    np.testing.assert_array_equal(est.predict(Xt), labels)
    # The target's encoder is the source's trained on the target's graph; the source's is kept.
    src = est._codes(est._tensor(Xt), est.encoder_)
    assert not torch.allclose(src, est._codes(est._tensor(Xt)))
    assert est.similarity_net_.members[0].backbone[0].in_features == 10  # G compares codes


def test_the_graph_is_cosine_only_for_non_negative_rows_that_hold_zeros():
    assert ccn_module.image_data(np.array([[0.0, 3.0], [2.0, 0.0]]))
    assert not ccn_module.image_data(np.array([[0.5, 3.0], [2.0, 1.0]]) + 3e6)  # offset: no zeros
    assert not ccn_module.image_data(np.array([[-1.0, 0.0], [2.0, 1.0]]))


@pytest.mark.parametrize("bound", [3, 4])
def test_an_upper_bound_equal_to_k_keeps_a_cluster_slightly_below_n_over_k(bound):
    """Issue 30 S3: 3 blobs of 34 / 33 / 33 rows under an upper bound of 3 gave 2 clusters (fit) and
    1 (transfer): 120 'auto' neighbours covered all 100 rows (no pair was dissimilar) and an
    output was kept only with at least n / bound rows (33 < 100 / 3)."""
    X, y = _separated_blobs()
    est = CCNCluster(bound, estimate_n_clusters=True, device="cpu", random_state=0).fit(X, y)
    assert est.similar_neighbors_ == 7  # ceil(100 / 15)
    assert est.n_clusters_ == 3 and clustering_accuracy(y, est.labels_) == 1.0
    labels = est.transfer(X)
    assert est.n_clusters_ == 3 and clustering_accuracy(y, labels) == 1.0


def test_an_upper_bound_equal_to_k_finds_the_three_blobs_of_issue_30_s3():
    """Issue 30 S3's case: make_blobs(300, centers=3, cluster_std=0.5, random_state=0) under a
    bound of 3 gave 2 clusters (fit) and 1 (transfer)."""
    X, y = make_blobs(n_samples=300, centers=3, cluster_std=0.5, random_state=0)
    est = CCNCluster(3, estimate_n_clusters=True, device="cpu", random_state=0).fit(X, y)
    assert est.n_clusters_ == 3 and clustering_accuracy(y, est.labels_) > 0.99
    labels = est.transfer(X)
    assert est.n_clusters_ == 3 and clustering_accuracy(y, labels) == 1.0


def test_batchnorm_statistics_are_exact_whatever_the_order_of_the_rows():
    """Rows stored sorted by class (MNIST's target) gave batches of one class, whose averaged
    within-batch variance missed the variance between classes."""
    from sktransfer_cluster.cluster.ccn import pairs

    torch.manual_seed(0)
    X = torch.cat([torch.randn(100, 3) + 5.0, torch.randn(100, 3) - 5.0])  # "sorted by class"
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                              torch.nn.Linear(4, 2), torch.nn.BatchNorm1d(2))
    a = pairs.reestimate_batchnorm(copy.deepcopy(net), [X[i : i + 50] for i in range(0, 200, 50)])
    perm = torch.randperm(200)
    b = pairs.reestimate_batchnorm(copy.deepcopy(net), [X[perm][i : i + 50] for i in range(0, 200, 50)])
    with torch.no_grad():
        h = net[0](X)
        torch.testing.assert_close(a[1].running_mean, h.mean(0))
        torch.testing.assert_close(a[1].running_var, h.var(0), rtol=1e-4, atol=1e-4)
        h2 = a[3](a[2](a[1](h)))  # the second layer measured behind the first, as set
        torch.testing.assert_close(a[4].running_var, h2.var(0), rtol=1e-4, atol=1e-4)
    for m, n in zip(a.modules(), b.modules()):
        if isinstance(m, torch.nn.BatchNorm1d):
            torch.testing.assert_close(m.running_mean, n.running_mean, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(m.running_var, n.running_var, rtol=1e-4, atol=1e-5)


def test_auto_threshold_makes_g_call_nine_in_ten_neighbour_pairs_similar():
    from sktransfer_cluster.cluster.ccn import pairs
    from sktransfer_cluster.nn import knn_indices

    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(3, device="cpu", random_state=0).fit(Xs, ys)
    est.transfer(Xt)
    t = est.similarity_threshold_
    assert 0.0 < est.dissimilar_threshold_ <= t <= 0.5
    Z = est._codes(est._tensor(Xt))
    knn = knn_indices(Z, est.similar_neighbors_)
    g = est._current_g()
    P = pairs.pair_probabilities(g, Z)
    p_nb = P[np.arange(Z.shape[0])[:, None], knn.numpy()]
    assert (p_nb > t).mean() >= 0.9 - 1e-9 or t == 0.5
    fixed = CCNCluster(3, similarity_threshold=0.3, device="cpu", random_state=0).fit(Xs, ys)
    fixed.transfer(Xt)
    assert (fixed.similarity_threshold_, fixed.dissimilar_threshold_) == (0.3, None)


def test_outputs_that_g_links_are_one_cluster_and_unlinked_ones_stay_apart():
    from sktransfer_cluster.cluster.ccn import pairs

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 40)
    S = (y[:, None] == y[None, :]) & (rng.random((120, 120)) < 0.5)  # a G of recall 0.5, no false calls
    S = S | S.T
    outputs = np.repeat([0, 1, 2, 3], [20, 20, 40, 40])  # class 0 split over outputs 0 and 1
    np.testing.assert_array_equal(pairs.linked_outputs(S, outputs, 5), [0, 0, 2, 3, 4])
    # A G that calls every cross pair similar singles none out: nothing is linked.
    np.testing.assert_array_equal(pairs.linked_outputs(np.ones((120, 120), bool), outputs, 5), np.arange(5))


def test_an_output_that_mixes_two_classes_does_not_chain_them_into_one_cluster():
    """MNIST seed 2 under a bound of 20: an output of 5s and 8s was linked to the 5s' output and to
    the 8s', and single links joined the two digits (4 clusters). Joined groups are judged by all
    their rows (average linkage), so the mixed output joins one class only."""
    from sktransfer_cluster.cluster.ccn import pairs

    y = np.repeat([0, 0, 1, 1, 2], [60, 15, 5, 60, 60])  # rows of class 0, class 1, class 2
    outputs = np.repeat([0, 1, 1, 2, 3], [60, 15, 5, 60, 60])  # output 1 mixes classes 0 and 1 (15 / 5)
    S = y[:, None] == y[None, :]
    joined = pairs.linked_outputs(S, outputs, 4)
    np.testing.assert_array_equal(joined, [0, 0, 2, 3])  # with class 0's output, not also class 1's


def test_rows_far_beyond_the_fitted_data_get_finite_scores_and_the_labels_of_their_direction():
    """Issue 30 R3: score(X * 1e150) was NaN (float32 overflow)."""
    Xs, ys, Xt, _ = _blob_task()
    for params in ({}, FAST):
        est = CCNCluster(3, **{"device": "cpu", "random_state": 0, **params}).fit(Xs, ys)
        for scale in (1e50, 1e150, 1e300):
            assert np.isfinite(est.score(Xt * scale))
            assert np.isfinite(est.pairwise_similarity(Xt[:5] * scale)).all()
        # Far along a ray the label no longer changes: 1e150 and 1e40 give the same labels.
        np.testing.assert_array_equal(est.predict(Xt * 1e150), est.predict(Xt * 1e40))
        assert np.isfinite(est.score(Xt))  # ordinary rows are not touched


def test_a_group_under_half_an_equal_share_of_the_clusters_kept_is_dropped_whatever_the_bound():
    """mfeat-pix 5-9 under a bound of 20: a group of 25 style-sixes beside five of about 200 rows
    was kept, as it sat exactly on n / (2 bound) = 25. The floor is now half the mean size of the
    groups kept (1000 / 10 here), so it goes; equal-sized clusters and issue 30 S3's 33 of 100
    under a bound of 3 stay."""
    from sktransfer_cluster.cluster.ccn import pairs

    sizes = np.array([200, 205, 195, 200, 175, 25])
    assert pairs.kept_groups(sizes, 20).tolist() == [True] * 5 + [False]
    assert pairs.kept_groups(sizes, 6).tolist() == [True] * 5 + [False]  # the bound does not matter
    assert pairs.kept_groups(np.array([34, 33, 33]), 3).all()
    assert pairs.kept_groups(np.array([34, 33, 33, 0]), 4).tolist() == [True, True, True, False]
    # A smaller true cluster above half the mean is kept: 120 beside four of 220 (120 >= 1000 / 10).
    assert pairs.kept_groups(np.array([220, 220, 220, 220, 120]), 20).all()


def test_links_between_outputs_are_judged_at_gs_uncapped_neighbour_threshold(monkeypatch):
    """Digits 5-9 under a bound of 20: G scores even the neighbour pairs above 0.5, so f's
    threshold sits at its cap (0.5), where G called a quarter of all unseen pairs similar
    (precision 0.71-0.77) and linked the 5s with the 8s (K 3 and 2 on seeds 0 and 2). The links
    are judged at the threshold at which G calls 90 % of the neighbour pairs similar, uncapped."""
    from sktransfer_cluster.cluster.ccn import pairs
    from sktransfer_cluster.nn import knn_indices

    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(12, estimate_n_clusters=True, n_similarity_nets=1, device="cpu", random_state=0).fit(Xs, ys)
    seen = []
    monkeypatch.setattr(pairs, "linked_outputs", lambda similar, *a, **k: seen.append(similar) or np.arange(12))
    est.transfer(Xt)
    Z = est._codes(est._tensor(Xt))
    g = est._current_g()
    P = pairs.pair_probabilities(g, Z)
    p_nb = P[np.arange(Z.shape[0])[:, None], knn_indices(Z, est.similar_neighbors_).numpy()]
    assert abs((p_nb > est.link_threshold_).mean() - 0.9) < 0.02  # 90 % of the neighbour pairs
    assert est.link_threshold_ > 0.5 == est.similarity_threshold_  # capped for f, not for the links
    np.testing.assert_array_equal(seen[-1], P > est.link_threshold_)  # the n = 150 <= 1,000 rows
    fixed = CCNCluster(12, estimate_n_clusters=True, similarity_threshold=0.3, **dict(FAST, clustering_epochs=1))
    assert fixed.fit(Xs, ys).link_threshold_ == 0.3  # a given threshold serves both


# ------------------------------------------------------------------ past the landmark count (issue 31)
def test_neighbour_radii_from_every_row_are_the_kth_neighbour_distances_and_give_the_knn_pairs():
    """Radii estimated from reference rows (streamed fits) are the k-NN relation when every row is a reference."""
    from sktransfer_cluster.cluster.ccn import pairs
    from sktransfer_cluster.cluster.ccn.streamed import NeighbourRadii
    from sktransfer_cluster.nn import knn_indices

    X = torch.randn(300, 5, generator=torch.Generator().manual_seed(0))
    radii = NeighbourRadii(X, 20, np.random.default_rng(0))  # 300 rows: all of them references
    D = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist").fill_diagonal_(math.inf)
    torch.testing.assert_close(radii.radii, D.kthvalue(20, dim=1).values)  # itself left out, as knn_indices does
    idx = torch.arange(300)
    found, table = radii.pairs(idx, X), pairs.neighbor_pairs(knn_indices(X, 20), idx)
    # The same pairs but where a k-th neighbour's two computed distances round apart.
    assert (found != table).float().mean() < 1e-4 and found.sum() > 20 * 300


def test_streamed_rows_are_the_normalised_rows_in_the_order_asked():
    from sktransfer_cluster.representation import StreamedRows

    X = np.random.default_rng(0).normal(3.0, 2.0, size=(50, 4))
    shift, scale = X.mean(0), 2.0
    rows = StreamedRows(X, shift, scale, torch.device("cpu"), torch.float32)
    index = torch.tensor([7, 3, 7, 41])
    expected = torch.as_tensor(((X - shift) / scale).astype(np.float32))
    torch.testing.assert_close(rows[index], expected[index], rtol=0, atol=0)
    torch.testing.assert_close(rows[10:13], expected[10:13], rtol=0, atol=0)
    assert rows.shape == (50, 4)


# ------------------------------------------------------- predict's fast path (issue 31 item 4)
_row_peaks = ccn_module._row_peaks


def _exact_tensor(self, X):
    """CCNCluster._tensor without its range screens: every row's peak in float64."""
    from sktransfer_cluster.base import TransferClusterMixin

    shift, scale = np.asarray(self._input_affine[0], dtype=np.float64), float(self._input_affine[1])
    X = np.asarray(X)
    peak = np.abs(X.astype(np.float64) / scale - shift / scale).max(1, initial=0.0)
    far = np.flatnonzero(peak > ccn_module._FAR_ROW)
    if far.size:
        X = np.array(X, dtype=np.float64)
        X[far] = (X[far] / scale - shift / scale) * (ccn_module._FAR_ROW / peak[far])[:, None] * scale + shift
    return TransferClusterMixin._tensor(self, X)


def _two_call_predict(self, X):
    """CCNCluster._predict as two module calls: f(encoder(rows)), the used outputs by indexing."""
    logits = self._inference_net(self._codes(self._tensor(X)))
    return self._output_labels[logits[:, self._outputs].argmax(1).cpu().numpy()]


def _exact_labels(est, X, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(CCNCluster, "_tensor", _exact_tensor)
        m.setattr(CCNCluster, "_predict", _two_call_predict)
        return est.predict(X)


@pytest.mark.parametrize("params", [{}, FAST], ids=["neighbours", "input"])
def test_predict_gives_the_labels_of_the_unscreened_two_call_path_on_near_and_far_rows(params, monkeypatch):
    """predict screens each chunk's range before any float64 pass and runs encoder and f as one
    chain: the same labels as checking every row in float64 and calling the two networks, for
    rows of the fitted range, rows far beyond it in the same chunk, and float32 or float64."""
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(3, **{"device": "cpu", "random_state": 0, **params}).fit(Xs, ys)
    for dtype, big in ((np.float32, 1e30), (np.float64, 1e150)):  # products of such rows overflow unless pulled in
        far = Xt.astype(dtype)
        far[::7] *= dtype(big)
        far[3::11, 1] = -big
        for X in (Xt.astype(dtype), far):
            np.testing.assert_array_equal(est.predict(X), _exact_labels(est, X, monkeypatch))


def test_predict_screen_falls_back_to_per_feature_bounds_when_features_sit_far_apart(monkeypatch):
    """A feature offset by 1e10 (spread ~3) puts the tightest bound over all features above every
    other feature's values: the per-feature screen still skips the float64 pass, same labels."""
    Xs, ys, Xt, _ = _blob_task()
    offset = np.array([0.0, 1e10])
    est = CCNCluster(3, **FAST).fit(Xs + offset, ys)
    peaks = []
    monkeypatch.setattr(ccn_module, "_row_peaks", lambda *a: peaks.append(1) or _row_peaks(*a))
    labels = est.predict(Xt + offset)
    assert not peaks  # no float64 pass
    est.predict(np.vstack([Xt, Xt[:1] * 1e12]) + offset)
    assert peaks  # a far row: the pass runs
    np.testing.assert_array_equal(labels, _exact_labels(est, Xt + offset, monkeypatch))


def test_predict_chain_follows_the_encoder_that_transfer_refines(monkeypatch):
    Xs, ys, Xt, _ = _blob_task()
    est = CCNCluster(3, device="cpu", random_state=0, refine_epochs=2).fit(Xs, ys)
    est.predict(Xt)
    chain = est._predict_chain()
    est.transfer(Xt)
    assert est.target_encoder_ is not None and est._predict_chain() is not chain
    assert est._predict_chain()[0] is est.target_encoder_[0]  # the refined layers, not copies
    np.testing.assert_array_equal(est.predict(Xt), _exact_labels(est, Xt, monkeypatch))
