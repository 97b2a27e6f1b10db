"""The cross-entropy method (CEM), batched over the population.

De Boer, Kroese, Mannor & Rubinstein, *A tutorial on the cross-entropy method*
(2005); Algorithm 1 of Alami, Kaddah & Read, *Transferable Deep Metric Learning
for Clustering*. One function, :func:`cross_entropy_method`, maximises a black-box
score over real vectors: sample a population from ``N(mean, diag(std^2))``, score
it in **one call** of a batched score function, refit ``mean`` and ``std`` to the
elite fraction, repeat.

Torch only; every draw comes from an explicit :class:`torch.Generator` (global
seeds are never touched), so a fixed generator state gives identical results.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = ["CEMResult", "cross_entropy_method"]


class CEMResult(NamedTuple):
    """Outcome of :func:`cross_entropy_method`.

    Attributes
    ----------
    best : torch.Tensor of shape (dim,)
        Highest-scoring vector seen (the sampled ones and, with
        ``evaluate_mean=True``, the final mean).
    best_score : float
    mean, std : torch.Tensor of shape (dim,)
        The sampling distribution after the last iteration.
    n_iter : int
        Iterations run.
    history : list of dict
        Per iteration: ``best`` (best score so far), ``elite_mean`` (mean elite
        score), ``population_mean`` (mean finite score), ``std_mean``.
    """

    best: torch.Tensor
    best_score: float
    mean: torch.Tensor
    std: torch.Tensor
    n_iter: int
    history: list


def cross_entropy_method(
    score_fn,
    mean,
    std,
    *,
    population=100,
    elite_frac=0.1,
    n_iter=30,
    generator=None,
    smoothing=0.0,
    min_std=0.0,
    evaluate_mean=True,
    tol=None,
):
    """Maximise ``score_fn`` with the cross-entropy method.

    Each iteration draws ``population`` vectors ``w = mean + std * eps`` with
    ``eps ~ N(0, I)`` from ``generator``, scores them with a single call
    ``score_fn(W)`` on the stacked ``(population, dim)`` tensor, keeps the
    ``ceil(elite_frac * population)`` best and refits a diagonal Gaussian to
    them::

        mean <- smoothing * mean + (1 - smoothing) * elite.mean(0)
        std  <- max(smoothing * std + (1 - smoothing) * elite.std(0), min_std)

    (``std`` is the population standard deviation of the elite). The best
    vector ever scored is kept, so the returned score never decreases with
    ``n_iter``.

    Parameters
    ----------
    score_fn : callable
        ``score_fn(W) -> scores``: ``W`` of shape ``(P, dim)``, scores of shape
        ``(P,)`` (higher is better). Called once per iteration with the whole
        population, so it should be vectorised (``bmm``/``einsum``), not a loop.
        Non-finite scores rank last.
    mean : torch.Tensor of shape (dim,)
        Initial mean (also sets dtype and device of the samples).
    std : float or torch.Tensor of shape (dim,)
        Initial standard deviation(s), > 0.
    population : int, default=100
        Vectors drawn per iteration (``>= 1``).
    elite_frac : float, default=0.1
        Fraction of the population refitted to, in ``(0, 1]``; at least one.
    n_iter : int, default=30
        Number of iterations (``>= 1``).
    generator : torch.Generator, default=None
        Source of the Gaussian draws; ``None`` uses torch's global generator
        (not reproducible -- estimators always pass one). Must live on CPU; the
        draws are moved to ``mean``'s device.
    smoothing : float, default=0.0
        Weight of the previous ``mean``/``std`` in the update, in ``[0, 1)``
        (0 = the plain CEM update).
    min_std : float, default=0.0
        Floor on every standard deviation, which keeps exploring after the
        elite has collapsed.
    evaluate_mean : bool, default=True
        Also score the final ``mean`` (one extra call with a batch of one) and
        return it as ``best`` when it scores higher.
    tol : float, default=None
        Stop early when the largest ``std`` falls below ``tol``.

    Returns
    -------
    CEMResult

    Raises
    ------
    FloatingPointError
        If every score of an iteration is NaN or infinite.

    Examples
    --------
    >>> import torch
    >>> from sktransfer_cluster.cluster.c2m.cem import cross_entropy_method
    >>> target = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    >>> res = cross_entropy_method(lambda W: -((W - target) ** 2).sum(1),
    ...                            torch.zeros(3, dtype=torch.float64), 1.0,
    ...                            population=64, elite_frac=0.3, n_iter=40,
    ...                            generator=torch.Generator().manual_seed(0))
    >>> bool(torch.allclose(res.best, target, atol=1e-3))
    True
    """
    if population < 1:
        raise ValueError(f"population must be >= 1, got {population}.")
    if not 0.0 < elite_frac <= 1.0:
        raise ValueError(f"elite_frac must be in (0, 1], got {elite_frac}.")
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, got {n_iter}.")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}.")
    mean = torch.as_tensor(mean).clone()
    if mean.ndim != 1:
        raise ValueError(f"mean must be a 1-D tensor, got shape {tuple(mean.shape)}.")
    std = torch.as_tensor(std, dtype=mean.dtype, device=mean.device).expand_as(mean).clone()
    if not bool((std > 0).all()):
        raise ValueError("std must be > 0.")
    dim = mean.shape[0]
    n_elite = max(1, int(math.ceil(elite_frac * population)))
    best, best_score = None, -math.inf
    history = []
    it = 0
    for it in range(1, n_iter + 1):
        eps = torch.randn(population, dim, generator=generator, dtype=mean.dtype, device="cpu")
        W = mean + std * eps.to(mean.device)
        scores = torch.as_tensor(score_fn(W)).reshape(-1).to(mean.dtype)
        if scores.shape[0] != population:
            raise ValueError(f"score_fn returned {scores.shape[0]} scores for {population} candidates.")
        finite = torch.isfinite(scores)
        if not bool(finite.any()):
            raise FloatingPointError(
                f"cross_entropy_method: every score of iteration {it} is NaN or infinite; "
                "check the score function (a diverged model?)."
            )
        ranked = torch.where(finite, scores, torch.full_like(scores, -math.inf))
        # Stable sort: ties keep population order, so results are deterministic.
        order = torch.sort(ranked, descending=True, stable=True).indices
        elite = W[order[:n_elite]]
        top = float(ranked[order[0]])
        if top > best_score:
            best_score, best = top, W[order[0]].clone()
        mean = smoothing * mean + (1.0 - smoothing) * elite.mean(0)
        new_std = elite.std(0, unbiased=False) if n_elite > 1 else torch.zeros_like(std)
        std = (smoothing * std + (1.0 - smoothing) * new_std).clamp_min(min_std)
        history.append(
            {
                "best": best_score,
                "elite_mean": float(ranked[order[:n_elite]].mean()),
                "population_mean": float(scores[finite].mean()),
                "std_mean": float(std.mean()),
            }
        )
        if tol is not None and float(std.max()) < tol:
            break
    if evaluate_mean:
        s = float(torch.as_tensor(score_fn(mean.unsqueeze(0))).reshape(-1)[0])
        if math.isfinite(s) and s > best_score:
            best_score, best = s, mean.clone()
    return CEMResult(best, best_score, mean, std, it, history)
