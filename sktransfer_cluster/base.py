"""Shared machinery of every estimator: validation, device, seeding, chunked
prediction, the transfer protocol, progress reporting and pickling of torch state.

Estimators subclass :class:`TransferClusterMixin` (before ``ClusterMixin`` and
``BaseEstimator``) and implement a few private hooks:

* ``_fit(X, y, **fit_params)`` -- learn from the source; must set ``labels_``.
* ``_transfer(X, **kwargs)`` -- adapt to an unlabelled target; returns its labels.
* ``_predict(X_chunk)`` -- labels for a chunk, from the current model state only.

Everything else -- input checks, ``device_``, the random generators, chunking,
``NotFittedError``, the feature-count check -- lives here, once.
"""

from __future__ import annotations

import copy
import math
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["TransferClusterMixin", "resolve_device", "make_generators", "pipeline_transfer"]

# Parameter constraints every estimator shares (sklearn's _parameter_constraints).
COMMON_PARAMETER_CONSTRAINTS = {
    "keep_best": ["boolean"],
    "device": [str, torch.device, None],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

# Rows per chunk in predict/transform: bounds peak memory whatever n is.
DEFAULT_CHUNK_SIZE = 65536


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


def pipeline_transfer(pipeline, X, **kwargs):
    """``transfer`` through a fitted :class:`~sklearn.pipeline.Pipeline`.

    scikit-learn's Pipeline routes ``fit``/``predict`` but not ``transfer``.
    This applies the fitted pre-processing steps (fitted on the source, as a
    deployed model would) and calls ``transfer`` on the final estimator.

    Parameters
    ----------
    pipeline : Pipeline
        Fitted, ending with one of this package's estimators.
    X : array-like of shape (n_samples, n_features)
        Target data.
    **kwargs : dict
        Passed to the final estimator's ``transfer``.

    Returns
    -------
    labels : ndarray of shape (n_samples,)

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sktransfer_cluster import SinkhornKMeans, pipeline_transfer
    >>> X, _ = make_blobs(n_samples=120, centers=3, random_state=0)
    >>> pipe = make_pipeline(StandardScaler(), SinkhornKMeans(3, random_state=0)).fit(X)
    >>> pipeline_transfer(pipe, X + 0.5).shape
    (120,)
    """
    final = pipeline[-1]
    if not hasattr(final, "transfer"):
        raise TypeError(f"the last step of the pipeline ({type(final).__name__}) has no transfer method.")
    Xt = pipeline[:-1].transform(X) if len(pipeline) > 1 else X
    return final.transfer(Xt, **kwargs)


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


class TrainingRun:
    """Book-keeping of one training phase, shared by every estimator's loop.

    Made by :meth:`TransferClusterMixin._training`; the loop reads::

        with self._training("pretrain", n_epochs, state=[net]) as run:
            for epoch in run.epochs():
                ...
                run.end_epoch(loss)

    :meth:`end_epoch` stops a diverging fit with a ``FloatingPointError`` that
    names the phase and the epoch, moves the progress bar, and -- only when the
    estimator's ``keep_best`` is true -- remembers the best parameters so far so
    that an interrupt can fall back on them.
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

    def epochs(self):
        """Epoch numbers ``0 .. n_epochs - 1``; none after a kept interrupt."""
        for epoch in range(self.n_epochs):
            if self.owner.__dict__.get("_training_stopped", False):
                return
            yield epoch

    def end_epoch(self, loss, **postfix):
        """Close an epoch whose (mean) training loss is ``loss``.

        ``postfix`` values (other monitored quantities) are shown on the
        progress bar and checked like ``loss``.

        Raises
        ------
        FloatingPointError
            If ``loss`` or a ``postfix`` value is NaN or infinite.
        """
        values = {"loss": float(loss), **{k: float(v) for k, v in postfix.items()}}
        loss = values["loss"]
        epoch = self.completed
        bad = {k: v for k, v in values.items() if not math.isfinite(v)}
        if bad:
            what = ", ".join(f"{k} became {v}" for k, v in bad.items())
            raise FloatingPointError(
                f"{type(self.owner).__name__}: the {self.phase} {what} at {self.unit} {epoch} of "
                f"{self.n_epochs}; {self.hint} or standardise X (e.g. StandardScaler)."
            )
        self.completed += 1
        self.owner._tick(self.bar, loss=loss, **postfix)
        if not getattr(self.owner, "keep_best", False):
            return
        if self.select == "last":
            # Adversarial losses do not rank models: the latest state is the best guess.
            self.best_epoch, self.best_loss = epoch, loss
        elif loss < self.best_loss:
            self.best_epoch, self.best_loss = epoch, loss
            self._saved = _snapshot(self.state)

    def restore_best(self):
        if self._saved is not None:
            _restore(self.state, self._saved)


class TransferClusterMixin:
    """Mixin holding the shared contract of the transferable clustering estimators.

    Subclasses declare ``_requires_y = True`` when ``fit`` needs labels.
    """

    _requires_y = False
    # Minimum samples for fit; estimators with n_clusters also check n >= n_clusters.
    _min_samples = 1

    # ------------------------------------------------------------------ checks
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
            else:
                X = self._validate_input(X, reset=True)
            self.device_ = resolve_device(self.device)
            # Generators are passed down, not stored: fitted state stays picklable.
            rng, torch_gen = make_generators(self.random_state, "cpu")
            self._fit(X, y, rng=rng, torch_gen=torch_gen, **fit_params)
        return self

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
    def _training(self, phase, n_epochs, *, state=(), select="min", unit="epoch", hint=None):
        """A :class:`TrainingRun` for one training phase, with its progress bar.

        ``state`` lists the modules and tensors this phase trains; ``unit``
        names a training step in messages and ``hint`` replaces the default
        advice of the divergence error ("lower learning_rate"). With
        ``keep_best=True`` a ``KeyboardInterrupt`` inside the block is absorbed
        once an epoch of the phase has completed: ``state`` goes back to the
        epoch of lowest loss (``select="min"``) or stays at the last completed
        one (``select="last"``, for adversarial training), later phases run no
        epochs, and the caller finishes fitting so the model predicts. Otherwise
        the interrupt propagates and :meth:`_rollback_on_error` restores the
        state from before the call.
        """
        with self._progress(n_epochs, phase) as bar:
            run = TrainingRun(self, phase, n_epochs, state, select, bar, unit, hint)
            try:
                yield run
            except KeyboardInterrupt:
                if not getattr(self, "keep_best", False) or run.best_epoch is None:
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

    def _dtype(self):
        """Working float dtype: float64 on CPU (exact, deterministic), float32 elsewhere."""
        return torch.float64 if self.device_.type == "cpu" else torch.float32

    def _tensor(self, X):
        # torch cannot wrap negative strides (e.g. X[::-1]), which pass validation.
        X = np.ascontiguousarray(X)
        if not X.flags.writeable:
            # torch cannot wrap read-only memory (e.g. memmaps) without a warning.
            X = X.copy()
        return torch.as_tensor(X, dtype=self._dtype(), device=self.device_)

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
            Estimator-specific options (see the estimator's ``_transfer``).

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        X = self._fitted_input(X)
        with self._rollback_on_error():
            labels = self._transfer(X, **kwargs)
            self.labels_ = labels
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
        X = self._fitted_input(X)
        return self._chunked(self._predict, X, dtype=np.int64)

    def _chunked(self, fn, X, dtype=None, chunk_size=DEFAULT_CHUNK_SIZE):
        """Apply ``fn`` to row chunks of ``X`` and concatenate the numpy results."""
        outs = []
        with torch.no_grad():
            for start in range(0, X.shape[0], chunk_size):
                outs.append(np.asarray(fn(X[start : start + chunk_size])))
        out = np.concatenate(outs, axis=0)
        return out.astype(dtype, copy=False) if dtype is not None else out

    # --------------------------------------------------------------- progress
    @contextmanager
    def _progress(self, total, desc):
        """A tqdm bar when ``verbose >= 1``, a silent no-op otherwise."""
        if not self.verbose:
            yield None
            return
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=f"{type(self).__name__} {desc}", leave=False)
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
