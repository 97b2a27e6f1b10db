"""Dual potentials: the result type of the solvers, the marginals, and the plan they give."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = ["SinkhornResult", "uniform_or", "log_marginals", "plan_from_potentials"]


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
    errors : list of float
        The criterion at each check of the last (target ``reg``) stage.
    """

    f: torch.Tensor
    g: torch.Tensor
    n_iter: int
    err: float
    converged: bool
    method: str
    errors: list = field(default_factory=list)

def uniform_or(log_w, shape, like):
    """A log-marginal expanded to ``shape``; ``None`` means uniform."""
    if log_w is None:
        return torch.full(shape, -math.log(shape[-1]), dtype=like.dtype, device=like.device)
    return log_w.to(dtype=like.dtype, device=like.device).expand(shape)

def log_marginals(M, log_a, log_b):
    """Both log-marginals of the problem(s) ``M``, batch-shaped; ``None`` means uniform."""
    return (
        uniform_or(log_a, (*M.shape[:-2], M.shape[-2]), M),
        uniform_or(log_b, (*M.shape[:-2], M.shape[-1]), M),
    )


def plan_from_potentials(M, f, g, reg, log_a=None, log_b=None, *, balanced=True):
    """``P_ij = a_i b_j exp((f_i + g_j - M_ij)/reg)`` computed in the log domain, always finite.

    Potentials that have not converged, or costs so large that float64 cannot resolve
    ``reg`` beside them, can put entries above what a plan may hold; they are capped at
    ``min(a_i, b_j)`` (balanced), or so that the total mass stays finite (unbalanced).
    The marginal error of the result tells how far it is from a solution.
    """
    log_a, log_b = log_marginals(M, log_a, log_b)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (M, f, g, log_a, log_b)):
        log_p = log_a.unsqueeze(-1) + log_b.unsqueeze(-2) + (f.unsqueeze(-1) + g.unsqueeze(-2) - M) / reg
        if balanced:
            cap = torch.minimum(log_a.unsqueeze(-1), log_b.unsqueeze(-2))
        else:
            cap = torch.tensor(math.log(torch.finfo(M.dtype).max / (4 * M.shape[-1] * M.shape[-2])), dtype=M.dtype)
        return torch.minimum(log_p, cap).exp()
    # Without autograd: one (n, m) buffer updated in place (each pass over a large plan
    # costs memory bandwidth, each fresh buffer page faults).
    log_p = torch.sub(g.unsqueeze(-2), M).add_(f.unsqueeze(-1))
    if reg != 1:
        log_p.div_(reg)
    log_p.add_(log_a.unsqueeze(-1)).add_(log_b.unsqueeze(-2))
    if balanced:
        torch.minimum(log_p, log_a.unsqueeze(-1), out=log_p)
        torch.minimum(log_p, log_b.unsqueeze(-2), out=log_p)
    else:
        log_p.clamp_max_(math.log(torch.finfo(M.dtype).max / (4 * M.shape[-1] * M.shape[-2])))
    return log_p.exp_()
