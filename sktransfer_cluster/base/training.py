"""The mechanics of a training phase: minibatches, finiteness checks, history,
snapshots for ``keep_best`` and progress lines."""

from __future__ import annotations

import math
import sys
import time
from numbers import Integral

import numpy as np
import torch

from .runtime import exact_dtype

__all__ = ["minibatches", "TrainingRun", "TrainingCallback", "LineProgress", "check_callbacks"]


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

class TrainingCallback:
    """What an estimator's ``callbacks`` may observe of its training (skorch's idea).

    Pass any objects with some of these methods as ``Estimator(..., callbacks=[cb])``;
    each is called with the :class:`TrainingRun` of the phase (``run.phase``,
    ``run.n_epochs``, ``run.completed``, ``run.owner``). Subclassing this class is
    optional: it only supplies methods that do nothing. Callbacks observe; they
    change no result.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from sktransfer_cluster import TDCMCluster
    >>> class Losses(TrainingCallback):
    ...     def __init__(self):
    ...         self.seen = []
    ...     def on_epoch_end(self, run, values):
    ...         self.seen.append((run.phase, round(values["loss"], 3)))
    >>> X, _ = make_blobs(60, centers=3, random_state=0)
    >>> cb = Losses()
    >>> _ = TDCMCluster(3, max_epochs=2, random_state=0, callbacks=[cb]).fit(X)
    >>> sorted({phase for phase, _ in cb.seen})  # the neighbour encoder's epochs, then TDCM's
    ['fit', 'neighbours']
    >>> [phase for phase, _ in cb.seen].count("fit")
    2
    """

    def on_phase_begin(self, run):
        """A training phase starts (before its first epoch)."""

    def on_epoch_end(self, run, values):
        """An epoch (or step, for adversarial loops) ended; ``values`` holds ``"loss"`` and the extras."""

    def on_record(self, run, record):
        """A record ``{"phase", "epoch", "loss", ...}`` was appended to ``history_``."""

    def on_phase_end(self, run):
        """A training phase ended without an error."""


_CALLBACK_HOOKS = ("on_phase_begin", "on_epoch_end", "on_record", "on_phase_end")


def check_callbacks(callbacks):
    """``TypeError`` for an entry of ``callbacks`` that defines none of :class:`TrainingCallback`'s hooks.

    Such an entry would never be called (a plain function, say): the fit would run as if it
    were not there, silently.

    Parameters
    ----------
    callbacks : list or tuple or None
        An estimator's ``callbacks`` parameter.

    Examples
    --------
    >>> check_callbacks([TrainingCallback()])
    >>> check_callbacks([print])
    Traceback (most recent call last):
    ...
    TypeError: callbacks[0] (builtin_function_or_method) defines none of on_phase_begin, ...
    """
    for i, callback in enumerate(callbacks or ()):
        if not any(callable(getattr(callback, hook, None)) for hook in _CALLBACK_HOOKS):
            raise TypeError(
                f"callbacks[{i}] ({type(callback).__name__}) defines none of {', '.join(_CALLBACK_HOOKS)}, so it "
                "would never be called; pass objects with some of these methods (e.g. a subclass of "
                "sktransfer_cluster.base.TrainingCallback), not functions."
            )


class TrainingRun:
    """The mechanics of one training phase, shared by every estimator's loop.

    Made by :meth:`TransferClusterMixin._training`; a loop reads::

        with self._training("pretrain", n_epochs, state=[net]) as run:
            for epoch in run.epochs():
                for idx in run.batches(n, batch_size, torch_gen):
                    loss = ...
                    run.step(optimizer, loss, weight=len(idx), reconstruction=rec)
                run.end_epoch()               # the weighted means of the epoch's steps

    :meth:`step` checks the minibatch loss is finite, then zeroes the
    gradients, back-propagates and steps the optimiser, adding the loss and
    any named terms to the epoch's totals on their device (no host transfer).
    :meth:`end_epoch` stops a diverging fit with a ``FloatingPointError`` that
    names the phase and the epoch, appends one record ``{"phase", "epoch",
    "loss", **extras}`` to the estimator's ``history_``, moves the progress bar,
    tells the estimator's ``callbacks`` (:class:`TrainingCallback`) and, when
    the estimator's ``keep_best`` is true, snapshots the parameters that an
    interrupt falls back on. Loops with their own step logic (the adversarial
    and CEM loops) use the same calls with one "epoch" per step.
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
        self.callbacks = tuple(getattr(owner, "callbacks", None) or ())
        check_callbacks(self.callbacks)  # also set after fit's check (set_params before a transfer)
        self._totals = {}
        self._weight = 0.0

    def notify(self, hook, *args):
        """Call ``hook`` (a :class:`TrainingCallback` method name) on every callback that has it."""
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(self, *args)

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

    def step(self, optimizer, loss, *, weight=1.0, check=True, **terms):
        """One optimiser step on a minibatch ``loss``; returns it detached.

        Checks that ``loss`` is finite (unless ``check=False``, for loops that
        check their own monitored values once per step), zeroes the gradients,
        back-propagates and steps ``optimizer``. ``loss * weight`` and each of
        ``terms`` (tensors, also times ``weight``) are added to the epoch's
        totals on their device; :meth:`end_epoch` without a loss closes the
        epoch with their weighted means. ``weight=None`` keeps no totals (loops
        that monitor their own values).
        """
        if check:
            self.check_finite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        if weight is None:
            return loss
        for name, value in (("loss", loss), *terms.items()):
            # float64 totals: a float32 sum over many minibatches would drift in its last digits.
            value = value.detach().to(exact_dtype(value.device)) * weight
            self._totals[name] = value if name not in self._totals else self._totals[name] + value
        self._weight += weight
        return loss

    def epoch_means(self):
        """``{"loss": ..., **terms}``: the weighted means of this epoch's :meth:`step` calls so far (one host transfer)."""
        if not self._totals:
            raise RuntimeError("end_epoch() without a loss needs at least one step() in the epoch.")
        names = list(self._totals)
        # Stacked in the totals' dtype on their device (MPS has no float64), then one transfer.
        means = torch.stack([self._totals[k].reshape(()) for k in names]).cpu().to(torch.float64) / self._weight
        return dict(zip(names, means.tolist()))

    def step_callback(self, steps_per_epoch):
        """A ``callback(i, loss)`` for a loop that trains by itself and reports each step's loss.

        For :func:`~sktransfer_cluster.representation.train_neighbour_encoder`: each loss is
        checked (:meth:`check_finite`) and every ``steps_per_epoch`` steps close an epoch
        with their mean loss (:meth:`end_epoch`).
        """
        total = [0.0]

        def callback(i, loss):
            self.check_finite(loss)
            total[0] += loss
            if (i + 1) % steps_per_epoch == 0:
                self.end_epoch(total[0] / steps_per_epoch)
                total[0] = 0.0

        return callback

    def end_epoch(self, loss=None, *, log=True, **extras):
        """Close an epoch whose (mean) training loss is ``loss``.

        ``extras`` are other monitored quantities: they are checked like
        ``loss``, shown on the progress bar and stored in the history record.
        Without ``loss``, the loss and the terms of the epoch's :meth:`step`
        calls are their weighted means (``extras`` may add more).
        ``log=False`` skips the record (for loops that log an aggregate with
        :meth:`record` every few steps).

        Raises
        ------
        FloatingPointError
            If ``loss`` or an ``extras`` value is NaN or infinite.
        """
        if loss is None:
            means = self.epoch_means()
            loss, extras = means.pop("loss"), {**means, **extras}
        self._totals, self._weight = {}, 0.0
        values = {"loss": float(loss), **{k: _plain(v) for k, v in extras.items()}}
        epoch = self.completed
        bad = {k: v for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)}
        if bad:
            self._fail(", ".join(f"{k} became {v}" for k, v in bad.items()), epoch)
        self.completed += 1
        self.owner._tick(self.bar, **{k: v for k, v in values.items() if isinstance(v, float)})
        if log:
            self.record(epoch=epoch, **values)
        self.notify("on_epoch_end", values)
        if not getattr(self.owner, "keep_best", False):
            return
        if self.select == "last" or values["loss"] < self.best_loss:
            # "last": adversarial losses do not rank models, the latest complete state is kept.
            self.best_epoch, self.best_loss = epoch, values["loss"]
            self._saved = _snapshot(self.state)

    def record(self, *, epoch, loss, **extras):
        """Append ``{"phase", "epoch", "loss", **extras}`` to the owner's ``history_``."""
        entry = {"phase": self.phase, "epoch": int(epoch), "loss": float(loss), **{k: _plain(v) for k, v in extras.items()}}
        self.owner.history_.append(entry)
        self.notify("on_record", entry)

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
