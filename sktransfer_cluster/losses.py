"""Differentiable losses shared by the estimators."""

from __future__ import annotations

import torch

from .ot import plan_from_potentials, sinkhorn_potentials

__all__ = ["squared_distances", "ot_clustering_loss", "regularized_ot_cost"]


def squared_distances(X, C):
    """``||x_i - c_k||^2`` for all pairs, clamped at 0; shapes (..., n, d), (..., k, d)."""
    d = (X * X).sum(-1, keepdim=True) - 2.0 * X @ C.transpose(-1, -2) + (C * C).sum(-1).unsqueeze(-2)
    return d.clamp_min_(0.0)


def regularized_ot_cost(M, P, reg, log_a, log_b):
    """``<P, M> + reg * KL(P | a b^T)`` (the entropic OT objective), over the last two dims."""
    log_ab = log_a.unsqueeze(-1) + log_b.unsqueeze(-2)
    logP = torch.log(P.clamp_min(torch.finfo(P.dtype).tiny))
    kl = (P * (logP - log_ab)).sum((-1, -2)) - P.sum((-1, -2)) + 1.0
    return (P * M).sum((-1, -2)) + reg * kl


def ot_clustering_loss(Z, centers, reg, log_w, *, init=None, max_iter=1000, tol=1e-6):
    """Entropic-OT k-means loss of Genevay et al., differentiable in ``Z`` and ``centers``.

    ``loss = min_P <P, C> + reg KL(P | a w^T)`` with ``C_ik = ||z_i - mu_k||^2``,
    ``a`` uniform over the batch and ``w`` the cluster proportions. By the envelope
    theorem its gradient with respect to ``C`` is the optimal plan, so the plan is
    computed without autograd and the loss is ``<P, C>`` plus a constant.

    Parameters
    ----------
    Z : torch.Tensor of shape (n, d)
    centers : torch.Tensor of shape (k, d)
    reg : float
        Absolute entropic regularisation.
    log_w : torch.Tensor of shape (k,)
        Log cluster proportions.
    init : tuple, default=None
        Warm-start potentials.

    Returns
    -------
    loss : torch.Tensor (scalar)
    result : SinkhornResult
        The potentials, for warm starts.
    """
    C = squared_distances(Z, centers)
    with torch.no_grad():
        res = sinkhorn_potentials(C.detach(), reg, None, log_w, init=init, max_iter=max_iter, tol=tol)
        P = plan_from_potentials(C.detach(), res.f, res.g, reg, None, log_w)
    return (P * C).sum(), res
