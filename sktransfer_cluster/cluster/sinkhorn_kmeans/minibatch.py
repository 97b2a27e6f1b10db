"""Minibatch OT k-means: OT-Lloyd's step on one batch of rows at a time.

The streamed form of :mod:`~sktransfer_cluster.ot.lloyd` behind ``SinkhornKMeans.partial_fit`` and the fit of
inputs too large to copy. Each step assigns a batch ``B`` to the centres by entropic OT
under the cluster-size prior ``w`` at the fixed regularisation ``reg`` (with the
column potentials carried from batch to batch and updated by Sinkhorn's rule, see
:func:`minibatch_step`), which gives cluster ``k`` the mass ``m_k`` (near ``|B| w_k``)
and the plan-weighted batch mean ``z_k``; the centre then moves to the running mean of
everything it received::

    n_k <- n_k + m_k,        c_k <- c_k + (m_k / n_k) (z_k - c_k).

This is :class:`~sklearn.cluster.MiniBatchKMeans`' per-centre rate ``1 / n_k`` with the
soft, size-constrained assignment in place of the nearest centre. Batches are drawn by
index (as MiniBatchKMeans does), so a pass reads ``n`` rows in pieces of ``batch_size``
and nothing holds more than one batch.
"""

from __future__ import annotations

import numpy as np
import torch

from ...base.runtime import on_compute_threads
from ...ot.lloyd import costs_into

__all__ = ["BLOCK_ROWS", "MinibatchState", "batch_indices", "minibatch_passes", "minibatch_step"]

# Largest change of a column potential (in units of reg) one batch may make: a cluster
# whose mass underflowed in a batch comes back over a few batches, not in one jump.
_MAX_STEP = 30.0


class MinibatchState:
    """What minibatch OT k-means carries from one batch to the next.

    Attributes
    ----------
    centers : torch.Tensor of shape (K, d)
    counts : torch.Tensor of shape (K,)
        Rows' worth of plan mass each centre has received (float64).
    reg : float
        Absolute entropic regularisation, fixed for the run.
    g : torch.Tensor of shape (K,) or None
        Column potentials (costs divided by ``reg``, the row constant dropped, as
        :func:`~sktransfer_cluster.ot.lloyd.ot_lloyd_best`'s);
        None starts from zeros.
    n_steps : int
        Batches seen.
    """

    def __init__(self, centers, reg, counts=None):
        self.centers = centers
        self.reg = float(reg)
        self.counts = torch.zeros(centers.shape[0], dtype=torch.float64, device=centers.device) if counts is None else counts
        self.g = None
        self.n_steps = 0


@on_compute_threads
def minibatch_step(state, Z, log_w):
    """One minibatch OT k-means step on the rows ``Z`` (b, d), in place on ``state``.

    One pass over the batch's (b, K) costs. The plan of the carried column potentials
    ``g`` (rows exact; columns near the prior once ``g`` has settled) moves the
    centres; then Sinkhorn's column update on this batch, ``g_k += log w_k - log c_k``
    with ``c`` the batch's column masses, moves ``g`` (stochastic Sinkhorn on the
    semi-dual of the whole data: Genevay, Cuturi, Peyré & Bach, *Stochastic
    optimization for large-scale optimal transport*, NeurIPS 2016). So the potentials
    are the data's, not one batch's: a batch that happens to hold more rows of one
    cluster than the prior says keeps them there instead of pushing its extra rows to
    other centres, as a per-batch balanced solve would. (A per-batch Newton step on the
    semi-dual swung whole clusters: between separated clusters the semi-dual is nearly
    flat, and one batch's curvature estimate is about zero.)

    Returns the squared shift of the centres.
    """
    b, K = Z.shape[0], state.centers.shape[0]
    log_w = log_w.to(Z.dtype)
    g = torch.zeros(K, dtype=Z.dtype, device=Z.device) if state.g is None else state.g.to(Z.dtype)
    # Rows of P / a: softmax_k(log w_k + g_k - M_ik), built in place in the cost buffer.
    Q = costs_into(torch.empty(b, K, dtype=Z.dtype, device=Z.device), Z, state.centers, state.reg)
    Q.neg_().add_(g + log_w)
    Q.sub_(Q.amax(-1, keepdim=True)).exp_()
    Q.div_(Q.sum(-1, keepdim=True))
    col = Q.sum(0)  # rows' worth of mass per cluster
    moment = Q.transpose(0, 1) @ Z
    mass = col.to(torch.float64)
    state.counts += mass
    tiny = torch.finfo(Z.dtype).tiny
    has = col > tiny  # a cluster the plan left without mass keeps its centre
    rate = (mass / state.counts.clamp_min(torch.finfo(torch.float64).tiny)).to(Z.dtype)
    delta = moment / col.clamp_min(tiny).unsqueeze(-1) - state.centers
    delta = torch.where(has.unsqueeze(-1), delta, torch.zeros_like(delta))
    new = state.centers + rate.unsqueeze(-1) * delta
    shift = float(((new - state.centers) ** 2).sum())
    state.centers = new
    state.g = g + (log_w - (col / b).clamp_min(tiny).log()).clamp(-_MAX_STEP, _MAX_STEP)
    state.n_steps += 1
    return shift


#: Rows drawn together: a batch is made of random blocks of this many consecutive rows.
#: Random single rows of a memmap each cost a page fault (8,192 rows of 16 float32
#: features touch 8,192 pages); blocks of 32 touch one or two pages each.
BLOCK_ROWS = 32


def batch_indices(n, batch_size, rng):
    """Sorted row indices of one batch: ``batch_size // BLOCK_ROWS`` random blocks of rows.

    The blocks are the ``ceil(n / BLOCK_ROWS)`` consecutive runs of :data:`BLOCK_ROWS`
    rows, drawn uniformly (with replacement across batches, a block drawn twice in one
    batch counted once), so the draw takes O(batch_size) memory whatever ``n``
    (MiniBatchKMeans draws single rows the same way). All rows, in order, when
    ``n <= batch_size``.
    """
    if n <= batch_size:
        return np.arange(n)
    blocks = np.unique(rng.integers(0, -(-n // BLOCK_ROWS), size=max(1, batch_size // BLOCK_ROWS)))
    index = (blocks[:, None] * BLOCK_ROWS + np.arange(BLOCK_ROWS)).ravel()
    return index[index < n]


def minibatch_passes(state, read, n, log_w, *, batch_size, max_passes, tol, rng, callback=None):
    """Run minibatch OT k-means over ``n`` rows for at most ``max_passes`` passes.

    Parameters
    ----------
    state : MinibatchState
        Updated in place.
    read : callable
        ``read(indices)`` returns the (normalised) rows at the sorted ``indices`` as a tensor.
    n : int
        Rows in the data.
    log_w : torch.Tensor of shape (K,)
        Log cluster-size prior.
    batch_size : int
    max_passes : int
        A pass is ``ceil(n / batch_size)`` batches.
    tol : float
        Stop after a pass whose centres moved by a squared distance of at most ``tol`` in all.
    rng : numpy.random.Generator
    callback : callable, default=None
        Called with ``(pass_index, shift)`` after each pass.

    Returns
    -------
    int
        Passes run.
    """
    steps = -(-n // batch_size)
    passes = 0
    for passes in range(1, max_passes + 1):
        start = state.centers.clone()
        for _ in range(steps):
            minibatch_step(state, read(batch_indices(n, batch_size, rng)), log_w)
        shift = float(((state.centers - start) ** 2).sum())
        if callback is not None:
            callback(passes, shift)
        if shift <= tol:
            break
    return passes
