"""TDCMCluster: the behaviours specific to the transferable deep clustering model."""

import copy
import os
import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from scipy.spatial.distance import pdist
from sklearn.preprocessing import StandardScaler

from sktransfer_cluster import TDCMCluster
from sktransfer_cluster.base import TrainingRun, chunked, compiler_unavailable
from sktransfer_cluster.cluster.tdcm.model import (
    adapt_centroids,
    final_objective,
    initial_centroids,
    isometry_penalty,
    run_blocks,
)
from sktransfer_cluster.cluster.tdcm import estimator as tdcm
from sktransfer_cluster.cluster.tdcm import model as tdcm_model
from sktransfer_cluster.datasets import make_tdcm_transfer
from sktransfer_cluster.losses import negative_size_entropy
from sktransfer_cluster.representation import make_encoder
from sktransfer_cluster.cluster.tdcm.blocks import CentroidUpdateBlock

# Most tests below pin the blocks and TDCM's own encoder: representation="input" (the paper's
# family); the default neighbour encoder has its own section at the end.
INPUT = {"representation": "input"}
FAST = dict(
    representation="input", hidden_dims=(16,), embedding_dim=4, n_blocks=2, max_epochs=5, batch_size=64, n_init=1,
    device="cpu",
)


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=120, centers=3, n_features=4, random_state=0)
    return X, y


def _random_blocks(n, dim, seed, symmetric=True):
    g = torch.Generator().manual_seed(seed)
    blocks = torch.nn.ModuleList(
        CentroidUpdateBlock(dim, symmetric=symmetric).reset_parameters(g, noise=0.5) for _ in range(n)
    )
    return blocks.double()


def test_query_and_key_matrices_are_exactly_symmetric_by_construction(blobs):
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(blobs[0])
    for blk in model.blocks_:
        for W in blk.matrices():
            assert torch.equal(W, W.T)


def test_symmetric_false_learns_non_symmetric_matrices(blobs):
    model = TDCMCluster(n_clusters=3, symmetric=False, random_state=0, **FAST).fit(blobs[0])
    assert any(not torch.equal(W, W.T) for blk in model.blocks_ for W in blk.matrices())


def test_chunked_centroid_adaptation_equals_one_shot_computation():
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(1003, 6, generator=g, dtype=torch.float64) * 2.0
    blocks = _random_blocks(3, 6, seed=1)
    C0 = initial_centroids(5, 6, torch.float64, torch.device("cpu"))
    with torch.no_grad():
        one_shot = [C for _, C in run_blocks(Z, blocks, C0, 0.7)]
    for chunk_size in (1, 17, 250, 5000):
        streamed = adapt_centroids(Z, blocks, C0, 0.7, chunk_size=chunk_size)
        for a, b in zip(streamed, one_shot):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_quadratic_score_equals_the_direct_formula_for_every_pair():
    blk = _random_blocks(1, 4, seed=2, symmetric=False)[0]
    g = torch.Generator().manual_seed(3)
    Z = torch.randn(7, 4, generator=g, dtype=torch.float64)
    C = torch.randn(3, 4, generator=g, dtype=torch.float64)
    WQ, WK = blk.matrices()
    P = Z[:, None, :] - C[None, :, :]
    direct = ((P @ WQ.T) * (P @ WK.T)).sum(-1)
    torch.testing.assert_close(blk.quadratic(Z, C), direct)


def test_entropy_term_is_lower_for_balanced_clusters_and_its_gradient_balances():
    balanced = torch.tensor([[1.0, 0.0], [0.0, 1.0]] * 5, dtype=torch.float64)
    skewed = torch.tensor([[1.0, 0.0]] * 9 + [[0.0, 1.0]], dtype=torch.float64)
    assert negative_size_entropy(balanced) < negative_size_entropy(skewed)
    expected = torch.tensor(-np.log(2.0), dtype=torch.float64)
    torch.testing.assert_close(negative_size_entropy(balanced), expected)
    logits = torch.tensor([[2.0, 0.0]] * 10, dtype=torch.float64, requires_grad=True)
    negative_size_entropy(torch.softmax(logits, 1)).backward()
    with torch.no_grad():
        stepped = torch.softmax(logits - 0.5 * logits.grad, 1).mean(0)
    assert stepped[1] > torch.softmax(logits.detach(), 1).mean(0)[1]  # the small cluster grows


@pytest.mark.parametrize(
    "ablation",
    [
        dict(symmetric=False),
        dict(ortho_weight=0.0),
        dict(beta=0.0),
        dict(embedding_norm=None),
        dict(embedding_norm="scalar"),
        dict(activation="leaky_relu"),
    ],
    ids=["variant-R", "variant-O", "variant-E", "no-norm", "scalar-norm", "leaky_relu"],
)
def test_ablation_flags_fit_predict_and_transfer(blobs, ablation):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, **ablation}).fit(X)
    assert model.labels_.shape == (X.shape[0],)
    assert model.predict(X).shape == (X.shape[0],)
    assert model.transfer(X[:50] + 1.0).shape == (50,)
    assert np.isfinite(model.score(X))


def test_embedding_dim_smaller_than_n_clusters_is_a_clear_error(blobs):
    with pytest.raises(ValueError, match=r"embedding_dim=2 must be >= n_clusters=3"):
        TDCMCluster(n_clusters=3, **{**FAST, "embedding_dim": 2}).fit(blobs[0])


def test_nan_loss_raises_floating_point_error_suggesting_lower_learning_rate(blobs):
    X, _ = blobs
    with pytest.raises(FloatingPointError, match=r"epoch 0 of \d+; lower learning_rate"):
        TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "learning_rate": 1e30}).fit(X)


def test_predict_does_not_adapt_to_the_batch(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    full = model.predict(X + 3.0)
    np.testing.assert_array_equal(model.predict(X[:10] + 3.0), full[:10])
    np.testing.assert_array_equal(model.predict(X), model.labels_)


def test_transfer_moves_the_centroids_to_the_target(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    source_centers = model.cluster_centers_.copy()
    model.transfer(X + 5.0)
    assert not np.allclose(model.cluster_centers_, source_centers)
    np.testing.assert_array_equal(model.predict(X + 5.0), model.labels_)


def test_transfer_beats_predicting_with_source_centroids_on_shifted_tdcm_target():
    predicted, transferred = [], []
    for seed in range(3):
        task = make_tdcm_transfer(n_clusters=3, n_samples_per_cluster=60, shift=5.0, random_state=seed)
        model = TDCMCluster(
            n_clusters=3,
            representation="input",
            hidden_dims=(32,),
            embedding_dim=4,
            max_epochs=40,
            batch_size=64,
            device="cpu",
            random_state=0,
        ).fit(task.X_source)
        predicted.append(adjusted_rand_score(task.y_target, model.predict(task.X_target)))
        transferred.append(adjusted_rand_score(task.y_target, model.transfer(task.X_target)))
    assert np.mean(transferred) > np.mean(predicted) + 0.1


def test_fine_tune_epochs_train_on_the_target_and_are_recorded(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    model.transfer(X + 1.0, fine_tune_epochs=2)
    phases = [h["phase"] for h in model.history_]
    assert phases.count("fit") == FAST["max_epochs"] and phases.count("transfer") == 2
    assert model.n_iter_ == FAST["max_epochs"]


def test_fine_tuning_on_one_target_does_not_change_the_next_transfer(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    blocks = [p.detach().clone() for p in model.blocks_.parameters()]
    model.transfer(X * 2.0 - 1.0, fine_tune_epochs=3)  # rewrites the blocks for that target
    fresh = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    np.testing.assert_array_equal(model.transfer(X + 1.0, fine_tune_epochs=2), fresh.transfer(X + 1.0, fine_tune_epochs=2))
    model.transfer(X + 1.0)  # starts from the source's blocks again
    assert all(torch.equal(a, b) for a, b in zip(blocks, model.blocks_.parameters()))


def test_a_target_far_outside_the_sources_scale_is_refused_with_what_to_do_and_the_model_kept(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "representation": "neighbours"}).fit(X)
    before = model.predict(X)
    # The graph holds (its rows are rescaled in float64), but no float32 encoder computes with
    # rows 1e30 times those it was normalised for: refused before training, not NaN a few steps in.
    with pytest.raises(ValueError, match="outside the scale.*Rescale them to the source's units"):
        model.transfer(X * 1e30)
    np.testing.assert_array_equal(model.predict(X), before)


def test_grid_search_over_tau_works_without_a_scorer(blobs):
    X, _ = blobs
    search = GridSearchCV(TDCMCluster(n_clusters=3, random_state=0, **FAST), {"tau": [0.5, 2.0]}, cv=2)
    search.fit(X)
    assert search.best_params_["tau"] in (0.5, 2.0)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))


def test_pipeline_with_standard_scaler_fits_predicts_and_transfers(blobs):
    X, _ = blobs
    pipe = make_pipeline(StandardScaler(), TDCMCluster(n_clusters=3, random_state=0, **FAST)).fit(X)
    assert pipe.predict(X).shape == (X.shape[0],)
    assert pipe[-1].transfer(pipe[0].transform(X[:40])).shape == (40,)


def test_score_is_finite_and_higher_for_clustered_data_than_for_noise(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "max_epochs": 20}).fit(X)
    noise = np.random.default_rng(0).uniform(X.min(0), X.max(0), size=X.shape)
    assert np.isfinite(model.score(X))
    assert model.score(X) > model.score(noise)


def test_score_does_not_change_the_fitted_model(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    centers, labels = model.cluster_centers_.copy(), model.labels_.copy()
    model.score(X + 2.0)
    np.testing.assert_array_equal(model.cluster_centers_, centers)
    np.testing.assert_array_equal(model.labels_, labels)


def test_isometry_penalty_is_zero_for_scaled_partial_isometries_only():
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(6, 3, generator=g, dtype=torch.float64))
    zero = torch.zeros((), dtype=torch.float64)
    torch.testing.assert_close(isometry_penalty(5.0 * Q), zero)  # orthonormal columns (wide embedding)
    torch.testing.assert_close(isometry_penalty(0.2 * Q.T), zero)  # orthonormal rows (projection)
    rank_one = torch.ones(6, 3, dtype=torch.float64)
    assert isometry_penalty(rank_one) > 1.0


def test_isometry_weight_keeps_the_linear_encoder_from_collapsing(blobs):
    X, _ = blobs
    kw = {**FAST, "hidden_dims": (), "max_epochs": 30}

    def penalty(weight):
        model = TDCMCluster(n_clusters=3, isometry_weight=weight, random_state=0, **kw).fit(X)
        return float(isometry_penalty(model._model().linear_weight().detach()))

    assert penalty(1.0) < penalty(0.0)


def test_isometry_term_is_recorded_for_a_linear_encoder_and_zero_for_an_mlp(blobs):
    X, _ = blobs
    linear = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "hidden_dims": ()}).fit(X)
    mlp = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    assert linear.history_[0]["isometry"] > 0
    assert all(h["isometry"] == 0 for h in mlp.history_)


def test_extra_adapt_steps_repeat_the_last_block_without_changing_training(blobs):
    X, _ = blobs
    base = TDCMCluster(n_clusters=3, adapt_n_init=1, random_state=0, **FAST).fit(X)
    extra = TDCMCluster(n_clusters=3, extra_adapt_steps=3, adapt_n_init=1, random_state=0, **FAST).fit(X)
    for a, b in zip(base.blocks_.parameters(), extra.blocks_.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # transfer adapts on the target smoothed over its own neighbours (smoothing_steps).
    Z = extra._embed_all(extra._smoothed(X + 1.0, extra._input_projection()))
    blocks = list(extra.blocks_) + [extra.blocks_[-1]] * 3
    expected = adapt_centroids(Z, blocks, extra._model().initial_centroids(), extra.tau)[-1]
    extra.transfer(X + 1.0)
    # cluster_centers_ are the adapted centroids, reordered (label order, unused clusters last).
    dist = np.linalg.norm(extra.cluster_centers_[:, None, :] - expected.numpy()[None, :, :], axis=2)
    np.testing.assert_allclose(dist.min(1), 0.0, atol=1e-12)


def test_n_init_keeps_the_run_with_the_lowest_source_objective(blobs, monkeypatch):
    X, _ = blobs
    objectives, encoders = iter([3.0, 1.0, 2.0]), []

    def objective(self, X):
        encoders.append(self.encoder_)
        return next(objectives)

    monkeypatch.setattr(TDCMCluster, "_full_objective", objective)
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "n_init": 3}).fit(X)
    assert len(encoders) == 3 and len({id(e) for e in encoders}) == 3  # three fresh runs
    assert model.encoder_ is encoders[1]


def test_n_init_never_does_worse_on_the_source_objective(blobs):
    X, _ = blobs
    single = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    multi = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "n_init": 3}).fit(X)
    # The first of the three runs is the single run (same seeded generator).
    assert _source_objective(multi, X) <= _source_objective(single, X) + 1e-12


def test_scalar_embedding_norm_centres_and_scales_all_dimensions_by_one_number(blobs):
    X, _ = blobs
    kw = {**FAST, "hidden_dims": (), "embedding_norm": "scalar"}
    model = TDCMCluster(n_clusters=3, random_state=0, **kw).fit(X)
    X = model._smoothed(X, model._input_projection())  # the rows as fit clusters them
    with torch.no_grad():
        raw = model.encoder_[0](model._tensor(X))  # the encoder sees the normalised input
    Z = model.transform(X)
    np.testing.assert_allclose(Z.mean(0), 0.0, atol=1e-6)  # float32 network
    np.testing.assert_allclose(Z.var(0).mean(), 1.0, rtol=1e-4)  # up to batch norm's eps
    # One common scale: the embedding is the centred raw codes times a single number,
    # so pairwise distances keep their ratios (a per-dimension batch norm would not).
    centred = (raw - raw.mean(0)).numpy()
    scale = Z[:, 0] @ centred[:, 0] / (centred[:, 0] @ centred[:, 0])
    np.testing.assert_allclose(Z, scale * centred, rtol=1e-5, atol=1e-6)


def test_adapt_n_init_keeps_the_lowest_final_objective_and_leaves_training_unchanged(blobs):
    X, _ = blobs
    kw = {**FAST, "hidden_dims": (), "extra_adapt_steps": 2}
    single = TDCMCluster(n_clusters=3, adapt_n_init=1, random_state=0, **kw).fit(X)
    multi = TDCMCluster(n_clusters=3, adapt_n_init=6, random_state=0, **kw).fit(X)
    for a, b in zip(single.blocks_.parameters(), multi.blocks_.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    target = X[:60] * 1.5 + 2.0
    single.transfer(target)
    multi.transfer(target)
    Z = multi._embed_all(target)
    last = multi.blocks_[-1]

    def objective(model):
        C = torch.as_tensor(model.cluster_centers_)
        return final_objective(Z, last, C, model.tau, model.beta)

    assert objective(multi) <= objective(single) + 1e-12  # the paper's start is one of the candidates
    labels = multi.labels_.copy()
    np.testing.assert_array_equal(multi.transfer(target), labels)  # seeded: reproducible


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "bad", [(0,), (2.5,), (-3,), (8, "16"), "64"], ids=["zero", "fraction", "negative", "str-width", "str"]
)
def test_bad_hidden_dims_are_a_clear_error_and_leave_the_model_usable(blobs, bad):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    labels, centers = model.labels_.copy(), model.cluster_centers_.copy()
    with pytest.raises(ValueError, match=r"hidden_dims"):
        model.set_params(hidden_dims=bad).fit(X)
    np.testing.assert_array_equal(model.labels_, labels)
    np.testing.assert_array_equal(model.cluster_centers_, centers)
    np.testing.assert_array_equal(model.predict(X), labels)
    np.testing.assert_array_equal(model.set_params(hidden_dims=FAST["hidden_dims"]).fit(X).labels_, labels)


def test_zero_and_fractional_widths_are_refused_not_fitted_or_truncated(blobs):
    X, _ = blobs
    for bad, message in [((0,), r"positive ints.*\(0,\)"), ((2.5,), r"positive ints.*\(2\.5,\)")]:
        model = TDCMCluster(n_clusters=3, **{**FAST, "hidden_dims": bad})
        with pytest.raises(ValueError, match=message):
            model.fit(X)
        assert not hasattr(model, "labels_")


def test_empty_hidden_dims_is_a_linear_encoder(blobs):
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "hidden_dims": ()}).fit(blobs[0])
    assert model._model().linear_weight() is not None


def test_one_sample_fit_needs_embedding_norm_none(blobs):
    X = blobs[0][:1]
    with pytest.raises(ValueError, match=r"n_samples=1: embedding_norm='scalar'.*embedding_norm=None"):
        TDCMCluster(n_clusters=1, **FAST).fit(X)
    model = TDCMCluster(n_clusters=1, **{**FAST, "embedding_norm": None}).fit(X)
    assert model.labels_.tolist() == [0]


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_bad_fine_tune_epochs_are_a_clear_error_and_leave_the_model(blobs, bad):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    labels, n_records = model.labels_.copy(), len(model.history_)
    with pytest.raises(ValueError, match=r"fine_tune_epochs' parameter of TDCMCluster.transfer must"):
        model.transfer(X + 1.0, fine_tune_epochs=bad)
    np.testing.assert_array_equal(model.labels_, labels)
    assert len(model.history_) == n_records


def test_fine_tuning_on_one_sample_with_embedding_norm_is_a_clear_error(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=1, random_state=0, **FAST).fit(X)
    with pytest.raises(ValueError, match=r"n_samples=1: .*at least 2 samples for fine-tuning"):
        model.transfer(X[:1], fine_tune_epochs=1)
    assert model.transfer(X[:1]).tolist() == [0]  # the forward pass alone works


# --------------------------------------------------------------------- training


def test_every_history_record_has_phase_epoch_loss_and_the_loss_terms(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    model.transfer(X + 1.0, fine_tune_epochs=2)
    assert [(h["phase"], h["epoch"]) for h in model.history_] == [
        *(("fit", e) for e in range(FAST["max_epochs"])),
        ("transfer", 0),
        ("transfer", 1),
    ]
    for h in model.history_:
        assert set(h) == {"phase", "epoch", "loss", "clustering", "entropy", "orthogonality", "isometry"}
        assert all(isinstance(h[k], float) for k in set(h) - {"phase", "epoch"})


def _batch_sizes(monkeypatch):
    """Rows of every training forward pass of the encoder, recorded by a hook."""
    sizes = []
    new_networks = TDCMCluster._new_networks

    def recording(self, X, torch_gen, projection):
        encoder, blocks = new_networks(self, X, torch_gen, projection)
        encoder.register_forward_pre_hook(lambda m, a: sizes.append(a[0].shape[0]) if m.training else None)
        return encoder, blocks

    monkeypatch.setattr(TDCMCluster, "_new_networks", recording)
    return sizes


@pytest.mark.parametrize("norm", ["scalar", "batch", None])
def test_a_one_row_tail_joins_the_previous_batch_and_every_row_is_trained_on(blobs, monkeypatch, norm):
    X = blobs[0][:65]  # 65 = 64 + 1
    sizes = _batch_sizes(monkeypatch)
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "max_epochs": 2, "embedding_norm": norm})
    model.fit(X)
    assert sizes == [65, 65]
    model.transfer(X, fine_tune_epochs=1)
    assert sizes == [65, 65, 65]


def test_the_epoch_loss_is_the_row_weighted_mean_over_all_rows(blobs, monkeypatch):
    X = blobs[0][:97]  # batches of 64 and 33 rows
    losses = []
    objective = tdcm.model.TDCMModel.objective

    def recording(self, Z):
        loss, terms = objective(self, Z)
        losses.append((Z.shape[0], float(loss.detach())))
        return loss, terms

    monkeypatch.setattr(tdcm.model.TDCMModel, "objective", recording)
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "max_epochs": 1}).fit(X)
    assert [n for n, _ in losses] == [64, 33]
    expected = sum(n * loss for n, loss in losses) / X.shape[0]
    assert model.history_[0]["loss"] == pytest.approx(expected, rel=1e-12)


def test_a_kept_interrupt_stops_the_remaining_n_init_runs(blobs, monkeypatch):
    X, _ = blobs
    calls, interrupts = [], [1]
    train, end_epoch = TDCMCluster._train, TrainingRun.end_epoch

    def counting(self, *args):
        calls.append(1)
        return train(self, *args)

    def end_then_interrupt(run, loss=None, **extras):
        end_epoch(run, loss, **extras)
        if run.completed == 2 and interrupts:
            interrupts.pop()
            raise KeyboardInterrupt

    monkeypatch.setattr(TDCMCluster, "_train", counting)

    monkeypatch.setattr(TrainingRun, "end_epoch", end_then_interrupt)
    model = TDCMCluster(n_clusters=3, random_state=0, keep_best=True, **{**FAST, "n_init": 3})
    with pytest.warns(UserWarning, match="interrupted during fit after 2 epoch"):
        model.fit(X)
    assert len(calls) == 1 and model.n_iter_ == 2
    np.testing.assert_array_equal(model.predict(X), model.labels_)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(X)  # the interrupt was valid for that call only: three full runs now
    assert len(calls) == 4 and model.n_iter_ == FAST["max_epochs"]


# ---------------------------------------------------------- adaptation and score


def test_norm_statistics_and_embeddings_do_not_depend_on_the_chunk_size(blobs, monkeypatch):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "hidden_dims": ()}).fit(X)
    X = model._smoothed(X, model._input_projection())  # the rows as fit clusters them
    norm = model.encoder_[1]
    mean, var, Z = norm.running_mean.clone(), norm.running_var.clone(), model.transform(X)
    with torch.no_grad():
        raw = model.encoder_[0](model._tensor(X))  # the encoder sees the normalised input
    # Exact up to float32 rounding: the statistics are accumulated in float64 over the chunks.
    torch.testing.assert_close(mean, raw.mean(0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(var, raw.var(0, unbiased=False), rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(tdcm, "chunked", lambda fn, X: chunked(fn, X, chunk_size=7))
    model._set_norm_stats(X)
    # Chunks change only float32 rounding in the rows' codes (BLAS blocking).
    torch.testing.assert_close(norm.running_mean, mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(norm.running_var, var, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(model._embed_all(X).numpy(), Z, rtol=1e-5, atol=1e-6)


def test_labels_are_compacted_in_output_order_and_centroids_follow_them(blobs, monkeypatch):
    X, _ = blobs
    model = TDCMCluster(n_clusters=4, adapt_n_init=1, random_state=0, **FAST).fit(X)
    target = X + 1.0
    Z = model._embed_all(model._smoothed(target, model._input_projection()))
    C = adapt_centroids(Z, list(model.blocks_), model._model().initial_centroids(), model.tau)[-1].numpy()
    outputs = np.where(np.arange(X.shape[0]) % 3 == 0, 3, 1)  # clusters 0 and 2 get no sample
    monkeypatch.setattr(tdcm.model.TDCMModel, "assign", lambda self, Z, C: outputs)
    labels = model.transfer(target)
    np.testing.assert_array_equal(labels, np.where(outputs == 3, 1, 0))
    np.testing.assert_allclose(model.cluster_centers_, C[[1, 3, 0, 2]], rtol=0, atol=0)


def _source_objective(model, X):
    """The training objective on all of ``X``, smoothed as in fit (what n_init compares)."""
    return model._full_objective(model._smoothed(X, model._input_projection()))


def test_objective_includes_the_weighted_isometry_penalty_of_a_linear_encoder(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **{**FAST, "hidden_dims": ()}).fit(X)
    penalty = float(isometry_penalty(model._model().linear_weight().detach()))
    assert penalty > 0
    at_one = _source_objective(model, X)
    at_three = _source_objective(model.set_params(isometry_weight=3.0), X)
    assert at_three - at_one == pytest.approx(2.0 * penalty, rel=1e-9)


def test_objective_of_an_mlp_encoder_has_no_isometry_term(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    assert _source_objective(model, X) == _source_objective(model.set_params(isometry_weight=3.0), X)


def test_score_is_minus_the_within_cluster_sum_of_squares_of_the_predicted_partition(blobs):
    X, _ = blobs
    model = TDCMCluster(n_clusters=3, random_state=0, **FAST).fit(X)
    Xt = X[::2] + 0.5
    labels = model.predict(Xt)
    expected = sum(((Xt[labels == k] - Xt[labels == k].mean(0)) ** 2).sum() for k in np.unique(labels))
    assert model.score(Xt) == pytest.approx(-expected, rel=1e-12)
    # Only the partition counts: a parameter that changes no label changes no score.
    assert model.set_params(isometry_weight=3.0).score(Xt) == model.score(Xt)


def test_isometry_penalty_is_scale_free():
    W = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(isometry_penalty(7.0 * W), isometry_penalty(W))


# ------------------------------------------------ wide inputs (issue "Real images", item 4)
def _pixel_blobs(n=1000, live=196, std=0.1, seed=0):
    """10 blobs in [0, 1] on ``live`` of 784 features; the others are always 0 (like MNIST's border)."""
    Xl, y = make_blobs(n, n_features=live, centers=10, cluster_std=std, center_box=(0, 1), random_state=seed)
    X = np.zeros((n, 784))
    X[:, :live] = np.clip(Xl, 0, 1)
    return X, y


def test_defaults_use_all_clusters_on_separated_784_feature_pixel_blobs():
    X, y = _pixel_blobs()
    labels = TDCMCluster(10, device="cpu", random_state=0).fit_predict(X)
    assert np.unique(labels).size == 10
    assert np.bincount(labels).min() >= 50  # no cluster reduced to a few stray points


@pytest.mark.parametrize(
    ("n_features", "n_clusters", "expected"), [(2, 3, 10), (64, 5, 32), (784, 10, 32), (20, 15, 20), (784, 40, 40)]
)
def test_auto_embedding_dim_follows_the_input_width_within_bounds(n_features, n_clusters, expected):
    X = np.random.default_rng(0).normal(size=(60, n_features))
    model = TDCMCluster(n_clusters, **{**FAST, "hidden_dims": (), "embedding_dim": "auto", "max_epochs": 1}).fit(X)
    assert model.embedding_dim_ == expected
    assert model.cluster_centers_.shape == (n_clusters, expected)
    assert model.transform(X).shape == (60, expected)


def test_a_narrow_linear_encoder_sees_the_top_principal_axes_of_the_source():
    X, _ = _pixel_blobs(n=300)
    model = TDCMCluster(10, **{**FAST, "hidden_dims": (), "embedding_dim": 12, "max_epochs": 1}).fit(X)
    proj = model.encoder_[0][0]
    assert isinstance(proj, tdcm.model.InputProjection)
    P = proj.components.numpy()
    assert P.shape == (12, 784)
    np.testing.assert_allclose(P @ P.T, np.eye(12), atol=1e-6)  # float32 weights
    # Same subspace as the top 12 right singular vectors of the centred source.
    V = np.linalg.svd(X - X.mean(0), full_matrices=False)[2][:12]
    np.testing.assert_allclose(P.T @ P, V.T @ V, atol=1e-6)
    # The blank features get no weight, and the projection is fixed (not trained).
    assert np.abs(P[:, 196:]).max() < 1e-10
    assert not any(p is proj.components for p in model.encoder_.parameters())


def test_no_input_projection_for_none_an_mlp_or_an_embedding_as_wide_as_the_input():
    X, _ = _pixel_blobs(n=200)
    kinds = [
        dict(hidden_dims=(), embedding_dim=12, input_projection=None),
        dict(hidden_dims=(16,), embedding_dim=12),
    ]
    for kw in kinds:
        model = TDCMCluster(10, **{**FAST, "max_epochs": 1, **kw}).fit(X)
        assert not any(isinstance(m, tdcm.model.InputProjection) for m in model.encoder_.modules())
    Xs = X[:, :20]
    model = TDCMCluster(10, **{**FAST, "hidden_dims": (), "embedding_dim": 20, "max_epochs": 1}).fit(Xs)
    assert not any(isinstance(m, tdcm.model.InputProjection) for m in model.encoder_.modules())


def test_principal_axes_are_deterministic_and_ordered_by_variance():
    X = np.random.default_rng(1).normal(size=(500, 6)) * np.array([8.0, 4.0, 2.0, 1.0, 0.5, 0.25])
    mean, P = tdcm.model.principal_axes(X, 3)
    mean2, P2 = tdcm.model.principal_axes(X.copy(), 3)
    np.testing.assert_array_equal(P, P2)
    np.testing.assert_allclose(mean, X.mean(0))
    var = ((X - mean) @ P.T).var(0)
    assert np.all(np.diff(var) < 0)
    np.testing.assert_allclose(np.abs(P), np.eye(3, 6), atol=0.1)


# ------------------------------------------------ neighbour smoothing and the paper's settings
def test_neighbor_mean_operator_averages_each_row_with_its_nearest_rows():
    G = np.array([[0.0], [1.0], [10.0], [11.5], [30.0]])
    A = tdcm.model.neighbor_mean_operator(G, 2).toarray()
    expected = np.zeros((5, 5))
    for i, j in [(0, 1), (1, 0), (2, 3), (3, 2), (4, 3)]:
        expected[i, [i, j]] = 0.5
    np.testing.assert_allclose(A, expected)
    # Capped at the number of rows: every row then averages all rows.
    np.testing.assert_allclose(tdcm.model.neighbor_mean_operator(G, 50).toarray(), np.full((5, 5), 0.2))


def test_smoothing_shrinks_each_separated_cluster_towards_its_mean():
    X, y = make_blobs(n_samples=300, centers=3, n_features=5, cluster_std=1.0, random_state=0)
    Xs = tdcm.model.smooth_rows(X, X, 10, 8)
    assert Xs.shape == X.shape and Xs.dtype == X.dtype
    for c in range(3):
        # Rows average within their own cluster: its mean barely moves (< 0.3 of its std).
        np.testing.assert_allclose(Xs[y == c].mean(0), X[y == c].mean(0), atol=0.3)
        assert Xs[y == c].std(0).max() < 0.5 * X[y == c].std(0).min()
    assert tdcm.model.smooth_rows(X, X, 10, 0) is X


def test_fit_and_transfer_smooth_each_data_set_on_its_own_neighbours(blobs, monkeypatch):
    X, _ = blobs
    Xt = X[:90] + 5.0
    seen = []
    real = tdcm.model.smooth_rows

    def spy(X_, G, k, steps):
        seen.append((X_.shape[0], G.shape, k, steps))
        return real(X_, G, k, steps)

    monkeypatch.setattr(tdcm.model, "smooth_rows", spy)
    kw = {**FAST, "hidden_dims": (), "embedding_dim": 3, "n_neighbors": 7, "smoothing_steps": 3}
    model = TDCMCluster(3, **kw).fit(X)
    model.transfer(Xt)
    model.predict(Xt)  # one row's label must not depend on the others: no smoothing
    # Neighbours searched on the PCA coordinates (3 axes of the 4 features) of each data set.
    assert seen == [(120, (120, 3), 7, 3), (90, (90, 3), 7, 3)]


def test_smoothing_steps_zero_searches_no_neighbours(blobs, monkeypatch):
    X, _ = blobs

    def refuse(*args, **kwargs):
        raise AssertionError("neighbour search with smoothing_steps=0")

    monkeypatch.setattr(tdcm.model, "neighbor_mean_operator", refuse)
    model = TDCMCluster(3, **{**FAST, "smoothing_steps": 0}).fit(X)
    assert model.transfer(X).shape == (120,)
    assert np.isfinite(model.score(X))


def test_paper_params_build_the_papers_model_and_fit_on_tiny_data(blobs):
    X, _ = blobs
    defaults = TDCMCluster().get_params()
    assert all(defaults[name] != value for name, value in tdcm.PAPER_PARAMS.items())
    model = TDCMCluster(3, **{**tdcm.PAPER_PARAMS, "max_epochs": 2, "device": "cpu", "random_state": 0}).fit(X)
    assert model.embedding_dim_ == 10 and model.n_iter_ == 2
    assert not any(isinstance(m, tdcm.model.InputProjection) for m in model.encoder_.modules())
    assert sum(isinstance(m, torch.nn.Linear) for m in model.encoder_.modules()) == 3
    assert model.transfer(X + 1.0).shape == (120,)


def _block_labels(model, X):
    """predict's labels computed the unfolded way: encoder, then the last block's scores."""
    return model._chunked(model._predict, model._fitted_input(X), dtype=np.int64)


def test_predict_with_the_default_affine_encoder_is_one_linear_map_with_the_blocks_labels():
    X, _ = make_blobs(n_samples=600, centers=4, n_features=12, cluster_std=0.5, random_state=1)
    model = TDCMCluster(4, max_epochs=3, random_state=0, device="cpu", **INPUT).fit(X)
    assert model._linear_predictor() is not None  # the input model's default: affine encoder, PSD score
    W, b = model._linear_predictor()
    assert W.shape == (12, 4) and b.shape == (4,)
    Xn, _ = make_blobs(n_samples=300, centers=4, n_features=12, cluster_std=0.5, random_state=1)
    np.testing.assert_array_equal(model.predict(Xn), _block_labels(model, Xn))
    np.testing.assert_array_equal(model.predict(X), model.labels_)


def test_predict_falls_back_to_the_blocks_for_a_nonlinear_encoder_or_an_indefinite_score(blobs):
    X, _ = blobs
    mlp = TDCMCluster(3, random_state=0, **FAST).fit(X)
    assert mlp._affine_encoder() is None and mlp._linear_predictor() is None
    np.testing.assert_array_equal(mlp.predict(X), _block_labels(mlp, X))
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu", **INPUT).fit(X)
    with torch.no_grad():  # W_Q = -W_K: S negative definite, every score clipped by the ReLU
        model.blocks_[-1].A_q.copy_(-model.blocks_[-1].A_k)
    assert model._linear_predictor() is None
    np.testing.assert_array_equal(model.predict(X), _block_labels(model, X))


def test_predict_with_the_neighbour_encoder_folds_its_affine_tail_and_the_block_into_one_head(blobs):
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    trunk, W, b = model._folded_head()
    assert not any(isinstance(m, (torch.nn.BatchNorm1d, model._AFFINE_MODULES[0])) for m in trunk)
    assert isinstance(trunk[-1], torch.nn.ReLU) and W.shape == (trunk[-2].out_features, 3)
    np.testing.assert_array_equal(model.predict(X), _block_labels(model, X))
    np.testing.assert_array_equal(model.predict(X.astype(np.float32)), _block_labels(model, X.astype(np.float32)))
    with torch.no_grad():  # an indefinite score: the head does not hold, predict runs the blocks
        model.blocks_[-1].A_q.copy_(-model.blocks_[-1].A_k)
    assert model._folded_head() is None
    np.testing.assert_array_equal(model.predict(X), _block_labels(model, X))


def test_folded_head_predict_equals_the_blocks_on_rows_far_outside_the_fitted_range(blobs):
    """The fast path (trunk, one Linear to K) and the exact one (encoder, the block's quadratic
    form) give the same labels on rows up to 10^6 times the fitted spread away, float32 and float64
    (beyond, the exact path pulls rows in: the next tests)."""
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    assert model._folded_head() is not None
    for far in (X * 1e3, X + 1e4, X * 1e6, np.random.default_rng(0).standard_normal(X.shape) * 1e6):
        for dtype in (np.float32, np.float64):
            np.testing.assert_array_equal(model.predict(far.astype(dtype)), _block_labels(model, far.astype(dtype)))


def test_folded_head_predict_keeps_the_labels_of_a_rows_direction_where_the_blocks_overflow(blobs):
    """Past ~10^7 times the spread the blocks' float32 scores saturate and their labels collapse
    towards one; the folded head's labels stay those of each row's direction."""
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    direction = model.predict(X * 1e6)
    for scale in (1e9, 1e20):
        np.testing.assert_array_equal(model.predict((X * scale).astype(np.float32)), direction)


def test_exact_predict_path_gives_the_labels_of_a_rows_direction_on_rows_far_outside_the_fitted_range(blobs):
    """The exact path (encoder, the block's quadratic form: predict's where the folded head does not
    hold) pulls rows beyond ``_FAR_ROW`` in along their direction; its float32 scores saturated from
    ~10^7 times the spread (3 of these 120 rows at x1e7, 92 from x1e9) and now agree with the folded head."""
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    direction = model.predict(X * 1e6)
    for scale in (1e7, 3e7, 1e9, 1e30):
        for dtype in (np.float32, np.float64):
            far = (X * scale).astype(dtype)
            np.testing.assert_array_equal(_block_labels(model, far), direction)
            np.testing.assert_array_equal(_block_labels(model, far), model.predict(far))


def test_exact_predict_path_scores_the_fitted_rows_untouched(blobs):
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    for rows in (X, X * 1e3):  # inside the bound in the fitted units: scored as they are, no float64 copy
        assert model._pulled_in(rows) is rows


# --------------------------------------------------------- representation="neighbours" (issue 28)

NEIGHBOURS = dict(representation="neighbours", max_epochs=10, device="cpu")


@pytest.fixture(scope="module")
def pixel_task():
    """Three separated blobs in 64 features (an 8 x 8 'image'), and the same blobs shifted as a target."""
    X, y = make_blobs(n_samples=240, centers=3, n_features=64, cluster_std=1.0, center_box=(-6, 6), random_state=3)
    return X, y, X + 1.5


def test_neighbours_held_out_rows_of_a_training_cluster_land_in_that_cluster(pixel_task):
    X, y, _ = pixel_task
    held = np.r_[0:240:12]
    train = np.setdiff1d(np.arange(240), held)
    model = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X[train])
    assert adjusted_rand_score(y[train], model.labels_) == 1.0
    # Each held-out row gets the label that its cluster's training rows got.
    majority = {c: np.bincount(model.labels_[y[train] == c]).argmax() for c in range(3)}
    np.testing.assert_array_equal(model.predict(X[held]), [majority[c] for c in y[held]])
    # predict is row-wise: a subset gets the labels it gets inside the whole set.
    np.testing.assert_array_equal(model.predict(X[:7]), model.predict(X)[:7])


def _spy_neighbour_training(monkeypatch):
    """Record (start weights, graph rows, epochs) of every neighbour-encoder training."""
    calls = []
    real = tdcm.train_neighbour_encoder

    def spy(encoder, inputs, graph, **kw):
        calls.append(({k: v.clone() for k, v in encoder.state_dict().items()}, graph.shape[0], kw["n_epochs"]))
        return real(encoder, inputs, graph, **kw)

    monkeypatch.setattr(tdcm, "train_neighbour_encoder", spy)
    return calls


def test_neighbours_transfer_trains_a_fresh_encoder_on_the_target_and_keeps_the_source_blocks(pixel_task, monkeypatch):
    X, _, Xt = pixel_task
    calls = _spy_neighbour_training(monkeypatch)
    model = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X[:200])
    fitted = {k: v.clone() for k, v in model.encoder_[0].state_dict().items()}
    blocks = {k: v.clone() for k, v in model.blocks_.state_dict().items()}
    assert [c[1:] for c in calls] == [(200, model._neighbour_epochs)]
    labels = model.transfer(Xt)
    assert [c[1:] for c in calls[1:]] == [(240, model._refine_epochs)]  # the target's own graph
    start = calls[1][0]
    assert all(not torch.equal(start[k], fitted[k]) for k in fitted)  # a fresh start, not the source's weights
    assert all(torch.equal(model.blocks_.state_dict()[k], blocks[k]) for k in blocks)  # the source's blocks
    assert {r["phase"] for r in model.history_} == {"neighbours", "fit", "transfer-neighbours"}
    np.testing.assert_array_equal(model.predict(Xt), labels)


def test_neighbours_fit_starts_the_encoder_from_the_rows_principal_layout(pixel_task, monkeypatch):
    X, _, _ = pixel_task
    calls = _spy_neighbour_training(monkeypatch)
    est = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X[:200])
    inputs = est._tensor(X[:200]).float()
    layout = tdcm_model.principal_layout(inputs.numpy(), est.embedding_dim_, tdcm_model.PRINCIPAL_START["scale"])
    start = make_encoder(64, est.embedding_dim_, tdcm_model.NEIGHBOUR_HIDDEN)
    start.load_state_dict(calls[0][0])
    with torch.no_grad():
        codes = start(inputs)
    # The graph training starts from codes that reproduce the principal-axis layout (to 5 % of its variance).
    assert float(((codes - layout) ** 2).sum() / (layout - layout.mean(0)).pow(2).sum()) < 0.05
    est._principal_start = False  # the random start, the default before 2026-11-27's sixth session
    est.fit(X[:200])
    random_start = make_encoder(64, est.embedding_dim_, tdcm_model.NEIGHBOUR_HIDDEN)
    random_start.load_state_dict(calls[-1][0])
    with torch.no_grad():
        codes = random_start(inputs)
    assert float(((codes - layout) ** 2).sum() / (layout - layout.mean(0)).pow(2).sum()) > 0.5


def test_principal_layout_scales_the_principal_coordinates_uniformly():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4)) * [5.0, 2.0, 1.0, 0.5] + 3.0
    T = tdcm_model.principal_layout(X, 6, 10.0).numpy()
    assert T.shape == (50, 6) and np.all(T[:, 4:] == 0)  # narrower input: zero-padded
    assert T[:, 0].std(ddof=1) == pytest.approx(10.0, rel=1e-4)
    # One scale for every axis: pairwise distances are the input's times a constant.
    d_in, d_out = pdist(X), pdist(T)
    np.testing.assert_allclose(d_out / d_in, np.full(d_in.shape, (d_out / d_in).mean()), rtol=1e-3)
    assert tdcm_model.principal_layout(np.ones((5, 3)), 4, 10.0) is None  # rows that do not vary


def test_neighbours_transfer_keeping_the_whole_source_encoder_refines_it_as_it_is(pixel_task, monkeypatch):
    X, _, Xt = pixel_task
    calls = _spy_neighbour_training(monkeypatch)
    model = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X[:200])
    model._refine_keep_source = 1.0  # the behaviour before 2026-11-27's fifth session
    fitted = {k: v.clone() for k, v in model.encoder_[0].state_dict().items()}
    model.transfer(Xt)
    assert all(torch.equal(calls[1][0][k], fitted[k]) for k in fitted)
    assert any(not torch.equal(model.encoder_[0].state_dict()[k], fitted[k]) for k in fitted)


def test_neighbours_graph_uses_the_image_shape_only_when_it_is_passed(pixel_task, monkeypatch):
    import sktransfer_cluster.representation as rep

    X, _, _ = pixel_task
    seen = []
    real = rep.neighbour_graph

    def spy(X, k, **kw):
        seen.append(kw)
        return real(X, k, **kw)

    monkeypatch.setattr(rep, "neighbour_graph", spy)
    X = X - X.min()  # pixels: non-negative
    TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X)  # 64 columns: never read as 8 x 8
    assert seen[-1]["image_shape"] is None and seen[-1]["max_shift"] == 0 and seen[-1]["blur"] == 0
    assert seen[-1]["metric"] == "cosine"
    TDCMCluster(3, random_state=0, image_shape=(8, 8), **NEIGHBOURS).fit(X)
    assert seen[-1]["image_shape"] == (8, 8) and seen[-1]["max_shift"] == 1 and seen[-1]["blur"] == 1.0
    assert seen[-1]["metric"] == "cosine"


def test_the_graph_distance_follows_the_values_never_the_width():
    from sktransfer_cluster.representation import auto_metric

    rng = np.random.default_rng(0)
    pixels = np.maximum(rng.random((50, 784)) - 0.3, 0.0)  # intensities: background at zero
    assert auto_metric(pixels) == "cosine"
    assert auto_metric(pixels - 0.5) == "euclidean"  # 784 columns alone switch nothing
    assert auto_metric(pixels + 3.0) == "euclidean"  # positive, but an offset: no zero intensity
    one = pixels.copy()
    one[-1, -1] = -1e-9  # one negative entry: an arbitrary origin
    assert auto_metric(one) == "euclidean"


def test_neighbours_graph_finds_positive_blobs_under_a_per_feature_offset():
    """Issue 30 N1: a large positive offset made every row point the same way, and the cosine
    graph lost the blobs (ARI 0.38 at [1e8, 5]); offset rows get the Euclidean graph."""
    X, y = make_blobs(300, centers=3, cluster_std=0.5, random_state=0)
    model = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X + np.array([1e8, 5.0]))
    assert adjusted_rand_score(y, model.labels_) == 1.0


def test_the_default_representation_is_the_neighbour_encoder():
    model = TDCMCluster(3)
    assert model.representation == "neighbours"
    assert tdcm.PAPER_PARAMS["representation"] == "input"


def test_neighbours_graph_keeps_apart_two_blobs_on_one_ray_from_the_origin(monkeypatch):
    """Rows with negative entries get a Euclidean graph: blobs around (-1, -1) and (-5, -5) spread
    alike in angle about the origin, so a cosine graph would join them at random; no edge may."""
    import sktransfer_cluster.representation as rep

    rng = np.random.default_rng(0)
    X = -np.r_[rng.normal(1.0, 0.1, (100, 2)), rng.normal(5.0, 0.5, (100, 2))]
    y = np.repeat([0, 1], 100)
    graphs = []
    real = rep.neighbour_graph
    monkeypatch.setattr(rep, "neighbour_graph", lambda *a, **kw: graphs.append(real(*a, **kw)) or graphs[-1])
    model = TDCMCluster(2, random_state=0, **NEIGHBOURS).fit(X)
    assert graphs[0][:100, 100:].nnz == 0
    assert real(X, 15, metric="cosine")[:100, 100:].nnz > 0  # what the cosine graph does here
    assert adjusted_rand_score(y, model.labels_) == 1.0


def test_neighbours_flat_graph_does_not_depend_on_the_data_units(pixel_task):
    """The flat graph is built on the rows the encoder sees (centred, one scale): the same fit in other units."""
    X, _, _ = pixel_task
    a = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X)
    b = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X * 1e6 + 3e6)
    assert adjusted_rand_score(a.labels_, b.labels_) == 1.0


@pytest.mark.parametrize("scale", [1e-170, 1e160])
def test_neighbours_cosine_graph_finds_non_negative_blobs_at_extreme_scales(pixel_task, scale):
    """Issue 30 R3 on the cosine path (no negative entry): the rows are brought near 1 by a power
    of two before the graph, so squared norms neither under- nor overflow. (The Euclidean path
    is test_numeric_robustness's.)"""
    X, y, _ = pixel_task
    X = (X - X.min()) * scale
    assert X.min() == 0  # non-negative intensities reaching zero: the cosine path
    model = TDCMCluster(3, random_state=0, **NEIGHBOURS).fit(X)
    assert adjusted_rand_score(y, model.labels_) == 1.0
    assert adjusted_rand_score(y, model.transfer(X)) == 1.0
    assert adjusted_rand_score(y, model.predict(X)) == 1.0


@pytest.mark.parametrize("bad", [(7, 7), (8, 8, 8, 8), (8, 0), (8.0, 8)])
def test_neighbours_bad_image_shape_is_a_clear_error(pixel_task, bad):
    X, _, _ = pixel_task
    with pytest.raises(ValueError, match="image_shape"):
        TDCMCluster(3, image_shape=bad, **NEIGHBOURS).fit(X)


def test_neighbours_is_deterministic_pickles_and_clones(pixel_task):
    import pickle

    from sklearn.base import clone

    X, _, Xt = pixel_task
    a = TDCMCluster(3, random_state=1, **NEIGHBOURS).fit(X)
    b = clone(a).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.transform(Xt), b.transform(Xt))
    c = pickle.loads(pickle.dumps(a))
    np.testing.assert_array_equal(c.predict(Xt), a.predict(Xt))
    np.testing.assert_array_equal(c.transfer(Xt), a.transfer(Xt))
    assert a.embedding_dim_ == 10 and a.cluster_centers_.shape == (3, 10)


# ----------------------------------------------------------------- compile=True (issue 31 item 5)
_TINY = dict(representation="input", n_blocks=1, embedding_dim=2, max_epochs=2, adapt_n_init=1, smoothing_steps=0,
             batch_size=32, random_state=0, device="cpu")


def _tiny_blobs():
    return make_blobs(60, n_features=2, centers=2, random_state=0)[0]


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
def test_compile_true_traces_the_step_and_matches_eager(monkeypatch):
    # aot_eager: TorchDynamo's graph and AOTAutograd's backward without a C++ build (seconds, not tens).
    monkeypatch.setattr(TDCMCluster, "_compile_options", {"backend": "aot_eager"})
    X = _tiny_blobs()
    compiled = TDCMCluster(2, compile="always", **_TINY).fit(X)
    eager = TDCMCluster(2, **_TINY).fit(X)
    np.testing.assert_allclose(compiled.cluster_centers_, eager.cluster_centers_, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled.labels_, eager.labels_)
    np.testing.assert_allclose([h["loss"] for h in compiled.history_], [h["loss"] for h in eager.history_], rtol=1e-5)


def test_compile_true_without_a_compiler_warns_and_equals_eager_exactly():
    from torch._inductor import config, cpp_builder

    X = _tiny_blobs()
    cpp_builder.cpp_compiler_search.cache_clear()
    try:
        with config.patch({"cpp.cxx": ("/nonexistent/c++",)}), pytest.warns(UserWarning, match="runs eagerly"):
            fallback = TDCMCluster(2, compile=True, **_TINY).fit(X)
    finally:
        cpp_builder.cpp_compiler_search.cache_clear()
    eager = TDCMCluster(2, **_TINY).fit(X)
    np.testing.assert_array_equal(fallback.cluster_centers_, eager.cluster_centers_)
    assert fallback.history_ == eager.history_


def test_compile_true_keeps_each_step_eager_where_its_phase_cannot_repay_the_compilation():
    # 2 epochs of 60 rows: the rule's expected saving (steps left x eager step x (1 - 1/speed-up))
    # is far below any compilation cost, so compile=True trains exactly as eager mode.
    X = _tiny_blobs()
    ruled = TDCMCluster(2, compile=True, **_TINY).fit(X)
    eager = TDCMCluster(2, **_TINY).fit(X)
    assert [(d["phase"], d["step"], d["compiled"]) for d in ruled.compile_decisions_] == [("fit", "blocks", False)]
    np.testing.assert_array_equal(ruled.cluster_centers_, eager.cluster_centers_)
    assert ruled.history_ == eager.history_
    assert eager.compile_decisions_ == []


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
def test_compile_true_compiles_a_step_after_its_probe_epoch_where_the_saving_exceeds_the_cost(monkeypatch):
    monkeypatch.setattr(TDCMCluster, "_compile_options", {"backend": "aot_eager"})
    free = {key: dict(v, cold_cost=0.0, warm_cost=0.0) for key, v in TDCMCluster._compile_expectations.items()}
    monkeypatch.setattr(TDCMCluster, "_compile_expectations", free)
    X = _tiny_blobs()
    ruled = TDCMCluster(2, compile=True, **dict(_TINY, max_epochs=3)).fit(X)
    eager = TDCMCluster(2, **dict(_TINY, max_epochs=3)).fit(X)
    (d,) = ruled.compile_decisions_
    # 3 epochs of 2 steps (60 rows, batches of 32): the first step, 2 timed ones, then compiled for the 3 left.
    assert d["compiled"] and d["steps_left"] == 3 and d["expected_saving_s"] > 0
    np.testing.assert_allclose(ruled.cluster_centers_, eager.cluster_centers_, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ruled.labels_, eager.labels_)


@pytest.mark.skipif(not os.environ.get("SKTRANSFER_COMPILE_TESTS"),
                    reason="compiles C++ with inductor (tens of CPU seconds cold); set SKTRANSFER_COMPILE_TESTS=1")
def test_compile_true_with_inductor_matches_eager_within_float_tolerance():
    X = _tiny_blobs()
    compiled = TDCMCluster(2, compile="always", **_TINY).fit(X)
    eager = TDCMCluster(2, **_TINY).fit(X)
    np.testing.assert_allclose(compiled.cluster_centers_, eager.cluster_centers_, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(compiled.labels_, eager.labels_)


# --------------------------------------------------- landmark fits past LANDMARK_ROWS (issue 31)
def test_a_neighbour_fit_past_the_landmark_count_reads_landmarks_and_chunks_never_the_whole_array(tmp_path, monkeypatch):
    from tests.test_scale import landmark_memmap_reads

    model, largest, chunk = landmark_memmap_reads(
        TDCMCluster, lambda: TDCMCluster(3, max_epochs=1, random_state=0, device="cpu"), tmp_path, monkeypatch)
    assert chunk < 6000
    # Landmarks are read in pieces, every pass in chunks: at most one chunk (or the landmarks) at a time.
    assert largest <= max(500, chunk)
    assert model.labels_.shape == (6000,)


def test_the_tdcm_landmark_fit_on_a_memmap_equals_it_on_the_array_in_memory(tmp_path, monkeypatch):
    from tests.test_scale import landmark_fits_on_memmap_and_array

    mapped, in_memory = landmark_fits_on_memmap_and_array(
        lambda: TDCMCluster(3, max_epochs=2, random_state=0, device="cpu"), tmp_path, monkeypatch)
    np.testing.assert_array_equal(mapped.cluster_centers_, in_memory.cluster_centers_)
    np.testing.assert_array_equal(mapped.labels_, in_memory.labels_)


@pytest.mark.parametrize("signed", [False, True], ids=["cosine", "euclidean"])
def test_the_tdcm_landmark_path_starts_only_past_the_landmark_count(monkeypatch, signed):
    import sktransfer_cluster.representation as representation
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, y = _nonnegative_blobs(300, 30)
    X = X - 0.5 if signed else X  # a negative entry: the Euclidean graph
    reads = []
    original = representation.read_landmarks
    monkeypatch.setattr(representation, "read_landmarks", lambda X, index, *a: reads.append(len(index)) or
                        original(X, index, *a))
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 300)
    TDCMCluster(3, max_epochs=2, random_state=0, device="cpu").fit(X)
    assert reads == []  # every row, in memory, as before landmarks existed
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 299)
    model = TDCMCluster(3, max_epochs=2, random_state=0, device="cpu").fit(X)
    assert reads and set(reads) == {299}  # the landmarks only (read again normalised for the cosine graph)
    assert adjusted_rand_score(y, model.labels_) == 1.0  # separated blobs, every row labelled by its code


def test_smoothing_by_landmarks_with_every_row_a_landmark_is_smooth_rows():
    from sktransfer_cluster.cluster.tdcm.model import smooth_by_landmarks, smooth_rows

    H = np.random.default_rng(0).normal(size=(300, 4))
    np.testing.assert_allclose(smooth_by_landmarks(H, np.arange(300), 5, 3, chunk_size=70),
                               smooth_rows(H, H, 5, 3), rtol=1e-12, atol=1e-12)


# ------------------------------------------- parameters set after fit (V14 finding 1, tenth session)
# Each parameter that shapes the fitted model, with another value: transfer refuses it, naming it
# (before, transfer ran with it: 12 centroids from 3 fitted ones, or a shape error from deep inside).
_SHAPING = [("n_clusters", 12), ("representation", "input"), ("hidden_dims", (4,)), ("embedding_dim", 12),
            ("n_blocks", 2), ("tau", 0.5), ("activation", "leaky_relu"), ("symmetric", False),
            ("embedding_norm", None), ("image_shape", (2, 2)), ("input_projection", None)]


@pytest.mark.parametrize("name, value", _SHAPING)
def test_transfer_refuses_a_parameter_that_shapes_the_model_changed_since_fit(blobs, name, value):
    X, _ = blobs
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    model.set_params(**{name: value})
    with pytest.raises(ValueError, match=rf"TDCMCluster.transfer: {name} changed since fit.*Call fit again"):
        model.transfer(X + 1.0)


def test_a_refused_transfer_leaves_the_model_and_transfers_as_before_once_set_back(blobs):
    X, _ = blobs
    Xt, Xt0 = X + 1.0, X + 1.0
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    expected = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X).transfer(Xt)
    labels, centres, predicted = model.labels_.copy(), model.cluster_centers_.copy(), model.predict(Xt)
    with pytest.raises(ValueError, match="n_clusters changed since fit"):
        model.set_params(n_clusters=12).transfer(Xt)
    np.testing.assert_array_equal(model.labels_, labels)
    np.testing.assert_array_equal(model.cluster_centers_, centres)
    np.testing.assert_array_equal(model.predict(Xt), predicted)
    np.testing.assert_array_equal(model.set_params(n_clusters=3).transfer(Xt), expected)
    np.testing.assert_array_equal(Xt, Xt0)


def test_embedding_dim_auto_is_not_a_change_when_it_resolves_to_the_fitted_width(blobs):
    X, _ = blobs
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    assert model.set_params(embedding_dim=model.embedding_dim_).transfer(X + 1.0).shape == (120,)


def test_transfer_smooths_the_target_with_the_current_smoothing_steps(blobs, monkeypatch):
    # How the target is smoothed is transfer's own: a value set after fit is honoured.
    X, _ = blobs
    model = TDCMCluster(3, **{**FAST, "hidden_dims": (), "embedding_dim": 3, "smoothing_steps": 3}).fit(X)
    seen = []
    real = tdcm.model.smooth_rows
    monkeypatch.setattr(tdcm.model, "smooth_rows", lambda X_, G, k, steps: seen.append(steps) or real(X_, G, k, steps))
    model.set_params(smoothing_steps=5).transfer(X + 1.0)
    assert seen == [5]


def test_predict_reads_the_fitted_number_of_clusters_after_set_params(blobs):
    X, _ = blobs
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    model.transfer(X + 1.0)
    expected = model.predict(X)
    model.set_params(n_clusters=12, tau=0.5)
    np.testing.assert_array_equal(model.predict(X), expected)
    assert model._model().n_clusters == 3


def test_a_model_pickled_before_the_record_was_kept_loads_and_transfers_with_the_current_parameters(blobs):
    import pickle

    X, _ = blobs
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    expected = model.transfer(X + 1.0)
    old = copy.deepcopy(model)
    for state in (old.__dict__, old.__dict__["_source_state"]):
        del state["_fitted_params"]
    old = pickle.loads(pickle.dumps(old))
    np.testing.assert_array_equal(old.transfer(X + 1.0), expected)


# ------------------------------------------- rows beyond float32's range (V14 finding 2, tenth session)
def test_folded_head_predict_gives_the_labels_of_a_rows_direction_on_float64_rows_beyond_float32s_range(blobs):
    # Before, the folded head scored such rows unpulled: inf codes, every row label 0.
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    assert model._folded_head() is not None
    np.testing.assert_array_equal(model.predict(X * 1e39), model.predict(X * 1e30))


def test_transform_of_rows_beyond_float32s_range_gives_their_float64_codes(blobs):
    # Before, their float32 codes overflowed (inf/NaN); far away the piecewise-linear codes scale with the row.
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    far = model.transform(X * 1e39)
    assert np.isfinite(far).all()
    np.testing.assert_allclose(far / 1e39, model.transform(X * 1e25) / 1e25, rtol=1e-9)


def test_a_far_row_in_transform_leaves_the_codes_of_the_other_rows_as_they_are(blobs):
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    rows = X.copy()
    rows[5] *= 1e39
    Z = model.transform(rows)
    np.testing.assert_array_equal(np.delete(Z, 5, 0), np.delete(model.transform(X), 5, 0))
    np.testing.assert_array_equal(rows[5], X[5] * 1e39)


def test_transform_refuses_rows_whose_float64_codes_overflow(blobs):
    X, _ = blobs
    model = TDCMCluster(3, random_state=0, representation="neighbours", max_epochs=3, device="cpu").fit(X)
    with torch.no_grad():  # weights that make float64 overflow on rows near its largest value
        model.encoder_[0][0].weight.mul_(1e20)
    with pytest.raises(ValueError, match="overflow even float64; rescale them"):
        model.transform(X * 1e300)


# ------------------------------------------- smoothing on small data (V14 finding 9, tenth session)
def test_smoothing_on_few_rows_per_cluster_keeps_the_clusters_apart():
    # 15 rows of 3 blobs: 10 neighbours reached into the other clusters, and 16 steps merged all three.
    X, y = make_blobs(15, n_features=4, centers=3, cluster_std=0.5, random_state=0)
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    assert adjusted_rand_score(y, model.labels_) == 1.0


def test_smoothing_neighbours_are_n_neighbors_from_n_neighbors_rows_per_cluster_and_a_cluster_below(blobs):
    X, _ = blobs
    model = TDCMCluster(3, max_epochs=3, random_state=0, device="cpu").fit(X)
    assert [model._smoothing_neighbours(n) for n in (3000, 30, 29, 15, 2)] == [10, 10, 9, 5, 1]
