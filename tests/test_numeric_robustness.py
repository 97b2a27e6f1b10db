"""Issue 30's numeric defects in the estimators' kernels, each with the right answer asserted:
R1 (TDCM's principal axes of wide data), R3 (scale-free C2M, TDCM, CCN and GAN), S3 (CCN's
estimate of the number of clusters) and S7 (the folded affine predict on float32 data at a
large offset)."""

import tracemalloc

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from sktransfer_cluster.cluster.tdcm import model as tdcm_model


# ------------------------------------------------------------------ R1: TDCM on n << d
def _axes_from_covariance(X, k):
    """The reference: eigenvectors of the d x d covariance, largest first, largest entry positive."""
    Xc = X - X.mean(0)
    evals, evecs = np.linalg.eigh(Xc.T @ Xc / X.shape[0])
    comps = evecs[:, ::-1][:, :k].T
    return comps * np.sign(comps[np.arange(k), np.abs(comps).argmax(1)])[:, None], evals[::-1][:k]


def test_principal_axes_of_wide_data_are_the_covariances_without_building_it():
    """R1: 100 x 10,000 took 374 s and 4.2 GB in the d x d covariance and its eigh."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 120)) * np.linspace(4.0, 0.2, 120) + 3.0
    mean, comps = tdcm_model.principal_axes(X, 10)
    ref, _ = _axes_from_covariance(X, 10)
    np.testing.assert_allclose(mean, X.mean(0))
    np.testing.assert_allclose(comps, ref, rtol=0, atol=1e-10)  # same axes, same signs
    np.testing.assert_allclose(comps @ comps.T, np.eye(10), atol=1e-12)
    # The memory: a 4,000-wide covariance alone is 128 MB; the centred rows are 1.6 MB.
    wide = rng.normal(size=(50, 4000))
    tracemalloc.start()
    try:
        tdcm_model.principal_axes(wide, 50)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"principal_axes of 50 x 4000 peaked at {peak / 2**20:.0f} MiB"


def test_principal_axes_with_as_many_rows_as_features_keep_the_covariance_path():
    """n >= d is unchanged (the eigenvectors of the covariance), so fitted models do not move."""
    X = np.random.default_rng(2).normal(size=(64, 64)) * np.linspace(3.0, 0.5, 64)
    _, comps = tdcm_model.principal_axes(X, 8)
    ref, _ = _axes_from_covariance(X, 8)
    np.testing.assert_allclose(comps, ref, rtol=0, atol=1e-10)


# ------------------------------------------------------------------ R3: C2M at extreme scales
def _plain_standardize(X):
    """graph.standardize as it was: right wherever the squares of X neither under- nor overflow."""
    mean = X.mean(0)
    scale = float(X.std(0).mean())
    return (X - mean) / (scale if np.isfinite(scale) and scale > 0 else 1.0), mean, scale


def test_c2m_standardize_is_scale_free_and_bit_identical_on_ordinary_data():
    import torch

    from sktransfer_cluster.cluster.c2m.graph import standardize

    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 4, generator=gen, dtype=torch.float64) * torch.tensor([1.0, 3.0, 0.1, 8.0]) + 5.0
    for ordinary in (1.0, 1e-12, 1e12):
        got, ref = standardize(X * ordinary), _plain_standardize(X * ordinary)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]) and got[2] == ref[2]
    unit = standardize(X)
    for extreme in (1e-170, 1e-300, 1e160, 1e300):
        Xs, mean, scale = standardize(X * extreme)
        torch.testing.assert_close(Xs, unit[0], rtol=1e-12, atol=1e-12)
        assert scale == pytest.approx(unit[2] * extreme, rel=1e-12)
        torch.testing.assert_close(mean, unit[1] * extreme, rtol=1e-12, atol=0)


@pytest.mark.parametrize("scale", [1e-170, 1e160])
def test_c2m_finds_the_blobs_at_extreme_scales(scale):
    """R3: x1e160 ended in "cannot reshape array", x1e-170 found one cluster."""
    from sktransfer_cluster import C2MCluster

    X, y = make_blobs(n_samples=60, centers=3, n_features=3, cluster_std=0.4, center_box=(-8, 8), random_state=3)
    model = C2MCluster(max_clusters=4, max_epochs=1, sets_per_epoch=4, random_state=0).fit(X * scale, y)
    assert adjusted_rand_score(y, model.labels_) == 1.0
    assert adjusted_rand_score(y, model.transfer(X * scale)) == 1.0
    assert adjusted_rand_score(y, model.predict(X * scale)) == 1.0


# ------------------------------------------------------------------ S7: affine predict at an offset
S7_X, S7_Y = make_blobs(n_samples=1000, centers=3, n_features=5, cluster_std=4.0, random_state=0)


def _s7_models():
    from sktransfer_cluster import PreciseFeatureGAN, SinkhornKMeans, TDCMCluster

    return {
        "SinkhornKMeans": lambda: SinkhornKMeans(3, n_init=3, random_state=0),
        # smoothing_steps=0: TDCM's labels_ are otherwise those of the smoothed rows, by design
        "TDCMCluster": lambda: TDCMCluster(3, representation="input", max_epochs=10, smoothing_steps=0, random_state=0),
        "PreciseFeatureGAN": lambda: PreciseFeatureGAN(3, n_iter=150, random_state=0),
    }


@pytest.mark.parametrize("name", ["SinkhornKMeans", "TDCMCluster", "PreciseFeatureGAN"])
def test_predict_on_float32_rows_at_a_large_offset_gives_labels_(name):
    """S7: ``(X + 3e6).astype("float32")`` predicted other labels than labels_ for 2.7-3 % of rows."""
    X32 = (S7_X + 3e6).astype(np.float32)
    model = _s7_models()[name]().fit(X32, S7_Y)
    assert model._linear_predictor() is not None  # the folded path is the one under test
    np.testing.assert_array_equal(model.predict(X32), model.labels_)
    np.testing.assert_array_equal(model.predict(X32.astype(np.float64)), model.labels_)


def test_predict_on_float64_rows_at_an_offset_float64_barely_resolves_gives_labels_():
    from sktransfer_cluster import SinkhornKMeans

    X = make_blobs(n_samples=2000, centers=3, n_features=5, cluster_std=4.0, random_state=0)[0]
    X = X + 1e14  # float64 steps by 0.016 here, the spread is ~6: 0.1 % of the rows moved
    model = SinkhornKMeans(3, n_init=3, random_state=0).fit(X)
    np.testing.assert_array_equal(model.predict(X), model.labels_)


def test_predict_of_a_model_pickled_without_the_spread_centres_its_rows():
    import pickle

    from sktransfer_cluster import SinkhornKMeans

    X32 = (S7_X + 3e6).astype(np.float32)
    model = SinkhornKMeans(3, n_init=3, random_state=0).fit(X32)
    del model._input_spread  # as in a model fitted before the spread was kept
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(model)).predict(X32), model.labels_)


# ------------------------------------------------------------------ R3: TDCM's neighbour search
R3_X, R3_Y = make_blobs(n_samples=60, centers=3, n_features=3, cluster_std=0.4, center_box=(-8, 8), random_state=3)


@pytest.mark.parametrize("scale", [1e-170, 1e160])
def test_tdcm_finds_the_blobs_at_extreme_scales(scale):
    """R3: the neighbour smoothing searched raw X, whose squared distances under/overflow: ARI 0."""
    from sktransfer_cluster import TDCMCluster

    model = TDCMCluster(3, max_epochs=20, random_state=0).fit(R3_X * scale)
    assert model.smoothing_steps > 0  # the default smooths: the path under test
    assert adjusted_rand_score(R3_Y, model.labels_) == 1.0
    assert adjusted_rand_score(R3_Y, model.predict(R3_X * scale)) == 1.0
    assert adjusted_rand_score(R3_Y, model.transfer(R3_X * scale)) == 1.0


def test_tdcm_smoothing_of_ordinary_data_is_unchanged():
    """The search space is rescaled by a power of two: exact, so the same neighbours, the same rows."""
    from sktransfer_cluster import TDCMCluster

    X = make_blobs(n_samples=300, centers=4, n_features=6, random_state=1)[0] * 7.0 + 3.0
    est = TDCMCluster(4, smoothing_steps=2, n_neighbors=5)
    np.testing.assert_array_equal(est._smoothed(X, None), tdcm_model.smooth_rows(X, X, 5, 2))
