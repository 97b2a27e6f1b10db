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
