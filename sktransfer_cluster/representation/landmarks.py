"""Graph representations of inputs too large to copy: landmark rows, row readers, streamed codes.

A neighbour encoder fitted on every row of X needs X in memory and the exact k-NN
graph of all rows (``O(n^2 d)``). Past :data:`LANDMARK_ROWS` rows a fit instead

1. draws ``m = min(n, LANDMARK_ROWS)`` landmark rows uniformly by index
   (:func:`landmark_indices`) and reads only them (:func:`read_landmarks`, through
   :class:`~sktransfer_cluster.base.streaming.RowReader`: bounded float64 pieces, a
   memmap's pages released as it goes);
2. builds the neighbour graph of the landmarks
   (:func:`~.graph.neighbour_graph`) and trains the encoder on it
   (:func:`~.encoder.train_neighbour_encoder`, which also takes a row reader,
   :func:`row_reader`, in place of an array);
3. maps every row through the trained encoder chunk by chunk
   (:func:`encode_chunks`): only the codes, ``n x n_components``, are held.

Nothing holds more than the landmarks and one chunk of X. Rows are normalised
exactly as the estimators' ``_tensor`` does it (``(x - shift) / scale`` in float64,
then float32), so a landmark's input is bitwise the row the in-memory path would
have used.
"""

from __future__ import annotations

import numpy as np
import torch

import copy

from ..base import streaming
from ..base.arrays import chunk_rows, normalised_blocks
from ..base.runtime import compute_threads, on_compute_threads
from ..base.streaming import DaskRows, PlannedReads, RowReader, iter_row_chunks

__all__ = ["LANDMARK_ROWS", "StreamedRows", "encode_chunks", "landmark_graph_inputs", "landmark_graph_rows",
           "landmark_indices", "normalise_rows", "read_landmarks", "row_reader", "unit_peak_rows", "uses_landmarks"]

#: Landmark rows of a graph fit: a data set with more rows is represented by this many rows
#: drawn uniformly. The cost it bounds, whatever n: the exact graph search, ``m^2 d``
#: multiply-adds (2 x 10^12 at d = 784), the landmarks in memory (``m d`` float32: 150 MiB at
#: d = 784; building their graph peaks 300 MiB above them, measured at 50,000 x 784: the
#: float32 copy the search reads and about 140 MiB of distance blocks), and the training (about ``1.6 m k``
#: edges per pass, k neighbours). Every data set of up to 50,000 rows keeps its fit on all
#: rows exactly as before landmarks existed.
LANDMARK_ROWS = 50_000
# A dask array of up to LANDMARK_ROWS rows is computed to numpy before any fit sees it
# (base.streaming.dask_input): every wing fits that many rows in memory.
streaming.set_in_memory_rows(lambda: LANDMARK_ROWS)


def uses_landmarks(n_samples, max_rows=None):
    """Whether a graph fit on ``n_samples`` rows runs on landmarks (more rows than ``max_rows``).

    ``max_rows``: None reads :data:`LANDMARK_ROWS` at call time.

    Examples
    --------
    >>> uses_landmarks(50_000), uses_landmarks(50_001), uses_landmarks(10, max_rows=5)
    (False, True, True)
    """
    return int(n_samples) > int(LANDMARK_ROWS if max_rows is None else max_rows)


def landmark_indices(n_samples, rng, max_rows=None):
    """Sorted indices of ``min(n_samples, max_rows)`` rows drawn uniformly without replacement.

    Every index (``arange``) when there are no more rows than ``max_rows``; then
    ``rng`` is not used.

    Parameters
    ----------
    n_samples : int
    rng : numpy.random.Generator
    max_rows : int, optional
        None: :data:`LANDMARK_ROWS`.

    Returns
    -------
    ndarray of int64, sorted

    Examples
    --------
    >>> import numpy as np
    >>> idx = landmark_indices(1000, np.random.default_rng(0), max_rows=10)
    >>> idx.shape, bool(np.all(np.diff(idx) > 0))
    ((10,), True)
    """
    n = int(n_samples)
    m = min(n, int(LANDMARK_ROWS if max_rows is None else max_rows))
    if m >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(rng.choice(n, m, replace=False)).astype(np.int64)


def normalise_rows(rows, shift=None, scale=1.0, out=None):
    """``((rows - shift) / scale)`` as float32 numpy rows (``out`` may be ``rows``).

    The estimators' input normalisation to the bit (:func:`~sktransfer_cluster.base.arrays.normalised_blocks`,
    which ``_tensor`` uses too): float64 arithmetic, one rounding to float32.
    ``shift=None``: the rows as float32, through float64 as well (``x - 0`` and ``x / 1`` are exact).
    """
    out = np.empty(rows.shape, dtype=np.float32) if out is None else out
    if shift is None:
        shift, scale = 0.0, 1.0
    for start, block in normalised_blocks(rows, shift, scale):
        out[start : start + block.shape[0]] = block
    return out


def read_landmarks(X, index, shift=None, scale=1.0):
    """The rows of ``X`` at sorted ``index`` as one float32 array, normalised when ``shift`` is given.

    Read through :class:`~sktransfer_cluster.base.streaming.RowReader` in pieces of
    4 MiB of float64 (:func:`~sktransfer_cluster.base.arrays.chunk_rows`): beyond the
    result, memory holds one float64 piece, and a memmap's file pages are handed back
    as they are read (every :data:`~sktransfer_cluster.base.streaming.RELEASE_ROWS` rows).

    Parameters
    ----------
    X : ndarray or np.memmap of shape (n_samples, n_features)
    index : ndarray of int, sorted
    shift : ndarray of shape (n_features,), optional
    scale : float, default=1.0

    Returns
    -------
    ndarray of float32, shape (len(index), n_features)
    """
    index = np.asarray(index, dtype=np.int64)
    reader = RowReader(X)
    out = np.empty((index.shape[0], X.shape[1]), dtype=np.float32)
    # A dask array's rows come in larger pieces: each read is a compute, a task per chunk touched.
    step = max(chunk_rows(X.shape[1]), streaming.DASK_READ_ROWS) if isinstance(X, DaskRows) else chunk_rows(X.shape[1])
    for start in range(0, index.shape[0], step):
        part = index[start : start + step]
        normalise_rows(reader(part), shift, scale, out=out[start : start + part.shape[0]])
    return out


def row_reader(X, shift=None, scale=1.0):
    """``read(nodes)``: the rows of ``X`` at ``nodes`` (sorted, distinct) as a normalised float32 tensor.

    The input :func:`~.encoder.train_neighbour_encoder` takes in place of an array,
    so that a network trains on rows it reads from a memmap batch by batch
    (:func:`read_landmarks` per call).
    """

    def read(nodes):
        index = nodes.cpu().numpy() if torch.is_tensor(nodes) else np.asarray(nodes)
        return torch.from_numpy(read_landmarks(X, index, shift, scale))

    return read


def unit_peak_rows(rows):
    """``rows`` divided in place by each row's largest magnitude: the same angles (the cosine
    graph's distance), inside float32 at any scale."""
    # Each row's peak from its max and min: no rows-sized temporary of magnitudes.
    peaks = np.maximum(rows.max(1, keepdims=True), -rows.min(1, keepdims=True)) if rows.size else rows[:, :1]
    rows /= np.maximum(peaks, np.finfo(rows.dtype).tiny)
    return rows


def landmark_graph_rows(X, index, metric, shift, scale):
    """The landmark rows ``X[index]`` as a neighbour graph of ``metric`` compares them, float32.

    The raw rows scaled per row (:func:`unit_peak_rows`) for ``metric="cosine"``, else the
    normalised rows ``(x - shift) / scale``: what the in-memory path's graph sees of every row.
    Read in pieces by index (:func:`read_landmarks`).
    """
    if metric == "cosine":
        return unit_peak_rows(read_landmarks(X, index))
    return read_landmarks(X, index, shift, scale)


def landmark_graph_inputs(X, index, metric, shift, scale, graph_of):
    """``(graph, inputs)``: the neighbour graph of the landmark rows ``X[index]`` and their normalised rows.

    ``graph_of(rows)`` builds the graph of :func:`landmark_graph_rows`. ``inputs``: the
    float32 numpy rows ``(x - shift) / scale``, an encoder's. For the cosine graph the
    scaled raw landmarks are dropped once the graph is built and read a second time
    normalised: one landmark array fewer at the graph's peak (150 MiB at 50,000 x 784).
    """
    rows = landmark_graph_rows(X, index, metric, shift, scale)
    graph = graph_of(rows)
    if metric == "cosine":
        del rows
        rows = read_landmarks(X, index, shift, scale)
    return graph, rows


class StreamedRows:
    """The normalised rows of ``X`` read on demand, standing for the tensor of all of them.

    For networks that train on minibatches drawn by index: ``rows[index]`` (a tensor or
    array of row indices, in any order, repeats allowed) and ``rows[a:b]`` return those
    rows, ``(x - shift) / scale`` rounded once to float32 (:func:`row_reader`: the bits of
    the in-memory path's rows), on ``device`` in ``dtype``. A memmap's pages are handed back
    as they are read; nothing else is held.

    Parameters
    ----------
    X : ndarray or np.memmap of shape (n_samples, n_features)
    shift : ndarray of shape (n_features,) or None
        None: the rows as they are (no normalisation).
    scale : float
    device : torch.device
    dtype : torch.dtype

    Examples
    --------
    >>> import numpy as np, torch
    >>> rows = StreamedRows(np.arange(6.0).reshape(3, 2), np.zeros(2), 2.0, "cpu", torch.float32)
    >>> rows[torch.tensor([2, 0, 2])].tolist(), rows.shape
    ([[2.0, 2.5], [0.0, 0.5], [2.0, 2.5]], (3, 2))
    """

    def __init__(self, X, shift, scale, device, dtype):
        self.shape = tuple(X.shape)
        self.device, self.dtype = torch.device(device), dtype
        self._source = (X, shift, scale)
        self._read = row_reader(X, shift, scale)
        self._planned = None

    def plan(self, batches):
        """The coming epoch's minibatches (in order): a dask array's rows are then read a group of
        batches per round trip (:class:`~sktransfer_cluster.base.streaming.PlannedReads`), the same
        rows; other arrays ignore it."""
        if isinstance(self._source[0], DaskRows):
            self._planned = PlannedReads(self._read, batches)

    def map_chunks(self, fn, chunk_size=None, *, with_start=False):
        """``chunked(fn, rows)``: ``fn`` over consecutive chunks of the rows as ``rows[a:b]`` gives them.

        For a dask array's rows (:class:`~sktransfer_cluster.base.streaming.DaskRows`) on the
        CPU, each of its chunks is mapped on its worker, in the same pieces at the same
        offsets; only ``fn``'s results (a tensor per piece, one row per row) come back.
        Returns a tensor, as :func:`~sktransfer_cluster.base.arrays.chunked` of a tensor ``fn``.
        ``with_start=True`` calls ``fn(a, rows[a:b])``: for maps that need each row's index.
        """
        from ..base.arrays import chunked

        X, shift, scale = self._source
        step = chunk_rows(X.shape[1]) if chunk_size is None else int(chunk_size)
        if not isinstance(X, DaskRows) or self.device.type != "cpu":
            if not with_start:
                return chunked(fn, self, step)
            with torch.no_grad():
                return torch.cat([fn(a, self[a : a + step]) for a in range(0, self.shape[0], step)])
        parts = X.map_blocks(_map_block, fn, shift, scale, step, self.dtype, with_start)
        return torch.cat([torch.from_numpy(p) for p in parts if p is not None])

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            index = np.arange(*index.indices(self.shape[0]))
        index = index.cpu().numpy() if torch.is_tensor(index) else np.asarray(index)
        planned = self._planned.take(index) if self._planned is not None else None
        if planned is not None:
            return planned.to(self.device, self.dtype)
        # The reader takes sorted distinct rows: read those, then put them in the order asked.
        unique, inverse = np.unique(index, return_inverse=True)
        rows = self._read(unique)[torch.from_numpy(inverse.reshape(-1))]
        return rows.to(self.device, self.dtype)


@on_compute_threads
@torch.no_grad()
def encode_chunks(encoder, X, shift=None, scale=1.0, chunk_size=None):
    """``encoder`` applied to every row of ``X``, read and normalised chunk by chunk.

    Each chunk is a float64 copy of ``chunk_size`` rows (default: 4 MiB of them,
    :func:`~sktransfer_cluster.base.arrays.chunk_rows`), normalised as
    :func:`normalise_rows`, and a memmap's pages are released once it is read;
    only the codes are kept. The encoder runs in eval mode, on its own device and dtype.

    Parameters
    ----------
    encoder : torch.nn.Module
    X : ndarray or np.memmap of shape (n_samples, n_features)
    shift : ndarray of shape (n_features,), optional
    scale : float, default=1.0
    chunk_size : int, optional

    Returns
    -------
    torch.Tensor of shape (n_samples, n_components)
        On the encoder's device, in its dtype.

    A dask array's rows (:class:`~sktransfer_cluster.base.streaming.DaskRows`) are encoded on
    its workers, one task per chunk, in the same pieces at the same offsets (so the codes of
    chunks starting at multiples of ``chunk_size`` are the in-memory ones to the bit); the
    encoder travels to the workers once (a CPU copy when it lives elsewhere) and only the
    codes come back.
    """
    param = next(encoder.parameters())
    was = encoder.training
    encoder.eval()
    out = None
    if isinstance(X, DaskRows):
        try:
            step = chunk_rows(X.shape[1]) if chunk_size is None else int(chunk_size)
            shipped = encoder if param.device.type == "cpu" else copy.deepcopy(encoder).cpu()
            parts = X.map_blocks(_map_block, shipped, shift, scale, step, param.dtype)
        finally:
            encoder.train(was)
        width = next(part.shape[1] for part in parts if part is not None)  # None: a chunk with no rows
        out = torch.empty((X.shape[0], width), dtype=param.dtype, device=param.device)
        for start, part in zip(X.bounds[:-1].tolist(), parts):
            if part is not None:
                out[start : start + part.shape[0]] = torch.from_numpy(part)
        return out
    try:
        for start, stop, rows in iter_row_chunks(X, chunk_size):
            Z = encoder(torch.from_numpy(normalise_rows(rows, shift, scale)).to(param.device, param.dtype))
            if out is None:
                out = torch.empty((X.shape[0], Z.shape[1]), dtype=Z.dtype, device=Z.device)
            out[start:stop] = Z
    finally:
        encoder.train(was)
    return out


def _map_block(start, block, fn, shift, scale, step, dtype, with_start=False):
    """:meth:`StreamedRows.map_chunks` of one dask chunk, on a worker: numpy results (None if empty)."""
    rows = np.asarray(block)
    out = []
    with torch.no_grad(), compute_threads():
        for _, lo, hi in streaming._subchunks(start, start + rows.shape[0], step):
            piece = np.array(rows[lo - start : hi - start], dtype=np.float64)
            piece = torch.from_numpy(normalise_rows(piece, shift, scale)).to(dtype)
            out.append((fn(lo, piece) if with_start else fn(piece)).cpu().numpy())
    return np.concatenate(out) if out else None
