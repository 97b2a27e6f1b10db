"""TDCM's centroid-updating attention block (Zhang & Zhao, *Transferable Deep Clustering Model*)."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["CentroidUpdateBlock", "centroids_from_stats"]


class CentroidUpdateBlock(nn.Module):
    """One learnable centroid-updating block of TDCM (Zhang & Zhao).

    Scores every sample/centroid pair with
    ``q_ij = (W_Q (z_i - c_j)) . (W_K (z_i - c_j)) = p^T W_Q^T W_K p``,
    assigns ``delta_ij = softmax_j(-act(q_ij) / tau)`` and moves each centroid to
    its ``delta``-weighted mean of the samples.

    ``W_Q`` and ``W_K`` are symmetric by construction, ``(A + A^T) / 2`` of free
    parameters ``A`` (exactly symmetric in floating point), unless
    ``symmetric=False`` (the paper's variant-R ablation), where ``W = A``.

    Parameters
    ----------
    dim : int
        Embedding dimension ``b``.
    symmetric : bool, default=True
    activation : {"relu", "leaky_relu"}, default="relu"
        The non-decreasing ``sigma`` applied to the quadratic score.
    negative_slope : float, default=0.01
        Slope of ``"leaky_relu"`` for negative scores.

    Notes
    -----
    All pairs are scored in ``O(n b^2 + n K b)`` (not the ``O(n K b^2)`` of the
    direct formula): with ``S = sym(W_Q^T W_K)``,
    ``q_ij = z_i^T S z_i - 2 z_i^T S c_j + c_j^T S c_j``.
    """

    def __init__(self, dim, symmetric=True, activation="relu", negative_slope=0.01):
        super().__init__()
        if activation not in ("relu", "leaky_relu"):
            raise ValueError(f"activation must be 'relu' or 'leaky_relu', got {activation!r}.")
        self.dim = int(dim)
        self.symmetric = bool(symmetric)
        self.activation = activation
        self.negative_slope = float(negative_slope)
        self.A_q = nn.Parameter(torch.eye(self.dim))
        self.A_k = nn.Parameter(torch.eye(self.dim))

    @torch.no_grad()
    def reset_parameters(self, generator, noise=0.1):
        """``A = I + noise * U(-1, 1) / sqrt(dim)`` drawn from ``generator``.

        Starting near the identity starts near soft k-means (Theorem 4.2 of the
        paper: ``W_Q = W_K = I``, ``sigma`` = identity gives k-means); the small
        noise makes ``W_Q`` and ``W_K`` differ so both are learned.
        """
        for A in (self.A_q, self.A_k):
            u = torch.rand(A.shape, generator=generator, dtype=A.dtype, device="cpu") * 2.0 - 1.0
            A.copy_(torch.eye(self.dim, dtype=A.dtype) + noise * u.to(A.device) / math.sqrt(self.dim))
        return self

    def matrices(self):
        """``(W_Q, W_K)``: symmetrised parameters, or the raw ones when ``symmetric=False``."""
        if self.symmetric:
            return 0.5 * (self.A_q + self.A_q.T), 0.5 * (self.A_k + self.A_k.T)
        return self.A_q, self.A_k

    def act(self, q):
        if self.activation == "relu":
            return torch.relu(q)
        return torch.nn.functional.leaky_relu(q, self.negative_slope)

    def quadratic(self, Z, C):
        """``q_ij = (W_Q (z_i - c_j)) . (W_K (z_i - c_j))`` for all pairs, shape (n, K)."""
        WQ, WK = self.matrices()
        M = WQ.T @ WK
        S = 0.5 * (M + M.T)
        ZS = Z @ S
        CS = C @ S
        return (ZS * Z).sum(1, keepdim=True) - 2.0 * ZS @ C.T + (CS * C).sum(1).unsqueeze(0)

    def logits(self, Z, C, tau):
        """``-act(q) / tau``: the assignment logits (the score ``l(z_i, c_j)`` of the paper)."""
        return -self.act(self.quadratic(Z, C)) / tau

    def assign(self, Z, C, tau):
        """``delta`` of shape (n, K): softmax over centroids of :meth:`logits`."""
        return torch.softmax(self.logits(Z, C, tau), dim=1)

    @staticmethod
    def update(Z, delta, C_prev):
        """``c_j = sum_i delta_ij z_i / sum_i delta_ij``; a centroid with no mass stays put."""
        mass = delta.sum(0)
        return centroids_from_stats(delta.T @ Z, mass, C_prev)

    def forward(self, Z, C, tau):
        """One block: ``(delta, new centroids)``."""
        delta = self.assign(Z, C, tau)
        return delta, self.update(Z, delta, C)

def centroids_from_stats(weighted_sum, mass, C_prev):
    """Centroids ``weighted_sum / mass`` from (possibly streamed) sufficient statistics.

    ``weighted_sum`` (K, b) is ``sum_i delta_ij z_i`` and ``mass`` (K,) is
    ``sum_i delta_ij``; rows with zero mass keep ``C_prev``.
    """
    tiny = torch.finfo(mass.dtype).tiny
    new = weighted_sum / mass.clamp_min(tiny).unsqueeze(1)
    return torch.where((mass > 0).unsqueeze(1), new, C_prev)
