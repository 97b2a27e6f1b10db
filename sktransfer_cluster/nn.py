"""Small torch building blocks shared by the estimators.

Modules are initialised from an explicit :class:`torch.Generator` through
:func:`init_module`, so that seeding never touches torch's global RNG.
"""

from __future__ import annotations

import math

import torch
from sklearn.neighbors import NearestNeighbors
from torch import nn

__all__ = [
    "mlp",
    "fold_batch_norm",
    "inference_forward",
    "AutoEncoder",
    "init_module",
    "CentroidUpdateBlock",
    "centroids_from_stats",
    "pair_enumerate",
    "PairEnum",
    "SimilarityNetwork",
    "SimilarityEnsemble",
    "clique_propagate",
    "cluster_margin_features",
    "knn_indices",
    "neighbour_label_features",
    "CliqueGAE",
    "gram_pool",
    "ClusteringCritic",
    "ConvNet",
    "ConvGenerator",
    "ConvAutoEncoder",
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


def fold_batch_norm(module):
    """An eval-mode copy of ``module`` with each affine map absorbed into the layer before.

    Inside every ``nn.Sequential``, a ``BatchNorm1d`` that directly follows an
    ``nn.Linear`` is, at inference, the affine map ``y -> (y - mean) * gamma / sqrt(var +
    eps) + beta`` of the running statistics; it is folded into that Linear's weight and
    bias and replaced by ``nn.Identity``, saving a full pass over the activations per
    layer. The result equals ``module.eval()``'s up to float rounding. ``module`` itself
    is not changed; the copy has no gradients.
    """
    import copy

    folded = copy.deepcopy(module).eval()
    with torch.no_grad():
        for seq in folded.modules():
            if not isinstance(seq, nn.Sequential):
                continue
            for i in range(1, len(seq)):
                lin, bn = seq[i - 1], seq[i]
                if not (isinstance(lin, nn.Linear) and type(bn) is nn.BatchNorm1d and bn.track_running_stats
                        and bn.running_mean is not None):
                    continue
                scale = torch.rsqrt(bn.running_var + bn.eps)
                shift = -bn.running_mean * scale
                if bn.affine:
                    scale, shift = scale * bn.weight, shift * bn.weight + bn.bias
                bias = lin.bias if lin.bias is not None else torch.zeros_like(bn.running_mean)
                fused = nn.Linear(lin.in_features, lin.out_features, device=lin.weight.device, dtype=lin.weight.dtype)
                fused.weight.copy_(lin.weight * scale.unsqueeze(-1))
                fused.bias.copy_(bias * scale + shift)
                seq[i - 1], seq[i] = fused, nn.Identity()
    for p in folded.parameters():
        p.requires_grad_(False)
    return folded


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


def pair_enumerate(a, b=None, symmetric=False):
    """All ordered pairs of rows: row ``i * m + j`` describes the pair ``(a_i, b_j)``.

    Vectorised with ``expand`` + ``cat`` (no Python loop over pairs). Self-pairs
    are included, as in the paper's pair-enumeration layer: a (10, 512) input
    gives a (100, 1024) output. Memory is O(n m d).

    Parameters
    ----------
    a : torch.Tensor of shape (n, d)
    b : torch.Tensor of shape (m, d), default=None
        Defaults to ``a`` (all n^2 pairs of a minibatch).
    symmetric : bool, default=False
        False: the paper's concatenation ``[a_i, b_j]``. True:
        ``[|a_i - b_j|, a_i * b_j]``, the same for ``(i, j)`` and ``(j, i)``.

    Returns
    -------
    torch.Tensor of shape (n * m, 2 * d)
    """
    if b is None:
        b = a
    n, m = a.shape[0], b.shape[0]
    left = a.unsqueeze(1).expand(n, m, a.shape[1])
    right = b.unsqueeze(0).expand(n, m, b.shape[1])
    parts = [(left - right).abs(), left * right] if symmetric else [left, right]
    return torch.cat(parts, dim=2).reshape(n * m, a.shape[1] + b.shape[1])


class PairEnum(nn.Module):
    """Module form of :func:`pair_enumerate`."""

    def __init__(self, symmetric=False):
        super().__init__()
        self.symmetric = symmetric

    def forward(self, a, b=None):
        return pair_enumerate(a, b, symmetric=self.symmetric)


class _WithInput(nn.Module):
    """``net(x)`` followed by ``x`` itself."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return torch.cat([self.net(x), x], dim=1)


class SimilarityNetwork(nn.Module):
    """The pairwise similarity network ``G``: backbone -> pair enumeration -> FC -> 2 classes.

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int, default=(128, 64)
        Backbone widths (batch norm + ReLU after each; with ``symmetric`` the
        last layer is linear, since a ReLU would zero part of ``|h_i - h_j|``).
    pair_hidden : int, default=64
        Width of the hidden fully connected layer on the pair features.
    batch_norm : bool, default=True
    symmetric : bool, default=False
        Pair features ``[|h_i - h_j|, h_i * h_j]`` instead of the paper's
        ``[h_i, h_j]``: the head sees how two features agree, not where each
        lies, so it cannot learn "i is a 3 and j is a 3" and has to learn a
        comparison, which carries over to classes never seen in training. The
        prediction is then symmetric in ``(i, j)``.
    raw_features : bool, default=False
        Append the input itself to the backbone's features ``h``.

    ``forward(x)`` returns logits of shape (n, n, 2) for all ordered pairs of the
    minibatch (class 1 = similar); ``forward(x, x2)`` those of the (n, m) cross pairs.
    """

    def __init__(
        self, n_features, hidden_dims=(128, 64), pair_hidden=64, batch_norm=True, symmetric=False, raw_features=False
    ):
        super().__init__()
        dims = [n_features, *hidden_dims]
        self.backbone = mlp(dims, batch_norm=batch_norm, final_activation=not symmetric)
        if raw_features:
            self.backbone = _WithInput(self.backbone)
        self.pair_enum = PairEnum(symmetric)
        h = dims[-1] + (n_features if raw_features else 0)
        self.feature_dim = h  # width of backbone(x)
        layers = [nn.Linear(2 * h, pair_hidden)]
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


class SimilarityEnsemble(nn.Module):
    """Several :class:`SimilarityNetwork` ``G`` whose "similar" probabilities are averaged.

    Has the members' interface, so code written for one ``G`` works unchanged:
    ``backbone(x)`` returns the members' features side by side and
    ``pair_logits(fa, fb)`` splits them again. The returned "logits" are the log
    of the averaged pair probabilities, so their softmax is that average and
    their argmax the ensemble's prediction.

    Parameters
    ----------
    members : sequence of SimilarityNetwork
    """

    def __init__(self, members):
        super().__init__()
        self.members = nn.ModuleList(members)
        self._widths = [m.feature_dim for m in self.members]

    def backbone(self, x):
        return torch.cat([m.backbone(x) for m in self.members], dim=1)

    def pair_logits(self, fa, fb=None):
        """Log of the members' mean pair probabilities, shape (n, m, 2)."""
        fas = torch.split(fa, self._widths, dim=1)
        fbs = [None] * len(fas) if fb is None else torch.split(fb, self._widths, dim=1)
        prob = sum(torch.softmax(m.pair_logits(a, b), -1) for m, a, b in zip(self.members, fas, fbs))
        prob = prob / len(self.members)
        return torch.log(prob.clamp_min(torch.finfo(prob.dtype).tiny))

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


# ------------------------------------------------- conditional GAN networks (precise-feature GAN)
# Gan et al., *Learning the Precise Feature for Cluster Assignment*: 5x5 stride-2 (de)convolutions.


def _image_shape(image_shape):
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
        self.image_shape = _image_shape(image_shape)
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
        self.image_shape = _image_shape(image_shape)
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


class ConvAutoEncoder(nn.Module):
    """Convolutional autoencoder for flat image rows: :class:`ConvNet` in, :class:`ConvGenerator` out.

    The encoder maps a row of ``c * h * w`` pixels through 5x5 stride-2
    convolutions (``channels``) and a linear layer to a code of ``code_dim``;
    the decoder mirrors it back to a flat row. Same interface as
    :class:`AutoEncoder`: ``forward(x)`` returns ``(code, reconstruction)``.

    Parameters
    ----------
    n_features : int
        Row width; must equal ``c * h * w``.
    image_shape : tuple of int
        ``(h, w)`` or ``(c, h, w)``; rows are read channel-major.
    channels : sequence of int, default=(16, 32)
        Channels of each convolution, image side first.
    code_dim : int, default=10

    Raises
    ------
    ValueError
        If ``image_shape`` is malformed or does not hold ``n_features`` pixels,
        or ``channels`` is empty.
    """

    def __init__(self, n_features, image_shape, channels=(16, 32), code_dim=10):
        super().__init__()
        shape = _image_shape(image_shape)
        if math.prod(shape) != int(n_features):
            raise ValueError(
                f"image_shape {tuple(image_shape)!r} holds {math.prod(shape)} pixels but X has "
                f"{int(n_features)} features; pass the shape of one image, e.g. (28, 28) for 784 features."
            )
        channels = [int(ch) for ch in channels]
        if not channels:
            raise ValueError("channels must name at least one convolution.")
        self.image_shape = shape
        self.encoder = ConvNet(shape, channels, int(code_dim))
        self.decoder = ConvGenerator(int(code_dim), shape, channels)

    def forward(self, x):
        z = self.encoder(x)
        return z, self.decoder(z)


# ------------------------------------------------- clique-graph GAE and set critic (C2M)
# Alami, Kaddah & Read, *Transferable Deep Metric Learning for Clustering*.
# A labelling y of n points is the graph whose cliques are the clusters. With
# Kipf & Welling's propagation A_hat = D^-1/2 (A + I) D^-1/2 and A the clique
# adjacency (A_ij = 1 iff y_i == y_j, i != j), A + I is block-diagonal all-ones
# and D_ii = |C(i)|, so (A_hat H)_i is the mean of H over i's cluster: a segment
# sum, O(n h), never an n x n matrix. Sums run over the points in their order
# whatever the cluster ids are, so everything below is exactly (bit for bit)
# invariant to renaming the clusters.


def _population_labels(labels):
    """``labels`` as an int64 tensor of shape (P, n) (a 1-D labelling is P = 1)."""
    labels = torch.as_tensor(labels)
    if labels.ndim == 1:
        labels = labels.unsqueeze(0)
    if labels.ndim != 2:
        raise ValueError(f"labels must have shape (n,) or (P, n), got {tuple(labels.shape)}.")
    return labels.long()


def _segment_index(labels):
    """Flat segment ids ``p * n_slots + y_pi`` of a (P, n) labelling, and ``n_slots``."""
    n_slots = int(labels.max()) + 1 if labels.numel() else 1
    offsets = n_slots * torch.arange(labels.shape[0], device=labels.device).unsqueeze(1)
    return (labels + offsets).reshape(-1), n_slots


def clique_propagate(H, labels):
    """GCN propagation ``A_hat H`` on the clique graph of each labelling: cluster means.

    Parameters
    ----------
    H : torch.Tensor of shape (n, h) or (P, n, h)
        Node features, shared by all labellings (2-D) or one set per labelling.
    labels : torch.Tensor of shape (n,) or (P, n)
        Non-negative integer cluster ids; P labellings of the same n points.
        Memory grows with ``P * (max id + 1)``: use consecutive ids.

    Returns
    -------
    torch.Tensor of shape (P, n, h)
        Row ``i`` of labelling ``p`` is the mean of ``H`` over the points that
        ``p`` puts in ``i``'s cluster, computed with segment sums
        (``index_add_``) in O(P n h) time and memory.
    """
    labels = _population_labels(labels)
    P, n = labels.shape
    means, _, idx, _ = _segment_means(H, labels)
    return means[idx].reshape(P, n, H.shape[-1])


def _segment_means(H, labels):
    """Per-cluster means of ``H`` (n, h) or (P, n, h) under ``labels`` (P, n), by segment sums.

    Returns ``means`` (P * slots, h), ``counts`` (P * slots,), the segment index
    of every point (P * n,) and ``slots``; empty slots have mean 0.
    """
    P, n = labels.shape
    h = H.shape[-1]
    idx, n_slots = _segment_index(labels)
    flat = H.expand(P, n, h).reshape(P * n, h)
    sums = flat.new_zeros(P * n_slots, h).index_add_(0, idx, flat)
    counts = torch.bincount(idx, minlength=P * n_slots)
    return sums / counts.clamp_min(1).unsqueeze(1).to(H.dtype), counts, idx, n_slots


def cluster_margin_features(X, labels, chunk_elements=2**22):
    """Distance of each point to its own cluster mean and to the nearest other one.

    ``a_i = ||x_i - m_C(i)||`` and ``b_i = min_{c != C(i)} ||x_i - m_c||``
    (``b_i = 0`` when the labelling has a single cluster): the two ingredients
    of the silhouette, with cluster means in place of all pairs, so the cost is
    O(P n k d) for k clusters, never O(n^2).

    Parameters
    ----------
    X : torch.Tensor of shape (n, d)
    labels : torch.Tensor of shape (n,) or (P, n)
    chunk_elements : int
        Bound on the elements of one block of point-to-mean distances.

    Returns
    -------
    torch.Tensor of shape (P, n, 2)
    """
    labels = _population_labels(labels)
    P, n = labels.shape
    d = X.shape[-1]
    means, counts, _, n_slots = _segment_means(X, labels)
    means, counts = means.reshape(P, n_slots, d), counts.reshape(P, n_slots)
    unused = (counts == 0).unsqueeze(1)  # (P, 1, slots)
    out = X.new_empty(P, n, 2)
    rows = max(1, chunk_elements // max(1, P * n_slots))
    for s in range(0, n, rows):
        xs = X[s : s + rows]  # (r, d)
        # Direct differences, not the ||x||^2 + ||m||^2 - 2 x.m matrix-product trick:
        # each distance is computed the same way whatever its cluster's id.
        dist = torch.cdist(
            xs.expand(P, xs.shape[0], d), means, compute_mode="donot_use_mm_for_euclid_dist"
        )  # (P, r, slots)
        own = labels[:, s : s + rows].unsqueeze(-1)
        a = dist.gather(-1, own).squeeze(-1)
        other = dist.scatter(-1, own, float("inf")).masked_fill(unused, float("inf"))
        b = other.min(-1).values
        out[:, s : s + rows, 0] = a
        out[:, s : s + rows, 1] = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
    return out


# Up to this many features a KD-tree beats chunked brute force on the CPU (measured at
# n = 3 * 10^4 with 20 neighbours, one thread: 77x faster at d = 2, 2.3x at d = 8, and
# 1.5x at d = 10, n = 10^5); beyond it a tree prunes too little.
_KD_TREE_MAX_FEATURES = 10


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


def neighbour_label_features(labels, neighbours):
    """How each point's label agrees with its nearest neighbours', for P labellings at once.

    Two features per point in [-1, 1] (``2 f - 1`` of a fraction ``f``): the
    fraction of its k nearest neighbours with its label, and the number of its
    nearest neighbours (nearest first) sharing its label before the first that
    does not, over k. O(P n k); exactly invariant to renaming the clusters.

    Parameters
    ----------
    labels : torch.Tensor of shape (n,) or (P, n)
    neighbours : torch.Tensor of shape (n, k)
        From :func:`knn_indices` (the graph depends on the points only).

    Returns
    -------
    torch.Tensor of shape (P, n, 2), float64
    """
    labels = _population_labels(labels)
    k = neighbours.shape[1]
    same = labels[:, neighbours] == labels.unsqueeze(-1)
    agree = same.to(torch.float64).mean(-1)
    ranks = torch.arange(k, device=labels.device)
    run = torch.where(same, torch.full_like(ranks, k), ranks).min(-1).values.to(torch.float64) / k
    return torch.stack([2.0 * agree - 1.0, 2.0 * run - 1.0], -1)


class CliqueGAE(nn.Module):
    """Graph convolutional encoder of a labelled set, on the clique graph of its clusters.

    Layer ``l``: ``H_{l+1} = act(A_hat H_l W_l [+ H_l U_l + b_l])`` with ``A_hat H``
    from :func:`clique_propagate` (cluster means); ReLU between layers, the last
    layer linear, as in Kipf & Welling's GAE encoder.

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int, default=(32, 16)
        Layer widths; the node embedding size is ``hidden_dims[-1]``.
    skip : bool, default=True
        Add a per-node term ``H U + b`` to every layer. Without it (the plain GCN
        of the paper) every point of a cluster gets the same embedding, a
        function of the cluster mean only, so the encoder cannot see how the
        points spread inside their cluster.

    ``forward(H, labels)``: ``H`` of shape (n, d) or (P, n, d), ``labels`` of
    shape (n,) or (P, n); returns ``Z`` of shape (P, n, hidden_dims[-1]).
    """

    def __init__(self, n_features, hidden_dims=(32, 16), skip=True):
        super().__init__()
        dims = [int(n_features), *[int(h) for h in hidden_dims]]
        self.propagate = nn.ModuleList(
            nn.Linear(dims[i], dims[i + 1], bias=False) for i in range(len(dims) - 1)
        )
        self.self_loop = (
            nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)) if skip else None
        )

    def forward(self, H, labels):
        labels = _population_labels(labels)
        n_layers = len(self.propagate)
        for i in range(n_layers):
            out = clique_propagate(self.propagate[i](H), labels)
            if self.self_loop is not None:
                out = out + self.self_loop[i](H)
            H = torch.relu(out) if i < n_layers - 1 else out
        return H


def gram_pool(Z, eps=1e-12):
    """Size-free embedding of a set: upper triangle of ``Z_n^T Z_n / n``.

    ``Z_n`` is ``Z`` with each row scaled to unit L2 norm (rows of norm below
    ``eps`` are left as they are), so the result is the mean over the points of
    ``z_i z_i^T / ||z_i||^2``: its scale depends neither on the number of points
    (the paper's ``Z^T Z`` grows linearly with n) nor on the encoder's output
    scale (trace 1), and duplicating every point leaves it unchanged.

    Parameters
    ----------
    Z : torch.Tensor of shape (..., n, m)

    Returns
    -------
    torch.Tensor of shape (..., m (m + 1) / 2)
        Row-major upper triangle, diagonal included.
    """
    m = Z.shape[-1]
    Zn = Z / Z.norm(dim=-1, keepdim=True).clamp_min(eps)
    G = Zn.transpose(-1, -2) @ Zn / Z.shape[-2]
    iu = torch.triu_indices(m, m, device=Z.device)
    return G[..., iu[0], iu[1]]


class ClusteringCritic(nn.Module):
    """The C2M metric ``r(X, y) = c(pool(GAE(graph(X, y))))``, batched over labellings.

    Parameters
    ----------
    n_features : int
    gae_dims : sequence of int, default=(32, 16)
    critic_dims : sequence of int, default=(256, 256, 512, 512)
        Hidden widths of the critic MLP (LeakyReLU, then one linear output).
    skip : bool, default=True
        See :class:`CliqueGAE`.
    margin_features : bool, default=True
        Feed :func:`cluster_margin_features` (distance to the own and to the
        nearest other cluster mean) to the encoder beside the coordinates.
    n_neighbors : int or None, default=None
        Also feed :func:`neighbour_label_features` over the ``n_neighbors``
        nearest neighbours of each point (``None``: not).
    negative_slope : float, default=0.2

    ``embed(X, labels)`` returns the pooled embeddings (P, e); ``head(e)`` the
    scores; ``forward(X, labels)`` both, shape (P,). ``X`` (n, d) is shared by the
    P labellings of ``labels`` (P, n). Both take ``neighbours=`` (the set's
    :func:`knn_indices`, computed when omitted) so a CEM population reuses it.
    """

    def __init__(
        self,
        n_features,
        gae_dims=(32, 16),
        critic_dims=(256, 256, 512, 512),
        skip=True,
        margin_features=True,
        n_neighbors=None,
        negative_slope=0.2,
    ):
        super().__init__()
        self.margin_features = bool(margin_features)
        self.n_neighbors = None if n_neighbors is None else int(n_neighbors)
        n_in = int(n_features) + (2 if self.margin_features else 0) + (0 if n_neighbors is None else 2)
        self.gae = CliqueGAE(n_in, gae_dims, skip=skip)
        m = int(gae_dims[-1])
        slope = float(negative_slope)
        self.head = mlp([m * (m + 1) // 2, *critic_dims, 1], activation=lambda: nn.LeakyReLU(slope))

    def embed(self, X, labels, neighbours=None):
        labels = _population_labels(labels)
        P, n = labels.shape
        parts = [X.expand(P, n, X.shape[-1])]
        if self.margin_features:
            parts.append(cluster_margin_features(X, labels))
        if self.n_neighbors is not None:
            if neighbours is None:
                neighbours = knn_indices(X, self.n_neighbors)
            parts.append(neighbour_label_features(labels, neighbours).to(X.dtype))
        H = torch.cat(parts, -1) if len(parts) > 1 else X
        return gram_pool(self.gae(H, labels))

    def forward(self, X, labels, neighbours=None):
        return self.head(self.embed(X, labels, neighbours)).squeeze(-1)
