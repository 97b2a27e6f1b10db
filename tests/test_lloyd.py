"""OT-Lloyd kernels: the semi-dual solves agree with the Sinkhorn formulation they replace."""

import math

import numpy as np
import pytest
import torch
from sklearn.cluster import kmeans_plusplus
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from sktransfer_cluster import SinkhornKMeans
from sktransfer_cluster.cluster.sinkhorn_kmeans import lloyd
from sktransfer_cluster.cluster.sinkhorn_kmeans.objective import regularized_ot_cost, squared_distances
from sktransfer_cluster.ot import plan_from_potentials, semi_dual_newton, sinkhorn_potentials


def _setup(n=400, k=4, n_init=3, seed=0, d=3):
    X, y = make_blobs(n_samples=n, centers=k, n_features=d, random_state=seed)
    Xt = torch.as_tensor(X)
    inits = np.stack([kmeans_plusplus(X, k, random_state=s)[0] for s in range(n_init)])
    log_w = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1][:k], dtype=torch.float64))
    return Xt, y, torch.as_tensor(inits), log_w - torch.logsumexp(log_w, 0)


def _reference_lloyd(X, centers, reg_rel, log_w, max_iter, tol):
    """OT-Lloyd as it was written with Sinkhorn on the full cost, solved tightly."""
    C = squared_distances(X, centers)
    reg = lloyd.relative_reg(C, reg_rel)
    for _ in range(max_iter):
        res = sinkhorn_potentials(C / reg, 1.0, None, log_w, tol=1e-12, max_iter=100000)
        P = plan_from_potentials(C / reg, res.f, res.g, 1.0, None, log_w)
        new = (P.transpose(0, 1) @ X) / P.sum(0).unsqueeze(-1)
        shift = float(((new - centers) ** 2).sum())
        centers = new
        C = squared_distances(X, centers)
        if shift <= tol:
            break
    return centers, reg


def test_ot_lloyd_matches_the_sinkhorn_formulation():
    X, _, inits, log_w = _setup()
    centers, reg, n_iter, (f, g) = lloyd.ot_lloyd(X, inits, 0.05, log_w, 50, 1e-8)
    assert centers.shape == inits.shape and reg.shape == (3,) and f.shape == (3, 400) and g.shape == (3, 4)
    for b in range(3):
        ref, ref_reg = _reference_lloyd(X, inits[b], 0.05, log_w, 50, 1e-8)
        torch.testing.assert_close(reg[b], ref_reg)
        # Within what the per-step solve's tolerance (SINKHORN_TOL, an L1 marginal error) allows.
        torch.testing.assert_close(centers[b], ref, atol=1e-4, rtol=0)
        # The returned potentials are those of the full cost: rows of the plan are exact.
        C = squared_distances(X, centers[b]) / reg[b]
        P = plan_from_potentials(C, f[b], g[b], 1.0, None, log_w)
        assert float((P.sum(0) - log_w.exp()).abs().sum()) < 1e-3


def test_ot_lloyd_best_keeps_the_cheapest_run_with_its_cost():
    X, _, inits, log_w = _setup(n_init=4, seed=3)
    cost, centers, reg, n_iter, check = lloyd.ot_lloyd_best(X, inits, 0.05, log_w, 50, 1e-6)
    all_centers, regs, _, _ = lloyd.ot_lloyd(X, inits, 0.05, log_w, 50, 1e-6)
    costs = []
    log_a = torch.full((X.shape[0],), -math.log(X.shape[0]), dtype=X.dtype)
    for b in range(4):  # each run's regularised cost at its final centres, tightly solved
        C = squared_distances(X, all_centers[b]) / regs[b]
        res = semi_dual_newton(C, log_w, tol=1e-12)
        P = plan_from_potentials(C, res.f, res.g, 1.0, None, log_w)
        costs.append(float(regularized_ot_cost(C, P, 1.0, log_a, log_w) * regs[b]))
    best = int(np.argmin(costs))
    torch.testing.assert_close(centers, all_centers[best])
    assert reg == pytest.approx(float(regs[best]))
    assert cost == pytest.approx(costs[best], rel=1e-4)
    assert check.converged and check.err < 1e-3


def test_ot_lloyd_with_tol_zero_stops_when_the_hard_labels_stop_changing(monkeypatch):
    """Issue 19.11: soft assignments never stop moving exactly, the hard labels do."""
    X, _ = make_blobs(n_samples=300, centers=[[0, 0], [8, 0], [0, 8]], random_state=0)
    exact = SinkhornKMeans(3, tol=0.0, max_iter=100, random_state=0, device="cpu").fit(X)
    loose = SinkhornKMeans(3, tol=1e-4, max_iter=100, random_state=0, device="cpu").fit(X)
    assert exact.n_iter_ < 100
    assert adjusted_rand_score(exact.labels_, loose.labels_) == 1.0  # the same partition
    # The rule itself: without it this run goes to max_iter, with it it stops early.
    Xt, _, inits, log_w = _setup(n_init=1)
    _, _, n_iter, _ = lloyd.ot_lloyd(Xt, inits, 0.05, log_w, 100, 0.0)
    assert lloyd.LABEL_PATIENCE < n_iter < 100
    monkeypatch.setattr(lloyd, "LABEL_PATIENCE", 10**6)
    assert lloyd.ot_lloyd(Xt, inits, 0.05, log_w, 100, 0.0)[2] == 100


def test_a_cluster_the_plan_leaves_empty_keeps_a_finite_centre():
    X, _ = make_blobs(n_samples=60, centers=3, cluster_std=0.6, random_state=3)
    Xt = torch.as_tensor(X)
    init = torch.as_tensor(kmeans_plusplus(X, 3, random_state=0)[0]).unsqueeze(0)
    log_w = torch.log(torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64))
    centers, _, _, (f, g) = lloyd.ot_lloyd(Xt, init, 1e-10, log_w, 20, 1e-4)
    assert torch.isfinite(centers).all() and torch.isfinite(f).all() and torch.isfinite(g).all()


@pytest.mark.parametrize("scale", [1e-14, 1e-12, 1e-10, 1e10, 1e14])
def test_ot_lloyd_is_scale_free(scale):
    """Issue 30 S1: the initial reg floored the mean cost at an absolute eps, so data at
    1e-10 and smaller got a near-uniform plan. At any scale the run must be the unit-scale
    run scaled: centres times ``scale``, reg times ``scale**2``, the same iterations."""
    X, _, inits, log_w = _setup(n_init=2)
    X = X - X.mean(0)  # as SinkhornKMeans sees it (centred)
    inits = inits - X.mean(0)
    ref_centers, ref_reg, ref_iter, _ = lloyd.ot_lloyd(X, inits, 0.01, log_w, 50, 1e-8)
    centers, reg, n_iter, _ = lloyd.ot_lloyd(X * scale, inits * scale, 0.01, log_w, 50, 1e-8 * scale**2)
    torch.testing.assert_close(reg, ref_reg * scale**2, rtol=1e-9, atol=0)
    torch.testing.assert_close(centers, ref_centers * scale, rtol=1e-6, atol=0)
    assert n_iter == ref_iter


def test_relative_reg_has_no_absolute_floor_above_the_costs():
    C = torch.full((5, 3), 1e-24, dtype=torch.float64)
    assert float(lloyd.relative_reg(C, 0.01)) == pytest.approx(1e-26, rel=1e-12, abs=0)
    assert float(lloyd.relative_reg(torch.zeros(5, 3, dtype=torch.float64), 0.01)) > 0  # still positive
