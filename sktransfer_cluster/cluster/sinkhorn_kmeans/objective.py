"""SinkhornKMeans' objective: squared distances to the centres and the entropic-OT
clustering loss of Genevay, Dulac-Arnold & Vert, differentiable in the codes and centres."""

from __future__ import annotations

import dataclasses

import torch

from ...base import exact_dtype
from ...ot import plan_from_potentials, semi_dual_newton

__all__ = ["squared_distances", "nearest_centre", "regularized_ot_cost", "ot_clustering_loss"]


def squared_distances(X, C):
    """``||x_i - c_k||^2`` for all pairs, clamped at 0; shapes (..., n, d), (..., k, d)."""
    # One (n, k) buffer updated in place (the product's backward needs only X and C).
    d = X @ C.transpose(-1, -2)
    d.mul_(-2.0).add_((C * C).sum(-1).unsqueeze(-2)).add_((X * X).sum(-1, keepdim=True))
    return d.clamp_min_(0.0)

def nearest_centre(X, C):
    """Index of the nearest row of ``C`` for each row of ``X``.

    ``argmin_k ||c_k||^2 - 2 x . c_k``: the ``||x||^2`` term and the clamp of
    :func:`squared_distances` do not change the argmin, so they are skipped.
    """
    if X.ndim == 2 and C.ndim == 2:  # one buffer: ||c||^2 - 2 X C^T in a single addmm
        return torch.addmm((C * C).sum(-1), X, C.transpose(0, 1), alpha=-2.0).argmin(-1)
    return ((C * C).sum(-1) - 2.0 * X @ C.transpose(-1, -2)).argmin(-1)

def regularized_ot_cost(M, P, reg, log_a, log_b):
    """``<P, M> + reg * KL(P | a b^T)`` (the entropic OT objective), over the last two dims."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (M, P, log_a, log_b)):
        log_ab = log_a.unsqueeze(-1) + log_b.unsqueeze(-2)
        logP = torch.log(P.clamp_min(torch.finfo(P.dtype).tiny))
        kl = (P * (logP - log_ab)).sum((-1, -2)) - P.sum((-1, -2)) + 1.0
        return (P * M).sum((-1, -2)) + reg * kl
    # Without autograd, one (n, m) buffer: M + reg * (log P - log a - log b), times P.
    t = P.clamp_min(torch.finfo(P.dtype).tiny).log_().sub_(log_a.unsqueeze(-1)).sub_(log_b.unsqueeze(-2))
    r = reg[..., None, None] if torch.is_tensor(reg) and reg.ndim > 0 else reg
    t.mul_(r).add_(M).mul_(P)
    return t.sum((-1, -2)) + reg * (1.0 - P.sum((-1, -2)))

def ot_clustering_loss(Z, centers, reg, log_w, *, init=None, max_iter=100, tol=1e-6):
    """Entropic-OT k-means loss of Genevay et al., differentiable in ``Z`` and ``centers``.

    ``loss = min_P <P, C> + reg KL(P | a w^T)`` with ``C_ik = ||z_i - mu_k||^2``,
    ``a`` uniform over the batch and ``w`` the cluster proportions. By the envelope
    theorem its gradient with respect to ``C`` is the optimal plan, so the plan is
    computed without autograd and the loss is ``<P, C>`` plus a constant. The plan
    comes from damped Newton on the semi-dual (:func:`~sktransfer_cluster.ot.semi_dual_newton`):
    a few passes over the ``(n, k)`` costs (one from the converged column
    potentials of the same problem, ``init``).

    Parameters
    ----------
    Z : torch.Tensor of shape (n, d)
    centers : torch.Tensor of shape (k, d)
    reg : float or torch.Tensor (scalar)
        Absolute entropic regularisation.
    log_w : torch.Tensor of shape (k,)
        Log cluster proportions.
    init : torch.Tensor of shape (k,), default=None
        Warm-start column potentials, in cost units (``result.g`` of an earlier call).
    max_iter : int, default=100
        Maximum passes of the solver.
    tol : float, default=1e-6
        Threshold on the plan's column-marginal L1 error.

    Returns
    -------
    loss : torch.Tensor (scalar)
    result : SinkhornResult or None
        The solve, with potentials ``f`` and ``g`` in cost units (for warm starts); None, with
        a NaN loss, where the costs are not finite (codes of a diverged network).

    Examples
    --------
    >>> import torch
    >>> Z = torch.tensor([[0.0], [0.1], [5.0], [5.1]])
    >>> mu = torch.tensor([[0.0], [5.0]], requires_grad=True)
    >>> loss, res = ot_clustering_loss(Z, mu, 0.01, torch.log(torch.tensor([0.5, 0.5])))
    >>> round(loss.item(), 4), bool(res.converged)
    (0.005, True)
    """
    C = squared_distances(Z, centers)
    if not bool(torch.isfinite(C.detach()).all()):
        # Codes gone NaN or infinite: the network diverged, and there is no plan to solve for. A
        # NaN loss lets the training loop's own check say what to do (lower learning_rate), where
        # the solver would blame the rows' scale.
        return C.sum() * float("nan"), None
    with torch.no_grad():
        # A minibatch's (n, k) problem is small: solved in float64 whatever the network's
        # dtype, so that tol is reachable and the plan is exact to it.
        M = C.detach().to(exact_dtype(C.device)) / reg
        g = None if init is None else init / reg
        res = semi_dual_newton(M, log_w, g, max_iter=max_iter, tol=tol)
        P = plan_from_potentials(M, res.f, res.g, 1.0, None, log_w).to(C.dtype)
    return (P * C).sum(), dataclasses.replace(res, f=res.f * reg, g=res.g * reg)
