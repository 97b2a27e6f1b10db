"""Reading inputs too large to copy: row chunks, index batches, one-pass statistics.

A fit on an ``np.memmap`` (or an array viewing one) must never hold a float copy of
the whole array. The helpers here read rows in bounded pieces, as float64 copies of
the piece only, and hand the pages of the file they touched back to the kernel
(``madvise(MADV_DONTNEED)``): file pages mapped into the process count in its
resident set, so a pass over a 1.28 GB memmap would otherwise grow the peak RSS by
1.28 GB although nothing was copied. The page cache keeps the pages; reading them
again costs a minor fault. Copy-on-write memmaps (``mode="c"``) are never released:
that would drop the user's private changes.

:func:`streamed_affine` computes :func:`~sktransfer_cluster.base.arrays.input_affine`'s
per-feature mean and global scale, and checks every value is finite, in one pass.

A ``dask.array`` reaches the same paths as a :class:`DaskRows` (see :func:`dask_input`):
rows read by sorted index or in chunks come to the client on demand, while the passes
over every row -- the normalisation moments, the finite check, the signs of the values,
and maps such as an encoder's codes (:meth:`DaskRows.map_blocks`) -- run one task per
chunk on the workers. Nothing converts it whole: ``np.asarray`` of a ``DaskRows``
raises instead.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

from .arrays import _scaled_column_means, chunk_rows, rms_about

__all__ = ["DASK_READ_ROWS", "DaskRows", "RELEASE_ROWS", "RELEASE_WINDOW", "RowReader", "check_dask_array",
           "PlannedReads", "check_finite", "dask_input", "in_memory_rows", "is_dask_array", "iter_row_chunks", "mapped_pages",
           "read_rows", "release_pages", "set_in_memory_rows", "streamed_affine", "value_signs"]


def mapped_pages(X):
    """``(mmap, start, stop)``: the mapping behind ``X`` and the byte range ``X`` spans in it.

    None when ``X`` views no releasable memory map (an in-memory array, or a
    copy-on-write memmap whose pages hold the user's private changes).
    """
    if not isinstance(X, np.ndarray):
        return None
    base = X
    memmap = None
    while base is not None:
        if isinstance(base, np.memmap) and memmap is None:
            memmap = base
        if isinstance(base, mmap.mmap):
            if memmap is None or getattr(memmap, "mode", "c") == "c":
                return None
            start_address = np.frombuffer(base, dtype=np.uint8).__array_interface__["data"][0]
            begin = X.__array_interface__["data"][0] - start_address
            # The bytes X spans, strides included (a view of every other row spans them all).
            extent = sum((n - 1) * abs(s) for n, s in zip(X.shape, X.strides)) + X.itemsize if X.size else 0
            if any(s < 0 for s in X.strides):
                return None
            return base, begin, begin + extent
        base = getattr(base, "base", None) if not isinstance(base, np.memmap) else getattr(base, "_mmap", None)
    return None


def release_pages(X, pages=None):
    """Unmap the file pages ``X`` spans from this process (the page cache keeps them).

    A no-op for anything but a shared or read-only memmap. ``pages``: the result of
    :func:`mapped_pages`, when the caller has it.
    """
    pages = mapped_pages(X) if pages is None else pages
    if pages is None:
        return
    mm, begin, end = pages
    size = mmap.PAGESIZE
    start = (begin // size) * size
    stop = min(len(mm), -(-end // size) * size)
    if stop > start:
        mm.madvise(mmap.MADV_DONTNEED, start, stop - start)


def read_rows(X, index, pages=None, dtype=np.float64):
    """A ``dtype`` copy of ``X[index]`` (a slice or sorted integer indices), its pages released after.

    ``pages``: :func:`mapped_pages` of ``X`` (None: looked up). Each call releases the
    whole span of ``X`` (for a few reads; :class:`RowReader` for many).
    """
    rows = np.array(X[index], dtype=dtype, copy=True)
    release_pages(X, mapped_pages(X) if pages is None else pages)
    return rows


#: Pages are handed back in aligned windows of this many bytes around each row read: a page
#: fault on a file mapping also maps the cached pages around it (the kernel's fault-around,
#: 64 KiB by default), so 24,576 random rows of a 1.28 GB memmap mapped the whole file.
RELEASE_WINDOW = 2**17
#: Rows a :class:`RowReader` reads between two releases. A fault may map more than its
#: window: with large page-cache folios (Linux 6.18 here) it maps the whole folio, up to
#: 2 MiB per row read at random, so 1,024 rows between releases mapped 264 MiB of a
#: 784-column float32 memmap at once and 32 rows 53 MiB (3,000 sorted random rows per call,
#: 1.7 us more per row; docs/notes/performance.md, sixth session).
RELEASE_ROWS = 32


class RowReader:
    """Reads rows of ``X`` by sorted indices as float64 copies, releasing memmap pages as it goes.

    Every :data:`RELEASE_ROWS` rows, the aligned :data:`RELEASE_WINDOW` windows around
    the rows just read are handed back (``madvise`` calls coalesced over runs of windows;
    one call over the whole mapping costs 2 ms per 128 MB), so the resident set grows by
    the pages of at most ``RELEASE_ROWS`` rows whatever the size of ``X`` and of the index.

    Parameters
    ----------
    X : ndarray or np.memmap of shape (n_samples, n_features)
    """

    def __init__(self, X):
        self.X = X
        self.pages = mapped_pages(X)

    def __call__(self, index):
        index = np.asarray(index)
        if self.pages is None:
            return np.array(self.X[index], dtype=np.float64, copy=True)
        rows = np.empty((index.shape[0], *self.X.shape[1:]), dtype=np.float64)
        for start in range(0, index.shape[0], RELEASE_ROWS):
            part = index[start : start + RELEASE_ROWS]
            rows[start : start + part.shape[0]] = self.X[part]
            self._release(part)
        return rows

    def _release(self, index):
        mm, begin, _ = self.pages
        first = begin + index * self.X.strides[0]
        # Fault-around windows are aligned in virtual memory, not to the mapping: take the
        # windows of every byte within 64 KiB of each row.
        reach = 2**16
        low = np.maximum(first - reach, 0) // RELEASE_WINDOW
        high = (first + self.X.strides[0] + reach) // RELEASE_WINDOW
        windows = np.unique(np.concatenate([low, high]))
        windows = np.unique(np.concatenate([windows, windows[:-1][np.diff(windows) == 2] + 1]))
        # Coalesce runs of consecutive windows into one call each.
        breaks = np.flatnonzero(np.diff(windows) > 1)
        for lo, hi in zip(np.r_[windows[:1], windows[breaks + 1]], np.r_[windows[breaks], windows[-1:]]):
            start = int(lo) * RELEASE_WINDOW
            stop = min(len(mm), (int(hi) + 1) * RELEASE_WINDOW)
            if stop > start:
                mm.madvise(mmap.MADV_DONTNEED, start, stop - start)


def iter_row_chunks(X, chunk_size=None, dtype=np.float64):
    """Yield ``(start, stop, rows)``: consecutive row chunks of ``X`` as ``dtype`` copies.

    Each chunk's file pages are released once it is read, so the resident set grows
    by one chunk, whatever the size of ``X``. A :class:`DaskRows` comes to the client
    one of its chunks at a time.
    """
    if isinstance(X, DaskRows):
        yield from X.iter_chunks(chunk_size, dtype)
        return
    pages = mapped_pages(X)
    for start, stop in _row_ranges(X, chunk_size):
        rows = np.array(X[start:stop], dtype=dtype, copy=True)
        _release_rows(X, pages, start, stop)
        yield start, stop, rows


def check_finite(X, chunk_size=None):
    """Raise ``ValueError`` if ``X`` holds NaN or infinity, reading it chunk by chunk.

    For a memmap, each chunk's file pages are released once checked, so the resident set
    grows by one chunk: scikit-learn's own check (``ensure_all_finite``) reads the whole
    array at once and keeps a memmap's every page mapped.

    Examples
    --------
    >>> import numpy as np
    >>> check_finite(np.ones((5, 2)))
    >>> check_finite(np.array([[1.0, np.inf]]))
    Traceback (most recent call last):
    ...
    ValueError: Input X contains NaN or infinity.
    """
    if isinstance(X, DaskRows):
        X.check_finite()
        return
    pages = mapped_pages(X)
    for start, stop in _row_ranges(X, chunk_size):
        finite = bool(np.isfinite(X[start:stop]).all())
        _release_rows(X, pages, start, stop)
        if not finite:
            raise ValueError("Input X contains NaN or infinity.")


def _row_ranges(X, chunk_size):
    n = X.shape[0]
    chunk_size = chunk_rows(X.shape[1]) if chunk_size is None else int(chunk_size)
    return ((start, min(start + chunk_size, n)) for start in range(0, n, chunk_size))


def _release_rows(X, pages, start, stop):
    """Release the file pages of rows ``start:stop`` of ``X`` (``pages``: its :func:`mapped_pages`)."""
    if pages is not None:
        mm, begin, _ = pages
        row_bytes = X.strides[0]
        release_pages(None, (mm, begin + start * row_bytes, begin + stop * row_bytes))


def streamed_affine(X, chunk_size=None):
    """:func:`~sktransfer_cluster.base.arrays.input_affine` of ``X`` in one pass, finite check included.

    The shift is ``input_affine``'s to the bit (the float64 sum of the same chunks'
    sums, over n). For the scale, per chunk: the sum of squares about the chunk's mean
    and its largest deviation, merged by Chan et al.'s pairwise update with the sums of
    squares carried divided by the square of the running peak, so neither 1e200 nor
    1e-200 overflows or underflows; equal to ``input_affine``'s to rounding.

    Returns
    -------
    shift : ndarray of shape (n_features,)
    scale : float

    Raises
    ------
    ValueError
        If ``X`` holds NaN or infinity (checked chunk by chunk, as the pass goes).

    A :class:`DaskRows` is read on its workers instead (:meth:`DaskRows.affine`: two
    passes, each one task per chunk, equal to ``input_affine``).
    """
    if isinstance(X, DaskRows):
        return X.affine()
    d = X.shape[1]
    n_seen = 0
    total = np.zeros(d)  # the shift is input_affine's: the float64 sum of the chunks' sums, over n
    mean = np.zeros(d)
    peak = 0.0  # largest |x - chunk mean| met so far: the unit of ss
    ss = 0.0  # total sum of squares about the running mean, divided by peak**2
    # Finite values near float64's limit can overflow a sum here (V15 #3): checked after the pass.
    with np.errstate(over="ignore", invalid="ignore"):
        for start, stop, rows in iter_row_chunks(X, chunk_size):
            if not np.isfinite(rows).all():
                raise ValueError("Input X contains NaN or infinity.")
            m = stop - start
            chunk_sum = rows.sum(0)
            total += chunk_sum
            chunk_mean = chunk_sum / m
            rows -= chunk_mean
            chunk_peak = float(np.abs(rows).max(initial=0.0))
            delta = chunk_mean - mean
            delta_peak = float(np.abs(delta).max(initial=0.0))
            new_peak = max(peak, chunk_peak, delta_peak)
            if new_peak > 0:
                chunk_ss = float(((rows / new_peak) ** 2).sum()) if chunk_peak > 0 else 0.0
                ss = ss * (peak / new_peak) ** 2 + chunk_ss
                ss += float(((delta / new_peak) ** 2).sum()) * n_seen * m / (n_seen + m)
                peak = new_peak
            mean = mean + delta * (m / (n_seen + m))
            n_seen += m
    shift = total / max(n_seen, 1)
    if not (np.isfinite(total).all() and np.isfinite(mean).all() and math.isfinite(peak) and math.isfinite(ss)):
        # input_affine's three passes, its sums pre-divided by n, where this one cannot carry them.
        return _streamed_affine_scaled(X, chunk_size)
    if not (0.0 < peak < np.inf) or ss <= 0:
        return shift, 1.0
    return shift, peak * math.sqrt(ss / (n_seen * d))


def _streamed_affine_scaled(X, chunk_size):
    """:func:`streamed_affine` where its one pass overflows: :func:`~.arrays.input_affine`'s
    passes over the released chunks, the shift summed pre-divided by n."""
    n, d = X.shape

    def blocks():
        return (rows for _, _, rows in iter_row_chunks(X, chunk_size))

    shift = _scaled_column_means(blocks(), n, d)
    return shift, rms_about(blocks, shift, n * d)


def is_dask_array(X):
    """Whether ``X`` is a ``dask.array.Array``, without importing dask when nothing has."""
    import sys

    da = sys.modules.get("dask.array")
    return da is not None and isinstance(X, da.Array)



# ----------------------------------------------------------------------------- Dask arrays
#: Rows a :class:`DaskRows` brings to the client per compute when rows are read by index in
#: pieces (landmarks) or for planned minibatches (:class:`PlannedReads`): each compute is a
#: round trip and a task per chunk it touches (50-90 ms on a 2-worker LocalCluster here,
#: whatever its size), so pieces of 4 MiB (:func:`~.arrays.chunk_rows`, 668 rows at 784
#: columns) would pay it 75 times for 50,000 landmarks; 8,192 rows of float64 at 784
#: columns are 51 MB.
DASK_READ_ROWS = 8192

# The rows up to which every estimator fits in memory, registered by the layer that owns the
# count (representation.landmarks: LANDMARK_ROWS, read at call time so that a patched count
# holds here too). base cannot import that layer: arrows point down.
_IN_MEMORY_ROWS = [lambda: 50_000]


def set_in_memory_rows(count):
    """Register ``count()``: the rows up to which an estimator fits its input in memory (see :func:`dask_input`)."""
    _IN_MEMORY_ROWS[0] = count


def in_memory_rows():
    """The rows up to which every estimator fits in memory: a dask array of no more is computed to numpy."""
    return int(_IN_MEMORY_ROWS[0]())


def _as_rows(block, dtype):
    """A chunk as C-ordered ``dtype`` rows (integers and float16 become float64, as validation makes them)."""
    return np.ascontiguousarray(block, dtype=dtype)


def _subchunks(start, stop, step):
    """``(index, lo, hi)``: the pieces of rows ``start:stop`` cut at the multiples of ``step`` (global offsets)."""
    lo = start
    while lo < stop:
        index = lo // step
        hi = min(stop, (index + 1) * step)
        yield index, lo, hi
        lo = hi


def _first_moments(start, block, dtype, step):
    """Pass 1 of :meth:`DaskRows.affine` on one chunk: sums per piece, column extremes, finiteness, zeros."""
    rows = _as_rows(block, dtype)
    d = rows.shape[1]
    if not rows.shape[0]:
        return [], np.full(d, np.inf), np.full(d, -np.inf), True, False
    if not np.isfinite(rows).all():
        return [], np.full(d, np.inf), np.full(d, -np.inf), False, False
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is redone by DaskRows.affine
        sums = [(i, rows[lo - start : hi - start].sum(0, dtype=np.float64))
                for i, lo, hi in _subchunks(start, start + rows.shape[0], step)]
    return sums, rows.min(0).astype(np.float64), rows.max(0).astype(np.float64), True, bool((rows == 0).any())


def _second_moments(start, block, dtype, step, shift, peak):
    """Pass 2 of :meth:`DaskRows.affine` on one chunk: per piece, the sum of ``((x - shift) / peak)^2``."""
    rows = _as_rows(block, dtype)
    return [(i, float((((rows[lo - start : hi - start] - shift) / peak) ** 2).sum()))
            for i, lo, hi in _subchunks(start, start + rows.shape[0], step)]


def _scaled_sum(block, dtype, n):
    """One chunk's column sums of its rows divided by ``n`` (:meth:`DaskRows.affine` where the plain sum overflows)."""
    rows = _as_rows(block, dtype)
    return _scaled_column_means([rows], n, rows.shape[1])


def _merge_pieces(parts):
    """The per-piece values of every chunk, a piece cut by a chunk boundary added up, in row order."""
    merged = {}
    for part in parts:
        for index, value in part:
            merged[index] = merged[index] + value if index in merged else value
    return [merged[i] for i in sorted(merged)]


def _block_finite(block):
    return bool(np.isfinite(np.asarray(block)).all())


class DaskRows:
    """A 2-D ``dask.array`` standing for the validated input of a streamed fit, its chunks left on the workers.

    What the streamed paths ask of an array, answered where the data lives:

    * ``rows[index]`` (sorted integer indices or a slice): those rows computed and brought to
      the client (landmarks, minibatches drawn by index), in :attr:`dtype`;
    * :func:`iter_row_chunks`: one chunk at a time on the client;
    * :meth:`affine`, :meth:`check_finite`, :meth:`signs`: reductions, one task per chunk,
      only a few numbers per chunk coming back;
    * :meth:`map_blocks`: any per-row map (an encoder's codes), one task per chunk, only its
      results coming back.

    ``np.asarray(rows)`` raises ``TypeError``: nothing converts the whole array by accident.
    A nested estimator is given :attr:`array` (the dask array), not this wrapper, so that it
    validates and streams it itself. Persist the array first (``X.persist()``): a chunk
    computed from a task graph is otherwise computed again at each read.
    :attr:`dtype` is what validation makes of the array's: float32 stays, every other real
    type is read as float64.

    Parameters
    ----------
    array : dask.array.Array of shape (n_samples, n_features)
        Real numbers. Rechunked to whole rows (every column in one chunk) when it is not.
    """

    def __init__(self, array):
        self.array = array if array.numblocks[1] == 1 else array.rechunk({1: -1})
        self.dtype = np.dtype(np.float32 if array.dtype == np.float32 else np.float64)
        self.shape = (int(array.shape[0]), int(array.shape[1]))
        self.ndim, self.size = 2, self.shape[0] * self.shape[1]
        self.bounds = np.cumsum((0,) + tuple(int(c) for c in self.array.chunks[0]))
        self._signs = None

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"DaskRows(shape={self.shape}, dtype={self.dtype.name}, chunks={len(self.bounds) - 1})"

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"{self!r} would be computed whole on the client; a dask input is read by index, in chunks "
            "or on its workers (sktransfer_cluster.base.streaming.DaskRows)."
        )

    def __getitem__(self, index):
        if isinstance(index, tuple):
            if len(index) != 1:
                raise IndexError("DaskRows reads whole rows: index the rows only")
            index = index[0]
        if not isinstance(index, slice):
            index = np.asarray(index)
            if index.ndim != 1 or index.dtype.kind not in "iu":
                raise IndexError("DaskRows reads rows by a slice or a 1-D array of integer indices")
        return _as_rows(self.array[index].compute(), self.dtype)

    def blocks(self):
        """``(start, delayed chunk)`` for every chunk of rows, in order."""
        return list(zip(self.bounds[:-1].tolist(), self.array.to_delayed().ravel()))

    def map_blocks(self, fn, *args):
        """``[fn(start, chunk, *args) for every chunk]``, each call one task on the workers, in row order.

        ``chunk`` is the raw dask chunk (convert it with :attr:`dtype`). Each of ``args`` travels
        to the workers once per compute, not once per task (a network's weights, say).
        """
        import dask

        shared = [dask.delayed(a, pure=False, traverse=False) for a in args]
        return list(dask.compute(*[dask.delayed(fn, pure=False)(start, block, *shared) for start, block in self.blocks()]))

    def iter_chunks(self, chunk_size=None, dtype=np.float64):
        """:func:`iter_row_chunks` of the array: each chunk computed on its own and cut into ``chunk_size`` rows."""
        step = chunk_rows(self.shape[1]) if chunk_size is None else int(chunk_size)
        for start, stop, block in zip(self.bounds[:-1], self.bounds[1:], self.array.to_delayed().ravel()):
            rows = np.asarray(block.compute())
            for lo in range(0, int(stop - start), step):
                part = rows[lo : lo + step]
                yield int(start) + lo, int(start) + lo + part.shape[0], np.array(part, dtype=dtype, copy=True)
            del rows

    def check_finite(self):
        """``ValueError`` if any value is NaN or infinite: one task per chunk, a boolean back from each."""
        import dask

        if not all(dask.compute(*[dask.delayed(_block_finite, pure=False)(b) for _, b in self.blocks()])):
            raise ValueError("Input X contains NaN or infinity.")

    def affine(self):
        """:func:`~.arrays.input_affine` of the array on its workers: ``(shift, scale)``.

        Two passes, each one task per chunk returning a few numbers: the float64 sums of
        the pieces :func:`~.arrays.input_affine` reads (:func:`~.arrays.chunk_rows` rows at
        fixed offsets) with each column's extremes, then each piece's sum of
        ``((x - shift) / peak)^2``. The largest ``|x - shift|`` is read from the extremes
        (rounding is monotonic, so it is the largest rounded difference exactly). Where the
        chunks start at multiples of the piece size the result is ``input_affine``'s to the
        bit; otherwise a piece cut by a chunk boundary is summed in two parts. The first pass
        checks every value is finite and records :meth:`signs`.

        Raises
        ------
        ValueError
            If the array holds NaN or infinity.
        """
        import dask

        n, d = self.shape
        step = chunk_rows(d)
        parts = dask.compute(*[dask.delayed(_first_moments, pure=False)(start, block, self.dtype, step)
                               for start, block in self.blocks()])
        if not all(p[3] for p in parts):
            raise ValueError("Input X contains NaN or infinity.")
        low = np.min([p[1] for p in parts], axis=0)
        high = np.max([p[2] for p in parts], axis=0)
        self._signs = (bool((low < 0).any()), any(p[4] for p in parts))
        shift = np.zeros(d)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is redone below
            for total in _merge_pieces([p[0] for p in parts]):
                shift += total
        shift /= n
        if not np.isfinite(shift).all():
            # Finite values near float64's limit (V15 #3): each chunk's rows summed pre-divided by n.
            sums = dask.compute(*[dask.delayed(_scaled_sum, pure=False)(block, self.dtype, n) for _, block in self.blocks()])
            shift = np.sum(sums, axis=0)
        peak = float(np.maximum(high - shift, shift - low).max(initial=0.0))
        if not (0.0 < peak < np.inf):
            return shift, 1.0
        squares = dask.compute(*[dask.delayed(_second_moments, pure=False)(start, block, self.dtype, step, shift, peak)
                                 for start, block in self.blocks()])
        total = 0.0
        for value in _merge_pieces(squares):
            total += value
        return shift, peak * math.sqrt(total / self.size)

    def signs(self):
        """``(any value negative, any value zero)``, from the workers (kept from :meth:`affine` when it ran)."""
        if self._signs is None:
            import dask

            parts = dask.compute(*[dask.delayed(_block_signs, pure=False)(b) for _, b in self.blocks()])
            self._signs = (any(p[0] for p in parts), any(p[1] for p in parts))
        return self._signs


class PlannedReads:
    """Rows of an epoch's minibatches, known in advance, read a group of batches at a time.

    Each read of a dask array is a round trip to its workers (50-90 ms on a 2-worker
    ``LocalCluster`` here, whatever its size, for 64 rows); a training loop that reads
    its minibatches one by one pays it per step. Given the epoch's batches (in order),
    :meth:`take` serves batch after batch from one read of the sorted distinct rows of
    as many coming batches as fit in ``group_rows`` rows; any other index returns None.
    Rows read in a larger set are the same rows: the result does not change.

    Parameters
    ----------
    read : callable
        ``read(index)``: the rows at sorted distinct ``index`` (an array or a tensor).
    batches : list of array-like of int
        The epoch's minibatches, in the order they will be asked for.
    group_rows : int, optional
        None: :data:`DASK_READ_ROWS` (read at call time).
    """

    def __init__(self, read, batches, group_rows=None):
        self.read, self.group_rows = read, int(DASK_READ_ROWS if group_rows is None else group_rows)
        self.batches = [np.asarray(b.cpu() if hasattr(b, "cpu") else b) for b in batches]
        self.next, self.index, self.rows, self.upto = 0, None, None, 0

    def take(self, index):
        """The rows of ``index`` (in its order) when it is the next planned batch, else None."""
        index = np.asarray(index)
        if self.next >= len(self.batches) or not np.array_equal(index, self.batches[self.next]):
            return None
        if self.next >= self.upto:
            end, total = self.next, 0
            while end < len(self.batches) and (end == self.next or total + self.batches[end].shape[0] <= self.group_rows):
                total += self.batches[end].shape[0]
                end += 1
            self.rows = None  # the previous group goes before the next comes
            self.index = np.unique(np.concatenate(self.batches[self.next : end]))
            self.rows, self.upto = self.read(self.index), end
        self.next += 1
        return self.rows[np.searchsorted(self.index, index)]


def _block_signs(block):
    rows = np.asarray(block)
    return bool((rows < 0).any()), bool((rows == 0).any())


def value_signs(X, chunk_size=None):
    """``(any value negative, any value zero)`` of ``X``, read in row chunks; a :class:`DaskRows` on its workers.

    What :func:`~sktransfer_cluster.representation.auto_metric` decides from. An array is read
    chunk by chunk (a memmap's pages handed back) and the pass stops at the first negative value.

    Examples
    --------
    >>> import numpy as np
    >>> value_signs(np.array([[0.0, 3.0], [1.0, 2.0]])), value_signs(np.array([[-1.0, 3.0]]))
    ((False, True), (True, False))
    """
    if isinstance(X, DaskRows):
        return X.signs()
    negative = zero = False
    for _, _, block in iter_row_chunks(X, chunk_size, dtype=X.dtype):
        negative = negative or bool((block < 0).any())
        zero = zero or bool((block == 0).any())
        if negative:
            break
    return negative, zero


def check_dask_array(X, min_samples=1, known_rows=True):
    """``ValueError`` for a dask array that is not 2-D, of no columns, not of dense real numbers,
    of unknown chunk sizes (``known_rows``) or with fewer than ``min_samples`` rows; nothing is computed."""
    if X.ndim != 2:
        raise ValueError(f"Expected a 2-D dask array, got {X.ndim}-D (shape {X.shape}); reshape it to "
                         "(n_samples, n_features).")
    meta = getattr(X, "_meta", None)
    if meta is not None and not isinstance(meta, np.ndarray):
        raise ValueError(f"Expected a dask array of dense numpy chunks, got chunks of {type(meta).__name__}; "
                         "convert them with X.map_blocks(lambda b: b.toarray()) or a dense array.")
    if X.dtype.kind not in "biuf":
        what = "complex numbers" if X.dtype.kind == "c" else f"dtype {X.dtype}"
        raise ValueError(f"Expected a dask array of real numbers, got {what}; convert it with X.astype(float).")
    if isinstance(X.shape[1], float) or X.shape[1] < 1:
        raise ValueError(f"Found a dask array with {X.shape[1]} feature(s) (shape={X.shape}) while a minimum of 1 "
                         "is required.")
    if not known_rows:
        return
    if any(isinstance(s, float) and math.isnan(s) for s in X.shape):
        raise ValueError("The dask array's chunk sizes are unknown (NaN); call X.compute_chunk_sizes() first.")
    if X.shape[0] < min_samples:
        raise ValueError(f"Found array with {X.shape[0]} sample(s) (shape={X.shape}) while a minimum of "
                         f"{min_samples} is required.")


def dask_input(X, min_samples=1, stream=True):
    """A 2-D dask array of real numbers as an estimator reads it: checked, then numpy or :class:`DaskRows`.

    Shape and dtype are checked without computing anything (:func:`check_dask_array`). Up
    to :func:`in_memory_rows` rows, where every estimator fits in memory anyway, the array
    is computed to numpy and validated as any array is; past them it is wrapped as a
    :class:`DaskRows` (values are checked in the first pass over them, on the workers).
    ``stream=False`` (a caller that holds every row anyway): always computed to numpy.
    """
    check_dask_array(X, min_samples)
    if not stream or X.shape[0] <= in_memory_rows():
        return X.compute()
    return DaskRows(X)
