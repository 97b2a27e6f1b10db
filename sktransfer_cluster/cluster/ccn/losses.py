"""CCN's pairwise losses: KCL (a hinge on the KL divergence between the outputs of
two points) and MCL (the meta classification likelihood)."""

from __future__ import annotations

import torch

__all__ = ["pairwise_kl_detached", "kcl_loss", "mcl_loss"]


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
