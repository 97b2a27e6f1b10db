"""k-nearest-neighbour graphs and their fuzzy simplicial sets (UMAP's graph).

Everything here is exact (chunked matrix products, no approximate search) and
deterministic: the graph of a data set does not depend on a random state. For
images, :func:`neighbour_graph` can make the distance invariant to small shifts
(the smallest distance over every translation of up to ``max_shift`` pixels),
which is the "small transformations" invariance of IIC applied to the graph.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..base.arrays import chunk_rows
from ..base.runtime import compute_threads
from ..base.streaming import DaskRows, value_signs

__all__ = [
    "knn",
    "shifted_images",
    "fuzzy_graph",
    "neighbour_graph",
    "prepare_rows",
    "shared_neighbour_weights",
    "union_graph",
    "keep_rows",
    "auto_metric",
    "OFFSET_RATIO",
]


def _as_shape(image_shape, n_features):
    shape = tuple(int(v) for v in image_shape)
    if len(shape) == 2:
        shape = (1, *shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"image_shape must be (h, w) or (c, h, w), got {image_shape!r}.")
    if int(np.prod(shape)) != n_features:
        raise ValueError(
            f"image_shape {image_shape!r} has {int(np.prod(shape))} pixels but X has {n_features} columns."
        )
    return shape


def shifted_images(X, image_shape, dy, dx):
    """Each row of ``X`` (a flattened image) translated by ``(dy, dx)`` pixels, zero-filled.

    Parameters
    ----------
    X : torch.Tensor of shape (n, c * h * w)
    image_shape : tuple
        ``(h, w)`` or ``(c, h, w)``.
    dy, dx : int
        Rows down and columns right (negative: up and left).

    Returns
    -------
    torch.Tensor of shape (n, c * h * w)

    Examples
    --------
    >>> import torch
    >>> x = torch.arange(9.0).reshape(1, 9)
    >>> shifted_images(x, (3, 3), 0, 1).reshape(3, 3)
    tensor([[0., 0., 1.],
            [0., 3., 4.],
            [0., 6., 7.]])
    """
    c, h, w = _as_shape(image_shape, X.shape[1])
    im = X.reshape(-1, c, h, w)
    out = torch.zeros_like(im)
    ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
    xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
    out[:, :, yd, xd] = im[:, :, ys, xs]
    return out.reshape(X.shape[0], -1)


#: :func:`knn` and :func:`prepare_rows` centre rows (in float64, before the float32 cast) whose
#: mean's norm exceeds this many times the RMS distance ``s`` of the rows from their mean.
#: float32's ``|q|^2 - 2 q.r + |r|^2`` carries an error of about ``eps (|q|^2 + |r|^2)``, i.e.
#: ``2 eps (|m|^2 + s^2)``: below the ratio at most ``log2(1 + 8^2)``, 6, of its 24 bits are
#: lost to the offset (300 blobs in 10 dimensions: every true neighbour kept at ratio 8, 26 %
#: at 1000; in 2 dimensions, 5,000 rows: 99.93 % at 8). Rows the wings pass never reach it,
#: so their graphs keep their bits: centred rows (``|m|`` at rounding level) and unit cosine
#: rows, for which ``|m|^2 + s^2 = 1`` and the rule would need a mean cosine above 64/65.
OFFSET_RATIO = 8.0
# float32 squares and their sums stay normal and finite for row peaks in [2^-60, 2^60 / sqrt(d)].
_SAFE_EXPONENT = 60


def _finite_rows(X, what):
    """``X`` as an ndarray (floats as they are), refused with a clear message if not finite."""
    X = np.asarray(X)
    if X.dtype.kind not in "fiub":
        X = np.asarray(X, dtype=np.float64)
    if X.dtype.kind == "f" and not np.isfinite(X).all():
        raise ValueError(
            f"{what} holds NaN or infinite values, which have no neighbours: drop those rows or impute "
            "them (e.g. sklearn.impute.SimpleImputer) before building a neighbour graph."
        )
    return X


def _offset_centre(X):
    """The rows' float64 column means when their norm exceeds :data:`OFFSET_RATIO` times the
    RMS distance of the rows from them (an offset float32 would resolve badly), else None."""
    n = X.shape[0]
    if n == 0 or X.ndim != 2:
        return None
    mean = X.mean(0, dtype=np.float64)
    unit = float(np.abs(mean).max())  # both sides in units of the mean's peak: no overflow at any scale
    if unit == 0.0:
        return None
    spread2, step = 0.0, chunk_rows(X.shape[1])
    for s in range(0, n, step):
        block = np.subtract(X[s : s + step], mean, dtype=np.float64) / unit
        spread2 += float(np.einsum("ij,ij->", block, block))
    m = mean / unit
    return mean if float(m @ m) > OFFSET_RATIO**2 * spread2 / n else None


def _peak(X):
    """The largest magnitude of ``X`` as a float, without an ``np.abs(X)``-sized temporary."""
    return max(float(X.max()), -float(X.min())) if X.size else 0.0


def _power_of_two_exponent(peak, n_features):
    """The exponent ``e`` with ``peak * 2^-e`` in [0.5, 1) where float32's squared distances
    would over- or underflow (peak outside [2^-60, 2^60 / sqrt(d)]), else None."""
    if peak == 0.0 or 2.0**-_SAFE_EXPONENT <= peak <= 2.0**_SAFE_EXPONENT / np.sqrt(n_features):
        return None
    return int(np.frexp(peak)[1])


def _times_power_of_two(X, exponent):
    """``X`` (float64) times ``2^exponent``, exact short of over- or underflow."""
    half = -(-exponent // 2)  # two factors: 2^exponent alone may overflow (|exponent| past 1023)
    return np.asarray(X, dtype=np.float64) * 2.0**half * 2.0 ** (exponent - half)


def _power_of_two_scale(X):
    """``X`` (float64) times the power of two that brings its peak to [0.5, 1), where float32's
    squared distances would over- or underflow (peak outside [2^-60, 2^60 / sqrt(d)]), else None.
    A power of two is exact: the rows keep their geometry."""
    exponent = _power_of_two_exponent(_peak(X), X.shape[1])
    return None if exponent is None else _times_power_of_two(X, -exponent)


def _unit_peak_bad_rows(X, X32):
    """Rows of ``X32`` (the float32 cast of ``X``) whose float32 norm overflows or vanishes
    although the row is not zero, replaced by their float64 row divided by its peak (the same
    direction, inside float32 at any scale); every other row is left as it is."""
    with np.errstate(over="ignore", under="ignore"):
        norms = _row_norms(X32)
    suspect = ~np.isfinite(norms) | (norms < 1e-12)
    if not suspect.any():
        return X32
    rows = np.asarray(X[suspect], dtype=np.float64)
    bad = np.abs(rows).max(1) > 0  # zero rows stay zero rows
    if bad.any():
        from .landmarks import unit_peak_rows

        X32[np.flatnonzero(suspect)[bad]] = unit_peak_rows(rows[bad]).astype(np.float32)
    return X32


def _row_norms(X, keepdims=False):
    """``np.linalg.norm(X, axis=1)`` a chunk of rows at a time: the same bits (each row is
    reduced on its own), without its ``X``-sized temporary of squares."""
    norms = np.empty((X.shape[0], 1) if keepdims else X.shape[0], dtype=np.result_type(X.dtype, np.float32))
    step = chunk_rows(X.shape[1])
    for s in range(0, X.shape[0], step):
        norms[s : s + step] = np.linalg.norm(X[s : s + step], axis=1, keepdims=keepdims)
    return norms


def _squared_norms(R):
    """``(R * R).sum(1)`` a chunk of rows at a time through one reused buffer: the same bits
    (each row is reduced on its own) without an ``R``-sized temporary. A fresh product per
    chunk is no better: freed chunk by chunk, the heap kept them all (+147 MiB at 50,000 x 784)."""
    n, d = R.shape
    rn = torch.empty(n, dtype=R.dtype)
    step = max(1, min(n, chunk_rows(max(d, 1))))
    buf = torch.empty((step, d), dtype=R.dtype)
    for i in range(0, n, step):
        rows = R[i : i + step]
        part = buf[: rows.shape[0]]
        torch.mul(rows, rows, out=part)
        torch.sum(part, 1, out=rn[i : i + step])
    return rn


def _shifts(max_shift):
    return [(dy, dx) for dy in range(-max_shift, max_shift + 1) for dx in range(-max_shift, max_shift + 1)]


@torch.no_grad()
def knn(X, n_neighbors, *, query=None, image_shape=None, max_shift=0, chunk_elements=2**24):
    """Exact Euclidean k nearest neighbours (chunked), optionally shift-invariant.

    Distances are float32 block products, ``|q|^2 - 2 q.r + |r|^2``: rows whose mean lies
    farther from the origin than :data:`OFFSET_RATIO` times their spread are first centred
    (in float64, query rows by the same mean), so that the result does not depend on the
    data's offset, and rows whose float32 squares would over- or underflow (largest
    magnitude outside [2^-60, 2^60 / sqrt(d)], e.g. 1e-30 or 1e25) are scaled by a power of
    two (exact; distances are returned in the rows' own unit). Rows with NaN or infinite
    values are refused.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Reference rows.
    n_neighbors : int
        Neighbours per query row. Without ``query`` the row itself is excluded.
    query : array-like of shape (m, d), optional
        Rows whose neighbours in ``X`` are sought (default: ``X`` itself).
    image_shape : tuple, optional
        With ``max_shift > 0``: the distance between two images is the smallest
        over every translation of the query image by up to ``max_shift`` pixels.
    max_shift : int, default=0
    chunk_elements : int
        Size of the distance blocks (rows x references).

    Returns
    -------
    indices : ndarray of int64, shape (m, n_neighbors)
    distances : ndarray of float32, shape (m, n_neighbors)
        Ascending within each row (``inf`` or 0 where a distance lies outside float32's range).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0], [7.0]]) * 1e-30
    >>> i, d = knn(X, 1)
    >>> i.ravel().tolist(), (d.ravel() / np.float32(1e-30)).round(3).tolist()
    ([1, 0, 1, 2], [1.0, 1.0, 2.0, 4.0])
    """
    self_query = query is None
    X = _finite_rows(X, "X")
    query = None if self_query else _finite_rows(query, "query")
    # Rows far from the origin against their spread are centred before the float32 cast; not
    # with shifted images, whose translations fill with zeros (a level centring would move).
    shifted = image_shape is not None and max_shift > 0
    centre = None if shifted else _offset_centre(X)
    if centre is not None:
        X = np.subtract(X, centre, dtype=np.float64)
        query = None if self_query else np.subtract(query, centre, dtype=np.float64)
    # Neighbours do not change with the scale: rows whose float32 squares would over- or
    # underflow are brought to a peak in [0.5, 1) by a power of two (exact), as prepare_rows does.
    peak = _peak(X) if self_query else max(_peak(X), _peak(query))
    exponent = _power_of_two_exponent(peak, X.shape[1]) if X.ndim == 2 else None
    if exponent is not None:
        X = _times_power_of_two(X, -exponent)
        query = None if self_query else _times_power_of_two(query, -exponent)
    R = torch.as_tensor(np.asarray(X, dtype=np.float32))
    Q = R if self_query else torch.as_tensor(np.asarray(query, dtype=np.float32))
    n, m = R.shape[0], Q.shape[0]
    k = int(n_neighbors)
    if k < 1 or k > n - (1 if self_query else 0):
        raise ValueError(f"n_neighbors={k} must lie in [1, {n - (1 if self_query else 0)}].")
    shifts = _shifts(int(max_shift)) if (image_shape is not None and max_shift > 0) else [(0, 0)]
    rn = _squared_norms(R)
    rows = max(1, int(chunk_elements) // max(n, 1))
    out_i = np.empty((m, k), dtype=np.int64)
    out_d = np.empty((m, k), dtype=np.float32)
    for s in range(0, m, rows):
        q = Q[s : s + rows]
        best = None
        for dy, dx in shifts:
            qs = q if (dy, dx) == (0, 0) else shifted_images(q, image_shape, dy, dx)
            # (q2 - (2 q) @ R^T) + rn in place: -M + q2 is q2 - M to the bit (negation and the
            # doubling are exact), with one block alive instead of three (V15 #5).
            d2 = (2.0 * qs) @ R.T
            d2.neg_().add_((qs * qs).sum(1, keepdim=True)).add_(rn)
            best = d2 if best is None else torch.minimum(best, d2, out=best)
        if self_query:
            best[torch.arange(best.shape[0]), torch.arange(s, s + best.shape[0])] = float("inf")
        d, i = torch.topk(best, k, dim=1, largest=False)
        out_i[s : s + rows] = i.numpy()
        out_d[s : s + rows] = d.clamp_min(0).sqrt().numpy()
    if exponent is not None:
        with np.errstate(over="ignore", under="ignore"):  # float32 holds what it can of the rows' unit
            out_d = _times_power_of_two(out_d, exponent).astype(np.float32)
    return out_i, out_d


def fuzzy_graph(indices, distances, n_samples=None, *, local_connectivity=1.0, n_iter=64):
    """UMAP's fuzzy simplicial set of a k-NN graph: symmetric edge weights in (0, 1].

    For each row ``i`` with neighbour distances ``d_ij``, ``rho_i`` is the
    distance to its nearest neighbour and ``sigma_i`` is found by bisection so
    that ``sum_j exp(-(d_ij - rho_i) / sigma_i) = log2(k)``; the directed
    weights ``w_ij = exp(-(d_ij - rho_i) / sigma_i)`` are then symmetrised by
    the fuzzy union ``w + w^T - w * w^T`` (McInnes et al., 2018, section 3).

    Parameters
    ----------
    indices, distances : ndarray of shape (n, k)
        From :func:`knn`.
    n_samples : int, optional
        Number of nodes (default: ``indices.shape[0]``).
    local_connectivity : float, default=1.0
        Which neighbour's distance is ``rho`` (1: the nearest).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n)
    """
    idx = np.asarray(indices, dtype=np.int64)
    d = np.asarray(distances, dtype=np.float64)
    n, k = idx.shape
    n_samples = n if n_samples is None else int(n_samples)
    lc = int(np.clip(np.floor(local_connectivity), 1, k)) - 1
    rho = d[:, lc]
    target = np.log2(k)
    shifted = np.maximum(d - rho[:, None], 0.0)
    lo = np.zeros(n)
    hi = np.full(n, np.inf)
    sigma = np.ones(n)
    for _ in range(n_iter):
        total = np.exp(-shifted / sigma[:, None]).sum(1)
        too_big = total > target
        hi = np.where(too_big, sigma, hi)
        lo = np.where(too_big, lo, sigma)
        sigma = np.where(np.isinf(hi), sigma * 2.0, (lo + hi) / 2.0)
    # Floor sigma as a fraction of the mean distance (flat neighbourhoods).
    sigma = np.maximum(sigma, 1e-3 * np.maximum(d.mean(1), 1e-12))
    w = np.exp(-shifted / sigma[:, None])
    A = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(n), k), idx.ravel())), shape=(n, n_samples))
    if n != n_samples:
        return A
    At = A.T.tocsr()
    G = (A + At - A.multiply(At)).tocsr()
    G.eliminate_zeros()
    return G


def _blur(X, image_shape, sigma):
    """Rows of ``X`` (flattened images) smoothed by a Gaussian of ``sigma`` pixels."""
    from scipy.ndimage import gaussian_filter

    c, h, w = _as_shape(image_shape, X.shape[1])
    return gaussian_filter(X.reshape(-1, c, h, w), sigma=(0, 0, sigma, sigma)).reshape(X.shape[0], -1)


def shared_neighbour_weights(graph, indices):
    """Each edge ``(i, j)`` of ``graph`` times the share of neighbours ``i`` and ``j`` have in common.

    With ``N(i)`` the ``k`` neighbours of ``i`` plus ``i`` itself, the factor is
    ``|N(i) & N(j)| / (k + 1)``: an edge between two rows whose neighbourhoods
    do not overlap (a bridge between clusters) is damped, as in shared-nearest-
    neighbour clustering.
    """
    idx = np.asarray(indices, dtype=np.int64)
    n, k = idx.shape
    G = sp.csr_matrix(graph)
    # The overlap of each edge's two neighbourhoods, counted for the edges alone: the product
    # A A^T of the neighbourhood matrix holds every pair sharing a neighbour, which hub rows
    # (in-degree in the hundreds, in many dimensions) blow up to gigabytes at 5 x 10^4 rows.
    hood = np.c_[np.arange(n), idx]
    rows = np.repeat(np.arange(n), np.diff(G.indptr))
    shared = np.empty(G.nnz, dtype=np.float64)
    step = max(1, 2**22 // ((k + 1) ** 2))
    for s in range(0, G.nnz, step):
        a, b = hood[rows[s : s + step]], hood[G.indices[s : s + step]]
        shared[s : s + step] = (a[:, :, None] == b[:, None, :]).sum((1, 2))  # entries distinct in each
    # Each row's edges in reverse order: the order scipy's element-wise product (the route of
    # this function before, G.multiply((A A^T) / (k + 1))) gave them, kept because the encoder
    # draws edges by position, so that every fit stays what it was to the bit.
    turned = G.indptr[rows] + G.indptr[rows + 1] - 1 - np.arange(G.nnz)
    indices, data = np.empty_like(G.indices), np.empty_like(G.data, dtype=np.float64)
    indices[turned] = G.indices
    data[turned] = G.data * (shared / (k + 1.0))
    out = sp.csr_matrix((data, indices, G.indptr.copy()), shape=G.shape)
    out.eliminate_zeros()
    return out


def neighbour_graph(
    X, n_neighbors=15, *, metric="euclidean", image_shape=None, max_shift=0, blur=0.0, shared_neighbours=False
):
    """The fuzzy k-NN graph of ``X`` (exact neighbours, UMAP's weights).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    n_neighbors : int, default=15
    metric : {"euclidean", "cosine", "auto"}, default="euclidean"
        "cosine": Euclidean distance between rows scaled to unit norm; "auto":
        :func:`auto_metric` (cosine for non-negative rows, else Euclidean).
    image_shape : tuple, optional
        ``(h, w)`` or ``(c, h, w)`` of each row; only used with ``max_shift``
        or ``blur``.
    max_shift : int, default=0
        With ``image_shape``: distances are the minimum over translations of up
        to this many pixels (0: plain Euclidean; nothing about the data's shape
        is inferred from its number of columns).
    blur : float, default=0.0
        With ``image_shape``: Gaussian smoothing (in pixels) of the images
        before distances are measured.
    shared_neighbours : bool, default=False
        Multiply each weight by the neighbourhoods' overlap
        (:func:`shared_neighbour_weights`).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_samples, n_samples)
        Symmetric, zero diagonal, weights in (0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> X = np.r_[np.zeros((5, 2)), np.ones((5, 2))] + np.arange(10)[:, None] * 1e-3
    >>> G = neighbour_graph(X, n_neighbors=3)
    >>> G.shape, bool((G != G.T).nnz == 0), G[:5, 5:].nnz
    ((10, 10), True, 0)
    """
    # The package's thread policy (base.runtime): the distance blocks are torch matmuls and the
    # graph's sparse products numpy/scipy; on a busy machine one thread is not slower than many.
    with compute_threads(blas=True):
        X = prepare_rows(X, metric=metric, image_shape=image_shape, blur=blur)
        idx, dist = knn(X, n_neighbors, image_shape=image_shape, max_shift=max_shift)
        G = fuzzy_graph(idx, dist)
        return shared_neighbour_weights(G, idx) if shared_neighbours else G


def auto_metric(X):
    """``"cosine"`` when ``X`` has no negative value and some zeros, else ``"euclidean"``.

    The cosine distance drops each row's norm and measures angles seen from the
    origin, so it needs an origin that means something: zero intensity or zero
    count, which images, spectra and histograms reach (background pixels, absent
    words) and where the norm is mostly overall brightness or stroke weight.
    Elsewhere the origin is arbitrary (standardised tables, coordinates, data at
    an offset): the angle then depends on where the origin lies, and in few
    dimensions it discards most of a row's position (in two, clusters on one ray
    from the origin become one). Read from the values (in row chunks), never
    from the number of columns; the same rule as CCN's graph.

    Examples
    --------
    >>> import numpy as np
    >>> auto_metric(np.array([[0.0, 3.0], [1.0, 2.0]])), auto_metric(np.array([[-1.0, 3.0], [0.0, 1.0]]))
    ('cosine', 'euclidean')
    >>> auto_metric(np.array([[5.0, 3.0], [4.0, 2.0]]))  # positive, but no zero: an offset, not intensities
    'euclidean'
    """
    if not isinstance(X, (np.ndarray, DaskRows)):
        X = np.asarray(X)
    # Row chunks of 4 MiB, a memmap's pages handed back after each, the first negative value
    # deciding; a dask input is read on its workers.
    negative, zero = value_signs(X, chunk_rows(X.shape[1]))
    return "cosine" if zero and not negative else "euclidean"


def prepare_rows(X, *, metric="euclidean", image_shape=None, blur=0.0):
    """``X`` as float32 rows ready for :func:`knn`: blurred and/or unit-normed (a copy).

    Rows with NaN or infinite values are refused. Euclidean rows far from the origin against
    their spread (:data:`OFFSET_RATIO`) are centred, and rows whose float32 squares would
    over- or underflow are scaled by a power of two, both in float64 before the cast (flat
    rows only for the centring: a shifted image fills with zeros). For the cosine, rows whose
    float32 norm overflows or vanishes are divided by their largest magnitude in float64
    first. Every other row is cast as it is, so ordinary data keep their bits.
    """
    X = _finite_rows(X, "X")
    with np.errstate(over="ignore"):
        X32 = np.array(X, dtype=np.float32)
    if metric == "auto":
        metric = auto_metric(X32)
    if metric not in ("euclidean", "cosine"):
        raise ValueError(f"metric must be 'euclidean', 'cosine' or 'auto', got {metric!r}.")
    if image_shape is not None:
        _as_shape(image_shape, X.shape[1])
    if metric == "euclidean":
        centre = None if image_shape is not None else _offset_centre(X)
        rows = X if centre is None else np.subtract(X, centre, dtype=np.float64)
        scaled = _power_of_two_scale(rows)
        if scaled is not None:
            rows = scaled
        if rows is not X:
            X32 = rows.astype(np.float32)
    else:
        X32 = _unit_peak_bad_rows(X, X32)
    X = X32
    if image_shape is not None and blur > 0:
        X = _blur(X, image_shape, float(blur)).astype(np.float32)
    if metric == "cosine":
        X /= np.maximum(_row_norms(X, keepdims=True), 1e-12)
    return X


def union_graph(graphs, shares=None):
    """The graphs of several row sets as one graph over their stacked rows (block diagonal).

    No edge joins two sets: each keeps its own neighbourhoods. With ``shares``
    each block's weights are rescaled so that its edges hold that share of the
    total weight, i.e. of the edges :func:`~.encoder.train_neighbour_encoder`
    draws (it draws edges in proportion to their weight).

    Parameters
    ----------
    graphs : sequence of scipy.sparse matrices
        Square, one per row set, in the order the rows are stacked.
    shares : sequence of float, optional
        Non-negative, one per graph, normalised to sum to one; a zero share
        drops that graph's edges (its rows stay as isolated nodes). None: the
        weights as they are.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (sum of n_i, sum of n_i)

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> G = union_graph([sp.csr_matrix([[0, 1.0], [1.0, 0]]), sp.csr_matrix([[0, 0.5], [0.5, 0]])], shares=(1, 3))
    >>> G.shape, float(G[:2, :2].sum()), float(G[2:, 2:].sum()), G[:2, 2:].nnz
    ((4, 4), 0.25, 0.75, 0)
    """
    blocks = [sp.csr_matrix(g, dtype=np.float64) for g in graphs]
    if any(b.shape[0] != b.shape[1] for b in blocks):
        raise ValueError("every graph must be square.")
    if shares is not None:
        shares = np.asarray(shares, dtype=np.float64)
        if shares.shape != (len(blocks),) or np.any(shares < 0) or shares.sum() <= 0:
            raise ValueError(f"shares must hold {len(blocks)} non-negative values, not all zero; got {shares!r}.")
        shares = shares / shares.sum()
        scaled = []
        for b, share in zip(blocks, shares):
            total = b.sum()
            if share > 0 and total <= 0:
                raise ValueError("a graph with a positive share has no edges.")
            scaled.append(b * (share / total) if share > 0 else sp.csr_matrix(b.shape))
        blocks = scaled
    G = sp.block_diag(blocks, format="csr")
    G.eliminate_zeros()
    return G


def keep_rows(rows, graph, max_rows):
    """At most ``max_rows`` of ``rows`` with the graph among them (for keeping a source in a model).

    Rows are taken evenly spaced through the array, without randomness (no
    random state is consumed); the graph keeps the edges between kept rows.

    Returns
    -------
    rows : ndarray of shape (min(n, max_rows), n_features)
    graph : scipy.sparse.csr_matrix
    """
    rows = np.asarray(rows)
    n = rows.shape[0]
    if n <= max_rows:
        return rows, sp.csr_matrix(graph)
    idx = np.unique(np.linspace(0, n - 1, int(max_rows)).round().astype(np.int64))
    G = sp.csr_matrix(graph)[idx][:, idx].tocsr()
    return rows[idx], G
