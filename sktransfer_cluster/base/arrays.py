"""Array helpers shared by every estimator: row chunks, the input normalisation and
its checks, label compaction and validation of widths and image shapes."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
import torch

__all__ = [
    "CHUNK_BYTES",
    "chunk_rows",
    "chunked",
    "fold_affine",
    "compact_labels",
    "check_widths",
    "check_image_shape",
    "input_affine",
    "check_resolution",
    "within_cluster_sum_of_squares",
]


# Bytes of float64 input per chunk in predict/transform: bounds peak memory whatever n is, and
# keeps each chunk's temporaries under glibc's mmap threshold (32 MiB at most), above which every
# fresh array is page-faulted in anew (a 65,536-row chunk of 64 features made predict 4x slower).
CHUNK_BYTES = 2**22

def chunk_rows(n_features):
    """Rows per chunk for rows of ``n_features`` values: ``CHUNK_BYTES`` of float64, at least 256."""
    return max(256, CHUNK_BYTES // (8 * max(1, int(n_features))))

def chunked(fn, X, chunk_size=None):
    """Apply ``fn`` to row chunks of ``X`` and concatenate the results, without autograd.

    Bounds the memory of inference on large inputs whatever their size.

    Parameters
    ----------
    fn : callable
        Maps a chunk of rows to an array or tensor with one row (or entry) per input row.
    X : ndarray or torch.Tensor of shape (n_samples, ...)
    chunk_size : int, default=None
        Rows per chunk; None: :func:`chunk_rows` of the row width.

    Returns
    -------
    ndarray or torch.Tensor
        A tensor when ``fn`` returns tensors, else a numpy array.

    Examples
    --------
    >>> import numpy as np
    >>> chunked(lambda x: x.sum(1), np.ones((5, 2)), chunk_size=2).tolist()
    [2.0, 2.0, 2.0, 2.0, 2.0]
    """
    if chunk_size is None:
        chunk_size = chunk_rows(math.prod(X.shape[1:]))
    with torch.no_grad():
        parts = [fn(X[start : start + chunk_size]) for start in range(0, max(X.shape[0], 1), chunk_size)]
    if torch.is_tensor(parts[0]):
        return torch.cat(parts, 0)
    return np.concatenate([np.asarray(p) for p in parts], axis=0)

def fold_affine(W, b, shift, scale):
    """``(W', b')`` with ``((x - shift) / scale) @ W + b == x @ W' + b'``, in float64.

    Lets a model of normalised rows score raw rows with one matmul, without a
    normalised copy of each chunk.

    Parameters
    ----------
    W : torch.Tensor of shape (n_features, n_outputs)
    b : torch.Tensor of shape (n_outputs,)
    shift : array-like of shape (n_features,)
    scale : float

    Returns
    -------
    W, b : torch.Tensor, float64, on the CPU (MPS has no float64)

    Examples
    --------
    >>> import torch
    >>> W, b = fold_affine(torch.eye(2), torch.zeros(2), [1.0, 3.0], 2.0)
    >>> (torch.tensor([[3.0, 5.0]], dtype=torch.float64) @ W + b).tolist()
    [[1.0, 1.0]]
    """
    W = W.detach().to("cpu", torch.float64) / float(scale)
    shift = torch.as_tensor(np.asarray(shift, dtype=np.float64))
    return W, b.detach().to("cpu", torch.float64) - shift @ W

def compact_labels(outputs, n_outputs=None):
    """Consecutive labels ``0 .. m-1`` for the ``m`` outputs (cluster ids) actually used.

    Label ``j`` is the ``j``-th smallest used output, so the map is the
    identity when every output is used.

    Parameters
    ----------
    outputs : array-like of int, shape (n_samples,)
        Raw output ids (e.g. the argmax of a network), all >= 0.
    n_outputs : int, default=None
        Number of possible outputs (defaults to ``max(outputs) + 1``).

    Returns
    -------
    labels : ndarray of int64, shape (n_samples,)
    used : ndarray of int64, shape (m,)
        The used outputs in increasing order: ``used[labels] == outputs``.

    Examples
    --------
    >>> labels, used = compact_labels([4, 1, 4, 7])
    >>> labels.tolist(), used.tolist()
    ([1, 0, 1, 2], [1, 4, 7])
    """
    outputs = np.asarray(outputs, dtype=np.int64)
    used = np.flatnonzero(np.bincount(outputs, minlength=n_outputs or 0)).astype(np.int64)
    return np.searchsorted(used, outputs).astype(np.int64), used

def check_widths(name, widths, *, allow_empty=True):
    """Validate a tuple of layer widths; return it as a tuple of Python ints.

    Raises
    ------
    ValueError
        If ``widths`` is not a sequence of positive integers (``2.5``, ``0``,
        ``-1``, ``True`` and strings are refused), or is empty when
        ``allow_empty`` is false. The message says what to pass.

    Examples
    --------
    >>> check_widths("hidden_dims", [64, 32])
    (64, 32)
    """
    what = "a tuple of positive ints" + ("" if allow_empty else " (at least one)")
    if isinstance(widths, (str, bytes)) or not hasattr(widths, "__iter__"):
        raise ValueError(f"{name} must be {what}, layer widths such as (128, 64); got {widths!r}.")
    widths = tuple(widths)
    bad = [w for w in widths if isinstance(w, bool) or not isinstance(w, Integral) or w < 1]
    if bad or (not widths and not allow_empty):
        raise ValueError(f"{name} must be {what}, layer widths such as (128, 64); got {widths!r}.")
    return tuple(int(w) for w in widths)

def check_image_shape(image_shape, n_features):
    """Validate the shape of one image against the width of X; return it as a tuple of ints.

    Raises
    ------
    ValueError
        If ``image_shape`` is not ``(h, w)`` or ``(c, h, w)`` with positive ints,
        or does not hold ``n_features`` values; the message says what to pass.

    Examples
    --------
    >>> check_image_shape((28, 28), 784)
    (28, 28)
    """
    shape = tuple(image_shape) if hasattr(image_shape, "__iter__") else (image_shape,)
    if len(shape) not in (2, 3) or any(isinstance(v, bool) or not isinstance(v, Integral) or v < 1 for v in shape):
        raise ValueError(
            f"image_shape must be (h, w) or (c, h, w) with positive ints, e.g. (28, 28); got {image_shape!r}."
        )
    size = math.prod(int(v) for v in shape)
    if size != n_features:
        raise ValueError(
            f"image_shape={image_shape!r} holds {size} pixels but X has {n_features} features; pass the "
            "shape of one image, whose flattened pixels are the rows of X (e.g. (28, 28) for 784 features)."
        )
    return tuple(int(v) for v in shape)

def input_affine(X, chunk_size=None):
    """Per-feature mean and one global scale of ``X``, in float64: ``(shift, scale)``.

    ``scale`` is the root mean square of the centred entries (1 when they are
    all equal). One scale for every feature keeps the data's geometry, and
    float64 with a pre-division by the largest centred entry keeps both
    computable for any finite float32/float64 input (no overflow at 1e20, no
    underflow at 1e-300). Rows are read in chunks: no float64 copy of ``X``.
    """
    n = X.shape[0]
    chunk_size = chunk_rows(X.shape[1]) if chunk_size is None else chunk_size
    shift = np.zeros(X.shape[1])
    for start in range(0, n, chunk_size):
        shift += X[start : start + chunk_size].sum(0, dtype=np.float64)
    shift /= n
    peak = 0.0
    for start in range(0, n, chunk_size):
        peak = max(peak, float(np.abs(X[start : start + chunk_size] - shift).max(initial=0.0)))
    if not (0.0 < peak < np.inf):
        return shift, 1.0
    total = 0.0
    for start in range(0, n, chunk_size):
        total += float((((X[start : start + chunk_size] - shift) / peak) ** 2).sum())
    return shift, peak * math.sqrt(total / X.size)

def check_resolution(dtype, shift, scale):
    """``ValueError`` when ``dtype`` cannot resolve the data's spread at its offset.

    Near a value of magnitude ``m`` a float is exact to about ``eps * m``; once
    that exceeds half the data's root-mean-square spread ``scale``, the
    clusters are lost in rounding before any estimator sees them (e.g. float32
    data around 1e8 spread by less than 20).
    """
    offset = float(np.abs(shift).max(initial=0.0))
    resolution = float(np.finfo(dtype).eps) * offset
    if resolution > scale / 2:
        raise ValueError(
            f"X cannot be clustered at {np.dtype(dtype).name} precision: its values sit near "
            f"{offset:.3g} but spread by only {scale:.3g} around their mean, while "
            f"{np.dtype(dtype).name} resolves steps of {resolution:.3g} there. Subtract the offset "
            "(e.g. StandardScaler) before converting the data, or pass float64."
        )


def within_cluster_sum_of_squares(X, labels, n_labels, chunk_size=None):
    """``sum_k sum_{i: labels_i = k} ||X_i - mean_k||^2``, in float64, in bounded memory.

    Two passes over row chunks of ``X`` (per-label sums, then squared
    deviations from the per-label means), so no ``(n, d)`` float64 copy is made
    and a large common offset of the rows cancels exactly.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    labels : ndarray of int, shape (n_samples,)
        Values in ``0 .. n_labels - 1``.
    n_labels : int
    chunk_size : int, default=None
        Rows per chunk; None: :func:`chunk_rows` of the row width.

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> within_cluster_sum_of_squares(np.array([[0.0], [2.0], [10.0]]), np.array([0, 0, 1]), 2)
    2.0
    """
    n = X.shape[0]
    chunk_size = chunk_rows(X.shape[1]) if chunk_size is None else chunk_size
    lab = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    sums = torch.zeros(n_labels, X.shape[1], dtype=torch.float64)
    for start in range(0, n, chunk_size):
        rows = torch.as_tensor(np.asarray(X[start : start + chunk_size], dtype=np.float64))
        sums.index_add_(0, lab[start : start + chunk_size], rows)
    counts = torch.bincount(lab, minlength=n_labels).to(torch.float64)
    means = sums / counts.clamp_min(1.0).unsqueeze(1)
    total = 0.0
    for start in range(0, n, chunk_size):
        rows = torch.as_tensor(np.asarray(X[start : start + chunk_size], dtype=np.float64))
        total += float(((rows - means[lab[start : start + chunk_size]]) ** 2).sum())
    return total
