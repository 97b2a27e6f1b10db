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
"""

from __future__ import annotations

import math
import mmap

import numpy as np

from .arrays import chunk_rows

__all__ = ["RELEASE_ROWS", "RELEASE_WINDOW", "RowReader", "check_finite", "is_dask_array", "iter_row_chunks",
           "mapped_pages", "read_rows", "release_pages", "streamed_affine"]


def mapped_pages(X):
    """``(mmap, start, stop)``: the mapping behind ``X`` and the byte range ``X`` spans in it.

    None when ``X`` views no releasable memory map (an in-memory array, or a
    copy-on-write memmap whose pages hold the user's private changes).
    """
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
    by one chunk, whatever the size of ``X``.
    """
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
    """
    d = X.shape[1]
    n_seen = 0
    total = np.zeros(d)  # the shift is input_affine's: the float64 sum of the chunks' sums, over n
    mean = np.zeros(d)
    peak = 0.0  # largest |x - chunk mean| met so far: the unit of ss
    ss = 0.0  # total sum of squares about the running mean, divided by peak**2
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
    if not (0.0 < peak < np.inf) or ss <= 0:
        return shift, 1.0
    return shift, peak * math.sqrt(ss / (n_seen * d))


def is_dask_array(X):
    """Whether ``X`` is a ``dask.array.Array``, without importing dask when nothing has."""
    import sys

    da = sys.modules.get("dask.array")
    return da is not None and isinstance(X, da.Array)

