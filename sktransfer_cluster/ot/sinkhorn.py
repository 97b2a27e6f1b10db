"""Entropic optimal transport on torch, shaped like POT's ``ot.bregman``.

:func:`sinkhorn` takes POT's arguments (``a, b, M, reg, method, numItermax, stopThr,
verbose, log, warn, warmstart``) beside this package's spellings, accepts POT's method
names and returns POT's log keys, so an ``ot.sinkhorn`` call runs unchanged; what still
differs is tabulated in its Notes. Numpy in gives numpy out, torch in gives torch out, and
leading dimensions are a batch of independent problems.

Conventions
-----------
For a cost ``M`` (n x m) and marginals ``a``, ``b`` we solve::

    min_P  <P, M> + reg * KL(P | a b^T)                      (balanced: P 1 = a, P^T 1 = b)
    min_P  <P, M> + reg * KL(P | a b^T)
           + reg_m * KL(P 1 | a) + reg_m * KL(P^T 1 | b)     (unbalanced, ``reg_m`` given)

The balanced plan is POT's (its entropy ``sum P log P`` differs from the KL by a constant);
the unbalanced one is POT's ``reg_type="kl"``. Plans are parametrised by potentials::

    P_ij = a_i b_j exp((f_i + g_j - M_ij) / reg),

so the balanced optimum costs ``<a, f> + <b, g>`` and POT's scalings are
``log u = log a + f / reg``, ``log v = log b + g / reg``.

Schemes, one function each at a fixed ``reg``:

* :func:`_sinkhorn_log` (``method="log"``) -- log-sum-exp updates, safe for any ``reg``.
* :func:`_sinkhorn_stabilized` (``method="stabilized"``) -- exp-domain matrix products,
  large scalings absorbed into the potentials; several times faster on CPU. Raises
  :class:`FloatingPointError` if a scaling stops being finite.
* ``method="auto"`` runs the stabilised scheme and continues in the log domain if it
  overflows, so no input gives NaN.

Inputs are validated (shapes, real non-negative finite marginals with mass, real finite
costs, the domain of every option, warm starts' shapes) with a clear ValueError; every plan
returned is finite, the best one reached, with a ConvergenceWarning when tol was not met.

Balanced problems are solved on ``M`` minus its row minima and then its column minima: the
plan does not change (the potentials absorb the shift), but ``(f + g - M) / reg`` no longer
cancels when the costs sit far from zero (``M = rand + 1e14`` at ``reg=0.01``). The plan
:func:`sinkhorn` returns is checked against its marginals before it is called converged.

:func:`_epsilon_scaling` drives them, annealing ``reg`` geometrically from a hundredth of
the cost's range down to its target and warm-starting the potentials.

A balanced cost ``M`` that requires grad gives a differentiable plan (and potentials): the
iterations run without a graph and the gradient is implicit (:class:`_ImplicitPotentials`),
the limit at convergence of POT's gradient unrolled through its iterations. Unbalanced OT of
such an ``M``, and marginals that require grad, are refused with a ValueError.

References: Cuturi, *Sinkhorn distances*, NeurIPS 2013; Schmitzer, *Stabilized sparse
scaling algorithms for entropy regularized transport problems*, SIAM J. Sci. Comput. 2019;
Chizat, Peyré, Schmitzer & Vialard, *Scaling algorithms for unbalanced optimal transport
problems*, Math. Comp. 2018.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ..base.runtime import exact_dtype, on_compute_threads, warn as _warn_caller, working_dtype
from .plan import SinkhornResult, log_marginals, plan_from_potentials

__all__ = ["sinkhorn", "sinkhorn_potentials", "SinkhornResult"]

# |log u| beyond this triggers absorption of the scalings into the potentials:
# exp(50) ~ 5e21 is far from float64 (and float32) overflow yet rarely reached.
_ABSORB_LOG_THRESHOLD = 50.0
# epsilon-scaling starts at (cost range) / _SCALING_START.
_SCALING_START = 100.0
# Accepted method names (ours, then POT's) -> scheme. POT's plain "sinkhorn" maps to
# "auto": both are the exp-domain default, and "auto" cannot return NaN.
_METHODS = {
    "auto": "auto",
    "stabilized": "stabilized",
    "log": "log",
    "sinkhorn": "auto",
    "sinkhorn_log": "log",
    "sinkhorn_stabilized": "stabilized",
}


def _scheme(method):
    """The scheme ("auto", "stabilized" or "log") an accepted method name stands for."""
    scheme = _METHODS.get(method.lower()) if isinstance(method, str) else None
    if scheme is None:
        names = ", ".join(repr(name) for name in _METHODS)
        raise ValueError(f"method must be one of {names}; got {method!r}.")
    return scheme


def _check_marginal_shape(name, log_w, shape):
    """A marginal (given as its log) must fit ``M``: shape ``(..., n)`` or ``(n,)``."""
    if log_w is not None and log_w.shape != shape and torch.Size(shape[-1:]) != log_w.shape:
        shared = f" (or {tuple(shape[-1:])}, shared by the batch)" if len(shape) > 1 else ""
        raise ValueError(f"{name} has shape {tuple(log_w.shape)}, but M needs {tuple(shape)}{shared}.")


def _check_options(reg, reg_m, max_iter, tol, check_every, eps_scaling):
    """ValueError, saying what to pass, for an option outside its domain.

    Booleans are refused where a number is meant (``reg=True`` is a slip, not 1.0), and
    ``eps_scaling`` must lie strictly between 0 and 1: at 1 or above the schedule never
    reaches ``reg`` (issue 30 T4: an endless loop), at 0 it divides by zero.
    """

    def real(name, value, what):
        number = isinstance(value, Real) and not isinstance(value, (bool, np.bool_))
        # 0-d arrays and one-element tensors, such as a reg computed as 0.1 * M.mean()
        scalar_array = (
            (isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf")
            or (torch.is_tensor(value) and value.numel() == 1 and (value.is_floating_point() or value.dtype in _INT_DTYPES[:-1]))
        )
        if not (number or scalar_array):
            raise ValueError(f"{name} must be {what}, got {value!r}.")
        return float(value)

    reg = real("reg", reg, "a positive finite float (the entropic regularisation, in M's unit)")
    if not 0 < reg < math.inf:
        raise ValueError(f"reg must be positive and finite, got {reg!r}; pass e.g. reg=0.1 * M.mean().")
    if reg_m is not None:
        what = "a positive float (the KL marginal relaxation) or None for balanced OT"
        if not real("reg_m", reg_m, what) > 0:
            raise ValueError(f"reg_m must be positive or None, got {reg_m!r}; pass {what}.")
    if isinstance(max_iter, (bool, np.bool_)) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}; pass e.g. max_iter=1000.")
    if not real("tol", tol, "a non-negative float") >= 0:
        raise ValueError(f"tol must be non-negative, got {tol!r}; pass e.g. tol=1e-9.")
    if isinstance(check_every, (bool, np.bool_)) or not isinstance(check_every, (int, np.integer)) or check_every < 1:
        raise ValueError(f"check_every must be a positive integer, got {check_every!r}; pass e.g. check_every=10.")
    if eps_scaling is not None:
        what = "a float strictly between 0 and 1 (e.g. 0.5, the default), or None to disable epsilon-scaling"
        if not 0 < real("eps_scaling", eps_scaling, what) < 1:
            raise ValueError(f"eps_scaling must be {what}; got {eps_scaling!r}.")


def _shift_costs(M):
    """``M - r_i - c_j`` with ``r`` the row minima of ``M`` and ``c`` the column minima of ``M - r``.

    A balanced plan is the same for both costs, and every row and column of the
    shifted one holds a zero, so the potentials stay near the costs' spread instead
    of their offset and ``(f + g - M) / reg`` keeps its precision. Differences too
    large for the dtype (a row spanning -1e308 .. 1e308) saturate at its largest value:
    their kernel entries are zero at any ``reg`` that resolves them.

    Returns ``(M_shifted, r, c)``.
    """
    r = M.amin(-1)
    shifted = M - r.unsqueeze(-1)
    c = shifted.amin(-2).clamp_max(torch.finfo(M.dtype).max)
    shifted.sub_(c.unsqueeze(-2))
    top = torch.finfo(M.dtype).max
    return torch.nan_to_num(shifted, nan=top, posinf=top, out=shifted), r, c


def _lse_rows(M, g, log_b, reg):
    """-reg * logsumexp_j(log b_j + (g_j - M_ij)/reg): the exact f-update's core."""
    return -reg * torch.logsumexp(log_b.unsqueeze(-2) + (g.unsqueeze(-2) - M) / reg, dim=-1)


def _lse_cols(M, f, log_a, reg):
    return -reg * torch.logsumexp(log_a.unsqueeze(-1) + (f.unsqueeze(-1) - M) / reg, dim=-2)


def _matvec(G, x, out=None):
    """Batched ``G @ x`` for a vector ``x``, written into ``out`` when given.

    The iterations reuse two buffers: a fresh vector per product and the
    reciprocal's temporaries cost a third of a small problem's time.
    """
    if out is None:
        return (G @ x.unsqueeze(-1)).squeeze(-1)
    if G.ndim == 2:
        return torch.mv(G, x, out=out)
    return torch.matmul(G, x.unsqueeze(-1), out=out.unsqueeze(-1)).squeeze(-1)


def _stop_error(row_sums, a, f, g, f_prev, g_prev, reg):
    """The stopping criterion, max over the batch.

    Balanced (``row_sums`` given): the L1 distance between the plan's row sums and ``a``;
    its column sums are exact after a g-update. Unbalanced (``row_sums=None``): no marginal
    is prescribed, so the largest potential change since the previous check, over ``reg``.
    """
    if row_sums is not None:
        return (row_sums - a).abs().sum(-1).max().item()
    change = torch.maximum((f - f_prev).abs().amax(-1), (g - g_prev).abs().amax(-1))
    return change.max().item() / reg


def _sinkhorn_log(M, f, g, log_a, log_b, reg, fi, n_iter, tol, check_every, trace):
    """Log-domain Sinkhorn at a fixed ``reg`` from potentials ``(f, g)``.

    Cuturi's (2013) alternate scaling written on the potentials, with the damping
    ``fi = reg_m / (reg_m + reg)`` of Chizat et al. (2018) for unbalanced OT (1 if balanced)::

        f_i <- -fi * reg * log sum_j b_j exp((g_j - M_ij) / reg)
        g_j <- -fi * reg * log sum_i a_i exp((f_i - M_ij) / reg)

    Every ``check_every`` iterations the criterion of :func:`_stop_error` is computed and
    passed to ``trace(iterations_done, err)``. ``tol=None`` runs exactly ``n_iter``
    iterations unchecked (an intermediate epsilon-scaling stage).

    Returns ``(f, g, iterations_done, err)``.
    """
    balanced = fi == 1.0
    a = log_a.exp()
    done = 0
    err = math.inf
    f_prev, g_prev = f, g
    while done < n_iter:
        steps = min(check_every, n_iter - done)
        for _ in range(steps):
            f = fi * _lse_rows(M, g, log_b, reg)
            g = fi * _lse_cols(M, f, log_a, reg)
        done += steps
        if tol is not None:
            rows = (log_a + (f - _lse_rows(M, g, log_b, reg)) / reg).exp() if balanced else None
            err = _stop_error(rows, a, f, g, f_prev, g_prev, reg)
            trace(done, err)
            f_prev, g_prev = f, g
            if err < tol:
                break
    return f, g, done, err


def _absorbed_kernel(M, f, g, reg):
    """``G = exp((f_i + g_j - M_ij) / reg)`` and unit scalings ``u``, ``v``."""
    G = torch.add(f.unsqueeze(-1), g.unsqueeze(-2)).sub_(M).div_(reg).exp_()
    return G, torch.ones_like(f), torch.ones_like(g)


def _sinkhorn_stabilized(M, f, g, log_a, log_b, reg, fi, n_iter, tol, check_every, trace):
    """Exp-domain Sinkhorn with absorption (Schmitzer 2019) at a fixed ``reg``.

    The kernel ``G`` absorbs the potentials and scalings ``u``, ``v`` carry the rest,
    ``f + reg log u`` and ``g + reg log v``; with ``fi`` as in :func:`_sinkhorn_log`::

        u <- (1 / G (b v))^fi * exp((fi - 1) f / reg)
        v <- (1 / G^T (a u))^fi * exp((fi - 1) g / reg)

    At each check, scalings with ``|log u|`` above ``_ABSORB_LOG_THRESHOLD`` are absorbed
    into the potentials and ``G`` rebuilt, so they stay far from overflow. A kernel row
    can still underflow to zero (``reg`` tiny for the potentials): the scalings then stop
    being finite and the scheme gives up.

    Returns ``(f, g, iterations_done, err, finite)``; when ``finite`` is False, ``f``,
    ``g`` are the potentials of the last finite check.
    """
    balanced = fi == 1.0
    a, b = log_a.exp(), log_b.exp()
    G, u, v = _absorbed_kernel(M, f, g, reg)
    f_ok, g_ok = f, g
    done = 0
    err = math.inf
    bv, au = torch.empty_like(v), torch.empty_like(u)
    while done < n_iter:
        steps = min(check_every, n_iter - done)
        for _ in range(steps):
            # In place into u and v (same arithmetic as u = 1 / (G (b v))).
            u = _matvec(G, torch.mul(b, v, out=bv), out=u).reciprocal_()
            if not balanced:
                u.pow_(fi).mul_(((fi - 1.0) * f / reg).exp())
            v = _matvec(G.transpose(-1, -2), torch.mul(a, u, out=au), out=v).reciprocal_()
            if not balanced:
                v.pow_(fi).mul_(((fi - 1.0) * g / reg).exp())
        done += steps
        log_u, log_v = u.log(), v.log()
        if not (torch.isfinite(log_u).all() and torch.isfinite(log_v).all()):
            return f_ok, g_ok, done, err, False
        f_new, g_new = f + reg * log_u, g + reg * log_v
        if tol is not None:
            rows = a * u * _matvec(G, b * v) if balanced else None
            err = _stop_error(rows, a, f_new, g_new, f_ok, g_ok, reg)
            trace(done, err)
        f_ok, g_ok = f_new, g_new
        if tol is not None and err < tol:
            break
        if max(log_u.abs().max().item(), log_v.abs().max().item()) > _ABSORB_LOG_THRESHOLD:
            f, g = f_new, g_new
            G, u, v = _absorbed_kernel(M, f, g, reg)
    return f_ok, g_ok, done, err, True


def _run_stage(scheme, fallback, M, f, g, log_a, log_b, reg, fi, n_iter, tol, check_every, trace):
    """One stage of ``scheme``; returns ``(f, g, iterations_done, err, scheme_used)``.

    When the stabilised scheme overflows, ``fallback`` (``method="auto"``) finishes the
    stage's budget in the log domain from the last finite potentials; otherwise it raises.
    """
    if scheme == "log":
        return (*_sinkhorn_log(M, f, g, log_a, log_b, reg, fi, n_iter, tol, check_every, trace), "log")
    f, g, done, err, finite = _sinkhorn_stabilized(
        M, f, g, log_a, log_b, reg, fi, n_iter, tol, check_every, trace
    )
    if finite:
        return f, g, done, err, scheme
    if not fallback:
        raise FloatingPointError(
            f"Sinkhorn with method='stabilized' overflowed at reg={reg:.3g}: a kernel row "
            "exp((f + g - M) / reg) underflowed and the scalings are no longer finite. Use "
            "method='auto' (continues in the log domain), method='log', or a larger reg."
        )
    f, g, extra, err = _sinkhorn_log(
        M, f, g, log_a, log_b, reg, fi, n_iter - done, tol, check_every, lambda it, e: trace(done + it, e)
    )
    return f, g, done + extra, err, "log"


def _epsilon_schedule(M, reg, eps_scaling, max_iter):
    """Decreasing regs, geometric by ``eps_scaling``, from about span/100 down to ``reg``.

    At most ``max_iter`` of them: each stage runs at least one iteration, so more could
    not run (and an ``eps_scaling`` near 1 would otherwise build a list without end).
    """
    schedule = [reg]
    if eps_scaling is not None:
        # Above span/100 the kernel exp(-M/eps) is well conditioned, so
        # annealing from higher only adds iterations (measured in benchmarks/).
        start = (M.amax() - M.amin()).item() / _SCALING_START
        eps = reg
        while eps < start and len(schedule) < max_iter:
            eps = eps / eps_scaling
            schedule.append(eps)
        schedule.reverse()
    return schedule


def _epsilon_scaling(M, f, g, log_a, log_b, schedule, reg_m, max_iter, tol, check_every, method, trace):
    """Run ``method``'s scheme along ``schedule``, each stage warm-started from the last.

    Epsilon-scaling (Schmitzer 2019): the intermediate regs only bring the
    potentials near the target's, so each runs a single chunk of ``check_every``
    iterations unchecked; the last (target) stage gets the remaining budget and ``tol``.
    Once "auto" has fallen back to the log domain it stays there.

    Returns ``(f, g, n_iter, err, scheme_used)``.
    """
    scheme = "stabilized" if method == "auto" else method
    total = 0
    err = math.inf
    for stage, eps in enumerate(schedule):
        fi = 1.0 if reg_m is None else reg_m / (reg_m + eps)
        last = stage == len(schedule) - 1
        # The target stage always runs: a plan is only consistent with potentials
        # updated at its own reg, so intermediate stages leave it at least one iteration.
        budget = max_iter - total if last else min(check_every, max_iter - total - 1)
        if budget <= 0:
            continue
        f, g, done, err, scheme = _run_stage(
            scheme, method == "auto", M, f, g, log_a, log_b, eps, fi, budget,
            tol if last else None, check_every, lambda it, e: trace(total + it, e),
        )
        total += done
    return f, g, total, err, scheme


@on_compute_threads
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
    verbose=False,
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
    check_every : int >= 1, default=10
        Iterations between two convergence checks (each check synchronises).
    eps_scaling : float in (0, 1) or None, default=0.5
        Geometric factor of the epsilon-scaling schedule; ``None`` disables it.
    method : str, default="auto"
        ``"auto"``, ``"stabilized"`` or ``"log"``, or POT's ``"sinkhorn"`` (= "auto"),
        ``"sinkhorn_log"``, ``"sinkhorn_stabilized"``; see the module docstring.
    verbose : bool, default=False
        Print the criterion at each check of the last stage.

    Returns
    -------
    SinkhornResult
        Potentials of ``M`` itself. A balanced problem is solved on ``M`` less its row and
        column minima, whose potentials are then shifted back: for costs far from zero
        (1e14 at ``reg=0.01``) ``f`` and ``g`` are then too large to rebuild the plan from
        ``M`` at float precision; :func:`sinkhorn` builds it from the shifted costs.
        For an ``M`` that requires grad, ``f`` and ``g`` carry an implicit gradient (from the
        optimality conditions, not unrolled through the iterations), exact only for a converged
        solve: a solve that stops before ``tol`` emits a
        :class:`~sklearn.exceptions.ConvergenceWarning` saying so.

    Raises
    ------
    ValueError
        For an input or option outside its domain; the message says what to pass.
    FloatingPointError
        With ``method="stabilized"`` when its scalings stop being finite.
    """
    res, _, r, c = _solve(M, reg, log_a, log_b, reg_m, init, max_iter, tol, check_every, eps_scaling, method, verbose)
    res.f, res.g = res.f + r, res.g + c
    return res


def _solve(
    M, reg, log_a, log_b, reg_m, init, max_iter, tol, check_every, eps_scaling, method, verbose, warn_gradient=True
):
    """:func:`sinkhorn_potentials` on the shifted costs of :func:`_shift_costs`.

    Returns ``(result, M_solved, r, c)``: the potentials of ``result`` are those of
    ``M_solved = M - r_i - c_j``, so ``f + r`` and ``g + c`` are those of ``M``
    (``r``, ``c`` are zeros for unbalanced OT, whose plan a shift would change).
    With ``warn_gradient`` a solve of an ``M`` that requires grad and has not converged
    warns that its implicit gradient is off (:func:`sinkhorn` says so in its own warning).
    """
    method = _scheme(method)
    _check_options(reg, reg_m, max_iter, tol, check_every, eps_scaling)
    reg = float(reg)
    if reg_m is not None and math.isinf(reg_m):
        reg_m = None  # an infinitely strong marginal penalty is the balanced problem (as in POT)
    if M.is_complex():
        raise ValueError("The cost matrix M is complex; pass a real cost matrix (e.g. M.real if its imaginary part is zero).")
    if M.ndim < 2 or M.shape[-1] == 0 or M.shape[-2] == 0:
        raise ValueError(f"M must be a non-empty cost matrix of shape (..., n, m), got shape {tuple(M.shape)}.")
    if not torch.isfinite(M).all():
        raise ValueError("The cost matrix M contains NaN or infinity.")
    _check_marginal_shape("a", log_a, (*M.shape[:-2], M.shape[-2]))
    _check_marginal_shape("b", log_b, (*M.shape[:-2], M.shape[-1]))
    differentiable = _wants_gradient(M, log_a, log_b, reg_m)
    M_grad, M = M, M.detach()  # the iterations build no graph; the gradient is implicit (below)
    log_a, log_b = log_marginals(M, log_a, log_b)
    if reg_m is None:
        M, r, c = _shift_costs(M)
    else:
        r, c = torch.zeros_like(log_a), torch.zeros_like(log_b)
    if init is not None:
        f, g = _check_init(init, log_a, log_b, M)
        f, g = f - r, g - c
        schedule = [reg]
    else:
        f, g = torch.zeros_like(log_a), torch.zeros_like(log_b)
        schedule = _epsilon_schedule(M, reg, eps_scaling, max_iter)
    errors = []

    def trace(it, err):
        errors.append(err)
        if verbose:
            header = f"{'It.':5s}|{'Err':12s}\n" + "-" * 19 + "\n" if len(errors) == 1 else ""
            print(f"{header}{it:5d}|{err:8e}|")

    f, g, n_iter, err, used = _epsilon_scaling(
        M, f, g, log_a, log_b, schedule, reg_m, max_iter, tol, check_every, method, trace
    )
    res = SinkhornResult(f=f, g=g, n_iter=n_iter, err=float(err), converged=err < tol, method=used, errors=errors)
    if differentiable:
        if warn_gradient and not res.converged:
            # The adjoint below is that of the optimality conditions: at potentials that do not
            # meet them it is the gradient of another problem, silently (V15 #1: 10 % off).
            _warn_caller(_gradient_not_converged(res.err, tol, n_iter), ConvergenceWarning)
        # The shift r, c is a constant: the potentials of M + dM are those of M + dM - r - c plus it.
        M = M_grad - r.unsqueeze(-1) - c.unsqueeze(-2)
        res.f, res.g = _ImplicitPotentials.apply(M, res.f, res.g, log_a, log_b, reg)
    return res, M, r, c


def _gradient_not_converged(err, tol, n_iter):
    """The warning for a gradient taken at potentials that have not converged."""
    return (
        f"Sinkhorn did not converge in {n_iter} iterations (error {err:.3g} > tol {tol:g}), and M requires grad: "
        "the gradient in M is implicit, taken from the optimality conditions that only a converged solve "
        "meets, so it is off by about as much as the potentials are. Increase max_iter (or reg, or tol) until "
        "the solve converges."
    )


def _wants_gradient(M, log_a, log_b, reg_m):
    """Whether the potentials must carry a gradient in ``M``; ValueError where none is implemented."""
    if not torch.is_grad_enabled():
        return False
    if any(w is not None and w.requires_grad for w in (log_a, log_b)):
        raise ValueError(
            "The marginals a or b require grad: the plan is differentiable in M only. Pass a.detach() and "
            "b.detach() (or differentiate POT's ot.sinkhorn for gradients in the marginals)."
        )
    if not M.requires_grad:
        return False
    if reg_m is not None:
        raise ValueError(
            "Unbalanced OT (reg_m given) of a cost M that requires grad is not differentiable here: pass "
            "M.detach(), or solve the balanced problem (reg_m=None), whose plan is differentiable in M."
        )
    return True


class _ImplicitPotentials(torch.autograd.Function):
    """The balanced potentials ``(f, g)`` of ``M``, differentiated through their optimality conditions.

    At the solution the plan ``P = a b^T exp((f + g - M) / reg)`` has the marginals ``a`` and
    ``b``; differentiating these conditions (implicit function theorem) gives, for a loss with
    gradients ``(gf, gg)`` in the potentials, ``dL/dM_ij = P_ij (mu_i + nu_j)`` with
    ``K [mu; nu] = [gf; gg]`` and ``K = [[diag(P 1), P], [P^T, diag(P^T 1)]]`` (the
    regularisation cancels). This is the limit of POT's gradient, unrolled through its iterations,
    at convergence, at the cost of one (min(n, m))-sized symmetric pseudo-inverse (an eigh) and
    no graph over the iterations; a warm start is a constant (detached). ``K`` is singular along
    ``(1, -1)`` (``f + t``, ``g - t`` is the same plan): the gradient is exact for functions of
    ``f_i + g_j`` and of ``<a, f> + <b, g>``; the split of a constant between ``f`` and ``g``
    follows a fixed convention.
    """

    @staticmethod
    def forward(ctx, M, f, g, log_a, log_b, reg):
        ctx.save_for_backward(plan_from_potentials(M.detach(), f, g, reg, log_a, log_b))
        return f.clone(), g.clone()

    @staticmethod
    def backward(ctx, grad_f, grad_g):
        (P,) = ctx.saved_tensors
        grad_f = torch.zeros_like(P[..., 0]) if grad_f is None else grad_f
        grad_g = torch.zeros_like(P[..., 0, :]) if grad_g is None else grad_g
        mu, nu = _dual_adjoint(P, grad_f, grad_g)
        return P * (mu.unsqueeze(-1) + nu.unsqueeze(-2)), None, None, None, None, None


def _dual_adjoint(P, gf, gg):
    """``[mu; nu]`` solving ``[[diag(P 1), P], [P^T, diag(P^T 1)]] [mu; nu] = [gf; gg]`` (see
    :class:`_ImplicitPotentials`), by eliminating the longer side: one (k, k) solve, k = min(n, m)."""
    if P.shape[-2] < P.shape[-1]:
        nu, mu = _dual_adjoint(P.transpose(-1, -2), gg, gf)
        return mu, nu
    dtype = P.dtype
    work = exact_dtype(P.device)
    P, gf, gg = P.to(work), gf.to(work), gg.to(work)
    p, q = P.sum(-1), P.sum(-2)
    # An empty row or column (zero mass) has no condition: its entry of the adjoint is zero.
    gf, gg = torch.where(p > 0, gf, 0.0), torch.where(q > 0, gg, 0.0)
    # K [1; -1] = 0: drop the part of the right-hand side along that null vector.
    t = (gf.sum(-1) - gg.sum(-1)) / (P.shape[-2] + P.shape[-1])
    gf = torch.where(p > 0, gf - t.unsqueeze(-1), 0.0)
    gg = torch.where(q > 0, gg + t.unsqueeze(-1), 0.0)
    inv_p = torch.where(p > 0, 1.0 / p.clamp_min(torch.finfo(work).tiny), 0.0)
    # mu = (gf - P nu) / p, then the Schur complement (a graph Laplacian, null vector 1) for nu.
    S = torch.diag_embed(q) - P.transpose(-1, -2) @ (P * inv_p.unsqueeze(-1))
    rhs = gg - (P.transpose(-1, -2) @ (gf * inv_p).unsqueeze(-1)).squeeze(-1)
    scale = q.mean(-1, keepdim=True).unsqueeze(-1)
    S = S + scale / q.shape[-1] + torch.diag_embed((q <= 0).to(work))
    # Once the plan is nearly a permutation, S cancels to rounding along more directions than 1
    # (one per nearly disconnected block of the plan) and a plain solve fails as singular. A
    # pseudo-inverse that drops eigenvalues below rounding (numpy's matrix_rank tolerance) gives
    # the minimum-norm solution; torch computes it by eigh, batched, on CPU and CUDA alike
    # (lstsq's rank-revealing drivers are CPU-only). MPS has no eigh: its (k, k) systems go to the CPU.
    S = (S + S.transpose(-1, -2)) / 2
    rtol = S.shape[-1] * torch.finfo(work).eps
    pinv = torch.linalg.pinv(S.cpu() if S.device.type == "mps" else S, rtol=rtol, hermitian=True).to(S.device)
    nu = (pinv @ rhs.unsqueeze(-1)).squeeze(-1)
    mu = (gf - (P @ nu.unsqueeze(-1)).squeeze(-1)) * inv_p
    return mu.to(dtype), nu.to(dtype)


def _check_init(init, log_a, log_b, M):
    """Warm-start potentials ``(f, g)`` on ``M``'s dtype and device, shaped like the marginals.

    ValueError (not torch's RuntimeError) for anything but a pair of real arrays that
    fit ``(..., n)`` and ``(..., m)``, naming the shapes expected.
    """
    n, m = M.shape[-2], M.shape[-1]
    expected = f"(..., {n}) and (..., {m}) for M of shape {tuple(M.shape)}"
    if not isinstance(init, (tuple, list)) or len(init) != 2:
        raise ValueError(f"A warm start must be a pair of arrays of shapes {expected}; got {type(init).__name__}.")
    out = []
    for t, w in zip(init, (log_a, log_b)):
        t = _tensor(t)
        if t.is_complex() or not (t.is_floating_point() or t.dtype in _INT_DTYPES):
            raise ValueError(f"A warm start must hold real numbers; got dtype {t.dtype}.")
        try:
            # A start is a constant of the new solve: the implicit gradient does not depend on it, and
            # one that carries a graph (a previous solve's potentials of a cost that requires grad)
            # must not be differentiated through these iterations.
            t = t.detach().to(dtype=M.dtype, device=M.device).expand(w.shape)
        except RuntimeError:
            got = tuple(tuple(_tensor(x).shape) for x in init)
            raise ValueError(f"The warm start has shapes {got}, but M needs {expected}.") from None
        if not torch.isfinite(t).all():
            raise ValueError("The warm start holds NaN or infinite values; pass finite potentials (e.g. a previous log's f, g).")
        out.append(t)
    return out


def _round_up(x, digits=2):
    """``x > 0`` with ``digits`` significant digits, rounded up (a bound quoted to the user stays a bound)."""
    exponent = math.floor(math.log10(x)) - digits + 1
    return f"{math.ceil(x / 10.0**exponent) * 10.0**exponent:.{digits}g}"


def _one_of(name, value, pot_name, pot_value, default):
    """An option given under our name or POT's (``None`` = not given), never both."""
    if value is not None and pot_value is not None:
        raise TypeError(f"sinkhorn() got both {name!r} and {pot_name!r}, two spellings of one option.")
    value = pot_value if value is None else value
    return default if value is None else value


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def _tensor(x):
    """``x`` as a tensor; ValueError for what is not an array of numbers (strings, objects)."""
    if torch.is_tensor(x):
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "biufc":
        raise ValueError(f"Expected an array of real numbers, got dtype {arr.dtype}.")
    return torch.as_tensor(arr)


def _real(name, x):
    """``x`` as a real tensor; ValueError for complex input (a cast would drop the imaginary part)."""
    x = _tensor(x)
    if x.is_complex():
        raise ValueError(f"{name} is complex; pass real values (e.g. {name}.real if its imaginary part is zero).")
    return x


def _log_marginal(name, w, like):
    """``log w`` on ``like``'s dtype and device; ``None`` (uniform) for None or empty.

    A user's weights are checked here, once, before their log hides a negative
    entry as NaN (the solver's callers inside the package pass valid ones).
    """
    if w is None:
        return None
    w = _real(name, w)
    if w.numel() == 0:
        return None
    w = w.to(dtype=like.dtype, device=like.device)
    if not torch.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"{name} must hold non-negative finite weights; it has negative, NaN or infinite entries.")
    if not (w.sum(dim=-1) > 0).all():
        raise ValueError(f"{name} must have positive total mass; it is all zeros.")
    return torch.log(w)


def _from_warmstart(warmstart, method, unbalanced, M, log_a, log_b, reg):
    """POT's warm start as our potentials ``(f, g)``.

    POT's balanced plans are ``diag(u) exp(-M / reg) diag(v)``, so ``log u = log a + f / reg``;
    ``sinkhorn`` and ``sinkhorn_log`` take ``(log u, log v)``, ``sinkhorn_stabilized`` takes
    ``(alpha, beta) = reg * (log u, log v)``. ``sinkhorn_unbalanced`` puts ``a b^T`` in its
    kernel, ``diag(u) (a b^T exp(-M / reg)) diag(v)``, so there ``log u = f / reg``.
    """
    log_u, log_v = _check_init(warmstart, *log_marginals(M, log_a, log_b), M)
    if unbalanced:
        return reg * log_u, reg * log_v
    if method.lower() == "sinkhorn_stabilized":
        log_u, log_v = log_u / reg, log_v / reg
    log_a, log_b = log_marginals(M, log_a, log_b)
    return reg * (log_u - log_a), reg * (log_v - log_b)


def _log_dict(res, M, log_a, log_b, reg, unbalanced, out):
    """Our diagnostics and POT's log keys (see :func:`_from_warmstart`), arrays through ``out``."""
    log_a, log_b = log_marginals(M, log_a, log_b)
    log_u, log_v = log_a + res.f / reg, log_b + res.g / reg
    # POT's sinkhorn_stabilized and sinkhorn_unbalanced name their warm start logu, logv.
    logu, logv = (res.f / reg, res.g / reg) if unbalanced else (log_u, log_v)
    return {
        "n_iter": res.n_iter,
        "niter": res.n_iter,
        "err": list(res.errors),
        "converged": res.converged,
        "method": res.method,
        "f": out(res.f),
        "g": out(res.g),
        "log_u": out(log_u),
        "log_v": out(log_v),
        "u": out(log_u.exp()),
        "v": out(log_v.exp()),
        "alpha": out(reg * log_u),
        "beta": out(reg * log_v),
        "logu": out(logu),
        "logv": out(logv),
    }


@on_compute_threads
def sinkhorn(
    a,
    b,
    M,
    reg,
    method="auto",
    numItermax=None,
    stopThr=None,
    verbose=False,
    log=False,
    warn=True,
    warmstart=None,
    *,
    max_iter=None,
    tol=None,
    init=None,
    reg_m=None,
    eps_scaling=0.5,
    check_every=10,
):
    """Entropic (optionally unbalanced) optimal transport plan, batched, on torch.

    The signature is POT's: ``sinkhorn(a, b, M, reg, method, numItermax, stopThr,
    verbose, log, warn, warmstart)`` behaves as ``ot.sinkhorn``, and with ``reg_m`` as
    ``ot.sinkhorn_unbalanced(a, b, M, reg, reg_m)`` (``reg_type="kl"``). Options with
    two spellings (``max_iter``/``numItermax``, ``tol``/``stopThr``, ``init``/``warmstart``)
    take either, not both.

    Parameters
    ----------
    a : array-like of shape (..., n) or None
        Source marginal (sums to one for balanced OT). ``None`` or empty: uniform.
    b : array-like of shape (..., m) or None
        Target marginal. ``None`` or empty: uniform.
    M : array-like or torch.Tensor of shape (..., n, m)
        Cost matrix; leading dimensions are solved as a batch.
    reg : float
        Entropic regularisation, in the unit of ``M``.
    method : str, default="auto"
        ``"auto"``, ``"stabilized"``, ``"log"`` (see the module docstring) or POT's
        ``"sinkhorn"`` (= ``"auto"``), ``"sinkhorn_log"``, ``"sinkhorn_stabilized"``.
    numItermax, max_iter : int, default=1000
        Maximum number of Sinkhorn iterations (all epsilon-scaling stages).
    stopThr, tol : float, default=1e-9
        Stopping threshold; see :func:`sinkhorn_potentials`.
    verbose : bool, default=False
        Print the stopping criterion at each check.
    log : bool, default=False
        Also return a dict: ``n_iter``, ``converged`` (the iterations met ``tol`` and so
        does the returned plan, whose L1 error on both marginals is ``marginal_error``
        for balanced OT), ``method``, potentials ``f``, ``g``, and POT's keys ``niter``, ``err`` (list, one value per check), the
        scalings ``u``, ``v``, ``log_u``, ``log_v`` of ``P = diag(u) exp(-M / reg) diag(v)``,
        ``alpha``, ``beta`` (``reg * log_u``, ``reg * log_v``) and ``logu``, ``logv``
        (the warm start of POT's ``sinkhorn_stabilized`` and ``sinkhorn_unbalanced``).
    warn : bool, default=True
        Emit a :class:`~sklearn.exceptions.ConvergenceWarning` when ``tol``
        is not reached, by the iterations or by the returned plan's marginals.
    warmstart : tuple of arrays, default=None
        POT's warm start, in the convention of the POT solver the call stands for:
        ``(log_u, log_v)``; ``(alpha, beta)`` with ``method="sinkhorn_stabilized"``;
        ``(logu, logv)`` with ``reg_m`` (``sinkhorn_unbalanced``). Skips epsilon-scaling.
    init : tuple of arrays, default=None
        Warm-start potentials ``(f, g)`` as in our log. Skips epsilon-scaling.
    reg_m : float or None, default=None
        Marginal relaxation for unbalanced OT.
    eps_scaling : float in (0, 1) or None, default=0.5
        Factor of the epsilon-scaling schedule; ``None`` disables it.
    check_every : int >= 1, default=10
        Iterations between two convergence checks.

    Returns
    -------
    plan : same kind as ``M`` (numpy or torch)
        Transport plan of shape ``(..., n, m)``, in ``M``'s floating dtype. For an ``M``
        that requires grad, its gradient is implicit (see :func:`sinkhorn_potentials`),
        exact only for a converged solve; the ConvergenceWarning says when it was not.
    log : dict
        Only when ``log=True``.

    Raises
    ------
    ValueError
        For an input or option outside its domain (complex or non-finite costs, a warm start
        of the wrong shape, ``eps_scaling`` outside (0, 1), ...); the message says what to pass.
        Also for a gradient not implemented: ``a`` or ``b`` requiring grad, or unbalanced OT
        (``reg_m``) of an ``M`` that requires grad (the balanced plan is differentiable in ``M``).
    FloatingPointError
        With ``method="stabilized"`` (or ``"sinkhorn_stabilized"``) when its scalings stop
        being finite; ``"auto"`` then continues in the log domain instead.

    Notes
    -----
    What still differs from POT 0.9 (arrays, batches, methods, overflow, epsilon-scaling, the
    stopping criterion, ``log`` keys, unbalanced OT, options, warnings) is tabulated in
    ``docs/ot.md``.

    Examples
    --------
    >>> import numpy as np
    >>> from sktransfer_cluster.ot import sinkhorn
    >>> M = np.array([[0.0, 1.0], [1.0, 0.0]])
    >>> P = sinkhorn([0.5, 0.5], [0.5, 0.5], M, reg=0.1)
    >>> np.round(P.sum(axis=1), 6).tolist()
    [0.5, 0.5]
    >>> P, log = sinkhorn([0.5, 0.5], [0.5, 0.5], M, 0.1, "sinkhorn_log", numItermax=100, log=True)
    >>> sorted(set(log) & {"u", "v", "log_u", "log_v", "niter", "err"})
    ['err', 'log_u', 'log_v', 'niter', 'u', 'v']
    """
    _scheme(method)  # fail on an unknown name before any work
    max_iter = _one_of("max_iter", max_iter, "numItermax", numItermax, 1000)
    tol = _one_of("tol", tol, "stopThr", stopThr, 1e-9)
    _one_of("init", init, "warmstart", warmstart, None)  # one option in two conventions
    # Before any use: a warm start in POT's stabilised convention is divided by reg.
    _check_options(reg, reg_m, max_iter, tol, check_every, eps_scaling)
    reg = float(reg)
    M_in = _real("M", M)
    out_dtype = M_in.dtype if M_in.is_floating_point() else exact_dtype(M_in.device)
    # The package's device-to-dtype rule: float64 on the CPU (float32 loses the marginals
    # at small reg), the cost's own float type on accelerators.
    work_dtype = working_dtype(M_in.device, accelerator=out_dtype)
    Mt = M_in.to(work_dtype)
    log_a, log_b = _log_marginal("a", a, Mt), _log_marginal("b", b, Mt)
    balanced = reg_m is None or math.isinf(reg_m)
    if Mt.ndim >= 2 and Mt.numel() > 0:  # else _solve says what M must be
        _check_marginal_shape("a", log_a, (*Mt.shape[:-2], Mt.shape[-2]))
        _check_marginal_shape("b", log_b, (*Mt.shape[:-2], Mt.shape[-1]))
        if warmstart is not None:
            init = _from_warmstart(warmstart, method, not balanced, Mt, log_a, log_b, reg)
    res, Ms, r, c = _solve(
        Mt, reg, log_a, log_b, reg_m, init, max_iter, tol, check_every, eps_scaling, method, verbose,
        warn_gradient=False,
    )
    # The plan comes from the shifted costs and their potentials, where (f + g - M) / reg
    # has not lost its precision to the costs' offset.
    P = torch.nan_to_num(plan_from_potentials(Ms, res.f, res.g, reg, log_a, log_b, balanced=balanced), nan=0.0)
    converged = res.converged
    if balanced:
        wa, wb = (w.exp() for w in log_marginals(Mt, log_a, log_b))
        marginal_error = _marginal_error(P, wa, wb)
        # The solver's criterion is read off its own arithmetic; the plan handed back is what
        # must meet tol (issue 30 S2: a plan 1.0 off its marginals was called converged).
        # Allowed beyond tol: the rounding of the sums themselves.
        roundoff = 4 * torch.finfo(P.dtype).eps * (P.shape[-1] + P.shape[-2])
        plan_ok = marginal_error < tol + roundoff
        if not converged:
            # Stopped early, rows or columns may hold more than their marginal (a capped entry can
            # reach min(a_i, b_j) in every cell). Shrink rows, then columns, to at most their
            # marginals: the plan stays the best one reached where it was feasible, and its L1
            # marginal error is at most 2 (twice the missing mass).
            P = P * (wa / P.sum(-1).clamp_min(torch.finfo(P.dtype).tiny)).clamp_max(1.0).unsqueeze(-1)
            P = P * (wb / P.sum(-2).clamp_min(torch.finfo(P.dtype).tiny)).clamp_max(1.0).unsqueeze(-2)
            marginal_error = _marginal_error(P, wa, wb)
        elif not plan_ok:
            converged = False
    if warn and not converged:
        if res.converged:
            spread = float(Ms.detach().amax())
            message = (
                f"Sinkhorn's plan is off its marginals by {marginal_error:.3g} (L1) > tol {tol:g}, although "
                f"its iterations met tol: at reg={reg:g} float precision cannot resolve costs spread over "
                f"{spread:.3g}. Raise reg or rescale M."
            )
        else:
            message = (
                f"Sinkhorn did not converge in {max_iter} iterations (error {res.err:.3g} > tol "
                f"{tol:g}); increase max_iter or reg."
            )
            if balanced:
                mass_a, mass_b = float(wa.sum()), float(wb.sum())
                gap = abs(mass_a - mass_b)
                if gap > tol + 4 * torch.finfo(wa.dtype).eps * max(mass_a, mass_b):
                    # No number of iterations helps: say the cause, not the usual remedy.
                    in_dtype, in_eps = _marginals_precision(a, b)
                    if gap <= (wa.shape[-1] + wb.shape[-1]) * in_eps * max(mass_a, mass_b):
                        # Weights normalised in float32 sum a rounding apart (V11 C1): normalising
                        # them again in that dtype cannot close the gap.
                        message = (
                            f"Sinkhorn did not converge in {max_iter} iterations: the masses of a and b differ "
                            f"by {gap:.3g}, the rounding of their {in_dtype} entries, so tol {tol:g} is below "
                            f"what {in_dtype} marginals allow. Pass tol above {_round_up(2 * gap)}, or pass b rescaled to "
                            "a's mass in float64 (b * (a.sum() / b.sum()))."
                        )
                    else:
                        message = (
                            f"Sinkhorn did not converge in {max_iter} iterations: a and b hold different masses "
                            f"({mass_a:.6g} and {mass_b:.6g}), which no plan of balanced OT can match. Normalise "
                            "them to the same total, or pass reg_m for unbalanced OT."
                        )
        if not res.converged and Mt.requires_grad and torch.is_grad_enabled():
            message += (
                " M requires grad: its gradient is implicit, taken from the optimality conditions that "
                "only a converged solve meets, so it is off as well."
            )
        # Attributed to the caller's line (not the thread decorator's), so that warnings from two
        # call sites are two warnings under Python's default filter.
        _warn_caller(message, ConvergenceWarning)
    out = (lambda t: t.to(out_dtype)) if torch.is_tensor(M) else (lambda t: t.to(out_dtype).numpy())
    if not log:
        return out(P)
    res.f, res.g, res.converged = res.f + r, res.g + c, converged
    log_dict = _log_dict(res, Mt, log_a, log_b, reg, not balanced, out)
    if balanced:  # L1 error of both marginals of the returned plan
        log_dict["marginal_error"] = marginal_error
    return out(P), log_dict


def _marginals_precision(a, b):
    """The coarsest float dtype among the marginals as given (``"float64"`` for None or integers) and its eps."""
    coarsest = torch.float64
    for w in (a, b):
        if w is None:
            continue
        dtype = _tensor(w).dtype
        if dtype.is_floating_point and torch.finfo(dtype).eps > torch.finfo(coarsest).eps:
            coarsest = dtype
    return str(coarsest).replace("torch.", ""), torch.finfo(coarsest).eps


def _marginal_error(P, wa, wb):
    """L1 error of both marginals of ``P``, max over the batch."""
    P = P.detach()
    return float(((P.sum(-1) - wa).abs().sum(-1) + (P.sum(-2) - wb).abs().sum(-1)).max())
