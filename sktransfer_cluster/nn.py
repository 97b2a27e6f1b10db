"""Small torch building blocks shared by the estimators.

Modules are initialised from an explicit :class:`torch.Generator` through
:func:`init_module`, so that seeding never touches torch's global RNG.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "mlp",
    "AutoEncoder",
    "init_module",
    "CentroidUpdateBlock",
    "centroids_from_stats",
    "pair_enumerate",
    "PairEnum",
    "SimilarityNetwork",
]


def mlp(dims, activation=nn.ReLU, batch_norm=False, final_activation=False):
    """A fully connected network ``dims[0] -> dims[1] -> ... -> dims[-1]``.

    Parameters
    ----------
    dims : sequence of int
        Layer widths, input first.
    activation : callable returning an nn.Module, default=nn.ReLU
    batch_norm : bool, default=False
        Batch normalisation after each hidden linear layer.
    final_activation : bool, default=False
        Also apply the activation (and batch norm) after the last layer.
    """
    layers = []
    n = len(dims) - 1
    for i in range(n):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < n - 1 or final_activation:
            if batch_norm:
                layers.append(nn.BatchNorm1d(dims[i + 1]))
            layers.append(activation())
    return nn.Sequential(*layers)


class AutoEncoder(nn.Module):
    """Symmetric MLP autoencoder ``d -> hidden_dims -> d`` (the code is ``hidden_dims[-1]``).

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int
        Encoder widths; the decoder mirrors them.
    """

    def __init__(self, n_features, hidden_dims):
        super().__init__()
        dims = [n_features, *hidden_dims]
        self.encoder = mlp(dims)
        self.decoder = mlp(dims[::-1])

    def forward(self, x):
        z = self.encoder(x)
        return z, self.decoder(z)


@torch.no_grad()
def init_module(module, generator):
    """Re-initialise every Linear/Conv layer of ``module`` from ``generator``.

    Uses PyTorch's default scheme (Kaiming-uniform weights with ``a = sqrt(5)``,
    uniform biases in ``+-1/sqrt(fan_in)``) but draws from the given generator,
    leaving the global RNG untouched. Returns ``module``.
    """
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=generator)
            if m.bias is not None:
                fan_in = nn.init._calculate_fan_in_and_fan_out(m.weight)[0]
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(m.bias, -bound, bound, generator=generator)
    return module


# ------------------------------------------------------- pair enumeration and the G network
# Hsu, Lv & Kira, *Learning to cluster in order to transfer across domains and tasks*.


def pair_enumerate(a, b=None):
    """All ordered pairs of rows, concatenated: row ``i * m + j`` is ``[a_i, b_j]``.

    Vectorised with ``expand`` + ``cat`` (no Python loop over pairs). Self-pairs
    are included, as in the paper's pair-enumeration layer: a (10, 512) input
    gives a (100, 1024) output. Memory is O(n m d).

    Parameters
    ----------
    a : torch.Tensor of shape (n, d)
    b : torch.Tensor of shape (m, d), default=None
        Defaults to ``a`` (all n^2 pairs of a minibatch).

    Returns
    -------
    torch.Tensor of shape (n * m, 2 * d)
    """
    if b is None:
        b = a
    n, m = a.shape[0], b.shape[0]
    left = a.unsqueeze(1).expand(n, m, a.shape[1])
    right = b.unsqueeze(0).expand(n, m, b.shape[1])
    return torch.cat([left, right], dim=2).reshape(n * m, a.shape[1] + b.shape[1])


class PairEnum(nn.Module):
    """Module form of :func:`pair_enumerate`."""

    def forward(self, a, b=None):
        return pair_enumerate(a, b)


class SimilarityNetwork(nn.Module):
    """The pairwise similarity network ``G``: backbone -> pair enumeration -> FC -> 2 classes.

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int, default=(128, 64)
        Backbone widths (batch norm + ReLU after each); the last is the feature size.
    pair_hidden : int, default=64
        Width of the hidden fully connected layer on the concatenated pairs.
    batch_norm : bool, default=True

    ``forward(x)`` returns logits of shape (n, n, 2) for all ordered pairs of the
    minibatch (class 1 = similar); ``forward(x, x2)`` those of the (n, m) cross pairs.
    """

    def __init__(self, n_features, hidden_dims=(128, 64), pair_hidden=64, batch_norm=True):
        super().__init__()
        dims = [n_features, *hidden_dims]
        self.backbone = mlp(dims, batch_norm=batch_norm, final_activation=True)
        self.pair_enum = PairEnum()
        layers = [nn.Linear(2 * dims[-1], pair_hidden)]
        if batch_norm:
            layers.append(nn.BatchNorm1d(pair_hidden))
        layers += [nn.ReLU(), nn.Linear(pair_hidden, 2)]
        self.head = nn.Sequential(*layers)

    def pair_logits(self, fa, fb=None):
        """Logits (n, m, 2) from backbone features ``fa`` (n, h) and ``fb`` (m, h)."""
        n = fa.shape[0]
        m = n if fb is None else fb.shape[0]
        return self.head(self.pair_enum(fa, fb)).reshape(n, m, 2)

    def forward(self, x, x2=None):
        fa = self.backbone(x)
        fb = None if x2 is None else self.backbone(x2)
        return self.pair_logits(fa, fb)




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
