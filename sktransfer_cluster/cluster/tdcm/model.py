"""Numeric kernels of TDCM's centroid-updating attention blocks.

Zhang & Zhao, *Transferable Deep Clustering Model*. :class:`TDCMModel` holds the
encoder, the blocks and the objective's constants and owns the training objective
and the adaptation of the centroids; below it, plain functions of tensors (and two
small modules) used by :class:`~sktransfer_cluster.cluster.TDCMCluster` -- the block weights
``alpha_l``, the starting centroids, the one-shot and the streamed
(bounded-memory) passes of the blocks, the loss terms and the penalties, the
embedding width rule, and the freshly initialised encoder and blocks. The block
itself is :class:`sktransfer_cluster.cluster.tdcm.blocks.CentroidUpdateBlock`. Nothing here
imports an estimator.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse
import torch
from sklearn.cluster import kmeans_plusplus
from sklearn.neighbors import NearestNeighbors

from ...losses import negative_size_entropy
from ...nn import init_module, mlp
from .blocks import CentroidUpdateBlock, centroids_from_stats

__all__ = [
    "block_weights",
    "initial_centroids",
    "run_blocks",
    "loss_terms",
    "TDCMModel",
    "ortho_term",
    "isometry_penalty",
    "adapt_centroids",
    "streamed_loss_terms",
    "final_objective",
    "kmeans_plusplus_starts",
    "best_adapted_centroids",
    "ScalarNorm",
    "principal_axes",
    "InputProjection",
    "auto_embedding_dim",
    "pca_projection",
    "project_rows",
    "new_encoder",
    "new_blocks",
    "neighbor_mean_operator",
    "smooth_by_landmarks",
    "smooth_rows",
    "unit_peak",
    "NEIGHBOUR_GRAPH",
    "NEIGHBOUR_HIDDEN",
    "neighbour_encoder_graph",
    "neighbour_steps_per_epoch",
    "PRINCIPAL_START",
    "principal_layout",
    "fit_to_layout",
]

# Cap on n_chunk * K score entries held at once when adapting centroids on a full data set.
_ADAPT_ENTRIES = 2**22

# embedding_dim="auto": as wide as the input (a lossless isometry), within these bounds.
_AUTO_MIN_DIM = 10
_AUTO_MAX_DIM = 32


def block_weights(n_blocks):
    """Linearly increasing ``alpha_l = 2 l / (L (L + 1))``, ``l = 1..L`` (sums to one)."""
    L = n_blocks
    return [2.0 * (i + 1) / (L * (L + 1)) for i in range(L)]


def initial_centroids(n_clusters, dim, dtype, device):
    """Orthogonal starting centroids ``c_j^(0) = e_j`` (rows of the identity)."""
    return torch.eye(n_clusters, dim, dtype=dtype, device=device)


def run_blocks(Z, blocks, C0, tau):
    """One-shot (differentiable) pass of all blocks on ``Z``: ``[(delta_l, C_l)]``."""
    out = []
    C = C0
    for blk in blocks:
        delta, C = blk(Z, C, tau)
        out.append((delta, C))
    return out


def loss_terms(Z, blocks, C0, tau):
    """``(clustering, negative entropy)`` of a batch, each summed over blocks with ``alpha_l``."""
    alphas = block_weights(len(blocks))
    clust = Z.new_zeros(())
    negent = Z.new_zeros(())
    for a, blk, (delta, C) in zip(alphas, blocks, run_blocks(Z, blocks, C0, tau)):
        clust = clust + a * (delta * blk.act(blk.quadratic(Z, C))).sum(1).mean()
        negent = negent + a * negative_size_entropy(delta)
    return clust, negent


def ortho_term(blocks):
    """``sum_blocks ||W_Q W_Q^T - I||^2 + ||W_K W_K^T - I||^2``: the soft ``W W^T = I``."""
    total = None
    for blk in blocks:
        WQ, WK = blk.matrices()
        t = orthogonality_penalty(WQ) + orthogonality_penalty(WK)
        total = t if total is None else total + t
    return total


def isometry_penalty(W):
    """``||G / mean(diag G) - I||_F^2`` with ``G`` the smaller Gram matrix of ``W``.

    Zero exactly when ``W`` is a scaled partial isometry: orthonormal columns
    (``W^T W``, embedding at least as wide as the input) or orthonormal rows
    (``W W^T``, a projection). Scale-free: the scale of the embedding is left
    to the normalisation after the encoder (``embedding_norm``, which fixes it
    unless None); what the penalty forbids is collapsing the embedding onto the
    few directions that separate the *source* clusters.
    """
    G = W.T @ W if W.shape[0] >= W.shape[1] else W @ W.T
    G = G / G.diagonal().mean().clamp_min(torch.finfo(G.dtype).tiny)
    eye = torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    return ((G - eye) ** 2).sum()


def _chunk_rows(n, n_clusters, chunk_size=None):
    """Row ranges holding at most ``_ADAPT_ENTRIES`` assignment entries (``chunk x K``)."""
    if chunk_size is None:
        chunk_size = max(1, _ADAPT_ENTRIES // max(1, n_clusters))
    return [(s, min(n, s + chunk_size)) for s in range(0, n, chunk_size)]


@torch.no_grad()
def adapt_centroids(Z, blocks, C0, tau, chunk_size=None):
    """All blocks on the full ``Z`` with streamed sufficient statistics.

    For each block, ``sum_i delta_ij z_i`` and ``sum_i delta_ij`` are accumulated
    over row chunks, so only a ``chunk x K`` assignment matrix exists at a time.
    Equals :func:`run_blocks` up to floating-point summation order.

    Returns
    -------
    list of torch.Tensor
        ``[C_1, ..., C_L]``, each of shape (K, b).
    """
    K = C0.shape[0]
    chunks = _chunk_rows(Z.shape[0], K, chunk_size)
    C = C0
    out = []
    for blk in blocks:
        wsum = torch.zeros_like(C0)
        mass = torch.zeros(K, dtype=C0.dtype, device=C0.device)
        for s, e in chunks:
            delta = blk.assign(Z[s:e], C, tau)
            wsum += delta.T @ Z[s:e]
            mass += delta.sum(0)
        C = centroids_from_stats(wsum, mass, C)
        out.append(C)
    return out


def _block_terms(Z, blk, C_assign, C, tau, chunks):
    """One block's mean scatter and size negentropy over the full ``Z``, streamed by ``chunks``.

    ``delta = blk.assign(Z, C_assign)`` scores ``Z`` against ``C`` with
    ``blk.act(blk.quadratic(., C))``; returns
    ``(mean_i sum_j delta_ij sigma(q_ij), sum_j pi_j log pi_j)`` as floats.
    """
    K = C.shape[0]
    mass = torch.zeros(K, dtype=C.dtype, device=C.device)
    scatter = Z.new_zeros(())
    for s, e in chunks:
        delta = blk.assign(Z[s:e], C_assign, tau)
        mass += delta.sum(0)
        scatter += (delta * blk.act(blk.quadratic(Z[s:e], C))).sum()
    n = Z.shape[0]
    return float(scatter) / n, float(negative_size_entropy((mass / n).unsqueeze(0)))


@torch.no_grad()
def streamed_loss_terms(Z, blocks, C0, centroids, tau, chunk_size=None):
    """``(clustering, negative entropy)`` of the full ``Z`` given the adapted ``centroids``."""
    chunks = _chunk_rows(Z.shape[0], C0.shape[0], chunk_size)
    clust = 0.0
    negent = 0.0
    prev = C0
    for a, blk, C in zip(block_weights(len(blocks)), blocks, centroids):
        scatter, neg = _block_terms(Z, blk, prev, C, tau, chunks)
        clust += a * scatter
        negent += a * neg
        prev = C
    return clust, negent


@torch.no_grad()
def final_objective(Z, block, C, tau, beta, chunk_size=None):
    """Objective of the *converged* state: ``block``'s scatter and size term at centroids ``C``.

    ``mean_i sum_j delta_ij sigma(q(z_i - c_j)) + beta sum_j pi_j log pi_j`` with
    ``delta = block.assign(Z, C)``, streamed over row chunks. Used to choose
    among several starting centroids of the adaptation (``adapt_n_init``).
    """
    scatter, negent = _block_terms(Z, block, C, C, tau, _chunk_rows(Z.shape[0], C.shape[0], chunk_size))
    return scatter + beta * negent


def kmeans_plusplus_starts(Z, n_clusters, n_starts, rng):
    """``n_starts`` k-means++ seedings of the rows of ``Z`` (tensors like ``Z``), drawn from ``rng``.

    ``rng`` is a :class:`numpy.random.Generator`; each seeding gets its own seed from it.
    """
    if n_starts < 1:
        return []
    Zn = Z.cpu().numpy()
    starts = []
    for _ in range(n_starts):
        seeds, _ = kmeans_plusplus(Zn, n_clusters, random_state=int(rng.integers(2**31 - 1)))
        starts.append(torch.as_tensor(seeds, dtype=Z.dtype, device=Z.device))
    return starts


def best_adapted_centroids(Z, blocks, starts, tau, beta):
    """The centroids the ``blocks`` reach on ``Z`` from the best of the starting centroids ``starts``.

    Each start runs through all blocks (:func:`adapt_centroids`); with more than
    one, the result of lowest :func:`final_objective` of the last block is kept
    (the first on ties).
    """
    if len(starts) == 1:
        return adapt_centroids(Z, blocks, starts[0], tau)[-1]
    best = None
    for C0 in starts:
        C = adapt_centroids(Z, blocks, C0, tau)[-1]
        objective = final_objective(Z, blocks[-1], C, tau, beta)
        if best is None or objective < best[0]:
            best = (objective, C)
    return best[1]


class TDCMModel:
    """TDCM behind its input: the encoder, the centroid-updating blocks and the objective's constants.

    It owns the two computations the estimator asks of the networks: the training objective
    (:meth:`objective` on a batch, :meth:`streamed_objective` on a whole data set) and the
    adaptation of the centroids to a data set (:meth:`adapt`, then :meth:`assign`). A view,
    not a copy: it holds the estimator's current modules, so training them trains it.

    Parameters
    ----------
    encoder : torch.nn.Module
        The whole encoder; when it holds exactly one Linear layer (the linear encoder), that
        layer's weight gets the isometry penalty.
    blocks : torch.nn.ModuleList of CentroidUpdateBlock
        The trained blocks, on the working device and dtype.
    n_clusters : int
    tau, beta, ortho_weight, isometry_weight : float
        The softmax temperature and the weights of the objective's terms.
    extra_adapt_steps : int, default=0
        Extra applications of the last block when adapting to a whole data set.
    """

    def __init__(self, encoder, blocks, n_clusters, *, tau, beta, ortho_weight, isometry_weight, extra_adapt_steps=0):
        self.encoder = encoder
        self.blocks = blocks
        self.n_clusters = int(n_clusters)
        self.tau = tau
        self.beta = beta
        self.ortho_weight = ortho_weight
        self.isometry_weight = isometry_weight
        self.extra_adapt_steps = int(extra_adapt_steps)

    def initial_centroids(self):
        """``c^(0)``: the first ``n_clusters`` rows of the identity, on the blocks' device and dtype."""
        p = next(self.blocks.parameters())
        return initial_centroids(self.n_clusters, self.blocks[0].dim, p.dtype, p.device)

    def linear_weight(self):
        """Weight of the encoder's only Linear layer, or None (an MLP, or no Linear layer)."""
        linears = [m for m in self.encoder.modules() if isinstance(m, torch.nn.Linear)]
        return linears[0].weight if len(linears) == 1 else None

    def objective(self, Z):
        """The training objective on a batch of embeddings ``Z`` and its terms (tensors).

        ``loss = L_clust + beta L_ent + ortho_weight * ortho_term + isometry_weight
        * isometry_penalty(W)``, the last only for a linear encoder of weight ``W``
        (else the isometry entry is 0).

        Returns
        -------
        loss : torch.Tensor
        terms : dict
            ``clustering``, ``entropy`` (the negative size entropy), ``orthogonality``,
            ``isometry``: tensors.
        """
        clust, negent = loss_terms(Z, self.blocks, self.initial_centroids(), self.tau)
        ortho = ortho_term(self.blocks)
        loss = clust + self.beta * negent
        if self.ortho_weight > 0:
            loss = loss + self.ortho_weight * ortho
        W = self.linear_weight()
        if W is None or self.isometry_weight == 0:
            iso = loss.new_zeros(())
        else:
            iso = isometry_penalty(W)
            loss = loss + self.isometry_weight * iso
        return loss, {"clustering": clust, "entropy": negent, "orthogonality": ortho, "isometry": iso}

    @torch.no_grad()
    def streamed_objective(self, Z):
        """:meth:`objective`'s loss on all of ``Z`` as a float, the blocks streamed over row chunks."""
        C0 = self.initial_centroids()
        centroids = adapt_centroids(Z, self.blocks, C0, self.tau)
        clust, negent = streamed_loss_terms(Z, self.blocks, C0, centroids, self.tau)
        ortho = float(ortho_term(self.blocks)) if self.ortho_weight > 0 else 0.0
        W = self.linear_weight()
        iso = 0.0 if W is None or self.isometry_weight == 0 else float(isometry_penalty(W))
        return clust + self.beta * negent + self.ortho_weight * ortho + self.isometry_weight * iso

    def adapt_blocks(self):
        """The blocks run on a whole data set: the ``L`` trained ones, then the last repeated."""
        return list(self.blocks) + [self.blocks[-1]] * self.extra_adapt_steps

    def adapt(self, Z, n_starts, rng):
        """The centroids the blocks reach on all of ``Z`` from the best of ``n_starts`` starts.

        The starts are ``c^(0)`` and ``n_starts - 1`` k-means++ seedings of ``Z`` drawn from
        ``rng`` (a :class:`numpy.random.Generator`); see :func:`best_adapted_centroids`.
        """
        seeds = kmeans_plusplus_starts(Z, self.n_clusters, n_starts - 1, rng)
        return best_adapted_centroids(Z, self.adapt_blocks(), [self.initial_centroids(), *seeds], self.tau, self.beta)

    def assign(self, Z, C):
        """Argmax of the last block's assignment of ``Z`` against fixed centroids ``C`` (int64 numpy)."""
        return self.blocks[-1].logits(Z, C, self.tau).argmax(1).cpu().numpy().astype(np.int64)


class ScalarNorm(torch.nn.BatchNorm1d):
    """Centre each embedding dimension, divide all by one scale (``embedding_norm="scalar"``).

    Like a non-affine batch norm, but the scale is ``sqrt(mean_k var_k)``, one
    number for all dimensions, so the normalisation is a translation plus a
    uniform scaling: it fixes the embedding's size (no collapse) without
    re-weighting its directions. Uses ``running_mean``/``running_var`` outside
    training, like :class:`torch.nn.BatchNorm1d`, so the exact statistics of a
    data set can be written into them.
    """

    def __init__(self, num_features):
        super().__init__(num_features, affine=False)

    def forward(self, x):
        if self.training:
            mean = x.mean(0)
            var = x.var(0, unbiased=False)
            with torch.no_grad():
                n = x.shape[0]
                m = self.momentum
                self.running_mean.mul_(1 - m).add_(m * mean)
                self.running_var.mul_(1 - m).add_(m * var * n / max(n - 1, 1))
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var.mean() + self.eps)


def principal_axes(X, n_components):
    """Mean and top ``n_components`` principal axes of the rows of ``X`` (numpy, deterministic).

    With at least as many rows as features: eigenvectors of the ``d x d``
    covariance (accumulated in float64 over row chunks). With fewer rows: right
    singular vectors of the ``n x d`` centred rows, the same axes without the
    ``d x d`` matrix, whose memory and ``O(d^3)`` eigendecomposition made 100 rows
    of 10,000 features take minutes and gigabytes (issue 30 R1). Largest variance
    first, each axis signed so that its largest-magnitude entry is positive. No
    random numbers: equal data give equal axes.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    components : ndarray of shape (n_components, n_features)
        Orthonormal rows.
    """
    X = np.asarray(X)
    n, d = X.shape
    mean = X.mean(0, dtype=np.float64)
    if n < d:
        # Singular values come sorted, largest first, as the covariance's reversed eigenvalues.
        _, _, vt = np.linalg.svd(X.astype(np.float64) - mean, full_matrices=False)
        comps = vt[:n_components].copy()
    else:
        cov = np.zeros((d, d))
        step = max(1, _ADAPT_ENTRIES // max(1, d))
        for s in range(0, n, step):
            xc = X[s : s + step].astype(np.float64) - mean
            cov += xc.T @ xc
        evals, evecs = np.linalg.eigh(cov / n)
        comps = evecs[:, ::-1][:, :n_components].T.copy()
    signs = np.sign(comps[np.arange(comps.shape[0]), np.abs(comps).argmax(1)])
    comps *= np.where(signs == 0, 1.0, signs)[:, None]
    return mean, comps


class InputProjection(torch.nn.Module):
    """Fixed ``x -> (x - mean) @ components.T``: the source's principal subspace (not trained).

    Put in front of TDCM's linear encoder when the embedding is narrower than
    the input (``input_projection="pca"``): the encoder, kept a (scaled)
    isometry, then acts on the directions in which the data vary and cannot
    spend its rows on directions in which they do not. The statistics are
    buffers, so they pickle and move with the module.
    """

    def __init__(self, mean, components):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean))
        self.register_buffer("components", torch.as_tensor(components))

    def forward(self, x):
        return (x - self.mean) @ self.components.T


def auto_embedding_dim(n_clusters, n_features):
    """``embedding_dim="auto"``: ``max(n_clusters, 10, min(n_features, 32))``.

    As wide as the input, so an isometric encoder of a low-dimensional input
    loses nothing; wide inputs are reduced to 32 (the blocks hold ``b x b``
    matrices); never fewer than 10 nor than the ``n_clusters`` orthogonal
    starting centroids.

    Examples
    --------
    >>> auto_embedding_dim(3, 2), auto_embedding_dim(3, 64), auto_embedding_dim(40, 64)
    (10, 32, 40)
    """
    return max(n_clusters, _AUTO_MIN_DIM, min(n_features, _AUTO_MAX_DIM))


def pca_projection(X, embedding_dim):
    """The fixed :class:`InputProjection` of ``X`` for an embedding of ``embedding_dim``, or None.

    None when the embedding is at least as wide as the input; else the top
    ``r = min(embedding_dim, n_samples)`` principal axes of ``X``, so that a
    linear encoder (``embedding_dim x r``, kept a scaled isometry) loses
    nothing of the projected data.
    """
    if embedding_dim >= X.shape[1]:
        return None
    mean, comps = principal_axes(X, min(embedding_dim, X.shape[0]))
    return InputProjection(mean, comps)


def project_rows(X, projection):
    """``X`` on an :class:`InputProjection`'s axes, as float64 numpy (for neighbour search)."""
    mean = projection.mean.detach().cpu().double().numpy()
    comps = projection.components.detach().cpu().double().numpy()
    return (np.asarray(X, dtype=np.float64) - mean) @ comps.T


def new_encoder(n_features, hidden_dims, embedding_dim, embedding_norm, projection, generator):
    """A freshly initialised TDCM encoder: ``[projection ->]`` MLP ``-> normalisation``.

    ``hidden_dims=()`` is a linear (affine) map; ``projection`` (an
    :class:`InputProjection` or None) comes first; ``embedding_norm``
    ("batch", "scalar" or None) picks the normalisation of the output. The
    weights are drawn from ``generator``.
    """
    d_in = n_features if projection is None else projection.components.shape[0]
    encoder = init_module(mlp([d_in, *(int(h) for h in hidden_dims), embedding_dim]), generator)
    if projection is not None:
        encoder = torch.nn.Sequential(projection, encoder)
    if embedding_norm == "batch":
        encoder = torch.nn.Sequential(encoder, torch.nn.BatchNorm1d(embedding_dim, affine=False))
    elif embedding_norm == "scalar":
        encoder = torch.nn.Sequential(encoder, ScalarNorm(embedding_dim))
    return encoder


def new_blocks(n_blocks, dim, symmetric, activation, generator):
    """``n_blocks`` freshly initialised centroid-updating blocks of width ``dim`` (``generator``'s draws)."""
    return torch.nn.ModuleList(
        CentroidUpdateBlock(dim, symmetric=symmetric, activation=activation).reset_parameters(generator)
        for _ in range(n_blocks)
    )


def neighbor_mean_operator(G, n_neighbors):
    """Row-stochastic sparse ``A`` (n x n): row ``i`` averages ``i``'s ``n_neighbors`` nearest rows of ``G``.

    The neighbours are found by Euclidean distance in ``G`` (a row is its own
    nearest neighbour, so it is included); ``n_neighbors`` is capped at the
    number of rows. ``A @ X`` replaces each row by the mean of its
    neighbourhood: a low-pass filter on the data set's k-nearest-neighbour
    graph, which shrinks each cluster towards its centre along the data
    manifold while keeping the cluster means.
    """
    G = np.asarray(G, dtype=np.float64)
    n = G.shape[0]
    k = max(1, min(int(n_neighbors), n))
    idx = NearestNeighbors(n_neighbors=k).fit(G).kneighbors(G, return_distance=False)
    rows = np.repeat(np.arange(n), k)
    return scipy.sparse.csr_matrix((np.full(n * k, 1.0 / k), (rows, idx.ravel())), shape=(n, n))


def smooth_rows(X, G, n_neighbors, steps):
    """``A^steps X`` with ``A`` = :func:`neighbor_mean_operator` of ``G`` (``X`` itself when ``steps == 0``).

    ``G`` holds the rows of ``X`` in the space where neighbours are searched
    (e.g. their principal-axis coordinates); the result has ``X``'s shape and
    dtype. Deterministic (exact neighbour search, ties broken by row order).
    """
    if steps == 0:
        return X
    A = neighbor_mean_operator(G, n_neighbors)
    out = np.asarray(X, dtype=np.float64)
    for _ in range(int(steps)):
        out = A @ out
    return out.astype(np.asarray(X).dtype, copy=False)


def smooth_by_landmarks(H, index, n_neighbors, steps, chunk_size=65_536):
    """:func:`smooth_rows` of the rows ``H`` past the landmark count, without their ``n x n`` search.

    The landmark rows ``H[index]`` are smoothed ``steps - 1`` times among themselves
    (:func:`smooth_rows`); the last step replaces every row of ``H`` by the mean of
    those smoothed landmarks at its ``n_neighbors`` nearest landmarks (a landmark finds
    itself first), searched in chunks of ``chunk_size`` rows. The same number of
    averaging steps as :func:`smooth_rows`, over a sparser neighbourhood: ``n / m`` times
    as many rows lie within a row's ``n_neighbors`` nearest landmarks as within its
    ``n_neighbors`` nearest rows. Holds ``H``, the result and one chunk's indices.

    Parameters
    ----------
    H : ndarray of shape (n, d)
        The rows (the neighbour codes), also the space of the search.
    index : ndarray of int, sorted
        The landmark rows.
    n_neighbors : int
        Landmarks averaged per step (capped at their number).
    steps : int
        Averaging steps; ``0`` returns ``H``.
    chunk_size : int, default=65536

    Returns
    -------
    ndarray of ``H``'s shape and dtype
    """
    if steps == 0:
        return H
    L = np.asarray(H[index], dtype=np.float64)
    smoothed = smooth_rows(L, L, n_neighbors, int(steps) - 1)
    k = max(1, min(int(n_neighbors), L.shape[0]))
    tree = NearestNeighbors(n_neighbors=k).fit(L)
    out = np.empty(H.shape, dtype=np.asarray(H).dtype)
    for start in range(0, H.shape[0], int(chunk_size)):
        rows = np.asarray(H[start : start + int(chunk_size)], dtype=np.float64)
        near = tree.kneighbors(rows, return_distance=False)
        out[start : start + rows.shape[0]] = smoothed[near].mean(1)
    return out


def unit_peak(G):
    """``G`` times the power of two that brings its largest magnitude near 1 (exact; ``G`` if all 0 or not finite).

    Multiplying by a power of two changes no neighbour and no ratio of distances, while
    squared distances of data at 1e-170 or 1e160 no longer under- or overflow.
    """
    peak = float(np.abs(G).max(initial=0.0))
    if not 0.0 < peak < np.inf:
        return G
    e = -math.frexp(peak)[1]
    return G * 2.0 ** (e // 2) * 2.0 ** (e - e // 2)


def orthogonality_penalty(W):
    """``||W W^T - I||_F^2``: the soft form of the constraint ``W W^T = I``."""
    eye = torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
    return ((W @ W.T - eye) ** 2).sum()


#: The neighbour graph of ``representation="neighbours"``: that of
#: :class:`~sktransfer_cluster.representation.NeighbourEmbedding` at its defaults (15
#: neighbours, shared-neighbour weights; with ``image_shape``, a 1-pixel blur and distances
#: minimised over 1-pixel shifts), with the distance of :func:`~sktransfer_cluster.representation.auto_metric`.
NEIGHBOUR_GRAPH = {"n_neighbors": 15, "shared_neighbours": True, "max_shift": 1, "blur": 1.0}

#: Hidden widths of the neighbour encoder when ``hidden_dims=()`` (NeighbourEmbedding's default).
NEIGHBOUR_HIDDEN = (256, 256)


def neighbour_encoder_graph(X, image_shape=None, metric="cosine"):
    """The fuzzy k-NN graph of the rows ``X`` that the neighbour encoder is trained on.

    :data:`NEIGHBOUR_GRAPH` with ``metric`` through
    :func:`~sktransfer_cluster.representation.neighbour_graph`; the image terms only when
    ``image_shape`` is given (never inferred from the number of columns). Deterministic.
    """
    from ...representation import neighbour_graph

    opts = dict(NEIGHBOUR_GRAPH, metric=metric)
    if image_shape is None:
        opts.update(max_shift=0, blur=0.0)
    n_neighbors = min(opts.pop("n_neighbors"), X.shape[0] - 1)
    return neighbour_graph(X, n_neighbors, image_shape=image_shape, **opts)


def neighbour_steps_per_epoch(graph, batch_size):
    """Adam steps in one epoch of :func:`~sktransfer_cluster.representation.train_neighbour_encoder` on ``graph``."""
    from ...representation import steps_per_epoch

    return steps_per_epoch(int((scipy.sparse.coo_matrix(graph).data > 0).sum()), batch_size)


#: The layout the neighbour encoder of ``fit`` is fitted to before its graph training: the rows'
#: principal-axis coordinates with the first axis at standard deviation ``scale`` (``steps`` Adam
#: steps on ``batch_rows`` rows drawn with replacement; learning rate 1e-3). Issue 28, wine:
#: docs/notes/tdcm.md, 2026-11-27 sixth session (scale 3: wine 0.927; 10: 0.949; 20: 0.961).
PRINCIPAL_START = {"scale": 10.0, "steps": 300, "batch_rows": 512}


@torch.no_grad()
def principal_layout(inputs, n_components, scale):
    """The rows' principal-axis coordinates (``n x n_components``, float32), first axis at std ``scale``.

    Coordinates on the top ``min(n_components, rank)`` right singular vectors of the
    centred rows, zero-padded to ``n_components`` columns (an input narrower than the
    code), all divided by one number so that the first axis has standard deviation
    ``scale`` (unbiased): a uniform scaling, the rows' linear geometry kept. None when the rows do
    not vary (no axis to lay them out on).
    """
    X = torch.as_tensor(np.asarray(inputs, dtype=np.float32))
    Xc = X - X.mean(0)
    _, _, V = torch.linalg.svd(Xc, full_matrices=False)
    p = min(int(n_components), V.shape[0])
    T = torch.zeros(X.shape[0], int(n_components))
    T[:, :p] = Xc @ V[:p].T
    sd = float(T[:, 0].std()) if X.shape[0] > 1 else 0.0
    if not (math.isfinite(sd) and sd > 0.0):
        return None
    return T / sd * float(scale)


def fit_to_layout(encoder, inputs, layout, steps, batch_rows, generator):
    """Fit ``encoder`` (in place) to map the rows ``inputs`` onto ``layout``: mean squared error, Adam.

    ``steps`` minibatches of ``batch_rows`` rows drawn with replacement from ``generator``
    (all randomness from it). The start of the neighbour encoder's graph training in
    ``fit`` (:data:`PRINCIPAL_START`): UMAP and t-SNE start their layouts from principal
    or spectral coordinates rather than at random, so that the graph loss reorganises a
    layout that already holds the data's global, linear structure (Kobak & Linderman,
    2021, Nat. Biotechnol. 39, 156-157).

    Returns
    -------
    encoder
    """
    X = torch.as_tensor(np.asarray(inputs, dtype=np.float32))
    n = X.shape[0]
    encoder.train()
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    for _ in range(int(steps)):
        idx = torch.randint(0, n, (min(n, int(batch_rows)),), generator=generator)
        loss = ((encoder(X[idx]) - layout[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return encoder.eval()
