"""SinkhornKMeans on inputs streamed in batches: ``partial_fit`` and the minibatch fit.

A mixin of :class:`~sktransfer_cluster.SinkhornKMeans` (plain OT k-means, no
embedding). Both run :mod:`.minibatch`: ``partial_fit(X)`` is one step on the batch
``X`` (its first call starts from OT-Lloyd on that batch, as MiniBatchKMeans starts
from k-means++ on its first batch); ``fit`` with ``algorithm="minibatch"`` (or
``"auto"`` on an input whose float64 copy would pass ``STREAM_BYTES``) starts from
OT-Lloyd on ``STREAM_INIT_ROWS`` rows drawn by index, then runs passes of
``STREAM_BATCH_ROWS``-row batches drawn by index until the centres move by less than
``tol`` in a pass, and labels every row in chunks. No step copies the input: a memmap
is read a batch at a time and its file pages are released after each read
(:mod:`sktransfer_cluster.base.streaming`).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.utils._available_if import available_if

from ...base.contract import _as_dask_labels
from ...base.arrays import normalise_rows
from ...base.runtime import compute_threads, make_generators, resolve_device, working_dtype
from ...base.streaming import DaskRows, PlannedReads, RowReader, is_dask_array, iter_row_chunks
from ...ot import lloyd
from .minibatch import MinibatchState, minibatch_passes, minibatch_step
from .objective import squared_distances

__all__ = ["CODE_CHUNK_ROWS", "IndexedRows", "STREAM_BATCH_ROWS", "STREAM_BYTES", "STREAM_INIT_ROWS",
           "StreamedOTKMeansMixin"]

#: Rows per batch of the minibatch fit: large enough that a batch holds hundreds of rows
#: of each of tens of clusters, and the per-batch overhead of torch stays small.
STREAM_BATCH_ROWS = 8192
#: Rows of the OT-Lloyd start of the minibatch fit (MiniBatchKMeans' ``init_size`` rule:
#: three batches).
STREAM_INIT_ROWS = 3 * STREAM_BATCH_ROWS
#: ``algorithm="auto"`` fits by minibatches when a float64 copy of X would pass this.
STREAM_BYTES = 2**30
#: Rows of codes per chunk of a streamed fit's final assignment: the (rows, K) costs of a chunk,
#: not of every row (10^7 rows x 10 clusters would be 400 MB of float32 costs).
CODE_CHUNK_ROWS = 2**16
# Check of the start's plan (a report only), as the full fit's.
_CHECK_TOL = 1e-3
_CHECK_MAX_ITER = 10 * lloyd.SINKHORN_MAX_ITER


class IndexedRows:
    """The rows of ``X`` normalised as ``_tensor`` does it, read by index a minibatch at a time.

    Stands for the whole normalised tensor where a training loop only takes
    ``rows.shape``, ``rows.device`` and minibatches ``rows[idx]``: ``rows[idx]`` reads
    the rows at ``idx`` (any order, as drawn) in sorted order through
    :class:`~sktransfer_cluster.base.streaming.RowReader` (a memmap's pages handed back
    every :data:`~sktransfer_cluster.base.streaming.RELEASE_ROWS` rows), normalises them
    in float64 with one rounding to ``dtype``
    (:func:`~sktransfer_cluster.base.arrays.normalise_rows`, element by element, so the
    bits of ``_tensor``'s rows) and returns them in the order asked for. Beyond the
    batch nothing of ``X`` is held.

    Parameters
    ----------
    X : ndarray or np.memmap of shape (n_samples, n_features)
    shift : ndarray of shape (n_features,)
    scale : float
    dtype : torch.dtype
    device : torch.device
    """

    def __init__(self, X, shift, scale, dtype, device):
        self.X, self.shift, self.scale = X, shift, scale
        self.dtype, self.device = dtype, torch.device(device)
        self.shape = tuple(X.shape)
        self._read = RowReader(X)
        self._planned = None

    def plan(self, batches):
        """The coming epoch's minibatches: a dask array's rows are then read a group of batches per
        round trip (:class:`~sktransfer_cluster.base.streaming.PlannedReads`); other arrays ignore it."""
        if isinstance(self.X, DaskRows):
            self._planned = PlannedReads(
                lambda index: normalise_rows(self._read(index), self.shift, self.scale, self.dtype, "cpu"), batches)

    def __getitem__(self, idx):
        index = idx.cpu().numpy() if torch.is_tensor(idx) else np.asarray(idx)
        planned = self._planned.take(index) if self._planned is not None else None
        if planned is not None:
            return planned.to(self.device)
        order = np.argsort(index, kind="stable")
        index = index[order]
        rows = normalise_rows(self._read(index), self.shift, self.scale, self.dtype, "cpu")
        out = torch.empty_like(rows)
        out[torch.from_numpy(order)] = rows
        return out.to(self.device)


class StreamedOTKMeansMixin:
    """``partial_fit`` and the minibatch ``fit`` of SinkhornKMeans (see the module docstring)."""

    # ------------------------------------------------------------------ helpers
    def _streams(self, X):
        """Whether ``fit`` runs minibatches on ``X``: ``algorithm``, and for "auto" the size of X."""
        if self.embedding is not None or self.algorithm == "full":
            return False
        return self.algorithm == "minibatch" or X.shape[0] * X.shape[1] * 8 > STREAM_BYTES

    def _row_reader(self, X):
        """``read(indices)``: the rows of X at sorted ``indices``, normalised as ``_tensor`` does."""
        reader = RowReader(X)
        shift, scale = self._input_affine
        dtype, device = self._dtype(), self.device_

        def read(index):
            rows = reader(index)
            rows -= shift
            if scale != 1.0:
                rows /= scale
            return torch.as_tensor(rows, dtype=dtype).to(device)

        return read

    def _ot_lloyd_start(self, Z, rng, what):
        """OT-Lloyd from ``n_init`` k-means++ starts on ``Z``: ``(centers, reg, n_iter, g)``."""
        with compute_threads(Z.device, blas=True):
            init = self._kmeanspp(Z, self.n_init, rng)
        work = working_dtype(Z.device, accelerator=Z.dtype)
        _, centers, reg, n_iter, check = lloyd.ot_lloyd_best(
            Z.to(work), init.to(work), self.epsilon, self._log_weights(), self.max_iter, self._abs_tol(Z),
            check_tol=_CHECK_TOL, check_max_iter=_CHECK_MAX_ITER,
        )
        self._warn_not_converged(check, what, _CHECK_TOL, _CHECK_MAX_ITER)
        return centers.to(Z.dtype), reg, n_iter, check.g

    def _new_stream(self, centers, reg, g, n_rows):
        """The minibatch state after a start on ``n_rows`` rows (they count as seen)."""
        state = MinibatchState(centers, reg)
        state.counts += n_rows * torch.as_tensor(self.weights_, dtype=torch.float64, device=centers.device)
        state.g = g
        return state

    def _keep_stream(self, state):
        # Plain tensors in a dict: pickling moves them to the CPU with the rest of the state.
        self._stream = {"counts": state.counts, "g": state.g, "reg": state.reg, "n_steps": state.n_steps}

    def _stream_state(self):
        s = self._stream
        state = MinibatchState(self._centers, s["reg"], counts=s["counts"].clone())
        state.g, state.n_steps = s["g"], s["n_steps"]
        return state

    def _set_centres(self, centers, reg):
        self._centers = centers.detach()
        self.cluster_centers_ = self._centers.cpu().numpy() + self._input_affine[0]
        self.reg_ = float(reg)

    def _label_chunks(self, X):
        """Nearest-centre labels and inertia of every row of X, read in chunks."""
        shift, scale = self._input_affine
        labels = np.empty(X.shape[0], dtype=np.int64)
        inertia = 0.0
        with torch.no_grad(), compute_threads(self.device_):
            for start, stop, rows in iter_row_chunks(X):
                Z = torch.as_tensor((rows - shift) / scale, dtype=self._dtype()).to(self.device_)
                mins, lab = squared_distances(Z, self._centers).min(1)
                labels[start:stop] = lab.cpu().numpy()
                inertia += float(mins.sum())
        return labels, inertia

    # ---------------------------------------------------------------- minibatch fit
    def _fit_minibatch(self, X, rng):
        """``fit`` by minibatch OT k-means (``_fit`` calls it when :meth:`_streams`)."""
        n = X.shape[0]
        read = self._row_reader(X)
        size = min(n, STREAM_INIT_ROWS)
        start_rows = np.arange(n) if size == n else np.sort(rng.choice(n, size, replace=False))
        with torch.no_grad():
            Z = read(start_rows)
            centers, reg, _, g = self._ot_lloyd_start(Z, rng, "the OT-Lloyd start of the minibatch fit")
            del Z
            state = self._new_stream(centers, reg, g, size)
            tol = float(self.tol * self._input_spread**2 / (self._input_affine[1] ** 2))
            with self._progress(self.max_iter, "minibatch passes") as bar:
                passes = minibatch_passes(
                    state, read, n, self._log_weights(), batch_size=STREAM_BATCH_ROWS, max_passes=self.max_iter,
                    tol=tol, rng=rng, callback=lambda i, shift: self._tick(bar, shift=shift),
                )
        self._set_centres(state.centers, state.reg)
        self._keep_stream(state)
        self.n_iter_ = int(passes)
        self.labels_, self.inertia_ = self._label_chunks(X)
        return self.labels_

    # ------------------------------------------------------------------ partial_fit
    def _plain_ot_kmeans(self):
        # partial_fit streams plain OT k-means only: an embedding trains a network on the
        # whole source, so with one the method does not exist (hasattr is False, as
        # scikit-learn's checks and meta-estimators expect).
        return self.embedding is None

    @available_if(_plain_ot_kmeans)
    def partial_fit(self, X, y=None):
        """Update the centres with one batch of rows (minibatch OT k-means with the size prior).

        The first call (on an unfitted estimator, or after a fit with an embedding,
        which leaves nothing to continue) starts a new model, fitted with the
        parameters as they are then, from OT-Lloyd on ``X``
        (``n_init`` k-means++ starts, at least ``n_clusters`` rows); each later call
        (any number of rows, as MiniBatchKMeans takes a stream's short last batch)
        is one step: ``X`` is assigned by entropic OT to the centres under the
        cluster-size prior, with column potentials carried from batch to batch, and
        each centre moves to the running mean of the plan mass it has received
        (scikit-learn's ``MiniBatchKMeans.partial_fit`` with the size-constrained
        assignment). After a ``fit`` without an embedding the steps continue from the fitted centres
        (the source model's, also after a ``transfer``).
        Only without an embedding (with one the method does not exist).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            One batch of source rows.
        y : None
            Ignored.

        Returns
        -------
        self : object
            ``labels_`` and ``inertia_`` are those of this batch; ``n_steps_``
            counts the batches seen.
        """
        first = not hasattr(self, "_stream")
        if first:
            self._validate_params()
        with self._rollback_on_error():
            # Each batch updates the source model (not a target's, after a transfer); transfers start from it.
            self._continue_source(first=first)
            X = self._validate_input(X, reset=first, stream=False)  # one batch, held in memory
            if first:
                self._check_params_vs_input(X, reset=True)
            else:
                # A later batch may hold fewer rows than clusters (a stream's short last batch, as
                # MiniBatchKMeans takes it); its width was checked above.
                self._check_unchanged_since_fit("partial_fit")
            with torch.no_grad():
                if first:
                    self._start_stream(X)
                    state = self._stream_state()
                    state.n_steps = 1
                else:
                    state = self._stream_state()
                    minibatch_step(state, self._tensor(X), self._log_weights())
            self._set_centres(state.centers, state.reg)
            self._keep_stream(state)
            self.n_steps_ = self.n_iter_ = state.n_steps
            self.labels_, self.inertia_ = self._label_chunks(X)
            self.n_clusters_ = int(np.count_nonzero(np.bincount(self.labels_)))
        return self

    def _reset_for_a_new_fit(self):
        """What every fit of plain OT k-means sets first (a stream's start, a Dask fit); its rng."""
        self.device_ = resolve_device(self.device)
        self.history_ = []
        self.weights_ = self._proportions()
        self.autoencoder_ = None
        self.encoder_ = None
        return make_generators(self.random_state, "cpu")[0]

    def _start_stream(self, X):
        """The first ``partial_fit``: everything ``fit`` sets up, then OT-Lloyd on the batch."""
        from ...base.arrays import check_resolution, input_affine

        rng = self._reset_for_a_new_fit()
        shift, scale = input_affine(X)
        check_resolution(X.dtype, shift, scale)
        self._input_affine, self._input_spread = (shift, 1.0), scale
        Z = self._tensor(X)
        centers, reg, _, g = self._ot_lloyd_start(Z, rng, "the OT-Lloyd start of partial_fit")
        self._centers = centers
        self._keep_stream(self._new_stream(centers, reg, g, X.shape[0]))

    # ------------------------------------------------------------------------ Dask
    def _dask_rows(self, X, *, reset):
        """The checks of a Dask fit (``reset``) or transfer of plain OT k-means: ``X`` as a
        :class:`~sktransfer_cluster.base.streaming.DaskRows`, nothing computed."""
        from ...base.streaming import DaskRows, check_dask_array

        check_dask_array(X)
        if reset:
            self._check_n_clusters(int(X.shape[0]), self.n_clusters)
            self.__dict__.pop("feature_names_in_", None)
            self.n_features_in_ = int(X.shape[1])
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        return DaskRows(X)

    def _dask_start_rows(self, rows, rng, shift, scale):
        """``STREAM_INIT_ROWS`` rows drawn by index (every row of a smaller array), brought to the client
        and normalised into the centres' frame: ``(Z, rows drawn)``."""
        n = rows.shape[0]
        size = min(n, STREAM_INIT_ROWS)
        index = np.arange(n) if size == n else np.sort(rng.choice(n, size, replace=False))
        Z = (np.asarray(rows[index], dtype=np.float64) - shift) / scale
        return torch.as_tensor(Z, dtype=self._dtype()).to(self.device_), size

    def _dask_lloyd(self, rows, centers, reg, g, shift, scale, tol):
        """OT-Lloyd from ``centers`` on the workers (:func:`.distributed.dask_ot_lloyd`), then the
        centres, ``n_iter_``, ``labels_`` (one integer per row gathered), ``inertia_`` and
        ``n_clusters_``: the tail every Dask fit and transfer shares. Returns ``(centers, g)``."""
        from .distributed import dask_labels, dask_ot_lloyd

        centers, n_iter, g, _ = dask_ot_lloyd(
            rows.array, centers.cpu(), reg, self._log_weights().cpu(), g.cpu(), shift=shift, scale=scale,
            max_iter=self.max_iter, tol=tol,
        )
        centers = centers.to(device=self.device_, dtype=self._dtype())
        self._set_centres(centers, reg)
        self.n_iter_ = int(n_iter)
        self.labels_, self.inertia_ = dask_labels(rows.array, centers.cpu(), shift=shift, scale=scale)
        return centers, g

    def _fit_dask(self, X, y=None):
        """``fit`` on a ``dask.array``: every pass over the rows runs on the workers.

        The normalisation statistics and the finite check are one task per chunk per pass
        (:meth:`~sktransfer_cluster.base.streaming.DaskRows.affine`), the start is OT-Lloyd
        on ``STREAM_INIT_ROWS`` rows drawn by index (brought to the client), then OT-Lloyd
        runs on the whole array with each solver pass one task per chunk
        (:mod:`.distributed`). Only the labels, one integer per row, come back. The
        checks are those of the in-memory ``fit``: ``y``'s length (``y`` is unused),
        the parameters against the data, and a ConvergenceWarning when fewer than
        ``n_clusters`` clusters come out.
        """
        from ...base.arrays import check_resolution

        self._validate_params()
        with self._rollback_on_error():
            self._new_source()
            rows = self._dask_rows(X, reset=True)
            if y is not None:
                self._validate_dask_rows(rows, reset=True, y=y.compute() if is_dask_array(y) else y)
            self._check_params_vs_input(rows, reset=True)
            rng = self._reset_for_a_new_fit()
            shift, scale = rows.affine()
            check_resolution(rows.dtype, shift, scale)
            self._input_affine, self._input_spread = (shift, 1.0), scale
            with torch.no_grad():
                Z, size = self._dask_start_rows(rows, rng, shift, 1.0)
                centers, reg, _, g = self._ot_lloyd_start(Z, rng, "the OT-Lloyd start of the Dask fit")
                centers, g = self._dask_lloyd(rows, centers, reg, g, shift, 1.0, float(self.tol * scale**2))
            self._keep_stream(self._new_stream(centers, reg, g.to(self.device_), rows.shape[0]))
            self._record_clusters(rows, "fit")
        return self

    def _transfer_dask(self, X, options):
        """``transfer`` to a ``dask.array`` target: OT-Lloyd from the source centres on the workers.

        As the in-memory transfer of plain OT k-means, where the chunks live: the target's
        spread and finite check are one task per chunk per pass; the start is the source
        centres (beside ``n_restarts`` k-means++ starts), run on ``STREAM_INIT_ROWS`` target
        rows drawn by index, the cheapest kept; OT-Lloyd then runs on the whole array, each
        solver pass one task per chunk. ``labels_`` gathers one integer per row; the labels
        returned are a dask array chunked as the rows. ``options``: ``transfer``'s keyword
        options, checked as the in-memory ``transfer`` checks them (``fine_tune_epochs`` is
        unused without an embedding).
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        self._validate_params()  # as the in-memory transfer: a value set since fit is refused, not run
        self._validate_transfer_options(options)
        n_restarts = 0 if options.get("n_restarts") is None else int(options["n_restarts"])
        with self._rollback_on_error():
            self._start_from_source()
            rows = self._dask_rows(X, reset=False)
            self._check_params_vs_input(rows, reset=False)
            rng, _ = make_generators(self.random_state, "cpu")
            _, spread = rows.affine()  # the target's spread sets tol; its values are checked
            shift, scale = self._input_affine  # the centres live in the source's frame
            with torch.no_grad():
                Z, size = self._dask_start_rows(rows, rng, shift, scale)
                starts = self._centers.unsqueeze(0).to(Z.dtype)
                if n_restarts > 0 and size >= self.n_clusters:
                    starts = torch.cat([starts, self._kmeanspp(Z, int(n_restarts), rng)])
                work = working_dtype(Z.device, accelerator=Z.dtype)
                _, centers, reg, _, check = lloyd.ot_lloyd_best(
                    Z.to(work), starts.to(work), self.epsilon, self._log_weights(), self.max_iter, self._abs_tol(Z),
                    check_tol=_CHECK_TOL, check_max_iter=_CHECK_MAX_ITER,
                )
                self._warn_not_converged(check, "the OT-Lloyd start of the Dask transfer", _CHECK_TOL, _CHECK_MAX_ITER)
                self._dask_lloyd(rows, centers, reg, check.g, shift, scale, float(self.tol * (spread / scale) ** 2))
        self._record_clusters(rows, "transfer")
        return _as_dask_labels(self.labels_, rows.array)
