"""Array helpers shared by every estimator: row chunks, the input normalisation and
its checks, label compaction and validation of widths and image shapes."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

__all__ = [
    "CHUNK_BYTES",
    "chunk_rows",
    "chunked",
    "fold_affine",
    "normalise_rows",
    "normalised_blocks",
    "InputFold",
    "inference_rows",
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
        Maps a chunk of rows to an array or tensor with one row (or entry) per input row
        (written into one output), or with any other number of rows (concatenated).
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
    n, out, parts = X.shape[0], None, []
    with torch.no_grad():
        for start in range(0, max(n, 1), chunk_size):
            part = fn(X[start : start + chunk_size])
            part = part if torch.is_tensor(part) else np.asarray(part)
            if start == 0 and part.shape[0] == min(n, chunk_size):
                # One row per row: one output, allocated at the first chunk. The chunks' results
                # kept for one concatenation fragmented the heap between reads of a memmap's chunks
                # (labels of a 10^6 x 784 memmap: 2.9 GiB of anonymous memory, never used at once).
                shape = (n, *part.shape[1:])
                out = (torch.empty(shape, dtype=part.dtype, device=part.device) if torch.is_tensor(part)
                       else np.empty(shape, dtype=part.dtype))
            if out is None:  # any other number of rows per chunk (a per-chunk reduction): concatenated
                parts.append(part)
            else:
                out[start : start + part.shape[0]] = part
    if out is not None:
        return out
    return torch.cat(parts, 0) if torch.is_tensor(parts[0]) else np.concatenate(parts, axis=0)


# Bytes of float32 activations of one row block through a network's widest layer at inference:
# such a block stays in a core's L2 cache (2 MiB here). 10^6 x 64 rows through 64-256-256-10
# (1 thread, this 2-core Xeon) took 0.64 s per 4 x 10^5 rows in 1,024-row blocks against 0.88 s
# in 8,192-row blocks (1,024 x 256 x 4 bytes = 1 MiB).
CACHE_BYTES = 2**20


def inference_rows(n_features, width):
    """Rows per chunk of network inference: :data:`CACHE_BYTES` of float32 through a layer ``width`` wide.

    Never more than :func:`chunk_rows` of ``n_features``, never fewer than 256 (a chunk's fixed
    costs); ``width`` 0 (no network) gives :func:`chunk_rows`.

    Examples
    --------
    >>> inference_rows(64, 256), inference_rows(64, 0), inference_rows(64, 10**6)
    (1024, 8192, 256)
    """
    rows = chunk_rows(n_features)
    if width > 0:
        rows = min(rows, CACHE_BYTES // (4 * int(width)))
    return max(256, rows)


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


def normalised_blocks(X, shift, scale):
    """``(start, (block - shift) / scale)`` for consecutive row blocks of ``X``, in float64.

    The house's one input normalisation, written once for every consumer (tensors for the
    networks, float32 arrays for landmark rows): float64 before any cast to float32, so a large
    offset cannot swamp the data's spread; one float64 block (:func:`chunk_rows`) at a time.
    """
    step = chunk_rows(X.shape[1])
    for start in range(0, X.shape[0], step):
        yield start, (np.asarray(X[start : start + step], dtype=np.float64) - shift) / scale


def normalise_rows(X, shift, scale, dtype, device):
    """``(X - shift) / scale`` as a ``dtype`` tensor on ``device`` (:func:`normalised_blocks`).

    Peak memory is X, the result and one float64 block.
    """
    shift = np.asarray(shift, dtype=np.float64)
    out = torch.empty(X.shape, dtype=dtype, device=device)
    for start, block in normalised_blocks(X, shift, scale):
        out[start : start + block.shape[0]] = torch.from_numpy(block).to(out.device)
    return out


class InputFold:
    """A fitted input normalisation ``x -> (x - shift) / scale`` folded into the first linear layer.

    :meth:`rows` wraps raw float32 rows as a :class:`FoldedRows` tensor that stands for their
    normalised form: a ``linear`` layer applied to it multiplies the raw rows by its weights
    divided by ``scale``, with ``shift`` folded into its bias (:func:`fold_affine`, in float64,
    once per layer and per fold, not per chunk), so rows go into the network with no float64
    pass and no normalised copy. Any other operation gets the normalised rows exactly as
    :func:`normalise_rows` computes them.

    The fold adds a rounding of ``eps * |shift|`` to the first layer's outputs (the argument of
    issue 30 S7, as in ``predict``'s linear fold); with ``centre`` (the shift rounded to float32)
    each chunk is first centred at it in float32, exactly for rows near it, and only the rest of
    the shift is folded.

    Parameters
    ----------
    shift : ndarray of shape (n_features,)
    scale : float
    centre : bool
        Centre each chunk at the float32 shift first (for offsets large beside the spread).
    device : torch.device
    """

    def __init__(self, shift, scale, centre, device):
        self.shift = np.asarray(shift, dtype=np.float64)
        self.scale = float(scale)
        self.device = device
        self.centre = None
        residual = torch.from_numpy(self.shift)
        if centre:
            self.centre = residual.to(torch.float32)
            residual = residual - self.centre.to(torch.float64)
            self.centre = self.centre.to(device)
        self._residual = residual
        self._folds = {}

    def rows(self, X):
        """Validated float32 rows ``X`` (ndarray) as a :class:`FoldedRows` on the fold's device."""
        # torch wraps neither negative strides nor read-only memory: copy such chunks.
        X = np.require(X, requirements="CW")
        plain = torch.as_tensor(X, dtype=torch.float32, device=self.device)
        if self.centre is not None:
            plain = plain - self.centre
        return FoldedRows.wrap(plain, X, self)

    def linear(self, weight, bias):
        """``(W, b)``, float32, with ``linear(normalised, weight, bias) == rows @ W + b`` up to rounding."""
        hit = self._folds.get(id(weight))
        if hit is None or hit[0] is not weight or hit[1] != weight._version:
            b = torch.zeros(weight.shape[0], dtype=torch.float64) if bias is None else bias
            W, b = fold_affine(weight.detach().T, b, self._residual, self.scale)
            hit = (weight, weight._version, W.to(weight.device, torch.float32), b.to(weight.device, torch.float32))
            self._folds[id(weight)] = hit
        return hit[2], hit[3]

    def normalised(self, X):
        return normalise_rows(X, self.shift, self.scale, torch.float32, self.device)


# Tensor attributes that read the shape, dtype or device only: equal on the raw and the
# normalised rows, so answered without normalising.
_METADATA = {
    torch.Tensor.shape.__get__, torch.Tensor.dtype.__get__, torch.Tensor.device.__get__,
    torch.Tensor.ndim.__get__, torch.Tensor.requires_grad.__get__, torch.Tensor.is_cuda.__get__,
    torch.Tensor.size, torch.Tensor.dim, torch.Tensor.__len__,
}


class FoldedRows(torch.Tensor):
    """Raw rows standing for their normalisation under an :class:`InputFold` (see there).

    ``linear`` (without autograd) runs on the raw rows with the folded weights; row slices
    ``rows[a:b]`` stay folded; shape, dtype and device are read as they are; every other
    operation sees the normalised rows, computed once and from then on the rows for every
    operation (so a change made in place is never bypassed by the fold).
    """

    @staticmethod
    def wrap(plain, source, fold):
        out = plain.as_subclass(FoldedRows)
        out._plain, out._source, out._fold, out._normalised = plain, source, fold, None
        return out

    def normalised(self):
        """The rows as :func:`normalise_rows` gives them (computed once)."""
        if self._normalised is None:
            self._normalised = self._fold.normalised(self._source)
        return self._normalised

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        x = args[0] if args else None
        # Once the normalised rows exist (an operation may have changed them in place), they are the rows.
        if type(x) is cls and x._normalised is None:
            if func is F.linear and not torch.is_grad_enabled():
                weight = args[1] if len(args) > 1 else kwargs["weight"]
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                W, b = x._fold.linear(weight, bias)
                return torch.addmm(b, x._plain, W)
            if func is torch.Tensor.__getitem__ and isinstance(args[1], slice) and args[1].step in (None, 1):
                return cls.wrap(x._plain[args[1]], x._source[args[1]], x._fold)
            if func in _METADATA:
                return func(x._plain, *args[1:], **kwargs)
        args, kwargs = tree_map(lambda a: a.normalised() if type(a) is cls else a, (args, kwargs))
        return func(*args, **kwargs)


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
    computable for any finite float32/float64 input whose centred entries are
    finite (no overflow at 1e20 nor at 1.2e308, no underflow at 1e-300). Rows
    are read in chunks: no float64 copy of ``X``.
    """
    n = X.shape[0]
    chunk_size = chunk_rows(X.shape[1]) if chunk_size is None else chunk_size

    def blocks():
        return (X[start : start + chunk_size] for start in range(0, n, chunk_size))

    shift = np.zeros(X.shape[1])
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is redone below
        for rows in blocks():
            shift += rows.sum(0, dtype=np.float64)
    shift /= n
    if not np.isfinite(shift).all():
        shift = _scaled_column_means(blocks(), n, X.shape[1])
    return shift, rms_about(blocks, shift, X.size)


def rms_about(blocks, shift, size):
    """The root mean square of ``rows - shift`` over the row blocks of ``blocks()``, in float64.

    ``blocks`` is called twice: the largest centred entry, then the squares pre-divided by
    it, so that the result is computable for entries at any finite scale. 1 when every entry
    equals its shift (or the centred entries overflow). ``size``: the number of entries.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 2.0], [2.0, 0.0]])
    >>> float(rms_about(lambda: iter([X]), np.ones(2), X.size))
    1.0
    """
    peak = 0.0
    for rows in blocks():
        peak = max(peak, float(np.abs(rows - shift).max(initial=0.0)))
    if not (0.0 < peak < np.inf):
        return 1.0
    total = 0.0
    for rows in blocks():
        total += float((((rows - shift) / peak) ** 2).sum())
    return peak * math.sqrt(total / size)


def _scaled_column_means(chunks, n, n_features):
    """Column means of the rows in ``chunks`` (``n`` in all) as the sum of each row divided by ``n``.

    The fallback of :func:`input_affine` where the plain float64 sum overflows (finite
    values near 1.8e308): a sum of values divided by ``n`` is at most their largest
    magnitude. Rounds differently from the plain sum, so it is used only where that fails.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.5e308], [1.5e308], [-1.0e308]])
    >>> _scaled_column_means([X[:2], X[2:]], 3, 1) / 1e307
    array([6.66666667])
    """
    shift = np.zeros(n_features)
    for rows in chunks:
        shift += (np.asarray(rows, dtype=np.float64) / n).sum(0)
    return shift


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
            f"{np.dtype(dtype).name} resolves steps of {resolution:.3g} there. "
            + (
                "Subtract the offset (e.g. StandardScaler) before converting the data, or pass float64."
                if np.dtype(dtype) != np.float64
                # Already float64: the spread is lost where the values were rounded, not in a conversion.
                else "The spread is lost in the values' own rounding: compute them relative to their offset "
                "where they are produced (float64 has no wider type to pass)."
            )
        )


def _writable(a):
    """``a``, copied when read-only: torch cannot wrap read-only memory (a memmap, a pandas>=3
    frame's values) without a warning."""
    return a if a.flags.writeable else a.copy()


def _check_wcss_inputs(X, labels, n_labels, chunk_size):
    """``X`` (an array as given: a memmap is not copied) and ``labels`` as int64, or a
    ``ValueError`` naming what does not fit."""
    if not (hasattr(X, "shape") and hasattr(X, "__getitem__")):
        X = np.asarray(X, dtype=np.float64)
    if len(X.shape) != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {tuple(X.shape)}.")
    if isinstance(n_labels, bool) or not isinstance(n_labels, Integral) or n_labels < 1:
        raise ValueError(f"n_labels must be an integer >= 1; got {n_labels!r}.")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral)
                                   or chunk_size < 1):
        raise ValueError(f"chunk_size must be None or an integer >= 1; got {chunk_size!r}.")
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must hold one label per row of X (1-D); got shape {labels.shape}.")
    if labels.shape[0] != X.shape[0]:
        raise ValueError(f"{labels.shape[0]} labels for {X.shape[0]} rows of X; pass one label per row.")
    if X.shape[0] == 0:
        raise ValueError("within_cluster_sum_of_squares needs at least one sample.")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"labels must be integer cluster ids in 0 .. n_labels - 1; got dtype {labels.dtype}.")
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= n_labels:
        raise ValueError(f"labels must lie in 0 .. {n_labels - 1} (n_labels={n_labels}); got values from "
                         f"{low} to {high}. Relabel them (e.g. np.unique(labels, return_inverse=True)) or "
                         "drop rows labelled as noise (-1).")
    return X, _writable(labels.astype(np.int64, copy=False))


def within_cluster_sum_of_squares(X, labels, n_labels, chunk_size=None):
    """``sum_k sum_{i: labels_i = k} ||X_i - mean_k||^2``, in float64, in bounded memory.

    Two passes over row chunks of ``X`` (per-label sums, then squared
    deviations from the per-label means), so no ``(n, d)`` float64 copy is made
    and a large common offset of the rows cancels exactly.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    labels : array-like of int, shape (n_samples,)
        Values in ``0 .. n_labels - 1``.
    n_labels : int
    chunk_size : int, default=None
        Rows per chunk; None: :func:`chunk_rows` of the row width.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        When ``X`` is not 2-D or empty, ``labels`` are not one integer per row
        of ``X`` in ``0 .. n_labels - 1``, or ``n_labels``/``chunk_size`` are not
        positive integers.

    Examples
    --------
    >>> import numpy as np
    >>> within_cluster_sum_of_squares(np.array([[0.0], [2.0], [10.0]]), np.array([0, 0, 1]), 2)
    2.0
    """
    X, labels = _check_wcss_inputs(X, labels, n_labels, chunk_size)
    n = X.shape[0]
    chunk_size = chunk_rows(X.shape[1]) if chunk_size is None else chunk_size
    lab = torch.as_tensor(labels)
    sums = torch.zeros(n_labels, X.shape[1], dtype=torch.float64)
    for start in range(0, n, chunk_size):
        rows = torch.as_tensor(_writable(np.asarray(X[start : start + chunk_size], dtype=np.float64)))
        sums.index_add_(0, lab[start : start + chunk_size], rows)
    counts = torch.bincount(lab, minlength=n_labels).to(torch.float64)
    means = sums / counts.clamp_min(1.0).unsqueeze(1)
    total = 0.0
    for start in range(0, n, chunk_size):
        rows = torch.as_tensor(_writable(np.asarray(X[start : start + chunk_size], dtype=np.float64)))
        total += float(((rows - means[lab[start : start + chunk_size]]) ** 2).sum())
    return total
