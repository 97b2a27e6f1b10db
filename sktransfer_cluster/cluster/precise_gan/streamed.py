"""The GAN on inputs too large to copy: landmark rows for the encoder, rows read by index for the GAN.

Past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows a
:class:`~sktransfer_cluster.cluster.precise_gan.PreciseFeatureGAN` fit (or
transfer) holds no float copy of ``X``:

* with the neighbour representation the encoder trains on the graph of the
  landmark rows (:func:`landmark_graph_inputs`) and every row's code is computed
  chunk by chunk (:mod:`sktransfer_cluster.representation.landmarks`); ``G``,
  ``D`` and ``C`` then train on minibatches of the codes (``n x 10``, in memory),
  drawn by index as in memory;
* on the rows themselves (``representation=None``) the critic's real minibatches
  are read by index from ``X`` (:class:`StreamedRows`), and every pass over the
  rows (labels, the nearest-point classifier's Lloyd steps) reads them in chunks.
"""

from __future__ import annotations

import numpy as np
import torch

from ...base import chunk_rows, chunked
from ...representation import row_reader

__all__ = ["READ_ROWS", "StreamedRows", "landmark_graph_inputs", "landmark_graph_rows", "map_rows", "unit_peak_rows"]

#: Rows :class:`StreamedRows` reads between two releases of a memmap's pages. A page fault
#: maps the whole page-cache folio around the row, and with large folios (Linux 6.18 on ext4
#: here) that is 2 MiB for every row drawn at random: the 320 random rows of a generator
#: step's critic minibatches, read at once, mapped up to 640 MiB before their release (peak
#: RSS growth 1,609 MiB over a fit on a 10^6 x 784 memmap). 64 rows map at most 128 MiB.
READ_ROWS = 64


class StreamedRows:
    """The normalised rows of ``X`` read on demand, for networks that train on minibatches.

    ``rows[index]`` (a tensor or array of row indices, in any order, repeats allowed)
    and ``rows[a:b]`` return those rows, ``(x - shift) / scale`` as float32 read
    through :func:`~sktransfer_cluster.representation.row_reader` (a memmap's pages are
    handed back as they are read), on ``device`` in ``dtype``: bitwise the rows of the
    estimator's ``_tensor``. Nothing else is held.

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
        self._read = row_reader(X, shift, scale)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            index = np.arange(*index.indices(self.shape[0]))
        index = index.cpu().numpy() if torch.is_tensor(index) else np.asarray(index)
        # The reader takes sorted distinct rows: read those, then put them in the order asked.
        unique, inverse = np.unique(index, return_inverse=True)
        if unique.shape[0] <= READ_ROWS or _contiguous(unique):
            rows = self._read(unique)
        else:  # scattered rows: a few at a time, each group's pages released before the next
            rows = torch.cat([self._read(unique[i : i + READ_ROWS]) for i in range(0, unique.shape[0], READ_ROWS)])
        return rows[torch.from_numpy(inverse.reshape(-1))].to(self.device, self.dtype)


def _contiguous(index):
    """Whether sorted distinct ``index`` is a run of consecutive rows (a chunk: its pages are its own)."""
    return index.shape[0] == 0 or int(index[-1]) - int(index[0]) == index.shape[0] - 1


@torch.no_grad()
def map_rows(fn, Xt):
    """``fn`` of every row of ``Xt`` (a tensor: :func:`~sktransfer_cluster.base.chunked`), one tensor.

    For :class:`StreamedRows`, chunk by chunk into one output allocated at the first
    chunk: collecting each chunk's small result (as ``chunked`` does) between the
    chunks' reads of a few MiB fragmented the heap until it held as much as the rows
    themselves (labels of a 10^6 x 784 memmap: 2.9 GiB of anonymous memory, never used
    at once).
    """
    if torch.is_tensor(Xt):
        return chunked(fn, Xt)
    n, step = Xt.shape[0], chunk_rows(int(np.prod(Xt.shape[1:])))
    out = None
    for start in range(0, n, step):
        part = fn(Xt[start : start + step])
        if out is None:
            out = torch.empty((n, *part.shape[1:]), dtype=part.dtype, device=part.device)
        out[start : start + part.shape[0]] = part
    return out


def unit_peak_rows(rows):
    """``rows`` divided in place by each row's largest magnitude: the same angles (the cosine
    graph's distance), inside float32 at any scale."""
    rows /= np.maximum(np.abs(rows).max(1, keepdims=True), np.finfo(rows.dtype).tiny)
    return rows


def landmark_graph_rows(X, index, metric, shift, scale):
    """The landmark rows ``X[index]`` as the neighbour graph compares them, float32.

    The raw rows scaled per row (:func:`unit_peak_rows`) for ``metric="cosine"``, else the
    normalised rows ``(x - shift) / scale``: what the in-memory path's graph sees of every row.
    Read in pieces by index (:func:`~sktransfer_cluster.representation.read_landmarks`).
    """
    from ...representation import read_landmarks  # looked up at call time (tests count its reads)

    if metric == "cosine":
        return unit_peak_rows(read_landmarks(X, index))
    return read_landmarks(X, index, shift, scale)


def landmark_graph_inputs(X, index, metric, shift, scale, graph_of):
    """``(graph, inputs)``: the neighbour graph of the landmark rows ``X[index]`` and their normalised rows.

    ``graph_of(rows)`` builds the graph of :func:`landmark_graph_rows`. ``inputs``: the
    float32 numpy rows ``(x - shift) / scale``, the encoder's. For the cosine graph the
    scaled raw landmarks are dropped once the graph is built and read a second time
    normalised: one landmark array fewer at the graph's peak (150 MiB at 50,000 x 784).
    """
    from ...representation import read_landmarks

    rows = landmark_graph_rows(X, index, metric, shift, scale)
    graph = graph_of(rows)
    if metric == "cosine":
        del rows
        rows = read_landmarks(X, index, shift, scale)
    return graph, rows
