"""Entropic optimal transport solvers (torch only).

The public entry point :func:`sinkhorn` mirrors POT's argument order
(``ot.sinkhorn(a, b, M, reg)`` / ``ot.sinkhorn_unbalanced(a, b, M, reg, reg_m)``)
so one can be swapped for the other, and returns the same kind of array it was
given (numpy in, numpy out; torch in, torch out).

Conventions
-----------
We solve, for a cost ``M`` (n x m) and marginals ``a``, ``b``::

    min_P  <P, M> + reg * KL(P | a b^T)                      (balanced: P 1 = a, P^T 1 = b)
    min_P  <P, M> + reg * KL(P | a b^T)
           + reg_m * KL(P 1 | a) + reg_m * KL(P^T 1 | b)     (unbalanced, ``reg_m`` given)

For the balanced problem the KL regulariser and POT's ``sum P (log P - 1)`` give the
same plan; for the unbalanced one this is POT's default ``reg_type="kl"``.
The plan is parametrised by dual potentials ``f``, ``g``::

    P_ij = a_i b_j exp((f_i + g_j - M_ij) / reg)

so that at the balanced optimum the regularised cost is ``<a, f> + <b, g>``.

Two update schemes share one loop:

* ``"stabilized"`` -- exp-domain scaling updates with matrix products; scalings
  whose logarithm grows past a threshold are absorbed into the potentials
  (Schmitzer, 2019).  Several times faster than log-sum-exp on CPU.
* ``"log"`` -- pure log-domain updates (log-sum-exp), safe for any ``reg``.

``"auto"`` uses the stabilised scheme and falls back to the log domain as soon as
a scaling stops being finite, so no input produces NaN or inf.
Both use epsilon-scaling: ``reg`` is annealed geometrically from a hundredth of the
cost's range down to its target value, warm-starting the potentials, which keeps the number of
iterations small for small ``reg``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

__all__ = ["sinkhorn", "sinkhorn_potentials", "plan_from_potentials", "SinkhornResult"]

# |log u| beyond this triggers absorption of the scalings into the potentials:
# exp(50) ~ 5e21 is far from float64 (and float32) overflow yet rarely reached.
_ABSORB_LOG_THRESHOLD = 50.0
# epsilon-scaling starts at (cost range) / _SCALING_START.
_SCALING_START = 100.0


@dataclass
class SinkhornResult:
    """Potentials and diagnostics returned by :func:`sinkhorn_potentials`.

    Attributes
    ----------
    f, g : torch.Tensor
        Dual potentials, shapes ``(..., n)`` and ``(..., m)``.
    n_iter : int
        Sinkhorn iterations over all epsilon-scaling stages.
    err : float
        Final stopping criterion: the L1 row-marginal error (balanced) or the
        largest potential change divided by ``reg`` (unbalanced), max over the batch.
    converged : bool
        Whether ``err < tol`` was reached within ``max_iter`` iterations.
    method : str
        ``"stabilized"`` or ``"log"``: the scheme that produced the result.
    """

    f: torch.Tensor
    g: torch.Tensor
    n_iter: int
    err: float
    converged: bool
    method: str


def _uniform_or(log_w, shape, like):
    """A log-marginal expanded to ``shape``; ``None`` means uniform."""
    if log_w is None:
        return torch.full(shape, -math.log(shape[-1]), dtype=like.dtype, device=like.device)
    return log_w.to(dtype=like.dtype, device=like.device).expand(shape)


def _lse_rows(M, g, log_b, reg):
    """-reg * logsumexp_j(log b_j + (g_j - M_ij)/reg): the exact f-update's core."""
    return -reg * torch.logsumexp(log_b.unsqueeze(-2) + (g.unsqueeze(-2) - M) / reg, dim=-1)


def _lse_cols(M, f, log_a, reg):
    return -reg * torch.logsumexp(log_a.unsqueeze(-1) + (f.unsqueeze(-1) - M) / reg, dim=-2)


def _row_error(M, f, g, log_a, log_b, reg):
    """L1 distance between the plan's row sums and a (max over the batch)."""
    log_rows = log_a + (f - _lse_rows(M, g, log_b, reg)) / reg
    return (log_rows.exp() - log_a.exp()).abs().sum(-1).max()


def _stage(M, f, g, log_a, log_b, reg, fi, n_iter, tol, check_every, method):
    """Run Sinkhorn at a fixed ``reg`` from potentials (f, g).

    Returns ``(f, g, iterations_done, err, method)``; ``tol=None`` means run
    exactly ``n_iter`` iterations (an intermediate epsilon-scaling stage).
    """
    balanced = fi == 1.0
    done = 0
    err = math.inf
    if method == "stabilized":
        a, b = log_a.exp(), log_b.exp()
        # G absorbs the current potentials; u, v are the remaining scalings.
        G = ((f.unsqueeze(-1) + g.unsqueeze(-2) - M) / reg).exp()
        u = torch.ones_like(f)
        v = torch.ones_like(g)
        f_ok, g_ok = f, g
        while done < n_iter:
            steps = min(check_every, n_iter - done)
            for _ in range(steps):
                u = 1.0 / (G @ (b * v).unsqueeze(-1)).squeeze(-1)
                if not balanced:
                    u = u.pow(fi) * ((fi - 1.0) * f / reg).exp()
                Gtu = (G.transpose(-1, -2) @ (a * u).unsqueeze(-1)).squeeze(-1)
                v = 1.0 / Gtu
                if not balanced:
                    v = v.pow(fi) * ((fi - 1.0) * g / reg).exp()
            done += steps
            log_u, log_v = u.log(), v.log()
            if not (torch.isfinite(log_u).all() and torch.isfinite(log_v).all()):
                # Some kernel row underflowed: redo the rest in the log domain.
                f, g = f_ok, g_ok
                rest = n_iter - done
                f, g, extra, err, _ = _stage(
                    M, f, g, log_a, log_b, reg, fi, rest, tol, check_every, "log"
                )
                return f, g, done + extra, err, "log"
            f_new, g_new = f + reg * log_u, g + reg * log_v
            if tol is not None:
                if balanced:
                    rows = a * u * (G @ (b * v).unsqueeze(-1)).squeeze(-1)
                    err = (rows - a).abs().sum(-1).max().item()
                else:
                    err = (
                        torch.maximum((f_new - f_ok).abs().amax(-1), (g_new - g_ok).abs().amax(-1))
                        .max()
                        .item()
                        / reg
                    )
            f_ok, g_ok = f_new, g_new
            if tol is not None and err < tol:
                return f_new, g_new, done, err, method
            if max(log_u.abs().max().item(), log_v.abs().max().item()) > _ABSORB_LOG_THRESHOLD:
                f, g = f_new, g_new
                G = ((f.unsqueeze(-1) + g.unsqueeze(-2) - M) / reg).exp()
                u = torch.ones_like(f)
                v = torch.ones_like(g)
        return f_ok, g_ok, done, err, method

    f_prev, g_prev = f, g
    while done < n_iter:
        steps = min(check_every, n_iter - done)
        for _ in range(steps):
            f = fi * _lse_rows(M, g, log_b, reg)
            g = fi * _lse_cols(M, f, log_a, reg)
        done += steps
        if tol is not None:
            if balanced:
                err = _row_error(M, f, g, log_a, log_b, reg).item()
            else:
                err = (
                    torch.maximum((f - f_prev).abs().amax(-1), (g - g_prev).abs().amax(-1))
                    .max()
                    .item()
                    / reg
                )
            f_prev, g_prev = f, g
            if err < tol:
                break
    return f, g, done, err, method


def sinkhorn_potentials(
    M,
    reg,
    log_a=None,
    log_b=None,
    *,
    reg_m=None,
    init=None,
    max_iter=1000,
    tol=1e-9,
    check_every=10,
    eps_scaling=0.5,
    method="auto",
):
    """Solve entropic OT on torch tensors and return the dual potentials.

    This is the low-level solver used by the estimators; :func:`sinkhorn` wraps it
    for numpy/torch users.

    Parameters
    ----------
    M : torch.Tensor of shape (..., n, m)
        Cost matrices; leading dimensions are a batch of independent problems.
    reg : float
        Entropic regularisation (absolute, same unit as ``M``).
    log_a, log_b : torch.Tensor of shape (..., n) and (..., m), default=None
        Log-marginals; ``None`` means uniform.
    reg_m : float or None, default=None
        KL marginal relaxation (unbalanced OT); ``None`` means balanced.
    init : tuple of torch.Tensor, default=None
        Warm-start potentials ``(f, g)``. When given, epsilon-scaling is skipped.
    max_iter : int, default=1000
        Maximum Sinkhorn iterations in total.
    tol : float, default=1e-9
        Stopping threshold on the L1 row-marginal error (balanced) or on the
        largest potential change divided by ``reg`` (unbalanced).
    check_every : int, default=10
        Iterations between two convergence checks (each check synchronises).
    eps_scaling : float in (0, 1) or None, default=0.5
        Geometric factor of the epsilon-scaling schedule; ``None`` disables it.
    method : {"auto", "stabilized", "log"}, default="auto"
        Update scheme, see the module docstring.

    Returns
    -------
    SinkhornResult
    """
    if method not in ("auto", "stabilized", "log"):
        raise ValueError(f"method must be 'auto', 'stabilized' or 'log', got {method!r}.")
    if not reg > 0:
        raise ValueError(f"reg must be positive, got {reg!r}.")
    if reg_m is not None and not reg_m > 0:
        raise ValueError(f"reg_m must be positive or None, got {reg_m!r}.")
    if not torch.isfinite(M).all():
        raise ValueError("The cost matrix M contains NaN or infinity.")
    n, m = M.shape[-2], M.shape[-1]
    batch = M.shape[:-2]
    log_a = _uniform_or(log_a, (*batch, n), M)
    log_b = _uniform_or(log_b, (*batch, m), M)
    scheme = "stabilized" if method == "auto" else method

    if init is not None:
        f, g = (t.to(dtype=M.dtype, device=M.device).expand(s) for t, s in zip(init, [(*batch, n), (*batch, m)]))
        schedule = [reg]
    else:
        f = torch.zeros((*batch, n), dtype=M.dtype, device=M.device)
        g = torch.zeros((*batch, m), dtype=M.dtype, device=M.device)
        schedule = [reg]
        if eps_scaling is not None:
            # Above span/100 the kernel exp(-M/eps) is well conditioned, so
            # annealing from higher only adds iterations (measured in benchmarks/).
            start = (M.amax() - M.amin()).item() / _SCALING_START
            eps = reg
            while eps < start:
                eps = eps / eps_scaling
                schedule.append(eps)
            schedule.reverse()

    total = 0
    err = math.inf
    for stage, eps in enumerate(schedule):
        fi = 1.0 if reg_m is None else reg_m / (reg_m + eps)
        last = stage == len(schedule) - 1
        budget = max_iter - total if last else min(check_every, max_iter - total)
        if budget <= 0:
            break
        f, g, done, err, scheme = _stage(
            M, f, g, log_a, log_b, eps, fi, budget, tol if last else None, check_every, scheme
        )
        total += done
    converged = err < tol
    return SinkhornResult(f=f, g=g, n_iter=total, err=float(err), converged=converged, method=scheme)


def plan_from_potentials(M, f, g, reg, log_a=None, log_b=None):
    """``P_ij = a_i b_j exp((f_i + g_j - M_ij)/reg)`` computed in the log domain."""
    n, m = M.shape[-2], M.shape[-1]
    log_a = _uniform_or(log_a, (*M.shape[:-2], n), M)
    log_b = _uniform_or(log_b, (*M.shape[:-2], m), M)
    return (log_a.unsqueeze(-1) + log_b.unsqueeze(-2) + (f.unsqueeze(-1) + g.unsqueeze(-2) - M) / reg).exp()


def sinkhorn(
    a,
    b,
    M,
    reg,
    *,
    max_iter=1000,
    tol=1e-9,
    reg_m=None,
    log=False,
    method="auto",
    eps_scaling=0.5,
    check_every=10,
    warn=True,
):
    """Entropic (optionally unbalanced) optimal transport plan, batched, on torch.

    Argument order follows POT: ``sinkhorn(a, b, M, reg)`` corresponds to
    ``ot.sinkhorn(a, b, M, reg)`` and, with ``reg_m``, to
    ``ot.sinkhorn_unbalanced(a, b, M, reg, reg_m)`` (``reg_type="kl"``).

    Parameters
    ----------
    a : array-like of shape (..., n) or None
        Source marginal (sums to one for balanced OT). ``None`` or empty: uniform.
    b : array-like of shape (..., m) or None
        Target marginal. ``None`` or empty: uniform.
    M : numpy.ndarray or torch.Tensor of shape (..., n, m)
        Cost matrix; leading dimensions are solved as a batch.
    reg : float
        Entropic regularisation, in the unit of ``M``.
    max_iter : int, default=1000
        Maximum number of Sinkhorn iterations (all epsilon-scaling stages).
    tol : float, default=1e-9
        Stopping threshold; see :func:`sinkhorn_potentials`.
    reg_m : float or None, default=None
        Marginal relaxation for unbalanced OT.
    log : bool, default=False
        Also return a dict with ``n_iter``, ``err``, ``converged``, ``method``
        and the potentials ``f``, ``g``.
    method : {"auto", "stabilized", "log"}, default="auto"
        Update scheme.
    eps_scaling : float or None, default=0.5
        Factor of the epsilon-scaling schedule; ``None`` disables it.
    check_every : int, default=10
        Iterations between two convergence checks.
    warn : bool, default=True
        Emit a :class:`~sklearn.exceptions.ConvergenceWarning` when ``tol``
        is not reached.

    Returns
    -------
    plan : same kind as ``M`` (numpy or torch)
        Transport plan of shape ``(..., n, m)``, in ``M``'s floating dtype.
    log : dict
        Only when ``log=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from sktransfer_cluster.ot import sinkhorn
    >>> M = np.array([[0.0, 1.0], [1.0, 0.0]])
    >>> P = sinkhorn([0.5, 0.5], [0.5, 0.5], M, reg=0.1)
    >>> np.round(P.sum(axis=1), 6).tolist()
    [0.5, 0.5]
    """
    is_numpy = not torch.is_tensor(M)
    M_in = torch.as_tensor(np.asarray(M)) if is_numpy else M
    out_dtype = M_in.dtype if M_in.is_floating_point() else torch.float64
    # float64 on CPU: float32 loses the marginals at small reg.
    work_dtype = torch.float64 if M_in.device.type == "cpu" else out_dtype
    Mt = M_in.to(work_dtype)

    def as_log(w):
        if w is None:
            return None
        w = torch.as_tensor(np.asarray(w) if not torch.is_tensor(w) else w)
        if w.numel() == 0:
            return None
        return torch.log(w.to(dtype=work_dtype, device=Mt.device))

    log_a, log_b = as_log(a), as_log(b)
    res = sinkhorn_potentials(
        Mt,
        reg,
        log_a,
        log_b,
        reg_m=reg_m,
        max_iter=max_iter,
        tol=tol,
        check_every=check_every,
        eps_scaling=eps_scaling,
        method=method,
    )
    if warn and not res.converged:
        warnings.warn(
            f"Sinkhorn did not converge in {max_iter} iterations (error {res.err:.3g} > tol "
            f"{tol:g}); increase max_iter or reg.",
            ConvergenceWarning,
            stacklevel=2,
        )
    plan = plan_from_potentials(Mt, res.f, res.g, reg, log_a, log_b).to(out_dtype)
    if is_numpy:
        plan = plan.numpy()
    if not log:
        return plan
    conv = (lambda t: t.to(out_dtype).numpy()) if is_numpy else (lambda t: t.to(out_dtype))
    info = {
        "n_iter": res.n_iter,
        "err": res.err,
        "converged": res.converged,
        "method": res.method,
        "f": conv(res.f),
        "g": conv(res.g),
    }
    return plan, info
