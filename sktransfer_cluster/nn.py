"""Small torch building blocks shared by the estimators.

Modules are initialised from an explicit :class:`torch.Generator` through
:func:`init_module`, so that seeding never touches torch's global RNG.
"""

from __future__ import annotations

import math

import torch
from sklearn.neighbors import NearestNeighbors
from torch import nn

from .base.runtime import on_compute_threads

__all__ = [
    "mlp",
    "inference_forward",
    "init_module",
    "image_channels_shape",
    "ConvNet",
    "ConvGenerator",
    "knn_indices",
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

# Rows per block of inference_forward: activations of a block stay below glibc's
# mmap threshold, so their buffers are reused instead of page-faulted block after block.
INFERENCE_ROWS = 8192

def inference_forward(module, x, rows=INFERENCE_ROWS):
    """``module(x)`` under ``torch.inference_mode``, in blocks of ``rows`` rows.

    For an eval-mode module without cross-row operations (batch norm at its running
    statistics), the result equals one call on ``x``.
    """
    with torch.inference_mode():
        if x.shape[0] <= rows:
            return module(x)
        return torch.cat([module(x[start : start + rows]) for start in range(0, x.shape[0], rows)])

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

# ------------------------------------------------- conditional GAN networks (precise-feature GAN)
# Gan et al., *Learning the Precise Feature for Cluster Assignment*: 5x5 stride-2 (de)convolutions.


def image_channels_shape(image_shape):
    """``(c, h, w)`` from ``(h, w)`` or ``(c, h, w)``; ValueError otherwise."""
    shape = tuple(int(s) for s in image_shape)
    if len(shape) == 2:
        shape = (1, *shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"image_shape must be (h, w) or (c, h, w) with positive sizes, got {image_shape!r}.")
    return shape

def _halved(n, times):
    """Sizes after ``times`` 5x5 stride-2 convolutions with padding 2: ``n -> ceil(n / 2)``."""
    sizes = [int(n)]
    for _ in range(times):
        sizes.append((sizes[-1] + 1) // 2)
    return sizes

class ConvNet(nn.Module):
    """Image network ``(c, h, w) -> n_out``: 5x5 stride-2 convolutions + ReLU, then a linear layer.

    The critic and the classifier of the precise-feature GAN (the paper's Fig. 2,
    scaled down). Inputs are flat rows of ``c * h * w`` values (channel-major,
    as ``X.reshape(n, c, h, w)`` reads them).

    Parameters
    ----------
    image_shape : tuple of int
        ``(h, w)`` or ``(c, h, w)``.
    channels : sequence of int
        Output channels of each convolution; each one halves the height and width
        (rounding up).
    n_out : int
        Output width.
    """

    def __init__(self, image_shape, channels, n_out):
        super().__init__()
        self.image_shape = image_channels_shape(image_shape)
        c, h, w = self.image_shape
        layers = []
        prev = c
        for ch in channels:
            layers += [nn.Conv2d(prev, int(ch), 5, stride=2, padding=2), nn.ReLU()]
            prev = int(ch)
        self.features = nn.Sequential(*layers)
        hh, ww = _halved(h, len(channels))[-1], _halved(w, len(channels))[-1]
        self.head = nn.Linear(prev * hh * ww, int(n_out))

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.image_shape)
        return self.head(self.features(x).flatten(1))

class ConvGenerator(nn.Module):
    """Image generator ``n_in -> (c, h, w)``: a linear layer, then 5x5 stride-2 transposed convolutions.

    Mirrors :class:`ConvNet`: ``channels`` are read from the image side, so
    ``ConvGenerator(d, shape, (32, 64))`` starts from 64 maps at a quarter of the
    resolution and doubles twice (cropping by ``output_padding`` so odd sizes come
    out exactly). ReLU between layers, no activation on the output. Returns flat
    rows of ``c * h * w`` values.

    Parameters
    ----------
    n_in : int
        Input width (one-hot cluster id + noise).
    image_shape : tuple of int
        ``(h, w)`` or ``(c, h, w)``.
    channels : sequence of int
        Channels of the intermediate maps, image side first (as in :class:`ConvNet`).
    """

    def __init__(self, n_in, image_shape, channels):
        super().__init__()
        self.image_shape = image_channels_shape(image_shape)
        c, h, w = self.image_shape
        channels = [int(ch) for ch in channels]
        hs, ws = _halved(h, len(channels)), _halved(w, len(channels))
        self.start = (channels[-1], hs[-1], ws[-1])
        self.project = nn.Sequential(nn.Linear(int(n_in), channels[-1] * hs[-1] * ws[-1]), nn.ReLU())
        layers = []
        outs = [c, *channels]  # outs[i] = channels of the map at resolution level i
        for level in range(len(channels), 0, -1):
            th, tw = hs[level - 1], ws[level - 1]
            pad = (th - (2 * hs[level] - 1), tw - (2 * ws[level] - 1))
            layers.append(
                nn.ConvTranspose2d(outs[level], outs[level - 1], 5, stride=2, padding=2, output_padding=pad)
            )
            if level > 1:
                layers.append(nn.ReLU())
        self.deconv = nn.Sequential(*layers)

    def forward(self, z):
        x = self.project(z).reshape(z.shape[0], *self.start)
        return self.deconv(x).flatten(1)

# Up to this many features a KD-tree beats chunked brute force on the CPU (measured at
# n = 3 * 10^4 with 20 neighbours, one thread: 77x faster at d = 2, 2.3x at d = 8, and
# 1.5x at d = 10, n = 10^5); beyond it a tree prunes too little.
_KD_TREE_MAX_FEATURES = 10

@on_compute_threads
def knn_indices(X, k, chunk_elements=2**22, query=None):
    """Indices of the ``k`` nearest rows of ``X`` (n, d), nearest first.

    Without ``query``: the ``k`` nearest *other* rows of each row of ``X``, shape
    (n, k), ``k`` capped at n - 1. With ``query`` (m, d): the ``k`` nearest rows
    of ``X`` to each query row, shape (m, k), ``k`` capped at n; a query row
    that is also a row of ``X`` finds itself (or an exact duplicate) first.

    Exact Euclidean neighbours. On a CPU tensor with at most 10 features they
    come from scikit-learn's KD-tree, O(n log n); otherwise (more features, or a
    GPU tensor) from chunked ``cdist`` with at most ``chunk_elements`` distances
    at a time: O(n^2 d) time, bounded memory. The result lies on ``X``'s device.
    Runs on the package's compute threads (:func:`~sktransfer_cluster.base.runtime.compute_threads`).

    Precondition of the ``cdist`` path: rows near the origin against their spread.
    ``torch.cdist`` computes large blocks as ``|q|^2 - 2 q.r + |r|^2`` in ``X``'s dtype,
    which cancels for rows at an offset: float32 rows of unit spread at an offset of 1e3
    keep 57 % of their true neighbours (800 Gaussian rows, d = 20). The package's callers pass normalised rows
    (centred, unit scale); centre other rows first (``X - X.mean(0)``), or use
    :func:`~sktransfer_cluster.representation.knn`, which centres and rescales as needed.
    """
    n, d = X.shape
    k = min(int(k), n if query is not None else n - 1)
    Q = X if query is None else query
    if X.device.type == "cpu" and d <= _KD_TREE_MAX_FEATURES and k > 0:
        tree = NearestNeighbors(n_neighbors=k, algorithm="kd_tree").fit(X.detach().numpy())
        # kneighbors() without a query leaves each point out of its own neighbours.
        found = tree.kneighbors(None if query is None else Q.detach().numpy(), return_distance=False)
        return torch.from_numpy(found).to(torch.long)
    m = Q.shape[0]
    rows = max(1, chunk_elements // max(1, n))
    # Written into one preallocated tensor: keeping a small result per chunk between the
    # freed distance blocks fragmented the CPU heap (24 GB resident at n = 10^5).
    out = torch.empty((m, k), dtype=torch.long, device=X.device)
    for s in range(0, m, rows):
        dist = torch.cdist(Q[s : s + rows], X)
        r = dist.shape[0]
        if query is None:
            dist[torch.arange(r, device=X.device), torch.arange(s, s + r, device=X.device)] = float("inf")
        out[s : s + r] = dist.topk(k, dim=1, largest=False).indices
    return out
