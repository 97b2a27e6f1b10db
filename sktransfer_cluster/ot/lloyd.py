"""OT-Lloyd: k-means whose assignment step is an entropic optimal transport plan.

The kernels behind :class:`~sktransfer_cluster.SinkhornKMeans` (Genevay,
Dulac-Arnold & Vert, *Differentiable Deep Clustering with Cluster Size
Constraints*): assign with entropic OT under the cluster-size prior, move each
centre to its plan-weighted mean. Plain functions on tensors, shared by the wings that
re-estimate centres under a size prior (SinkhornKMeans; PreciseFeatureGAN's transfer).
"""

from __future__ import annotations

import torch

from ..base.runtime import exact_dtype, on_compute_threads
from .semi_dual import newton_solve, row_chunks, semi_dual_pass

__all__ = ["LABEL_PATIENCE", "OFFSET_RATIO", "SINKHORN_MAX_ITER", "SINKHORN_TOL", "costs_into", "ot_lloyd", "ot_lloyd_best",
           "pair_with_weights", "relative_reg"]

# Inside OT-Lloyd the potentials are warm-started across iterations, so a loose
# per-iteration solve suffices (L1 marginal error).
SINKHORN_TOL = 1e-5
SINKHORN_MAX_ITER = 300
# With tol=0 the soft plan never stops moving exactly: OT-Lloyd also stops when the
# hard labels (argmax of the plan's rows) have not changed for this many iterations.
LABEL_PATIENCE = 3


def relative_reg(C, epsilon):
    """``epsilon`` times the mean cost over the last two dims, kept strictly positive.

    The floor is the smallest normal float, not an absolute eps: costs of data at
    1e-10 are about 1e-20, and any fixed floor above them would make the plan uniform.
    """
    return (epsilon * C.mean((-1, -2))).clamp_min(torch.finfo(C.dtype).tiny)


def _one_run(X, centers, reg, log_w, max_iter, tol, M, labels):
    """OT-Lloyd from one set of ``centers`` (K, d) at the fixed absolute ``reg``.

    Each assignment is a semi-dual Newton solve warm-started from the previous
    column potentials. Its cost drops the row constant ``||x_i||^2``, which leaves
    the plan unchanged (the row potentials absorb it). ``M`` (n, K) and ``labels``
    (n,) are work buffers. Returns ``(centers, n_iter, f, g)`` with ``f`` for the
    cost without ``||x_i||^2`` at the centres of the last solve.
    """
    n, K = M.shape
    g = None
    same = 0
    chunks = row_chunks(n, K)
    for it in range(1, max_iter + 1):
        costs_into(M, X, centers, reg)
        res, c, moment = newton_solve(M, log_w, g, None, SINKHORN_MAX_ITER, SINKHORN_TOL, 30.0, X)
        g, f = res.g, res.f
        # The solve's last pass also summed the plan-weighted features: P / a = exp(f_i + h_j - M_ij).
        mass = c * n
        if tol == 0:
            changed = False
            h = log_w + g
            for start, stop in chunks:
                now = torch.sub(h, M[start:stop]).argmax(-1)
                changed = changed or not torch.equal(now, labels[start:stop])
                labels[start:stop] = now
        # A cluster the plan left without mass (underflow at a tiny reg) keeps its centre.
        new = torch.where(mass.unsqueeze(-1) > 0, moment / mass.unsqueeze(-1), centers)
        shift = float(((new - centers) ** 2).sum())
        centers = new
        if shift <= tol:
            break
        if tol == 0:
            same = 0 if changed or it == 1 else same + 1
            if same >= LABEL_PATIENCE:
                break
    return centers, it, f, g


def pair_with_weights(X, centers, weights):
    """Reorder each start's centres so that the larger prior weights go to the larger cells.

    In OT-Lloyd weight ``k`` belongs to centre ``k``; the centres of a k-means++ start
    come in a random order, so a non-uniform prior would hit the start's clusters
    by chance. Per start ``b``, the centres are ranked by the number of rows of ``X``
    nearest to them and the weights by size (both descending, ties in their given
    order), and the centre of rank ``r`` moves to the position of the weight of rank
    ``r``: the largest cell gets the largest weight. Uniform weights return
    ``centers`` itself (nothing to pair). Memory: one (rows, K) block per chunk.

    Parameters
    ----------
    X : torch.Tensor of shape (n, d)
    centers : torch.Tensor of shape (B, K, d)
    weights : array-like of shape (K,)
        The prior proportions, in the order OT-Lloyd reads them.

    Returns
    -------
    torch.Tensor of shape (B, K, d)

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[0.0], [0.1], [0.2], [5.0]])
    >>> pair_with_weights(X, torch.tensor([[[5.0], [0.1]]]), [0.75, 0.25])[0, :, 0]
    tensor([0.1000, 5.0000])
    """
    w = torch.as_tensor(weights, dtype=torch.float64).reshape(-1).cpu()
    if bool((w == w[0]).all()):
        return centers
    B, K = centers.shape[0], centers.shape[1]
    counts = torch.zeros(B, K, dtype=torch.long)
    for start, stop in row_chunks(X.shape[0], K):
        rows = X[start:stop].to(centers.dtype)
        for b in range(B):
            nearest = torch.cdist(rows, centers[b]).argmin(1)
            counts[b] += torch.bincount(nearest, minlength=K).cpu()
    w_rank = torch.sort(w, descending=True, stable=True).indices
    out = torch.empty_like(centers)
    for b in range(B):
        c_rank = torch.sort(counts[b], descending=True, stable=True).indices
        out[b, w_rank.to(centers.device)] = centers[b, c_rank.to(centers.device)]
    return out


def _initial_reg(X, x2, c0, reg_rel):
    """``reg_rel`` times the mean squared distance to ``c0``, without an (n, K) temporary.

    The expansion ``|x|^2 - 2 x.c + |c|^2`` can cancel to about ``eps * (|x|^2 + |c|^2)``
    (or below zero), so the mean cost is floored there: relative to the data's own
    magnitude, which keeps OT-Lloyd scale-free (an absolute floor of ``eps`` made the
    plan uniform for data at 1e-10 and smaller, issue 30 S1). The smallest normal float
    is the last floor, for data that are all zero.
    """
    c2 = (c0 * c0).sum(-1).mean()
    mean_cost = x2.mean() - 2.0 * (X.mean(0) * c0).sum(-1).mean() + c2
    floor = torch.finfo(X.dtype).eps * (x2.mean() + c2)
    return (reg_rel * torch.maximum(mean_cost, floor)).clamp_min(torch.finfo(X.dtype).tiny)


def costs_into(M, X, centers, reg):
    """``M <- (||c_k||^2 - 2 x_i . c_k) / reg``: the cost without the row constant ``||x_i||^2``.

    The expansion cancels to about ``eps * (||x||^2 + ||c||^2)``: for rows far from the origin
    against their spread (float32 at an offset) the costs are rounding. Rows near the origin
    are its precondition; :func:`ot_lloyd` and :func:`ot_lloyd_best` centre rows that are not.
    """
    torch.addmm((centers * centers).sum(-1), X, centers.transpose(0, 1), alpha=-2.0, out=M)
    return M.div_(reg)


#: :func:`ot_lloyd` and :func:`ot_lloyd_best` centre rows whose costs would lose more to their
#: offset than float32 rows at this ratio of the mean's norm to the RMS spread (6 of 24 bits):
#: float32 rows past 8, float64 rows past about 1.9e5. Rows the estimators pass (normalised
#: inputs, codes) never reach it, so their results keep their bits.
OFFSET_RATIO = 8.0


def _offset_mean(X):
    """The rows' column means (in float64 where the device has it) when the cost expansion
    ``|x|^2 - 2 x.c + |c|^2`` in ``X``'s dtype would lose more than :data:`OFFSET_RATIO`
    allows to the rows' offset, else None. Read in row chunks: no copy of ``X``."""
    n = X.shape[0]
    if n == 0 or X.ndim != 2 or not X.dtype.is_floating_point:
        return None
    work = exact_dtype(X.device)
    chunks = row_chunks(n, X.shape[1])
    mean = torch.zeros(X.shape[1], dtype=work, device=X.device)
    for start, stop in chunks:
        mean += X[start:stop].to(work).sum(0)
    mean /= n
    unit = float(mean.abs().max())  # both sides in units of the mean's peak: no overflow at any scale
    if unit == 0.0 or not (unit < float("inf")):
        return None
    spread2 = 0.0
    for start, stop in chunks:
        block = (X[start:stop].to(work) - mean) / unit
        spread2 += float((block * block).sum())
    m2 = float(((mean / unit) ** 2).sum())
    allowed = torch.finfo(torch.float32).eps / torch.finfo(X.dtype).eps * OFFSET_RATIO**2
    return mean if m2 > allowed * spread2 / n else None


def _centred(X, centers):
    """``(X, centers, mean)``: both less the rows' :func:`_offset_mean` (in float64, cast back)
    where the costs need it (a copy of ``X``), else as they are with ``mean=None``. The plan
    of squared distances is the same for translated rows and centres."""
    mean = _offset_mean(X)
    if mean is None:
        return X, centers, None
    return (X.to(mean.dtype) - mean).to(X.dtype), (centers.to(mean.dtype) - mean).to(centers.dtype), mean


def _uncentred(centers, mean):
    """Centres computed on :func:`_centred` rows, moved back to the rows' own origin."""
    return centers if mean is None else (centers.to(mean.dtype) + mean).to(centers.dtype)


@on_compute_threads
def ot_lloyd(X, centers, reg_rel, log_w, max_iter, tol):
    """Batched OT-Lloyd from initial ``centers`` of shape (B, K, d).

    The B runs are independent (each stops on its own, as KMeans' inits do).
    A run stops when the squared centre shift is at most ``tol``; with ``tol=0``,
    also when its hard labels (the argmax of each row of the plan) have not changed
    for :data:`LABEL_PATIENCE` iterations. Memory beyond ``X``: one (n, K) buffer.

    Returns ``(centers, reg, n_iter, potentials)``: centres (B, K, d); ``reg``
    (shape (B,)), ``reg_rel`` times the mean cost at the initial centres, fixed for
    the run; the most iterations any run took; and the potentials ``(f, g)``, shapes
    (B, n) and (B, K), of the last assignment of each run, for the costs
    ``squared_distances(X, centers) / reg`` (with ``reg=1`` and marginals
    ``1/n`` and ``exp(log_w)`` as in :func:`~sktransfer_cluster.ot.sinkhorn_potentials`).

    Rows far from the origin against their spread (:data:`OFFSET_RATIO`, in ``X``'s dtype)
    are run centred at their mean, in a copy of ``X``: the plan is that of the rows as given
    (squared distances do not change with a translation), the centres are moved back.
    """
    X, centers, mean = _centred(X, centers)
    outs, regs, n_iters, fs, gs = [], [], [], [], []
    for c, reg, n_iter, f, g, x2, _ in _runs(X, centers, reg_rel, log_w, max_iter, tol):
        outs.append(_uncentred(c, mean))
        regs.append(reg)
        n_iters.append(n_iter)
        fs.append(f + x2 / reg)  # the row constant ||x_i||^2 / reg, dropped from the solve
        gs.append(g)
    return torch.stack(outs), torch.stack(regs), max(n_iters), (torch.stack(fs), torch.stack(gs))


def _runs(X, centers, reg_rel, log_w, max_iter, tol):
    """One OT-Lloyd run per initial ``centers[b]``, sharing one (n, K) cost buffer.

    Yields ``(centers, reg, n_iter, f, g, x2, M)`` per run: ``x2`` the rows' squared
    norms and ``M`` the shared buffer, which the caller may reuse until it resumes.
    """
    n, K = X.shape[0], centers.shape[-2]
    x2 = (X * X).sum(-1)
    log_w = log_w.to(X.dtype)
    M = torch.empty(n, K, dtype=X.dtype, device=X.device)
    labels = torch.full((n,), -1, dtype=torch.long, device=X.device)
    for c0 in centers:
        reg = _initial_reg(X, x2, c0, reg_rel)
        labels.fill_(-1)
        c, n_iter, f, g = _one_run(X, c0, reg, log_w, max_iter, tol, M, labels)
        yield c, reg, n_iter, f, g, x2, M


@on_compute_threads
def ot_lloyd_best(X, centers, reg_rel, log_w, max_iter, tol, *, check_tol=1e-3, check_max_iter=3000):
    """OT-Lloyd from each of the B initial ``centers`` (B, K, d); keep the cheapest run.

    Runs as :func:`ot_lloyd`, then scores each run by the regularised transport cost
    ``<P, C> + reg KL(P | a w^T)`` of the plan at its final centres whose rows are
    exact for the column potentials of its last solve, read in closed form from one
    chunked pass: ``reg * (<a, f> + <P^T 1, g>)``. The kept run's plan is then solved
    to ``check_tol`` (warm, usually no extra pass) to report whether it converged.
    Memory beyond ``X``: one (n, K) buffer and O(n) vectors, whatever B (and a centred
    copy of ``X`` for rows far from the origin, as in :func:`ot_lloyd`).

    Returns
    -------
    cost : float
        The kept run's regularised cost (in the unit of squared distances).
    centers : torch.Tensor of shape (K, d)
    reg : float
        Its absolute regularisation.
    n_iter : int
        Its OT-Lloyd iterations.
    check : SinkhornResult
        The check solve at its final centres (``converged``, ``err``, ``n_iter``).
    """
    X, centers, mean = _centred(X, centers)
    log_w = log_w.to(X.dtype)
    f = torch.empty(X.shape[0], dtype=X.dtype, device=X.device)
    chunks = row_chunks(X.shape[0], centers.shape[-2])
    best = None
    for c, reg, n_iter, _, g, x2, M in _runs(X, centers, reg_rel, log_w, max_iter, tol):
        costs_into(M, X, c, reg)
        af, mass, _, _ = semi_dual_pass(M, log_w + g, None, f, chunks)
        # Summed as Python floats (float64): in float32 the two terms cancel to rounding.
        cost = float(reg) * (float(af) + float((mass * g).sum())) + float(x2.mean())
        if best is None or cost < best[0]:
            best = (cost, c, float(reg), n_iter, g)
    cost, c, reg, n_iter, g = best
    check, _, _ = newton_solve(costs_into(M, X, c, reg), log_w, g, None, check_max_iter, check_tol, 30.0)
    return cost, _uncentred(c, mean), reg, n_iter, check
