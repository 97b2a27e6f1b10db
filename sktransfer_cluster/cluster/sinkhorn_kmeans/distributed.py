"""OT-Lloyd on a Dask array: every pass over the rows runs on the workers, chunk by chunk.

The form of :mod:`~sktransfer_cluster.ot.lloyd` behind ``SinkhornKMeans.fit`` on a ``dask.array`` (the design
of ``dask_ml.cluster.KMeans``). Each pass of the semi-dual Newton solver is one task per
chunk that returns the chunk's sums -- ``sum_i f_i``, the column masses, the K x K
Hessian and the plan-weighted feature sums, a few kilobytes -- and the client adds them
and takes the Newton step (:func:`~sktransfer_cluster.ot.semi_dual.newton_iterations`,
the in-memory solver's loop). So the rows never leave the workers, each task holds one
chunk, and the result is the in-memory OT-Lloyd's to the rounding of the sums' order.
The start (k-means++ and OT-Lloyd on rows drawn by index) is as the minibatch fit's; the
normalisation statistics are :meth:`~sktransfer_cluster.base.streaming.DaskRows.affine`
(one task per chunk per pass, as every estimator's fit on a dask array).
"""

from __future__ import annotations

import numpy as np
import torch

from ...base.runtime import compute_threads
from ...base.streaming import is_dask_array
from ...ot.semi_dual import newton_iterations, row_chunks, semi_dual_pass
from ...ot.lloyd import SINKHORN_MAX_ITER, SINKHORN_TOL, costs_into
from .objective import squared_distances

__all__ = ["block_sums", "dask_labels", "dask_ot_lloyd", "is_dask_array", "row_blocks"]


def _normalised(block, shift, scale, dtype):
    rows = np.asarray(block, dtype=np.float64) - shift
    if scale != 1.0:
        rows /= scale
    return torch.as_tensor(rows, dtype=dtype)


def block_sums(block, centers, h, reg, shift, scale, dtype):
    """One chunk's share of a semi-dual pass at column potentials ``h`` (``log w`` included).

    Returns ``(rows, sum_i f_i, c, H, moment)`` as float64 numpy sums over the chunk's
    rows: ``c = sum_i Q_i``, ``H = sum_i Q_i^T Q_i`` and ``moment = sum_i Q_i^T z_i`` with
    ``Q_i`` the row ``i`` of ``P / a`` (as :func:`~sktransfer_cluster.ot.semi_dual.semi_dual_pass`).
    Runs on a worker, on one thread.
    """
    with torch.no_grad(), compute_threads():
        Z = _normalised(block, shift, scale, dtype)
        b, K = Z.shape[0], centers.shape[0]
        if b == 0:
            d = Z.shape[1]
            return 0, 0.0, np.zeros(K), np.zeros((K, K)), np.zeros((K, d))
        C = torch.as_tensor(centers, dtype=dtype)
        M = costs_into(torch.empty(b, K, dtype=dtype), Z, C, reg)
        f = torch.empty(b, dtype=dtype)
        af, c, H, moment = semi_dual_pass(M, torch.as_tensor(h, dtype=dtype), None, f, row_chunks(b, K), Z)
        # semi_dual_pass returns means over the chunk for af, c and H, a sum for the moment.
        return (b, float(af) * b, (c * b).double().numpy(), (H * b).double().numpy(), moment.double().numpy())


def _pass(blocks, centers, h, reg, shift, scale, dtype):
    """Sums of every chunk, added on the client: ``(n, sum f, c, H, moment)``."""
    import dask

    parts = dask.compute(*[
        dask.delayed(block_sums, pure=False)(blk, centers, h, reg, shift, scale, dtype) for blk in blocks
    ])
    n = sum(p[0] for p in parts)
    total_f = sum(p[1] for p in parts)
    c = np.sum([p[2] for p in parts], axis=0)
    H = np.sum([p[3] for p in parts], axis=0)
    moment = np.sum([p[4] for p in parts], axis=0)
    return n, total_f, c, H, moment


def row_blocks(X):
    """The row chunks of ``X`` (a dask array), each holding every column, as delayed objects."""
    return list(X.rechunk({1: -1}).to_delayed().ravel())


def dask_ot_lloyd(X, centers, reg, log_w, g, *, shift, scale, max_iter, tol, dtype=torch.float64):
    """OT-Lloyd on the dask array ``X`` from ``centers`` (K, d) at the absolute ``reg``.

    Every assignment is the in-memory OT-Lloyd's semi-dual Newton solve
    (``SINKHORN_TOL``, warm-started from the last column potentials ``g``), each of its
    passes one task per chunk; the centres then move to their plan-weighted means. Stops
    when the squared centre shift is at most ``tol``.

    Returns ``(centers, n_iter, g, converged)`` (torch tensors, float64).
    """
    blocks = row_blocks(X)
    log_w = torch.as_tensor(log_w, dtype=dtype)
    w = log_w.exp()
    centers = torch.as_tensor(centers, dtype=dtype)
    g = torch.zeros(centers.shape[0], dtype=dtype) if g is None else torch.as_tensor(g, dtype=dtype).clone()
    converged = True
    it = 0
    for it in range(1, max_iter + 1):
        C = centers.numpy()

        def objective(g, _buffer, C=C):
            n, total_f, c, H, moment = _pass(blocks, C, (g + log_w).numpy(), reg, shift, scale, dtype)
            c = torch.as_tensor(c / n, dtype=dtype)
            return total_f / n + float((w * g).sum()), c, (torch.as_tensor(H / n, dtype=dtype),
                                                         torch.as_tensor(moment, dtype=dtype))

        g, c, moment, _, _, err, _ = newton_iterations(objective, log_w, g, SINKHORN_MAX_ITER, SINKHORN_TOL, 30.0)
        converged = converged and err < SINKHORN_TOL
        mass = c * float(X.shape[0])
        new = torch.where(mass.unsqueeze(-1) > 0, moment / mass.unsqueeze(-1), centers)
        shift_c = float(((new - centers) ** 2).sum())
        centers = new
        if shift_c <= tol:
            break
    return centers, it, g, converged


def _block_labels(block, centers, shift, scale, dtype):
    with torch.no_grad(), compute_threads():
        Z = _normalised(block, shift, scale, dtype)
        C = torch.as_tensor(centers, dtype=dtype)
        mins, labels = squared_distances(Z, C).min(1)
        return labels.to(torch.int32).numpy(), float(mins.sum())


def dask_labels(X, centers, *, shift, scale, dtype=torch.float64):
    """Nearest-centre labels (a numpy array) and the inertia of the rows of the dask array ``X``.

    One task per chunk returns its labels (int32) and its inertia; the client gathers the
    pieces and joins them, so no worker ever assembles an array of all the rows' labels.
    """
    import dask

    centers = np.asarray(centers)
    parts = dask.compute(*[
        dask.delayed(_block_labels, pure=False)(blk, centers, shift, scale, dtype) for blk in row_blocks(X)
    ])
    labels = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.int32)
    return labels.astype(np.int64), float(sum(p[1] for p in parts))
