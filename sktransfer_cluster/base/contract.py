"""The contract every estimator shares: :class:`TransferClusterMixin`."""

from __future__ import annotations

import contextvars
import copy
import inspect
import math
import re
import sys
from abc import ABC, abstractmethod
from contextlib import contextmanager

import numpy as np
import torch
from sklearn import get_config
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_consistent_length
from sklearn.utils._param_validation import InvalidParameterError, validate_parameter_constraints
from sklearn.utils.validation import _assert_all_finite, check_array, check_is_fitted, validate_data

from .arrays import (
    InputFold,
    check_resolution,
    check_widths,
    chunk_rows,
    chunked,
    fold_affine,
    inference_rows,
    input_affine,
    normalise_rows,
    within_cluster_sum_of_squares,
)
from .runtime import (
    compute_threads,
    exact_dtype,
    loaded_device,
    make_generators,
    move_torch,
    own_torch_rng,
    resolve_device,
    torch_threads,
    warn,
    working_dtype,
)
from .streaming import (
    DaskRows,
    check_dask_array,
    check_finite,
    dask_input,
    is_dask_array,
    iter_row_chunks,
    mapped_pages,
    release_pages,
    streamed_affine,
)
from .training import LineProgress, TrainingRun, check_callbacks

__all__ = ["COMMON_PARAMETER_CONSTRAINTS", "TransferClusterMixin", "WithinClusterScoreMixin", "inplace_activations"]


# Parameter constraints every estimator shares (sklearn's _parameter_constraints).
COMMON_PARAMETER_CONSTRAINTS = {
    "keep_best": ["boolean"],
    "callbacks": [list, tuple, None],
    "device": [str, torch.device, None],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}


# predict's affine fold is kept while the rounding it adds to the scores, eps * |shift|, stays
# below this fraction of the data's spread: float32 data offset by more than about 8 spreads,
# float64 data by more than 4e9, are centred chunk by chunk instead (see _labels).
_FOLD_TOL = 1e-6


def _same_value(a, b):
    """Whether two parameter values are equal, arrays included (``==`` on arrays is elementwise)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))
    return bool(a == b)
# scikit-learn's error for rows of another width than the fitted one (validate_data).
_WIDTH_ERROR = re.compile(r"X has \d+ features, but \w+ is expecting \d+ features as input")
# What a transfer does not restore from the source model (_start_from_source): the logs, the last
# labels, the copy itself, and scikit-learn's per-instance configuration (set_output, metadata routing).
_NOT_SOURCE_STATE = frozenset({"labels_", "history_", "_source_state", "_training_stopped"})
_CONFIG_PREFIXES = ("_sklearn", "_metadata_request")
# The parameters every estimator shares steer a run (its device, seed, logging, callbacks, what an
# interrupt keeps); none shapes a model: they are not part of the fitted record (_fitted_params).
_RUN_PARAMS = frozenset(COMMON_PARAMETER_CONSTRAINTS)


# The input fold of the predict call running in this thread (see _labels), with its estimator:
# a context variable, so that predicts of one estimator in several threads (dask) never share one.
_PREDICT_FOLD = contextvars.ContextVar("sktransfer_cluster_predict_fold", default=None)


# Layers whose output is a fresh tensor read by nothing but the next layer of their Sequential.
_FRESH_OUTPUT = (
    torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.ConvTranspose2d, torch.nn.BatchNorm1d, torch.nn.BatchNorm2d,
)


def inplace_activations(module):
    """Make each ReLU (and LeakyReLU of positive slope) that follows a linear, convolution or
    batch-norm layer in an ``nn.Sequential`` of ``module`` work in place; return how many changed.

    The same values and gradients: such an activation's input is a fresh tensor that no other
    layer reads, and neither layer needs it for its backward pass (a LeakyReLU of slope <= 0
    would, so it is left out). What it saves is writing and reading a second activation tensor
    per layer and chunk: predict of 2 x 10^5 x 64 rows took 8-14 % less time (the four network
    estimators, 1 thread; docs/notes/performance.md, 2026-11-27).

    Examples
    --------
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.ReLU())
    >>> inplace_activations(net), net[1].inplace, net[2].inplace
    (1, True, False)
    """
    changed = 0
    for seq in module.modules():
        if not isinstance(seq, torch.nn.Sequential):
            continue
        layers = list(seq)
        for before, layer in zip(layers[:-1], layers[1:]):
            act = isinstance(layer, torch.nn.ReLU) or (
                isinstance(layer, torch.nn.LeakyReLU) and layer.negative_slope > 0
            )
            if act and isinstance(before, _FRESH_OUTPUT) and not layer.inplace:
                layer.inplace = True
                changed += 1
    return changed


def _chunks_into(fn, X, chunk_size):
    """:func:`chunked` with numpy output written into one array (no list of parts to concatenate)."""
    out = None
    with torch.no_grad():
        for start in range(0, X.shape[0], chunk_size):
            part = fn(X[start : start + chunk_size])
            part = part.cpu().numpy() if torch.is_tensor(part) else np.asarray(part)
            if out is None:
                out = np.empty((X.shape[0], *part.shape[1:]), dtype=part.dtype)
            out[start : start + part.shape[0]] = part
    return out


def _check_chunk_finite(rows, X, estimator):
    """``ValueError`` if the chunk ``rows`` of the validated ``X`` holds NaN or infinity, as
    scikit-learn's ``ensure_all_finite`` checks all of ``X``: the chunk's sum (NaN or infinity
    make it non-finite; so does an overflow, of values near the dtype's largest), then each of
    its values; for a chunk that holds NaN or infinity, scikit-learn's own check of the whole of
    ``X``, so the error is word for word the one ``validate_data`` gave."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.sum(rows)) or np.isfinite(rows).all():
            return
    _assert_all_finite(X, allow_nan=False, estimator_name=type(estimator).__name__, input_name="X")


def _as_dask_labels(labels, rows):
    """``labels`` (one per row, on the client) as a dask array chunked as ``rows`` (a dask array or its row chunks)."""
    import dask.array as da

    return da.from_array(np.asarray(labels), chunks=(rows.chunks[0] if is_dask_array(rows) else rows,))


def _block_map(block, fn, width, dtype):
    """``fn`` (a per-row method) of one dask chunk; a chunk with no rows (left by filtering) has
    no results: an empty vector, or ``(0, width)``."""
    if block.shape[0]:
        return fn(block)
    return np.empty((0,) if width is None else (0, width), dtype=dtype)


def _chunked_block(start, block, fn, chunk_size, dtype):
    """:meth:`TransferClusterMixin._chunked` of one dask chunk, on a worker (None for an empty chunk)."""
    rows = np.ascontiguousarray(block, dtype=dtype)
    if not rows.shape[0]:
        return None
    with compute_threads("cpu", blas=True):
        return _chunks_into(fn, rows, chunk_size or chunk_rows(math.prod(rows.shape[1:])))


def _n_distinct(labels):
    """Distinct values of an integer array: a count per label, not a sorted copy (10^7 labels: 160 MB)."""
    labels = np.asarray(labels)
    if labels.size and labels.dtype.kind in "iu" and labels.min() >= 0:
        return int(np.count_nonzero(np.bincount(labels)))
    return int(np.unique(labels).shape[0])


def _distinct_rows_below(X, bound):
    """The number of distinct rows of ``X`` when it is below ``bound``, else None.

    Reads ``X`` chunk by chunk (a memmap's pages handed back) and stops once ``bound``
    distinct rows are seen, which on most data is within the first chunk: ``np.unique(X,
    axis=0)`` would sort a copy of all of X.
    """
    seen = set()
    for _, _, rows in iter_row_chunks(X, dtype=X.dtype):
        for row in np.unique(rows + 0.0, axis=0):  # + 0.0: -0.0 and 0.0 are one value
            seen.add(row.tobytes())
            if len(seen) >= bound:
                return None
    return len(seen)


def _is_missing(value):
    """None, a float NaN (numpy's or Python's), or pandas' ``NA``/``NaT`` (named, so pandas is not imported)."""
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return True
    return isinstance(value, (float, np.floating)) and value != value


def _check_labels(y):
    """``ValueError`` for source labels that ``np.unique`` cannot order: missing ones (None, NaN,
    pandas' NA) or a mix of types (``1`` and ``"a"`` in one object array). Numeric NaN would reach
    scikit-learn's "Input y contains NaN" and the rest a bare ``TypeError`` from the sort; either
    way the message did not say what to do. ``y`` is read, never changed."""
    values = np.asarray(y)
    if values.dtype.kind == "f":
        n_missing = int(np.isnan(values).sum())
    elif values.dtype == object:
        n_missing = sum(map(_is_missing, values.ravel()))
    else:
        return
    if n_missing:
        raise ValueError(
            f"y has {n_missing} missing label(s) (None, NaN or NA) out of {values.size}; every source row needs "
            "a label: drop the rows without one from X and y (e.g. keep = pd.notna(y); X[keep], y[keep])."
        )
    if values.dtype == object:
        try:
            np.unique(values)
        except TypeError:
            kinds = sorted({type(v).__name__ for v in values.ravel()})
            raise ValueError(
                f"y mixes label types ({', '.join(kinds)}), which cannot be ordered; pass labels of one "
                "type (e.g. y.astype(str))."
            ) from None


def _memory_mapped(X):
    """Whether ``X`` is an array over a releasable memory map (see :mod:`.streaming`)."""
    return isinstance(X, np.ndarray) and mapped_pages(X) is not None


def _streamed(X):
    """Whether ``X``'s statistics are read in one streamed pass: a memmap, or a dask array's :class:`DaskRows`."""
    return isinstance(X, DaskRows) or _memory_mapped(X)


class TransferClusterMixin(ABC):
    """Mixin holding the shared contract of the transferable clustering estimators.

    Class attributes a subclass may set:

    ``_requires_y``
        True when ``fit`` needs source labels. Declared here only: the tags
        (``target_tags.required``) carry it to scikit-learn, the CLI, the
        benchmarks and the tests.
    ``_width_params``
        Names of the parameters that hold layer widths; each is validated by
        :func:`check_widths` before ``_fit`` (None and ``"auto"`` are skipped).
    ``_min_samples``
        Minimum samples for ``fit``.
    ``_input_normalization``
        How the estimator sees its input: ``None`` (as given), ``"centre"``
        (each feature minus its source mean) or ``"affine"`` (centred, then
        divided by one global scale), with the source's :func:`input_affine`
        fitted by ``fit`` and applied by ``_tensor`` to every later input.
        Neural networks need ``"affine"``: their initialisation and learning
        rates assume unit-scale inputs, so data at 1e-8 would otherwise
        collapse. Centring alone keeps squared distances exact at large
        offsets. A property when it depends on the parameters.
    ``_labels_tolerance``
        Share of the rows just fitted or transferred on which ``predict`` may
        disagree with ``labels_`` before a ConvergenceWarning (0.01). Raise it
        only where ``labels_`` are by design more than a row-wise rule (e.g.
        smoothed over neighbours) and say why.
    """

    _requires_y = False
    #: Constraints of the options of ``transfer`` (scikit-learn's ``_parameter_constraints``
    #: form), validated by :meth:`transfer` before anything changes.
    _transfer_parameter_constraints = {}
    _width_params = ()
    _min_samples = 1
    _input_normalization = None
    _labels_tolerance = 0.01
    # Set by an interrupt kept under keep_best (see _training); valid for one call only.
    _training_stopped = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # A scikit-learn class before this mixin would shadow its methods (e.g. ClusterMixin's
        # fit_predict drops y, which estimators learning from labelled sources need).
        mro = cls.__mro__
        ours = mro.index(TransferClusterMixin)
        if any(c.__module__.startswith("sklearn.") for c in mro[:ours]):
            raise TypeError(
                f"{cls.__name__}: list TransferClusterMixin before BaseEstimator (and the other "
                "scikit-learn mixins), e.g. class X(TransferClusterMixin, ClusterMixin, BaseEstimator)."
            )

    # ------------------------------------------------------------------ hooks
    @abstractmethod
    def _fit(self, X, y, *, rng, torch_gen, **fit_params):
        """Learn from the validated source ``X``; set ``labels_`` and ``n_iter_``.

        ``fit`` then sets ``n_clusters_`` from ``labels_``.
        """

    @abstractmethod
    def _transfer(self, X, *, rng, torch_gen, **kwargs):
        """Adapt to the validated target ``X``; return its labels.

        ``rng`` and ``torch_gen`` are seeded from ``random_state`` as for ``_fit``;
        the options in ``kwargs`` are already validated against
        ``_transfer_parameter_constraints``.
        """

    @abstractmethod
    def _predict(self, X):
        """Labels of a chunk of validated rows from the current model state only."""

    @abstractmethod
    def score(self, X, y=None):
        """Higher is better; needs no labels."""

    # ------------------------------------------------------------------ checks
    def _check_params_vs_input(self, X, *, reset):
        """Every check of the parameters against the data, in one place.

        Called by ``fit`` (``reset=True``) and ``transfer`` (``reset=False``)
        with validated ``X``. Here: the layer widths of ``_width_params`` (at
        fit) and ``n_samples >= n_clusters`` where the estimator has a fixed
        ``n_clusters`` (not an upper bound under ``estimate_n_clusters``).
        Subclasses extend it (calling ``super()``). At transfer, first: the
        parameters that shape the fitted model are unchanged since fit
        (:meth:`_check_unchanged_since_fit`).
        """
        if not reset:
            self._check_unchanged_since_fit("transfer")
        if reset:
            for name in self._width_params:
                value = getattr(self, name)
                # None and "auto" are resolved by the estimator itself.
                if value is not None and not (isinstance(value, str) and value == "auto"):
                    check_widths(name, value)
        if hasattr(self, "n_clusters") and not getattr(self, "estimate_n_clusters", False):
            # Under estimate_n_clusters, n_clusters is an upper bound: fewer rows are fine.
            self._check_n_clusters(X.shape[0], self.n_clusters)

    #: The parameters that shape the fitted model (networks, K, latent): a transfer, which runs
    #: that model, refuses a change since fit (:meth:`_check_unchanged_since_fit`). The others are
    #: how a transfer adapts, and it takes their current values.
    _STRUCTURE = ()

    def _structure_values(self, params):
        """The :attr:`_STRUCTURE` values of ``params`` (a dict), normalised so that equal models
        compare equal (a list of widths and the same tuple, say); subclasses extend it."""
        return {name: tuple(v) if isinstance(v, list) else v for name, v in
                ((name, params[name]) for name in self._STRUCTURE)}

    def _check_unchanged_since_fit(self, what):
        """ValueError naming the :attr:`_STRUCTURE` parameters set to other values since fit.

        ``what`` (``"transfer"``, ``"sample"``) runs the fitted model: another number of
        clusters or network would fail deep inside, or silently run the fitted one. A name
        counts when both its value and its normalised value differ (``"auto"`` resolving
        anew after another change is not one). A model pickled before the record reads the
        current values, unchecked.
        """
        record = self.__dict__.get("_fitted_params")
        if record is None or not self._STRUCTURE:
            return
        params = self.get_params(deep=False)
        at_fit = {**params, **record}
        fitted, now = self._structure_values(at_fit), self._structure_values(params)
        changed = [name for name in self._STRUCTURE
                   if not _same_value(fitted[name], now[name]) and not _same_value(at_fit[name], params[name])]
        if changed:
            detail = "; ".join(f"{name}={at_fit[name]!r} at fit, {params[name]!r} now" for name in changed)
            raise ValueError(
                f"{type(self).__name__}.{what}: {', '.join(changed)} changed since fit ({detail}); they shape "
                f"the fitted model, which {what} runs. Call fit again with the new value, or set it back with "
                "set_params."
            )

    def _validate_input(self, X, *, reset, y=None, stream=True, finite=True):
        """Validate X (and y when given) against the fitted feature count.

        Numeric float32/float64 2-D arrays come out: like scikit-learn's ``KMeans``,
        string, bytes and object arrays of numbers are converted to float; NaN or inf
        (a ``None`` in an object array is NaN), complex values, or text that is not a
        number raise ``ValueError`` with the offending property named.
        A dask array comes out as numpy up to the rows every estimator fits in
        memory, else as a :class:`~.streaming.DaskRows` (:func:`~.streaming.dask_input`),
        whose values are checked on the workers (fit: in its moments' pass).
        ``stream=False``, for the methods that hold every row anyway (pairwise
        scores, ``partial_fit``'s batch): a dask array is computed to numpy.
        ``finite=False`` (``predict`` through a linear predictor): the values of an array
        held in memory are not checked here; the caller checks them chunk by chunk
        (:func:`_check_chunk_finite`).
        """
        if is_dask_array(y):
            y = y.compute()  # one label per row: what the client holds of labels anyway
        if y is not None:
            _check_labels(y)
        if is_dask_array(X):
            X = dask_input(X, self._min_samples if reset else 1, stream=stream)
            if isinstance(X, DaskRows):
                return self._validate_dask_rows(X, reset=reset, y=y)
        kwargs = dict(
            dtype=[np.float64, np.float32],
            ensure_min_samples=self._min_samples if reset else 1,
            reset=reset,
        )
        streamed = _memory_mapped(X) and X.dtype in (np.float32, np.float64)
        if streamed:
            # A memmap's values are checked chunk by chunk, its file pages handed back as
            # the pass goes (fit: in its one streamed pass, streamed_affine; predict and
            # transfer: check_finite): sklearn's check would map the whole file into the
            # resident set (a transfer of 10^6 x 784 float32 rows grew it by 2.9 GiB).
            kwargs["ensure_all_finite"] = False
        elif not finite:
            kwargs["ensure_all_finite"] = False
            try:
                return validate_data(self, X, **kwargs)
            except ValueError as exc:
                if not _WIDTH_ERROR.match(str(exc)):
                    raise
                error = exc
            # scikit-learn checks the values before the width: its error for them comes first.
            check_array(X, dtype=kwargs["dtype"], input_name="X", estimator=self)
            raise error
        out = validate_data(self, X, **kwargs) if y is None else validate_data(self, X, y, **kwargs)
        if streamed and not reset:
            check_finite(out[0] if y is not None else out)
        return out

    def _validate_dask_rows(self, X, *, reset, y=None):
        """:meth:`_validate_input` of a :class:`~.streaming.DaskRows`: features and labels checked as
        scikit-learn checks them, values on the workers (at fit, by the moments' pass)."""
        if reset:
            self.__dict__.pop("feature_names_in_", None)
            self.n_features_in_ = X.shape[1]
        else:
            self._check_dask_width(X)
            check_finite(X)
        if y is None:
            return X
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y does not match X: {X.shape[0]} rows of X, y of shape {y.shape}; "
                             "pass one label per row of X.")
        return X, y

    def _check_dask_width(self, X):
        """scikit-learn's error for a dask array of another width than the fitted one (nothing computed)."""
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")

    def _fitted_input(self, X, stream=True, finite=True):
        """``NotFittedError`` before fit, else X validated against the fitted features
        (``stream``, ``finite``: as :meth:`_validate_input`'s)."""
        check_is_fitted(self)
        return self._validate_input(X, reset=False, stream=stream, finite=finite)

    def _check_n_clusters(self, n_samples, n_clusters, name="n_clusters"):
        if n_samples < n_clusters:
            raise ValueError(
                f"n_samples={n_samples} should be >= {name}={n_clusters}; "
                f"pass more samples or lower {name}."
            )

    def _validate_transfer_options(self, options):
        """``InvalidParameterError`` (a ``ValueError``) for a ``transfer`` option outside its constraints.

        Booleans are refused where the constraints do not name ``"boolean"``:
        scikit-learn's integer intervals would take ``True`` for 1.
        """
        constraints = self._transfer_parameter_constraints
        caller = f"{type(self).__name__}.transfer"
        for name, value in options.items():
            if isinstance(value, (bool, np.bool_)) and "boolean" not in constraints.get(name, ()):
                raise InvalidParameterError(
                    f"The {name!r} parameter of {caller} must not be a bool; got {value!r}."
                )
        checked = {k: v for k, v in constraints.items() if k in options and v != "no_validation"}
        validate_parameter_constraints(checked, options, caller_name=caller)

    def _require_y(self, y):
        if y is None:
            raise ValueError(
                f"{type(self).__name__}.fit requires the source labels y (it learns what a "
                "cluster is from labelled source data); call fit(X, y). "
                # scikit-learn's phrase for a missing required y (check_requires_y_none).
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )

    def fit(self, X, y=None, **fit_params):
        """Learn the transferable model from the source data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Source data.
        y : array-like of shape (n_samples,), default=None
            Source labels; required by estimators that learn from labelled
            sources, ignored by the others.
        **fit_params : dict
            Estimator-specific options.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        self._validate_params()
        self._check_fit_params(fit_params)
        # Everything below, data validation included (it sets n_features_in_),
        # is undone if any step fails.
        with self._rollback_on_error():
            self._new_source()
            if self._requires_y:
                self._require_y(y)
                X, y = self._validate_input(X, reset=True, y=y)
                if np.unique(y).shape[0] < 2:
                    warn(
                        f"{type(self).__name__}.fit got source labels with a single class; it learns "
                        "what separates clusters from labelled sources and needs at least two.", UserWarning)
            else:
                X = self._validate_input(X, reset=True)
                if y is not None:
                    # y is unused here, but a mismatch means the caller mixed up arrays.
                    try:
                        check_consistent_length(X, y)
                    except ValueError as exc:
                        raise ValueError(f"y does not match X ({exc}); pass one label per row of X.") from None
            self._check_params_vs_input(X, reset=True)
            self.device_ = resolve_device(self.device)
            self.history_ = []
            # Generators are passed down, not stored: fitted state stays picklable.
            rng, torch_gen = make_generators(self.random_state, "cpu")
            shift, scale = streamed_affine(X) if _streamed(X) else input_affine(X)
            check_resolution(X.dtype, shift, scale)
            mode = self._input_normalization
            self._input_affine = None if mode is None else (shift, scale if mode == "affine" else 1.0)
            # The source's spread (root mean square about its mean): predict centres its rows
            # when the offset is large beside it (see _labels).
            self._input_spread = scale
            with own_torch_rng(self.device_):
                self._fit(X, y, rng=rng, torch_gen=torch_gen, **fit_params)
            self._inplace_activations()
            missing = [a for a in ("labels_", "n_iter_") if not hasattr(self, a)]
            if missing:
                raise NotImplementedError(f"{type(self).__name__}._fit must set {' and '.join(missing)}.")
            self._record_clusters(X, "fit")
        self._check_consistency(X, "fit")
        return self

    def _modules(self):
        """The torch modules among the estimator's attributes."""
        return [v for v in vars(self).values() if isinstance(v, torch.nn.Module)]

    def _inplace_activations(self):
        """Fitted networks' activations in place where that gives the same values (:func:`inplace_activations`).

        After ``fit`` and ``transfer``: a second activation tensor per layer and chunk cost
        predict 8-14 % (docs/notes/performance.md, 2026-11-27).
        """
        for module in self._modules():
            inplace_activations(module)

    def _record_clusters(self, X, what):
        """Set ``n_clusters_``, the number of distinct labels in ``labels_`` (every estimator).

        A ConvergenceWarning, as KMeans gives, when that is fewer than asked
        for: only for a fixed number of clusters (``n_clusters``, not an upper
        bound under ``estimate_n_clusters``). It names duplicate rows when they
        are the cause.
        """
        found = self.n_clusters_ = _n_distinct(self.labels_)
        asked = getattr(self, "n_clusters", None)
        if asked is None or getattr(self, "estimate_n_clusters", False) or found >= asked:
            return
        distinct = _distinct_rows_below(X, asked)
        cause = (
            f"X has only {distinct} distinct rows"
            if distinct is not None
            else "the data may hold fewer separable groups, or training stopped early"
        )
        warn(
            f"{type(self).__name__}.{what} found {found} distinct clusters, fewer than "
            f"n_clusters={asked}: {cause}. Lower n_clusters, or check X for duplicates.", ConvergenceWarning)

    def _check_consistency(self, X, what):
        """Warn when ``predict`` on the rows just fitted or transferred disagrees with ``labels_``.

        ``labels_`` and ``predict`` are two routes to one model; where they part
        on more than ``_labels_tolerance`` of the rows, the numbers a user reads
        from ``labels_`` do not describe the model ``predict`` serves. Costs one
        ``predict`` of ``X``, in bounded memory. The warning names the likely
        cause: when both routes split the rows into the same groups and fewer
        clusters than ``n_clusters`` are distinct, the clusters collapsed onto
        shared centres and each route breaks the tie its own way.
        """
        # In slices, so that a source of 10^7 rows never holds a second array of labels.
        step = 2**20
        differ, pairs = 0, set()
        if isinstance(X, DaskRows):
            # predict runs where the chunks live; one integer per row comes back.
            everything = self.predict(X.array).compute()

            def predict(start, stop):
                return everything[start:stop]
        else:
            def predict(start, stop):
                return self._labels(X[start:stop])
        for start in range(0, X.shape[0], step):
            predicted, fitted = predict(start, start + step), self.labels_[start : start + step]
            differ += int(np.count_nonzero(predicted != fitted))
            pairs.update(map(tuple, np.unique(np.stack([fitted, predicted]), axis=1).T.tolist()))
        share = differ / max(X.shape[0], 1)
        if share <= self._labels_tolerance:
            return
        done = "fitted" if what == "fit" else "transferred to"
        # One to one between the two labellings: the same groups under other numbers.
        same_groups = len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
        asked = getattr(self, "n_clusters", None)
        collapsed = (asked is not None and not getattr(self, "estimate_n_clusters", False)
                     and self.n_clusters_ < asked)
        if same_groups and collapsed:
            cause = (
                f"Likely cause: both split the rows into the same {self.n_clusters_} groups, but only "
                f"{self.n_clusters_} of the n_clusters={asked} clusters are distinct, so clusters that share "
                "a centre are numbered by each route's own tie-break (see the warning on fewer distinct "
                "clusters: lower n_clusters, or check X for duplicates).")
        else:
            cause = (
                "Likely causes: training stopped while the clusters were still moving (raise the epochs "
                "or iterations), or X's float precision is too coarse for its values (pass float64, "
                "centred X).")
        warn(
            f"{type(self).__name__}.{what}: predict(X) on the rows just {done} disagrees with "
            f"labels_ on {share:.1%} of them (more than {self._labels_tolerance:.0%}), so labels_ "
            f"do not describe the model predict serves. {cause}", ConvergenceWarning)

    @contextmanager
    def _rollback_on_error(self):
        """Restore the estimator's previous state if the block raises.

        A diverging loss, a bad option or a ``KeyboardInterrupt`` during
        ``fit``/``transfer`` leaves the estimator exactly as it was before the
        call (unfitted, or fitted on the previous data) -- never half-fitted.
        The one exception is an interrupt absorbed by :meth:`_training` under
        ``keep_best=True``, after which the call completes normally.
        """
        # The constructor's parameters are the caller's objects (callbacks, a RandomState): they come
        # back as themselves, not as copies that would take their place in the estimator.
        params = self.get_params(deep=False).values()
        saved = copy.deepcopy(self.__dict__, {id(v): v for v in params})
        try:
            yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise
        finally:
            # Set by a kept interrupt (see _training); valid for one call only.
            self.__dict__.pop("_training_stopped", None)

    def _validate_params(self):
        """scikit-learn's parameter constraints, then ``callbacks``' entries (:func:`check_callbacks`):
        the constraints take any list, and a function in it would be silently never called."""
        super()._validate_params()
        check_callbacks(getattr(self, "callbacks", None))

    def _check_fit_params(self, fit_params):
        """``TypeError`` before any work for a ``fit`` option this estimator does not take (e.g.
        ``sample_weight``, which no estimator here supports)."""
        accepted = [name for name, p in inspect.signature(self._fit).parameters.items()
                    if p.kind is p.KEYWORD_ONLY and name not in ("rng", "torch_gen")]
        unknown = sorted(set(fit_params) - set(accepted))
        if unknown:
            takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no fit options"
            raise TypeError(
                f"{type(self).__name__}.fit got unexpected keyword argument(s) {', '.join(map(repr, unknown))}: "
                f"{takes}. Sample weights are not supported: repeat or subsample rows instead.")

    def _source_keys(self):
        """Names in ``__dict__`` that hold the model learned on the source: all but the constructor's
        parameters, the logs and labels, and scikit-learn's per-instance configuration."""
        params = self.get_params(deep=False)
        return [k for k in self.__dict__
                if k not in params and k not in _NOT_SOURCE_STATE and not k.startswith(_CONFIG_PREFIXES)]

    def _new_source(self):
        """Called first by every fit on a new source (``fit``, a Dask fit): the model from here on
        is the source model, which the next :meth:`transfer` keeps (:meth:`_start_from_source`),
        fitted with the parameters as they are now (:meth:`_fitted_param`)."""
        self.__dict__.pop("_source_state", None)
        self._record_params(**self.get_params(deep=False))

    def _continue_source(self, *, first=False):
        """Called by a fit that continues the source model (``partial_fit``): back to the source
        model if a transfer has moved the estimator since (nothing to copy otherwise), then that
        model updated is the new source. The parameters it was fitted with stay recorded, except
        on a ``first`` batch, one that starts a new model (on an unfitted estimator, or after a fit
        that left nothing a batch continues): that records the parameters as they are now, afresh,
        as :meth:`_new_source` does."""
        if self.__dict__.get("_source_state") is not None:
            self._start_from_source()
        self.__dict__.pop("_source_state", None)
        if first or "_fitted_params" not in self.__dict__:
            self.__dict__.pop("_fitted_params", None)
            self._record_params(**self.get_params(deep=False))

    def _record_params(self, **values):
        """Record ``values`` as the parameter values the current model is built with.

        :meth:`_new_source` records every parameter but the run's (``_RUN_PARAMS``: device,
        seed, logging, callbacks, ``keep_best``), as copies, so a list changed in place later
        does not change the record either. The record is fitted state like any other: a
        failed call restores the one before it (:meth:`_rollback_on_error`), each transfer
        starts from the source model's (:meth:`_start_from_source`), ``partial_fit`` keeps it
        and pickles carry it. A wing whose transfer rebuilds part of the model with the
        current values of some parameters records those (C2M's clustering MLP).
        """
        values = {k: v for k, v in values.items() if k not in _RUN_PARAMS}
        self._fitted_params = {**self.__dict__.get("_fitted_params", {}), **copy.deepcopy(values)}

    def _fitted_param(self, name):
        """The value of parameter ``name`` the current model was fitted with (see :meth:`_record_params`).

        What every call after a fit reads, instead of the parameter: ``set_params`` after ``fit``
        changes nothing until the next fit. Inside a fit, the values it runs with. The current
        value for a run parameter, before any fit, and on a model pickled before the record was
        kept (as ``_input_spread``'s default: such a model keeps working).
        """
        record = self.__dict__.get("_fitted_params", {})
        return record[name] if name in record else getattr(self, name)

    def _start_from_source(self):
        """Called first by every ``transfer``: each transfer adapts the model as ``fit`` left it.

        The first transfer after a fit keeps a copy of the source model (the networks, centres
        and statistics: the fitted state without ``labels_`` and ``history_``); each later one
        starts from a fresh copy of it, so a target's labels do not depend on the targets
        transferred to before, and parameters set since (``set_params``, ``set_output``) stay.
        """
        state = self.__dict__.get("_source_state")
        if state is None:
            self._source_state = copy.deepcopy({k: self.__dict__[k] for k in self._source_keys()})
            return
        for k in self._source_keys():
            if k not in state:  # set by an earlier transfer (a target's encoder, say)
                del self.__dict__[k]
        self.__dict__.update(copy.deepcopy(state))

    @contextmanager
    def _training(self, phase, n_epochs, *, state=(), select="min", unit="epoch", hint=None, keeps_model=True):
        """A :class:`TrainingRun` for one training phase, with its progress bar.

        On the CPU the phase runs on one intra-op thread, the caller's count
        restored afterwards: minibatch steps are latency-bound (:func:`torch_threads`).

        ``state`` lists the modules and tensors this phase trains; ``unit``
        names a training step in messages and ``hint`` replaces the default
        advice of the divergence error ("lower learning_rate"). With
        ``keep_best=True`` a ``KeyboardInterrupt`` inside the block is absorbed
        once an epoch of the phase has completed: ``state`` goes back to its
        snapshot at the end of the epoch of lowest loss (``select="min"``) or
        of the last completed epoch (``select="last"``, for adversarial
        training, whose losses do not rank models) -- never to a half-updated
        epoch -- later phases run no epochs, and the caller finishes fitting so
        the model predicts. ``keep_best`` acts only on an interrupt. Otherwise
        the interrupt propagates and :meth:`_rollback_on_error` restores the
        state from before the call -- also in a phase with
        ``keeps_model=False``, one that cannot give a usable model by itself
        (a later phase builds the model that predicts).
        """
        with self._progress(n_epochs, phase) as bar, torch_threads(self.device_, 1):
            run = TrainingRun(self, phase, n_epochs, state, select, bar, unit, hint)
            run.keeps_model = keeps_model
            run.notify("on_phase_begin")
            try:
                yield run
                run.notify("on_phase_end")
            except KeyboardInterrupt:
                if not (getattr(self, "keep_best", False) and keeps_model) or run.best_epoch is None:
                    raise
                run.restore_best()
                self._training_stopped = True
                warn(
                    f"{type(self).__name__}: interrupted during {phase} after {run.completed} "
                    f"{unit}(s); kept the {'latest' if select == 'last' else 'best'} model so far "
                    f"({unit} {run.best_epoch}, loss {run.best_loss:.4g}) and skipped the remaining "
                    "training (keep_best=True).", UserWarning)

    #: Working float dtype on the CPU. float64 (exact) suits the OT estimators,
    #: whose cost is memory-bound passes over (n, K) arrays; estimators that
    #: train a network set float32, since matmuls and convolutions run about
    #: twice as fast in it on a CPU (and the OT kernels keep a float64 work
    #: dtype where the marginals need it).
    _cpu_dtype = torch.float64

    def _dtype(self):
        """Working float dtype: ``_cpu_dtype`` on the CPU, float32 on accelerators."""
        return working_dtype(self.device_, self._cpu_dtype)

    def _tensor(self, X):
        """Validated input rows as a tensor of the working dtype, normalised as fitted.

        With an ``_input_normalization`` the source's :func:`input_affine` is
        applied in float64 before any cast to float32, so a large offset cannot
        swamp the data's spread. Inside ``predict`` (see :meth:`_input_fold`),
        float32 rows come back raw as a :class:`~.arrays.FoldedRows`, which the
        first linear layer multiplies with the normalisation folded in.
        """
        # torch cannot wrap negative strides (e.g. X[::-1]), which pass validation.
        X = np.ascontiguousarray(X)
        if not X.flags.writeable:
            # torch cannot wrap read-only memory (e.g. memmaps) without a warning.
            X = X.copy()
        affine = getattr(self, "_input_affine", None)
        if affine is None:
            return torch.as_tensor(X, dtype=self._dtype(), device=self.device_)
        owner, fold = _PREDICT_FOLD.get() or (None, None)
        if owner is self and X.dtype == np.float32 and X.shape[1:] == fold.shift.shape:
            # Inside predict: raw float32 rows, the normalisation folded into the first layer.
            return fold.rows(X)
        return normalise_rows(X, affine[0], affine[1], self._dtype(), self.device_)

    # --------------------------------------------------------------- protocol
    def fit_predict(self, X, y=None, **fit_params):
        """Fit on the source and return ``labels_``.

        Unlike :meth:`sklearn.base.ClusterMixin.fit_predict`, ``y`` is passed on
        to ``fit`` (estimators that learn from labelled sources need it).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,), default=None
        **fit_params : dict

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A dask array, chunked as the rows, for a dask array.
        """
        labels = self.fit(X, y, **fit_params).labels_
        return _as_dask_labels(labels, X) if is_dask_array(X) else labels

    def transfer(self, X, **kwargs):
        """Adapt the fitted model to an unlabelled target ``X`` and return its labels.

        The transferable part learned by ``fit`` is reused, never relearned from
        scratch; afterwards ``labels_`` holds the target's labels and ``predict``
        serves the target. Every transfer starts from the model as ``fit`` left
        it: a target's labels do not depend on the targets transferred to before.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Target data, same features as the source.
        **kwargs : dict
            Estimator-specific options; each estimator's own ``transfer``
            documents them.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A dask array, chunked as the rows, for a dask array (``labels_``
            holds them on the client, one integer per row).
        """
        row_chunks = X.chunks[0] if is_dask_array(X) and X.ndim else None
        X = self._fitted_input(X)
        # A transfer reads parameters set since fit (its smoothing, epochs, ...): a value set_params
        # let through is refused here, as fit would, not deep inside with a raw error.
        self._validate_params()
        self._validate_transfer_options(kwargs)
        with self._rollback_on_error():
            self._start_from_source()
            self._check_params_vs_input(X, reset=False)
            rng, torch_gen = make_generators(self.random_state, "cpu")
            with own_torch_rng(self.device_):
                labels = self._transfer(X, rng=rng, torch_gen=torch_gen, **kwargs)
            self.labels_ = labels
            self._inplace_activations()
        self._record_clusters(X, "transfer")
        self._check_consistency(X, "transfer")
        return _as_dask_labels(labels, row_chunks) if row_chunks is not None else labels

    def predict(self, X):
        """Assign each sample of ``X`` to a cluster of the current model.

        Never adapts the model to ``X`` (use :meth:`transfer` for that): the
        result for a row does not depend on the other rows. Memory is bounded by
        processing ``X`` in chunks (a memmap's file pages are handed back as they
        are read).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A dask array for a dask array, each chunk assigned where it lives.
        """
        if is_dask_array(X):
            # Each chunk is assigned where it lives; the labels stay a dask array.
            return self._map_dask_rows("predict", X)
        check_is_fitted(self)
        linear = self._linear_predictor() if type(self)._labels is TransferClusterMixin._labels else None
        if linear is None:
            return self._labels(self._fitted_input(X))
        # One matmul per chunk: an in-memory array's values are checked chunk by chunk, each just
        # before its matmul, not in a pass over all of X first (SinkhornKMeans: 5-11 % less time,
        # docs/notes/roofline_2026-11-27.md, 2026-11-28). A memmap's were checked already, in one
        # pass by validation's check_finite (its pages handed back as it went). Other paths keep validation's scan,
        # which cost C2M's and TDCM's predicts less than a check per chunk.
        X = self._fitted_input(X, finite=False)
        return self._linear_labels(X, linear, check=not (_memory_mapped(X) or get_config()["assume_finite"]))

    def _map_dask_rows(self, method, X, width=None, dtype=np.int64):
        """``method`` (a per-row method: ``predict``, ``transform``...) of a dask array, as a lazy
        dask array chunked as its rows: one value per row (``width`` None) or ``width`` columns
        (an int, or a callable giving it from the fitted model).

        Shape, dtype and width are checked now, the values by each chunk's call (chunk sizes may
        be unknown). The result is computed later, so it comes from a copy of the model as it is
        now: a later fit or transfer of this estimator does not change it (``labels_`` and the
        source model's copy left out of it).
        """
        check_is_fitted(self)
        check_dask_array(X, known_rows=False)
        self._check_dask_width(X)
        if callable(width):  # read from the fitted model, once it is known to be fitted
            width = width()
        # labels_ and the source model's copy are not needed to predict.
        left_out = [self.__dict__[k] for k in ("labels_", "_source_state") if k in self.__dict__]
        model = copy.deepcopy(self, {id(v): None for v in left_out})
        X = X.rechunk({1: -1})
        fn = getattr(model, method)
        if width is None:
            return X.map_blocks(_block_map, fn, None, dtype, drop_axis=1, dtype=dtype)
        return X.map_blocks(_block_map, fn, int(width), dtype, chunks=(X.chunks[0], (int(width),)), dtype=dtype)

    def _linear_predictor(self):
        """``(W, b)`` with labels ``argmax(x @ W + b)`` for normalised rows ``x``, or None.

        Override where the model allows it; ``predict`` is then one matmul per
        chunk of raw rows instead of ``_predict``.
        """
        return None

    def _labels(self, X):
        """:meth:`predict` of validated rows ``X``.

        With a :meth:`_linear_predictor`, the fitted input normalisation is folded
        into it (:func:`fold_affine`) and each chunk of raw rows costs one matmul
        and an argmax, in X's dtype. Folding the shift into the bias adds two
        terms of the offset's size whose rounding, ``eps * |shift|``, cancels into
        the scores: float32 rows at an offset of 3e6 got other labels than
        ``labels_`` for 3 % of the rows (issue 30 S7). Where that rounding
        exceeds ``_FOLD_TOL`` of the data's spread, each chunk is first centred
        at the shift rounded to the dtype (rows near it differ from it
        exactly), the rest of the shift folded into the bias in float64.
        """
        linear = self._linear_predictor()
        if linear is None:
            with self._input_fold(X):
                return self._chunked(self._predict, X, dtype=np.int64, chunk_size=self._inference_rows(X))
        return self._linear_labels(X, linear)

    def _linear_labels(self, X, linear, check=False):
        """:meth:`_labels` of the rows ``X`` by the :meth:`_linear_predictor` ``linear``; ``check``:
        each chunk's values first (:func:`_check_chunk_finite`), for rows validation has not."""
        W, b = linear
        dtype = exact_dtype(self.device_) if X.dtype == np.float64 else torch.float32
        affine = getattr(self, "_input_affine", None)
        centre = None
        if affine is not None:
            shift = torch.as_tensor(np.asarray(affine[0], dtype=np.float64))
            spread = getattr(self, "_input_spread", 0.0)  # models pickled before it was kept: centre
            if torch.finfo(dtype).eps * float(shift.abs().max()) > _FOLD_TOL * spread:
                centre = shift.to(dtype)
                shift = shift - centre.to(torch.float64)
                centre = centre.to(self.device_)
            W, b = fold_affine(W, b, shift, affine[1])
        W, b = W.to(device=self.device_, dtype=dtype), b.to(device=self.device_, dtype=dtype)
        buffer = []  # one centred chunk, reused: a fresh one per chunk is page-faulted in anew

        def labels(rows):
            if check:
                _check_chunk_finite(rows, X, self)
            # torch wraps neither negative strides nor read-only memory: copy such chunks.
            rows = torch.as_tensor(np.require(rows, requirements="CW"), dtype=dtype, device=self.device_)
            if centre is not None:
                if not buffer or buffer[0].shape[0] < rows.shape[0]:
                    buffer[:] = [torch.empty_like(rows)]
                rows = torch.sub(rows, centre, out=buffer[0][: rows.shape[0]])
            return torch.addmm(b, rows, W).argmax(1).cpu().numpy()

        return self._chunked(labels, X, dtype=np.int64)

    @contextmanager
    def _input_fold(self, X):
        """Within the block, :meth:`_tensor` folds the fitted input normalisation into the first layer.

        For a network working in float32 on float32 rows ``X``: each chunk goes from the raw
        rows into the network (:class:`~.arrays.InputFold`, folded once per call) instead of a
        float64 normalised copy, which took 9-17 % of a network's predict. Where the fold's
        rounding, ``eps * |shift|``, would exceed ``_FOLD_TOL`` of the data's spread, each chunk
        is first centred at the float32 shift (as in :meth:`_labels`' linear fold). Float64
        rows keep the exact float64 normalisation.
        """
        affine = getattr(self, "_input_affine", None)
        if affine is None or X.dtype != np.float32 or self._dtype() != torch.float32:
            yield
            return
        spread = getattr(self, "_input_spread", 0.0)
        centre = np.finfo(np.float32).eps * float(np.abs(affine[0]).max(initial=0.0)) > _FOLD_TOL * spread
        token = _PREDICT_FOLD.set((self, InputFold(affine[0], affine[1], centre, self.device_)))
        try:
            yield
        finally:
            _PREDICT_FOLD.reset(token)

    def _inference_rows(self, X):
        """Rows per chunk of ``predict``: on the CPU, for an estimator that runs a network in
        float32, :func:`~.arrays.inference_rows` of the widest linear layer among its modules;
        otherwise :func:`~.arrays.chunk_rows` (an accelerator wants large blocks, and C2M's
        float64 neighbour search was 4 % slower in blocks of 1,927 rows than of 8,192)."""
        n_features = math.prod(X.shape[1:])
        if torch.device(getattr(self, "device_", "cpu")).type != "cpu" or self._cpu_dtype != torch.float32:
            return chunk_rows(n_features)
        width = 0
        for module in self._modules():
            for m in module.modules():
                if isinstance(m, torch.nn.Linear):
                    width = max(width, m.in_features, m.out_features)
        return inference_rows(n_features, width)

    def _chunked(self, fn, X, dtype=None, chunk_size=None):
        """:func:`chunked` with numpy output (cast to ``dtype`` when given).

        Runs under the package's thread policy (:func:`~sktransfer_cluster.base.runtime.compute_threads`,
        torch and BLAS): inference is a chain of chunk-sized operations, and a second
        thread beside a busy process made predict up to 10x slower. The file pages of a
        memmapped ``X`` are handed back chunk by chunk. A dask array's
        :class:`~.streaming.DaskRows` is mapped on its workers, one task per chunk
        (``fn`` travels to them with the model it uses; on an accelerator its chunks come
        to the client instead).
        """
        if isinstance(X, DaskRows) and torch.device(getattr(self, "device_", "cpu")).type == "cpu":
            # Each chunk is mapped where it lives (the model travels once); only the results come back.
            parts = [p for p in X.map_blocks(_chunked_block, fn, chunk_size, X.dtype) if p is not None]
            out = np.concatenate(parts)
            return out.astype(dtype, copy=False) if dtype is not None else out
        if _memory_mapped(X):
            inner = fn

            def fn(rows):
                try:
                    return inner(rows)
                finally:
                    release_pages(rows)

        with compute_threads(getattr(self, "device_", "cpu"), blas=True):
            if X.shape[0] <= (chunk_size or chunk_rows(math.prod(X.shape[1:]))):
                out = np.asarray(chunked(fn, X, chunk_size))
            else:
                out = _chunks_into(fn, X, chunk_size or chunk_rows(math.prod(X.shape[1:])))
        return out.astype(dtype, copy=False) if dtype is not None else out

    # --------------------------------------------------------------- progress
    @contextmanager
    def _progress(self, total, desc):
        """Progress of one phase when ``verbose >= 1``, a silent no-op otherwise.

        A tqdm bar in a terminal or notebook; elsewhere (a log file, a pipe)
        plain :class:`LineProgress` lines, which a bar's carriage returns would
        make unreadable.
        """
        if not self.verbose:
            yield None
            return
        name = f"{type(self).__name__} {desc}"
        if not (sys.stderr.isatty() or "ipykernel" in sys.modules):
            yield LineProgress(name, total, every=1 if self.verbose >= 2 else max(1, math.ceil(total / 10)))
            return
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=name, leave=False)
        try:
            yield bar
        finally:
            bar.close()

    @staticmethod
    def _tick(bar, **postfix):
        if bar is not None:
            bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)
            bar.update(1)

    # ------------------------------------------------------------------- tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = self._requires_y
        tags.non_deterministic = False
        return tags

    # --------------------------------------------------------------- pickling
    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        # torch state is stored on CPU so that a model fitted on a GPU unpickles anywhere.
        return {k: move_torch(v, "cpu") for k, v in state.items()}

    # Attributes that held a fitted parameter's value before the record (_fitted_params) was kept,
    # in models pickled at 5f9d6e7: legacy name -> the parameter(s) it held (a tuple of values for
    # several). Each wing names its own; unpickling moves them into the record (_migrate_legacy_record).
    _LEGACY_FITTED_PARAMS = {}

    @classmethod
    def _migrate_legacy_record(cls, state):
        """``state`` (a pickled ``__dict__``, or the source model a transfer keeps) with the
        attributes of :attr:`_LEGACY_FITTED_PARAMS` moved into ``_fitted_params``, the legacy
        names dropped: such a model reads the values it was fitted with, not the parameters
        set since. Parameters the legacy model did not record stay read from the current values."""
        legacy = [name for name in cls._LEGACY_FITTED_PARAMS if name in state]
        if not legacy:
            return state
        state = dict(state)
        record = dict(state.get("_fitted_params", {}))
        for name in legacy:
            params, value = cls._LEGACY_FITTED_PARAMS[name], state.pop(name)
            for param, v in zip(params, value if len(params) > 1 else (value,)):
                record.setdefault(param, v)
        state["_fitted_params"] = record
        return state

    def __setstate__(self, state):
        state = self._migrate_legacy_record(state)
        source = state.get("_source_state")
        migrated = self._migrate_legacy_record(source) if isinstance(source, dict) else source
        if migrated is not source:
            state = {**state, "_source_state": migrated}
        device = state.get("device_")
        if device is not None and device.type != "cpu":
            device = loaded_device(device)
            state = {k: move_torch(v, device) for k, v in state.items()}
            state["device_"] = device
        if hasattr(super(), "__setstate__"):
            super().__setstate__(state)
        else:
            self.__dict__.update(state)


class WithinClusterScoreMixin:
    """``score``: minus the within-cluster sum of squares of the partition ``predict`` gives.

    For the estimators that partition the input space around centres
    (SinkhornKMeans, TDCMCluster), listed before :class:`TransferClusterMixin`.
    """

    def score(self, X, y=None):
        """Minus the within-cluster sum of squares of the partition :meth:`predict` gives ``X``.

        ``-sum_k sum_{i: label_i = k} ||x_i - mean_k||^2`` in the input space
        (``mean_k`` the mean of the rows of ``X`` labelled ``k``): the k-means
        objective of the predicted labels. It depends on nothing but them, so
        it compares clusterings across every parameter (``epsilon``, ``tau``,
        cluster weights, embeddings) and across estimators (identical
        partitions score the same), and ``GridSearchCV`` can choose parameters
        with it; a training objective measured in a learned embedding cannot.
        Higher is better and no labels are needed; like
        :meth:`sklearn.cluster.KMeans.score` it is a sum over the samples.
        Rows are labelled as :meth:`predict` labels them (no adaptation, no
        transport problem solved), in row chunks: bounded memory, and the
        fitted model is not changed.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        score : float
        """
        X = self._fitted_input(X)
        # The fitted centres' count, not n_clusters: set_params after fit must not change what predict serves.
        return -within_cluster_sum_of_squares(X, self._labels(X), self.cluster_centers_.shape[0])
