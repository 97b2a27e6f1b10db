"""The semi-dual of entropic OT with fixed row marginals, solved by damped Newton.

Every estimator that transports points to centres solves this problem (OT-Lloyd,
the autoencoder's minibatch loss, ``SinkhornKMeans.transport_plan``): only the ``m``
column potentials are unknowns, the row potentials follow in closed form, and the
(m, m) Newton system is small. Passes over the (n, m) costs run in row chunks.
"""

from __future__ import annotations

import math

import torch

from ..base.runtime import on_compute_threads
from .plan import SinkhornResult

__all__ = ["CHUNK_ENTRIES", "newton_iterations", "newton_solve", "row_chunks", "semi_dual_newton", "semi_dual_pass"]


# Rows per chunk of the semi-dual passes: a chunk of an (n, m) array stays in cache
# (2^17 entries, 1 MiB in float64) and the temporaries are reused, not page-faulted.
CHUNK_ENTRIES = 2**17

def row_chunks(n, m):
    rows = max(1, CHUNK_ENTRIES // max(m, 1))
    return [(start, min(start + rows, n)) for start in range(0, n, rows)]

def semi_dual_pass(M, h, log_a, f_out, chunks, X=None):
    """One pass of the semi-dual at column potentials ``h`` (``log b`` included).

    The row potentials ``f = -logsumexp_j (h_j - M_ij)`` make every row of the plan sum
    to ``a``; they are written to ``f_out``. Returns ``(<a, f>, c, H, moment)``: the
    column sums ``c = P^T 1``, ``H = P^T diag(1/a) P`` and, when ``X`` (n, d) is given,
    ``moment = P^T diag(1/a) X`` (else None), accumulated chunk by chunk.
    """
    m = M.shape[-1]
    c = torch.zeros(m, dtype=M.dtype, device=M.device)
    H = torch.zeros(m, m, dtype=M.dtype, device=M.device)
    af = torch.zeros((), dtype=M.dtype, device=M.device)
    moment = None if X is None else torch.zeros(m, X.shape[-1], dtype=M.dtype, device=M.device)
    uniform = log_a is None
    for start, stop in chunks:
        Q = torch.sub(h, M[start:stop])
        top = Q.amax(-1, keepdim=True)
        Q.sub_(top).exp_()
        s = Q.sum(-1, keepdim=True)
        Q.div_(s)  # rows of P / a
        f = f_out[start:stop]
        torch.add(top.squeeze(-1), s.squeeze(-1).log_(), out=f)
        f.neg_()
        if X is not None:
            moment.addmm_(Q.transpose(0, 1), X[start:stop])
        if uniform:
            c += Q.sum(0)
            H.addmm_(Q.transpose(0, 1), Q)
            af += f.sum()
        else:
            a = log_a[start:stop].exp()
            c.addmv_(Q.transpose(0, 1), a)
            H.addmm_((Q * a.unsqueeze(-1)).transpose(0, 1), Q)
            af += (a * f).sum()
    if uniform:
        n = M.shape[0]
        c /= n
        H /= n
        af /= n
    return af, c, H, moment

@on_compute_threads
def semi_dual_newton(M, log_b, g=None, *, log_a=None, max_iter=100, tol=1e-5, max_step=30.0):
    """Balanced entropic OT with few columns, by damped Newton on the semi-dual (reg = 1).

    For costs ``M`` (n, m) with ``m`` small (clusters), the row potentials have a
    closed form given the column ones, ``f_i = -log sum_j b_j exp(g_j - M_ij)``, so the
    problem is the concave maximisation of ``F(g) = <a, f(g)> + <b, g>`` over ``m``
    variables. Its gradient is ``b - P^T 1`` and its Hessian the graph Laplacian
    ``-(diag(P^T 1) - P^T diag(1/a) P)``, an (m, m) matrix accumulated in the same pass
    over ``M``. An iteration costs about one Sinkhorn iteration and converges
    quadratically near the optimum, where Sinkhorn's linear rate can need hundreds of
    iterations (well-separated clusters under a size prior). Steps are capped (a
    trust radius that grows while capped steps succeed) and halved until ``F``
    increases enough (Armijo); when Newton's
    direction fails, Sinkhorn's column update (never a descent step) is taken instead.
    Passes run over row chunks, so the extra memory is ``O(n)`` beside ``M``.

    Same plan convention as :func:`sinkhorn_potentials` with ``reg=1``:
    ``P_ij = a_i b_j exp(f_i + g_j - M_ij)``. Rows are exact at every iterate; the
    criterion is the L1 column-marginal error ``||P^T 1 - b||_1``.

    Parameters
    ----------
    M : torch.Tensor of shape (n, m)
        Cost divided by the regularisation.
    log_b : torch.Tensor of shape (m,)
        Log column marginal (sums to one). Columns of zero mass (``-inf``) are left out of
        the Newton system; their ``g_j`` stays at its start and their plan column is zero.
    g : torch.Tensor of shape (m,), default=None
        Warm-start column potentials (zeros when None).
    log_a : torch.Tensor of shape (n,), default=None
        Log row marginal (sums to one); uniform when None.
    max_iter : int, default=100
        Maximum passes over ``M`` (objective evaluations).
    tol : float, default=1e-5
        Threshold on the column-marginal L1 error.
    max_step : float, default=30.0
        Initial cap on ``max_j |step_j|`` of a Newton step; a capped step accepted
        whole quadruples the cap for the next one.

    Returns
    -------
    SinkhornResult
        ``f``, ``g``, ``n_iter`` (passes), ``err``, ``converged``,
        ``method="newton"``, ``errors`` (the error at each accepted iterate).

    Raises
    ------
    FloatingPointError
        When the column sums of the first pass (or any later one) are not finite: costs
        that make them so are NaN, -inf, or a row with no finite cost (e.g. squared
        distances that overflow). The message says to rescale the rows; no further pass is
        made. A single +inf cell is a forbidden cell, not an error: the plan puts no mass
        there (a column of +inf with positive mass cannot be met and is reported as not
        converged).
    """
    return newton_solve(M, log_b, g, log_a, max_iter, tol, max_step)[0]

def newton_solve(M, log_b, g, log_a, max_iter, tol, max_step, X=None):
    """:func:`semi_dual_newton`; also returns ``P^T diag(1/a) X`` at the result (None without ``X``)."""
    n, m = M.shape
    log_b = log_b.to(M.dtype)
    g = torch.zeros(m, dtype=M.dtype, device=M.device) if g is None else g.to(M.dtype).clone()
    b = log_b.exp()
    chunks = row_chunks(n, m)
    f, f_new = torch.empty(n, dtype=M.dtype, device=M.device), torch.empty(n, dtype=M.dtype, device=M.device)

    # The moment P^T diag(1/a) X costs m*d per row, against about 3*m for the rest of a
    # pass: for wide X it is cheaper to leave it out of the line search's passes and
    # make one more pass at the result (same value, computed at the same g).
    fused = X is not None and X.shape[-1] <= 2 * m

    def objective(g, f_out):
        af, c, H, moment = semi_dual_pass(M, g + log_b, log_a, f_out, chunks, X if fused else None)
        return af + (b * g).sum(), c, (H, moment)

    g, c, moment, (f, f_new), passes, err, errors = newton_iterations(
        objective, log_b, g, max_iter, tol, max_step, (f, f_new)
    )
    if X is not None and not fused:
        moment = semi_dual_pass(M, g + log_b, log_a, f_new, chunks, X)[3]
    res = SinkhornResult(f=f, g=g, n_iter=passes, err=err, converged=err < tol, method="newton", errors=errors)
    return res, c, moment


def newton_iterations(objective, log_b, g, max_iter, tol, max_step, buffers=(None, None)):
    """The damped Newton loop of :func:`newton_solve` over any ``objective``.

    ``objective(g, buffer)`` evaluates the semi-dual at column potentials ``g`` in one
    pass over the rows, wherever they are (one tensor, or the chunks of a Dask array),
    writing the row potentials into ``buffer`` if it keeps them, and returns
    ``(F, c, (H, moment))``. ``buffers``: the current and the spare buffer, swapped as
    candidates are accepted.

    Returns ``(g, c, moment, buffers, passes, err, errors)``: the final potentials, their
    column sums and moment, the buffers with the final row potentials first, the passes
    made, the final L1 column error and the error at each accepted iterate. Raises
    ``FloatingPointError`` at the first pass whose column error is not finite.
    """
    b = log_b.exp()
    # Columns of zero mass (log b_j = -inf) hold none of the plan whatever g_j is: they are kept
    # out of the Newton system and out of Sinkhorn's update, and g_j stays where it started. (Left
    # in, the update set g_j = -inf, the objective's b_j g_j became 0 * (-inf) = NaN and no step
    # passed the Armijo test again: V11 A2.) With every b_j > 0 the arithmetic is unchanged.
    active = None if bool((b > 0).all()) else (b > 0).cpu()
    m = g.shape[0] if active is None else int(active.sum())
    f, f_new = buffers
    F, c, (H, moment) = objective(g, f)
    passes = 1
    errors = []
    eye = torch.eye(m, dtype=torch.float64)
    radius = max_step
    while True:
        grad = b - c
        err = float(grad.abs().sum())
        errors.append(err)
        if not math.isfinite(err):
            # NaN or infinite costs (squared distances of finite rows beyond the float range, or
            # NaN rows): no pass can mend them, and a NaN error never meets tol (V11 B2: 300 passes
            # per solve, 36 CPU s for SinkhornKMeans on 4 rows at +-1e308).
            raise FloatingPointError(
                "The semi-dual OT solve's column sums are not finite (error "
                f"{err}): its costs hold NaN or -inf, or a row with no finite cost, from rows that are NaN or "
                "infinite or from squared distances of finite rows so large that they overflow the float range. "
                "Rescale the rows (e.g. StandardScaler, or divide X by its largest absolute value) so that their "
                "squared distances stay finite."
            )
        if err < tol or passes >= max_iter:
            break
        # Newton direction: (diag(c) - H) step = b - c. The rank-one term removes the
        # Laplacian's null vector (a constant shift of g); the ridge keeps an empty
        # cluster's row solvable. The (m, m) system is solved on the CPU in float64 on any
        # device: in float32 the ridge vanishes beside the rank-one term (MPS has no float64).
        if active is None:
            L = (torch.diag(c) - H + c.mean() / m).to("cpu", torch.float64) + eye * (1e-12 * float(c.max()))
            rhs = grad.to("cpu", torch.float64).unsqueeze(-1)
            step = torch.linalg.solve(L, rhs).squeeze(-1).to(g.device, g.dtype)
            step = step - step.mean()
        else:  # the same system on the columns with mass; the others do not move
            c_on = c.cpu()[active]
            L = (torch.diag(c_on) - H.cpu()[active][:, active] + c_on.mean() / m).to(torch.float64)
            L = L + eye * (1e-12 * float(c_on.max()))
            rhs = grad.cpu()[active].to(torch.float64).unsqueeze(-1)
            sub = torch.linalg.solve(L, rhs).squeeze(-1)
            step = torch.zeros(g.shape[0], dtype=g.dtype)
            step[active] = (sub - sub.mean()).to(g.dtype)
            step = step.to(g.device)
        slope = float((grad * step).sum())
        big = float(step.abs().max())
        accepted = False
        if math.isfinite(big) and slope > 0:
            t = min(1.0, radius / big) if big > 0 else 1.0
            for tries in range(4):
                if passes >= max_iter:
                    break
                cand = g + t * step
                F_new, c_new, (H_new, moment_new) = objective(cand, f_new)
                passes += 1
                if F_new >= F + 1e-4 * t * slope:
                    g, F, c, H, moment = cand, F_new, c_new, H_new, moment_new
                    f, f_new = f_new, f
                    accepted = True
                    # A capped step taken whole: the objective is close to linear that far
                    # (near-hard assignments), so let the next one go further.
                    radius = 4.0 * radius if tries == 0 and t < 1.0 else max(max_step, t * big)
                    break
                t *= 0.5
        if not accepted:
            if passes >= max_iter:
                break
            if math.isfinite(big) and slope > 0 and big > 0:
                # Every length tried overshot (near-hard assignments: the objective is almost
                # piecewise linear, Newton's step far too long): the next step starts from the next
                # shorter one. Left at its size, every later step overshot again and only the
                # Sinkhorn updates below moved g, a few hundredths per pass (V10 #8: 0.033 of the
                # mass off after 200 passes where POT converges).
                radius = t * big
            # Sinkhorn's column update g_j += log b_j - log c_j (never decreases F).
            if active is None:
                g = g + log_b - c.clamp_min(torch.finfo(g.dtype).tiny).log()
                g = g - g.max()
            else:
                on = active.to(g.device)
                g = torch.where(on, g + log_b - c.clamp_min(torch.finfo(g.dtype).tiny).log(), g)
                g = g - g[on].max()
            F, c, (H, moment) = objective(g, f)
            passes += 1
    return g, c, moment, (f, f_new), passes, err, errors
