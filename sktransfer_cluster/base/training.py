"""The mechanics of a training phase: minibatches, finiteness checks, history,
snapshots for ``keep_best`` and progress lines."""

from __future__ import annotations

import math
import sys
import time
from numbers import Integral

import numpy as np
import torch

__all__ = ["minibatches", "TrainingRun", "LineProgress"]


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
