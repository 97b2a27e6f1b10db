"""Shared machinery of every estimator: validation, device, seeding, chunked
prediction, the transfer protocol, the training loop's mechanics, progress
reporting and pickling of torch state.

Estimators subclass :class:`TransferClusterMixin` (before ``ClusterMixin`` and
``BaseEstimator``; the order is checked when the class is defined) and implement
its abstract hooks:

* ``_fit(X, y, *, rng, torch_gen, **fit_params)`` -- learn from the source; must
  set ``labels_`` and ``n_iter_``.
* ``_transfer(X, **kwargs)`` -- adapt to an unlabelled target; returns its labels.
* ``_predict(X_chunk)`` -- labels for a chunk, from the current model state only.
  An estimator whose labels are the argmax of an affine map of its (normalised)
  input also returns that map from ``_linear_predictor()``; ``predict`` then
  runs one matmul per chunk of raw rows (:func:`fold_affine`).
* ``score(X, y=None)`` -- higher is better, needs no labels.

and, where they need more than the shared checks, ``_check_params_vs_input``
(every data-dependent parameter check) and the class attributes ``_requires_y``
(fit needs labels; read by everything else through the estimator's tags) and
``_width_params`` (layer-width tuples to validate). Training loops run inside
:meth:`TransferClusterMixin._training`, whose :class:`TrainingRun` owns the
minibatches, the finiteness checks, ``history_`` and interrupts.
See ``docs/adding_an_estimator.md``.
"""

from __future__ import annotations

import copy
import math
import sys
import time
import warnings
from abc import ABC, abstractmethod
from contextlib import contextmanager
from numbers import Integral

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_consistent_length, check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .ot import exact_dtype

__all__ = [
    "TransferClusterMixin",
    "TrainingRun",
    "resolve_device",
    "make_generators",
    "chunked",
    "compact_labels",
    "check_widths",
    "check_image_shape",
    "input_affine",
    "check_resolution",
    "chunk_rows",
    "fold_affine",
    "torch_threads",
]

# Parameter constraints every estimator shares (sklearn's _parameter_constraints).
COMMON_PARAMETER_CONSTRAINTS = {
    "keep_best": ["boolean"],
    "device": [str, torch.device, None],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

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


def resolve_device(device):
    """Turn a ``device`` parameter into an available :class:`torch.device`.

    Parameters
    ----------
    device : str or torch.device
        ``"auto"`` (CUDA if available, else MPS if available, else CPU), ``"cpu"``,
        ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a :class:`torch.device`.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        If the string is not a device name, or the device is not available on
        this machine; the message says which devices are.
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device={device!r} is not a valid device; use 'auto', 'cpu', 'cuda', 'cuda:N', "
            "'mps' or a torch.device."
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} was requested but CUDA is not available on this machine; "
                "use device='cpu' or device='auto'."
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r} was requested but only {torch.cuda.device_count()} CUDA "
                "device(s) exist; use 'cuda:0' .. 'cuda:N-1' or device='auto'."
            )
    elif dev.type == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise ValueError(
                f"device={device!r} was requested but MPS is not available on this machine; "
                "use device='cpu' or device='auto'."
            )
    elif dev.type != "cpu":
        raise ValueError(f"device={device!r} is not supported; use 'auto', 'cpu', 'cuda' or 'mps'.")
    return dev


@contextmanager
def torch_threads(device, n):
    """torch's intra-op threads on the CPU set to ``n`` (at most the current count), restored afterwards.

    Training steps of small networks are chains of small operations, bound by per-operation
    latency: a second thread does not shorten them, and where another process holds a core
    every parallel region waits for a descheduled thread (measurements:
    ``docs/notes/performance.md``).

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with torch_threads(torch.device("cpu"), 1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(int(n), before)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _own_torch_rng(device):
    """Leave torch's global RNG as it was: building a layer draws from it before
    our seeded initialisation overwrites the weights."""
    devices = [device.index or 0] if device.type == "cuda" else []
    return torch.random.fork_rng(devices=devices)


def make_generators(random_state, device):
    """Local numpy and torch generators seeded from ``random_state``.

    Global seeds are never touched: two estimators with the same
    ``random_state`` draw the same numbers whatever else runs in the process.

    Returns
    -------
    rng : numpy.random.Generator
    torch_gen : torch.Generator
        On ``device`` (CPU generator for CPU).
    """
    seed = int(check_random_state(random_state).randint(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    torch_gen = torch.Generator(device=device)
    torch_gen.manual_seed(seed)
    return rng, torch_gen


def _move_torch(obj, device):
    """Copy of ``obj`` with every tensor/module moved to ``device`` (containers walked)."""
    if isinstance(obj, torch.nn.Module):
        return copy.deepcopy(obj).to(device)
    if torch.is_tensor(obj):
        return obj.detach().to(device)
    if isinstance(obj, dict):
        return {k: _move_torch(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and any(
        isinstance(v, torch.nn.Module) or torch.is_tensor(v) for v in obj
    ):
        return type(obj)(_move_torch(v, device) for v in obj)
    return obj


def _snapshot(state):
    """Detached copies of the tensors of ``state`` (modules and tensors)."""
    return [
        {k: v.detach().clone() for k, v in obj.state_dict().items()}
        if isinstance(obj, torch.nn.Module)
        else obj.detach().clone()
        for obj in state
    ]


@torch.no_grad()
def _restore(state, snapshot):
    for obj, saved in zip(state, snapshot):
        if isinstance(obj, torch.nn.Module):
            obj.load_state_dict(saved)
        else:
            obj.copy_(saved)


def minibatches(order, batch_size):
    """Split the row indices ``order`` into batches of ``batch_size`` rows.

    The one policy for a short tail: a last batch of a single row joins the
    previous batch, because batch norm cannot standardise one sample and a
    one-row step is mostly noise. No row is ever dropped.

    Examples
    --------
    >>> [b.tolist() for b in minibatches(torch.arange(7), 3)]
    [[0, 1, 2], [3, 4, 5, 6]]
    """
    n = order.shape[0]
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] < 2:
        starts.pop()
    return [order[s:e] for s, e in zip(starts, starts[1:] + [n])]


class TrainingRun:
    """The mechanics of one training phase, shared by every estimator's loop.

    Made by :meth:`TransferClusterMixin._training`; a loop reads::

        with self._training("pretrain", n_epochs, state=[net]) as run:
            for epoch in run.epochs():
                for idx in run.batches(n, batch_size, torch_gen):
                    loss = ...
                    run.check_finite(loss)        # before the optimiser step
                    ...
                run.end_epoch(mean_loss, reconstruction=...)

    :meth:`end_epoch` stops a diverging fit with a ``FloatingPointError`` that
    names the phase and the epoch, appends one record ``{"phase", "epoch",
    "loss", **extras}`` to the estimator's ``history_``, moves the progress bar
    and, when the estimator's ``keep_best`` is true, snapshots the parameters
    that an interrupt falls back on. Loops with their own step logic (the
    adversarial and CEM loops) use the same calls with one "epoch" per step.
    """

    def __init__(self, owner, phase, n_epochs, state, select, bar, unit="epoch", hint=None):
        self.owner = owner
        self.phase = phase
        self.n_epochs = int(n_epochs)
        self.state = list(state)
        self.select = select
        self.bar = bar
        self.unit = unit
        if hint is None:
            lr = getattr(owner, "learning_rate", None)
            hint = "lower learning_rate" + ("" if lr is None else f" (now {lr:g})")
        self.hint = hint
        self.completed = 0
        self.best_epoch = None
        self.best_loss = math.inf
        self._saved = None

    @property
    def stopped(self):
        """Whether an interrupt was kept (``keep_best=True``) during this fit or transfer."""
        return self.owner._training_stopped

    def epochs(self):
        """Epoch numbers ``0 .. n_epochs - 1``; none after a kept interrupt."""
        for epoch in range(self.n_epochs):
            if self.stopped:
                return
            yield epoch

    def batches(self, n, batch_size, generator, device=None):
        """Row indices of one shuffled epoch over ``n`` rows, in minibatches.

        Draws ``torch.randperm(n, generator=generator)``; see :func:`minibatches`
        for the one-row policy.
        """
        return minibatches(torch.randperm(n, generator=generator).to(device), batch_size)

    def _fail(self, what, epoch):
        raise FloatingPointError(
            f"{type(self.owner).__name__}: the {self.phase} {what} at {self.unit} {epoch} of "
            f"{self.n_epochs}; {self.hint} or standardise X (e.g. StandardScaler)."
        )

    def check_finite(self, loss):
        """Raise before an optimiser step when a minibatch ``loss`` is NaN or infinite."""
        loss = torch.as_tensor(loss).detach()
        if not bool(torch.isfinite(loss).all()):
            self._fail(f"loss became {float(loss.reshape(-1)[0])}", self.completed)

    def end_epoch(self, loss, *, log=True, **extras):
        """Close an epoch whose (mean) training loss is ``loss``.

        ``extras`` are other monitored quantities: they are checked like
        ``loss``, shown on the progress bar and stored in the history record.
        ``log=False`` skips the record (for loops that log an aggregate with
        :meth:`record` every few steps).

        Raises
        ------
        FloatingPointError
            If ``loss`` or an ``extras`` value is NaN or infinite.
        """
        values = {"loss": float(loss), **{k: _plain(v) for k, v in extras.items()}}
        epoch = self.completed
        bad = {k: v for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)}
        if bad:
            self._fail(", ".join(f"{k} became {v}" for k, v in bad.items()), epoch)
        self.completed += 1
        self.owner._tick(self.bar, **{k: v for k, v in values.items() if isinstance(v, float)})
        if log:
            self.record(epoch=epoch, **values)
        if not getattr(self.owner, "keep_best", False):
            return
        if self.select == "last" or values["loss"] < self.best_loss:
            # "last": adversarial losses do not rank models, the latest complete state is kept.
            self.best_epoch, self.best_loss = epoch, values["loss"]
            self._saved = _snapshot(self.state)

    def record(self, *, epoch, loss, **extras):
        """Append ``{"phase", "epoch", "loss", **extras}`` to the owner's ``history_``."""
        self.owner.history_.append(
            {"phase": self.phase, "epoch": int(epoch), "loss": float(loss), **{k: _plain(v) for k, v in extras.items()}}
        )

    def restore_best(self):
        if self._saved is not None:
            _restore(self.state, self._saved)


class LineProgress:
    """Progress as plain lines on stderr, for logs and pipes.

    The part of tqdm's interface that :meth:`TransferClusterMixin._tick` uses.
    Prints ``"<desc>: <n>/<total> (<elapsed> s) key=value ..."`` every
    ``every`` steps and at the last one.
    """

    def __init__(self, desc, total, every):
        self.desc, self.total, self.every = desc, int(total), int(every)
        self.n = 0
        self.postfix = {}
        self._start = time.perf_counter()

    def set_postfix(self, postfix, refresh=False):
        self.postfix = dict(postfix)

    def update(self, n=1):
        self.n += n
        if self.n % self.every == 0 or self.n == self.total:
            values = "".join(f" {k}={v}" for k, v in self.postfix.items())
            elapsed = time.perf_counter() - self._start
            print(f"{self.desc}: {self.n}/{self.total} ({elapsed:.1f} s){values}", file=sys.stderr, flush=True)


def _plain(value):
    """A Python int or float for a history value (numpy/torch scalars included)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (Integral, np.integer)):
        return int(value)
    return float(value)


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
    """

    _requires_y = False
    _width_params = ()
    _min_samples = 1
    _input_normalization = None
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
    def _transfer(self, X, **kwargs):
        """Adapt to the validated target ``X``; return its labels."""

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
        fit) and ``n_samples >= n_clusters`` where the estimator has
        ``n_clusters``. Subclasses extend it (calling ``super()``).
        """
        if reset:
            for name in self._width_params:
                value = getattr(self, name)
                # None and "auto" are resolved by the estimator itself.
                if value is not None and not (isinstance(value, str) and value == "auto"):
                    check_widths(name, value)
        if hasattr(self, "n_clusters"):
            self._check_n_clusters(X.shape[0], self.n_clusters)

    def _validate_input(self, X, *, reset, y=None):
        """Validate X (and y when given) against the fitted feature count.

        Numeric float32/float64 2-D arrays come out; NaN/inf, complex, object or
        string data raise ``ValueError`` with the offending property named.
        """
        kwargs = dict(
            dtype=[np.float64, np.float32],
            ensure_min_samples=self._min_samples if reset else 1,
            reset=reset,
        )
        if y is None:
            return validate_data(self, X, **kwargs)
        return validate_data(self, X, y, **kwargs)

    def _fitted_input(self, X):
        """``NotFittedError`` before fit, else X validated against the fitted features."""
        check_is_fitted(self)
        return self._validate_input(X, reset=False)

    def _check_n_clusters(self, n_samples, n_clusters, name="n_clusters"):
        if n_samples < n_clusters:
            raise ValueError(
                f"n_samples={n_samples} should be >= {name}={n_clusters}; "
                f"pass more samples or lower {name}."
            )

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
        # Everything below, data validation included (it sets n_features_in_),
        # is undone if any step fails.
        with self._rollback_on_error():
            if self._requires_y:
                self._require_y(y)
                X, y = self._validate_input(X, reset=True, y=y)
                if np.unique(y).shape[0] < 2:
                    warnings.warn(
                        f"{type(self).__name__}.fit got source labels with a single class; it learns "
                        "what separates clusters from labelled sources and needs at least two.",
                        UserWarning,
                        stacklevel=2,
                    )
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
            shift, scale = input_affine(X)
            check_resolution(X.dtype, shift, scale)
            mode = self._input_normalization
            self._input_affine = None if mode is None else (shift, scale if mode == "affine" else 1.0)
            with _own_torch_rng(self.device_):
                self._fit(X, y, rng=rng, torch_gen=torch_gen, **fit_params)
            missing = [a for a in ("labels_", "n_iter_") if not hasattr(self, a)]
            if missing:
                raise NotImplementedError(f"{type(self).__name__}._fit must set {' and '.join(missing)}.")
            self._record_clusters(X, "fit", stacklevel=4)
        return self

    def _record_clusters(self, X, what, stacklevel):
        """Set ``n_clusters_``, the number of distinct labels in ``labels_`` (every estimator).

        A ConvergenceWarning, as KMeans gives, when that is fewer than asked
        for: only for a fixed number of clusters (``n_clusters``, not an upper
        bound under ``estimate_n_clusters``). It names duplicate rows when they
        are the cause.
        """
        found = self.n_clusters_ = int(np.unique(self.labels_).shape[0])
        asked = getattr(self, "n_clusters", None)
        if asked is None or getattr(self, "estimate_n_clusters", False) or found >= asked:
            return
        distinct = np.unique(X, axis=0).shape[0]
        cause = (
            f"X has only {distinct} distinct rows"
            if distinct < asked
            else "the data may hold fewer separable groups, or training stopped early"
        )
        warnings.warn(
            f"{type(self).__name__}.{what} found {found} distinct clusters, fewer than "
            f"n_clusters={asked}: {cause}. Lower n_clusters, or check X for duplicates.",
            ConvergenceWarning,
            stacklevel=stacklevel,
        )

    @contextmanager
    def _rollback_on_error(self):
        """Restore the estimator's previous state if the block raises.

        A diverging loss, a bad option or a ``KeyboardInterrupt`` during
        ``fit``/``transfer`` leaves the estimator exactly as it was before the
        call (unfitted, or fitted on the previous data) -- never half-fitted.
        The one exception is an interrupt absorbed by :meth:`_training` under
        ``keep_best=True``, after which the call completes normally.
        """
        saved = copy.deepcopy(self.__dict__)
        try:
            yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise
        finally:
            # Set by a kept interrupt (see _training); valid for one call only.
            self.__dict__.pop("_training_stopped", None)

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
            try:
                yield run
            except KeyboardInterrupt:
                if not (getattr(self, "keep_best", False) and keeps_model) or run.best_epoch is None:
                    raise
                run.restore_best()
                self._training_stopped = True
                warnings.warn(
                    f"{type(self).__name__}: interrupted during {phase} after {run.completed} "
                    f"{unit}(s); kept the {'latest' if select == 'last' else 'best'} model so far "
                    f"({unit} {run.best_epoch}, loss {run.best_loss:.4g}) and skipped the remaining "
                    "training (keep_best=True).",
                    UserWarning,
                    stacklevel=3,
                )

    #: Working float dtype on the CPU. float64 (exact) suits the OT estimators,
    #: whose cost is memory-bound passes over (n, K) arrays; estimators that
    #: train a network set float32, since matmuls and convolutions run about
    #: twice as fast in it on a CPU (and the OT kernels keep a float64 work
    #: dtype where the marginals need it).
    _cpu_dtype = torch.float64

    def _dtype(self):
        """Working float dtype: ``_cpu_dtype`` on the CPU, float32 on accelerators."""
        return self._cpu_dtype if self.device_.type == "cpu" else torch.float32

    def _tensor(self, X):
        """Validated input rows as a tensor of the working dtype, normalised as fitted.

        With an ``_input_normalization`` the source's :func:`input_affine` is
        applied in float64 before any cast to float32, so a large offset cannot
        swamp the data's spread.
        """
        # torch cannot wrap negative strides (e.g. X[::-1]), which pass validation.
        X = np.ascontiguousarray(X)
        if not X.flags.writeable:
            # torch cannot wrap read-only memory (e.g. memmaps) without a warning.
            X = X.copy()
        affine = getattr(self, "_input_affine", None)
        if affine is None:
            return torch.as_tensor(X, dtype=self._dtype(), device=self.device_)
        shift, scale = torch.from_numpy(affine[0]), affine[1]
        # Row chunks into one buffer: peak memory is X, the result and one float64 chunk.
        out = torch.empty(X.shape, dtype=self._dtype(), device=self.device_)
        step = chunk_rows(X.shape[1])
        for start in range(0, X.shape[0], step):
            rows = torch.as_tensor(X[start : start + step], dtype=torch.float64)
            out[start : start + step] = ((rows - shift) / scale).to(out.device)
        return out

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
        """
        return self.fit(X, y, **fit_params).labels_

    def transfer(self, X, **kwargs):
        """Adapt the fitted model to an unlabelled target ``X`` and return its labels.

        The transferable part learned by ``fit`` is reused, never relearned from
        scratch; afterwards ``labels_`` holds the target's labels and ``predict``
        serves the target.

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
        """
        X = self._fitted_input(X)
        with self._rollback_on_error():
            self._check_params_vs_input(X, reset=False)
            with _own_torch_rng(self.device_):
                labels = self._transfer(X, **kwargs)
            self.labels_ = labels
        # stacklevel: the user's call of the estimator's own transfer, which calls this one.
        self._record_clusters(X, "transfer", stacklevel=5)
        return labels

    def predict(self, X):
        """Assign each sample of ``X`` to a cluster of the current model.

        Never adapts the model to ``X`` (use :meth:`transfer` for that): the
        result for a row does not depend on the other rows. Memory is bounded by
        processing ``X`` in chunks.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        return self._labels(self._fitted_input(X))

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
        and an argmax, in X's dtype: float32 rows give float32 scores, whose
        rounding is of the order of the rounding already in the rows.
        """
        linear = self._linear_predictor()
        if linear is None:
            return self._chunked(self._predict, X, dtype=np.int64)
        W, b = linear
        affine = getattr(self, "_input_affine", None)
        if affine is not None:
            W, b = fold_affine(W, b, *affine)
        dtype = exact_dtype(self.device_) if X.dtype == np.float64 else torch.float32
        W, b = W.to(device=self.device_, dtype=dtype), b.to(device=self.device_, dtype=dtype)

        def labels(rows):
            # torch wraps neither negative strides nor read-only memory: copy such chunks.
            rows = torch.as_tensor(np.require(rows, requirements="CW"), dtype=dtype, device=self.device_)
            return torch.addmm(b, rows, W).argmax(1).cpu().numpy()

        return self._chunked(labels, X, dtype=np.int64)

    def _chunked(self, fn, X, dtype=None, chunk_size=None):
        """:func:`chunked` with numpy output (cast to ``dtype`` when given)."""
        out = np.asarray(chunked(fn, X, chunk_size))
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
        return {k: _move_torch(v, "cpu") for k, v in state.items()}

    def __setstate__(self, state):
        device = state.get("device_")
        if device is not None and device.type != "cpu":
            try:
                resolve_device(device)
            except ValueError:
                warnings.warn(
                    f"This model was fitted on {device} which is not available here; "
                    "it was loaded on the CPU.",
                    UserWarning,
                    stacklevel=2,
                )
                device = torch.device("cpu")
            state = {k: _move_torch(v, device) for k, v in state.items()}
            state["device_"] = device
        if hasattr(super(), "__setstate__"):
            super().__setstate__(state)
        else:
            self.__dict__.update(state)
