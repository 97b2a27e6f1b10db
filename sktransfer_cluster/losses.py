"""Differentiable losses shared by the estimators."""

from __future__ import annotations

import dataclasses

import torch

from .ot import exact_dtype, plan_from_potentials, semi_dual_newton

__all__ = [
    "squared_distances",
    "nearest_centre",
    "ot_clustering_loss",
    "regularized_ot_cost",
    "negative_size_entropy",
    "orthogonality_penalty",
    "pairwise_kl_detached",
    "kcl_loss",
    "mcl_loss",
    "gradient_penalty",
]


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
    result : SinkhornResult
        The solve, with potentials ``f`` and ``g`` in cost units (for warm starts).

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
    with torch.no_grad():
        # A minibatch's (n, k) problem is small: solved in float64 whatever the network's
        # dtype, so that tol is reachable and the plan is exact to it.
        M = C.detach().to(exact_dtype(C.device)) / reg
        g = None if init is None else init / reg
        res = semi_dual_newton(M, log_w, g, max_iter=max_iter, tol=tol)
        P = plan_from_potentials(M, res.f, res.g, 1.0, None, log_w).to(C.dtype)
    return (P * C).sum(), dataclasses.replace(res, f=res.f * reg, g=res.g * reg)


# --------------------------------------------------------------------------- KCL / LCO
# Hsu, Lv & Kira, *Learning to cluster in order to transfer across domains and tasks*.


def pairwise_kl_detached(log_p):
    """``D[i, j] = KL(P_i* || P_j)`` for every ordered pair of rows, ``*`` = detached.

    Computed as ``sum_c p_ic log p_ic - p_i @ log p_j`` (one matrix product, no
    ``n^2 x K`` tensor). The gradient flows only through the second argument
    ``P_j``, so summing ``D`` over all ordered pairs gives, for each unordered
    pair, both halves ``KL(P*||Q) + KL(Q*||P)`` of the paper's symmetric cost.

    Parameters
    ----------
    log_p : torch.Tensor of shape (n, K)
        Log-probabilities (e.g. ``log_softmax`` outputs).

    Returns
    -------
    torch.Tensor of shape (n, n)
    """
    # Clamp -inf (p = 0) so that 0 * log 0 terms are 0 and never NaN.
    log_p = torch.maximum(log_p, torch.log(log_p.new_tensor(torch.finfo(log_p.dtype).tiny)))
    log_t = log_p.detach()
    t = log_t.exp()
    neg_entropy = (t * log_t).sum(1, keepdim=True)
    return neg_entropy - t @ log_p.transpose(0, 1)


def _reduce_pairs(cost, mask, reduction):
    """Reduce an (n, n) matrix of per-pair costs over the pairs ``mask`` keeps (all when None).

    "mean" divides by the number of kept pairs (0 when there are none), "sum"
    adds them, "none" returns the matrix with the other pairs zeroed.
    """
    if mask is not None:
        cost = cost * mask.to(cost.dtype)
    if reduction == "none":
        return cost
    if reduction == "sum":
        return cost.sum()
    if reduction == "mean":
        count = cost.new_tensor(float(cost.numel())) if mask is None else mask.sum().to(cost.dtype)
        return cost.sum() / count.clamp_min(1.0)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}.")


def kcl_loss(log_p, similarity, *, mask=None, margin=2.0, reduction="mean"):
    """KL-divergence contrastive loss (KCL, the paper's LCO) over all ordered pairs.

    For the ordered pair ``(i, j)`` with ``d_ij = KL(P_i* || P_j)`` (``*`` held
    constant) the cost is ``d_ij`` if the pair is similar and
    ``max(0, margin - d_ij)`` if dissimilar. Summed over ``(i, j)`` and ``(j, i)``
    this is exactly the paper's similar cost ``KL(P*||Q) + KL(Q*||P)`` and
    dissimilar cost ``max(0, s - KL(P*||Q)) + max(0, s - KL(Q*||P))``.

    Parameters
    ----------
    log_p : torch.Tensor of shape (n, K)
        Log-probabilities of the cluster assignments of a minibatch.
    similarity : torch.Tensor of shape (n, n)
        1 (or True) for similar pairs, 0 for dissimilar ones (e.g. ``G``'s
        predictions binarised at 0.5).
    mask : torch.Tensor of shape (n, n), default=None
        True where the similarity of the pair is known; pairs of unknown
        similarity contribute nothing (they are *not* treated as dissimilar).
        None means every pair is known.
    margin : float, default=2.0
        The hinge margin ``sigma``.
    reduction : {"mean", "sum", "none"}, default="mean"
        Mean over the known ordered pairs (0 when there are none), their sum,
        or the (n, n) matrix of per-pair costs (zeros where masked).

    Returns
    -------
    torch.Tensor
        Scalar, or (n, n) with ``reduction="none"``.
    """
    d = pairwise_kl_detached(log_p)
    s = similarity.to(d.dtype)
    cost = s * d + (1.0 - s) * (margin - d).clamp_min(0.0)
    return _reduce_pairs(cost, mask, reduction)


def mcl_loss(log_p, similarity, *, mask=None, reduction="mean", eps=1e-7):
    """Meta classification likelihood (MCL) over all ordered pairs of a minibatch.

    Hsu, Lv, Schlosser, Odom & Kira, *Multi-class classification without
    multi-class labels* (ICLR 2019), the successor of KCL: the probability
    that samples ``i`` and ``j`` fall in the same cluster is
    ``s_ij = p_i . p_j`` (the dot product of their cluster distributions) and
    the cost of the pair is the binary cross-entropy
    ``-(y_ij log s_ij + (1 - y_ij) log(1 - s_ij))`` against the pair label
    ``y_ij``. All ``n x n`` values come from one matrix product; gradients
    flow through both samples of a pair. ``s_ij`` is clamped to
    ``[eps, 1 - eps]``.

    Parameters
    ----------
    log_p : torch.Tensor of shape (n, K)
        Log-probabilities of the cluster assignments of a minibatch.
    similarity : torch.Tensor of shape (n, n)
        Pair labels: 1 (or True) similar, 0 dissimilar, or soft targets in
        ``[0, 1]`` (e.g. ``G``'s probability of "similar").
    mask : torch.Tensor of shape (n, n), default=None
        True where the pair counts; other pairs contribute nothing. None means
        every pair counts.
    reduction : {"mean", "sum", "none"}, default="mean"
        Mean over the counted ordered pairs (0 when there are none), their
        sum, or the (n, n) matrix of per-pair costs (zeros where masked).
    eps : float, default=1e-7

    Returns
    -------
    torch.Tensor
        Scalar, or (n, n) with ``reduction="none"``.
    """
    p = log_p.exp()
    s = (p @ p.transpose(0, 1)).clamp(eps, 1.0 - eps)
    y = similarity.to(s.dtype)
    cost = -(y * torch.log(s) + (1.0 - y) * torch.log1p(-s))
    return _reduce_pairs(cost, mask, reduction)


def negative_size_entropy(delta):
    """``sum_j pi_j log pi_j`` with ``pi_j = mean_i delta_ij`` (cluster sizes).

    This is minus the entropy of the cluster sizes: it is smallest (``-log K``)
    for balanced clusters and largest (0) when every sample is in one cluster,
    so *adding* it to a loss that is minimised pushes towards balanced clusters.

    Parameters
    ----------
    delta : torch.Tensor of shape (n, K)
        Soft assignments (rows sum to one).

    Returns
    -------
    torch.Tensor (scalar)
    """
    pi = delta.mean(0)
    return (pi * torch.log(pi.clamp_min(torch.finfo(pi.dtype).tiny))).sum()


def orthogonality_penalty(W):
    """``||W W^T - I||_F^2``: the soft form of the constraint ``W W^T = I``."""
    eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    return ((W @ W.T - eye) ** 2).sum()


# --------------------------------------------------------------------------- WGAN-GP
# Gulrajani et al.; used by the precise-feature GAN (Gan et al., Eq. 5).


def gradient_penalty(critic, real, fake, *, weight=1.0, generator=None, eps=None):
    """WGAN-GP penalty ``weight * mean_i (||grad D(x_hat_i)||_2 - 1)^2``.

    ``x_hat_i = eps_i real_i + (1 - eps_i) fake_i`` with ``eps_i ~ U[0, 1]``, one
    per row, drawn from ``generator`` (a CPU :class:`torch.Generator`; global RNG
    untouched). The gradient is taken with ``create_graph=True`` so the penalty
    can be back-propagated into the critic's parameters. The norm is over all
    non-batch dimensions.

    Parameters
    ----------
    critic : callable
        Maps a batch shaped like ``real`` to one value per row.
    real, fake : torch.Tensor of shape (n, ...)
        Real and generated samples (``fake`` is treated as a constant).
    weight : float, default=1.0
        The coefficient ``lambda`` (the paper uses 100).
    generator : torch.Generator, default=None
        Source of ``eps``.
    eps : torch.Tensor of shape (n,), default=None
        Interpolation weights to use instead of drawing them.

    Returns
    -------
    torch.Tensor (scalar)
    """
    n = real.shape[0]
    if eps is None:
        eps = torch.rand(n, generator=generator, dtype=real.dtype, device="cpu").to(real.device)
    eps = eps.to(dtype=real.dtype, device=real.device).reshape(n, *([1] * (real.dim() - 1)))
    x_hat = (eps * real.detach() + (1.0 - eps) * fake.detach()).requires_grad_(True)
    out = critic(x_hat)
    (grad,) = torch.autograd.grad(out.sum(), x_hat, create_graph=True)
    norm = grad.reshape(n, -1).norm(2, dim=1)
    return weight * ((norm - 1.0) ** 2).mean()
