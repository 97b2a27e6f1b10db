"""OT-Lloyd: k-means whose assignment step is an entropic optimal transport plan.

The kernels behind :class:`~sktransfer_cluster.SinkhornKMeans` (Genevay,
Dulac-Arnold & Vert, *Differentiable Deep Clustering with Cluster Size
Constraints*): assign with Sinkhorn under the cluster-size prior, move each
centre to its plan-weighted mean. Plain functions on tensors.
"""

from __future__ import annotations

import torch

from .losses import squared_distances
from .ot import plan_from_potentials, sinkhorn_potentials

__all__ = ["relative_reg", "ot_lloyd", "SINKHORN_TOL", "SINKHORN_MAX_ITER"]

# Inside OT-Lloyd the potentials are warm-started across iterations, so a loose
# per-iteration solve suffices.
SINKHORN_TOL = 1e-5
SINKHORN_MAX_ITER = 300


def relative_reg(C, epsilon):
    """``epsilon`` times the mean cost over the last two dims, kept strictly positive."""
    return epsilon * C.mean((-1, -2)).clamp_min(torch.finfo(C.dtype).eps)


def ot_lloyd(X, centers, reg_rel, log_w, max_iter, tol):
    """Batched OT-Lloyd from initial ``centers`` of shape (B, K, d).

    Returns ``(centers, reg, n_iter, potentials)``; ``reg`` (shape (B,)) is
    ``reg_rel`` times the mean cost at the initial centres, fixed for the run.
    """
    C = squared_distances(X, centers)  # (B, n, K)
    reg = relative_reg(C, reg_rel)
    regv = reg.view(-1, 1, 1)
    # One Sinkhorn call for the whole batch: scale each problem's cost by its reg.
    init = None
    for it in range(1, max_iter + 1):
        res = sinkhorn_potentials(
            C / regv, 1.0, None, log_w, init=init, max_iter=SINKHORN_MAX_ITER, tol=SINKHORN_TOL
        )
        init = (res.f, res.g)
        P = plan_from_potentials(C / regv, res.f, res.g, 1.0, None, log_w)  # (B, n, K)
        mass = P.sum(-2).unsqueeze(-1)
        new = (P.transpose(-1, -2) @ X) / mass
        shift = ((new - centers) ** 2).sum((-1, -2))
        centers = new
        C = squared_distances(X, centers)
        if shift.max().item() <= tol:
            break
    return centers, reg, it, init
