"""CCN on inputs too large to copy: rows read on demand and neighbourhoods by radius.

Past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows a CCN fit (or
transfer) holds no float copy of ``X``:

* with ``representation="neighbours"`` the encoder trains on the graph of the
  landmark rows and every row's code is computed chunk by chunk
  (:mod:`sktransfer_cluster.representation.landmarks`); ``G`` and ``f`` train on
  minibatches of the codes (``n x 10``), drawn by index as in memory;
* with ``representation="input"`` ``G`` and ``f`` train on minibatches read by
  index from ``X`` itself (:class:`~sktransfer_cluster.representation.StreamedRows`).

Each row's ``similar_neighbors`` nearest rows (an ``n x k`` index table in memory:
``k = ceil(n / 15)``, 1.3 GB at ``n = 50,000``) become a radius per row
(:class:`NeighbourRadii`): the distance to its ``k'``-th nearest of
:data:`RADIUS_ROWS` reference rows drawn uniformly, ``k' = ceil(k m / n)``; two
rows of a minibatch are neighbours when either lies within the other's radius.
That is the ``k``-NN relation with the ``k``-th distance estimated from a uniform
sample (the ``1 / 15`` quantile of a row's distances from 5,000 rows).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

from ...base.arrays import chunk_rows
from ...base.runtime import compute_threads
from ...nn import knn_indices
from ...representation import landmark_indices
from . import pairs

__all__ = ["RADIUS_ROWS", "NeighbourRadii", "RowBatches"]

#: Reference rows from which each row's neighbourhood radius is estimated: the
#: search costs ``n x RADIUS_ROWS`` distances, and the ``1 / 15`` quantile of a row's
#: distances is then read from about 330 of them.
RADIUS_ROWS = 5000
# The "auto" threshold's rows, as pairs.neighbour_threshold draws them.
_THRESHOLD_ROWS = 1000


class RowBatches(Sequence):
    """``rows[i]`` for each index batch ``i`` of ``batches``, read when iterated (not held)."""

    def __init__(self, rows, batches):
        self.rows, self.batches = rows, batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return self.rows[self.batches[i]]


def _piece_radii(start, rows, reference, index, k):
    """Radii of the rows ``start:start + len(rows)``: the ``k``-th distance to ``reference`` (rows ``index``)."""
    dist = torch.cdist(rows, reference).cpu().numpy()
    # A reference row is not its own neighbour.
    own = np.flatnonzero((index >= start) & (index < start + rows.shape[0]))
    dist[index[own] - start, own] = np.inf
    # numpy's introselect: 4x torch's kthvalue on 256 x 5,000 distances (1 thread).
    return torch.from_numpy(np.partition(dist, k - 1, axis=1)[:, k - 1])


class NeighbourRadii:
    """Each row's ``k`` nearest rows as a radius: the ``k'``-th distance to uniform reference rows.

    For ``n`` rows ``Xt`` (a tensor or :class:`~sktransfer_cluster.representation.StreamedRows`), ``m =
    min(n, RADIUS_ROWS)`` reference rows are drawn by ``rng``; row ``i``'s radius is
    its distance to its ``k' = ceil(k m / n)``-th nearest reference row (itself left
    out, as :func:`~sktransfer_cluster.nn.knn_indices` leaves it out). Rows ``i`` and
    ``j`` are neighbours when ``|x_i - x_j| <= r_i`` or ``<= r_j``
    (:meth:`pairs`), as they are for a ``k``-NN table when either is among the
    other's ``k`` nearest. Memory: the radii, the reference rows and one block of
    ``chunk_rows``-bounded distances.

    Parameters
    ----------
    Xt : torch.Tensor or StreamedRows of shape (n, d)
    k : int
    rng : numpy.random.Generator
    """

    def __init__(self, Xt, k, rng):
        n = Xt.shape[0]
        self.index = landmark_indices(n, rng, max_rows=RADIUS_ROWS)
        m = self.index.shape[0]
        self.reference = Xt[torch.as_tensor(self.index)]
        self.k = max(1, min(m - 1, math.ceil(int(k) * m / n)))
        step = chunk_rows(m)  # blocks of at most 4 MiB of distances (256 rows at m = 5,000)
        piece = functools.partial(_piece_radii, reference=self.reference, index=self.index, k=self.k)
        with torch.no_grad(), compute_threads(self.reference.device):
            if hasattr(Xt, "map_chunks"):
                # Streamed rows: a dask array's chunks are searched on their workers, only radii come back.
                radii = Xt.map_chunks(piece, step, with_start=True)
            else:
                radii = torch.cat([piece(start, Xt[start : start + step]) for start in range(0, n, step)])
        self.radii = radii.to(self.reference.device)

    def pairs(self, idx, xb):
        """(b, b) boolean: rows ``idx`` (values ``xb``) pairwise within either's radius, or i = j."""
        r = self.radii[idx]
        dist = torch.cdist(xb, xb)
        nb = (dist <= r.unsqueeze(1)) | (dist <= r.unsqueeze(0))
        nb.fill_diagonal_(True)
        return nb

    def pair_probabilities(self, g, Xt, max_rows=None):
        """``G``'s "similar" probability of rows with their ``k'`` nearest reference rows.

        The rows: at most ``max_rows`` (None: ``_THRESHOLD_ROWS``) drawn as :func:`~.pairs.neighbour_threshold` draws
        them (a generator seeded 0); a reference row is not its own neighbour. The
        neighbours of a row among a uniform ``m / n`` of all rows are a uniform ``m / n``
        of its ``k`` neighbours: the pairs' scores have the same quantiles.
        """
        n = Xt.shape[0]
        max_rows = _THRESHOLD_ROWS if max_rows is None else max_rows
        rows = np.arange(n) if n <= max_rows else np.sort(np.random.default_rng(0).choice(n, max_rows, replace=False))
        query = Xt[torch.as_tensor(rows)]
        with torch.no_grad():
            knn = knn_indices(self.reference, self.k + 1, query=query)
            # Drop each row's own entry where it is a reference row (found first), else the (k'+1)-th.
            pos = np.searchsorted(self.index, rows)
            own = torch.as_tensor(np.where(self.index[np.minimum(pos, len(self.index) - 1)] == rows, pos, -1))
            drop = knn == own.to(knn.device).unsqueeze(1)
            drop[~drop.any(1), -1] = True
            knn = knn[~drop].reshape(len(rows), self.k)
            return pairs.neighbour_probabilities(g, g.backbone(query), g.backbone(self.reference), knn)
