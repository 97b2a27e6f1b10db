"""Opt-in ``torch.compile`` of a training step, with a clean fallback to eager mode.

Training loops that are bound by per-operation overhead (many small tensors:
TDCM's blocks, the GAN's small networks) gain from fusing a step's operations
into a few kernels. An estimator with a ``compile`` parameter wraps the
function it calls once per minibatch (the forward pass and the loss; autograd
then runs the compiled backward) in :func:`compile_step`:

>>> import torch
>>> from sktransfer_cluster.base import compile_step
>>> def loss(x):
...     return (x * x).sum()
>>> step = compile_step(loss, enabled=False)  # compile=False: the function itself
>>> step is loss
True

With ``enabled=True`` the result is a :class:`CompiledStep`. Where compilation
cannot work (no ``torch.compile``, a Python that TorchDynamo does not support,
no C++ compiler for inductor on the CPU, no Triton on CUDA:
:func:`compiler_unavailable`) it warns once and calls the function eagerly;
where compilation fails on a call, it warns, runs that call eagerly and stays
eager. Eager and compiled steps compute the same function, so results agree
within floating-point rounding (fused kernels sum in another order).

Float arguments are compiled as constants (``specialize_float``, :data:`DYNAMO_CONFIG`): a
step's floats are mostly a training run's constants (a loss weight, a curve's exponent), and
traced as symbols they can make TorchDynamo trace the step twice (it restarts to specialise
them). A float that changes during a run would recompile at each new value: pass
``dynamo_config={"specialize_float": False}`` for that step.

Compilation costs seconds to tens of seconds on the first call (and once more
for each new input shape, e.g. a shorter last minibatch); it pays only for
fits long enough to repay it (``docs/performance.md``). ``enabled`` may
therefore be a :class:`CompileRule`: the step then runs eagerly for a probe
(the first ``probe_steps`` steps after the first), and is compiled for the
rest of its run only where the measured eager time of the steps left, times
the step's expected saving, exceeds the step's expected compilation cost:

>>> from sktransfer_cluster.base.compiled import CompileRule, compile_step
>>> rule = CompileRule(total_steps=10, probe_steps=2, speedup=2.0, cold_cost=1e9)
>>> step = compile_step(loss, rule)
>>> float(sum(step(torch.ones(2)) for _ in range(10)))  # too short to repay 1e9 s: eager
20.0
>>> rule.decision["compiled"]
False
"""

from __future__ import annotations

import importlib
import importlib.util
import time

import torch

from .runtime import warn

__all__ = ["compiler_unavailable", "compile_step", "CompiledStep", "CompileRule", "COMPILE_OPTIONS",
           "CPU_INDUCTOR_OPTIONS", "DYNAMO_CONFIG"]


#: ``torch.compile``'s options unless the caller overrides them. ``dynamic=True``: one graph
#: for every batch size, so a shorter last minibatch does not compile a second graph (with
#: ``dynamic=False`` TDCM's cold compile took 130 CPU s against 93 s; epochs equally fast).
#: On the CPU, ``cpp_wrapper``: the wrapper and all kernels of a graph in one C++ file, so the
#: compiler runs once per graph rather than once per kernel (TDCM's step: 2 shared objects
#: instead of 37-47, 13 CPU s of gcc instead of 43-62 s; ``docs/notes/tdcm.md``, 2026-11-27).
COMPILE_OPTIONS = {"dynamic": True}
#: TorchDynamo's settings while a step is traced, unless the caller overrides them: floats
#: specialised (a run's constants; as symbols TorchDynamo traced TDCM's neighbour loss twice).
DYNAMO_CONFIG = {"specialize_float": True}
CPU_INDUCTOR_OPTIONS = {"cpp_wrapper": True}


def compiler_unavailable(device="cpu"):
    """Why ``torch.compile`` cannot compile for ``device`` here, or None when it can.

    Checks what can be checked without compiling: ``torch.compile`` exists,
    TorchDynamo supports this Python, and inductor's backend for the device is
    present (a C++ compiler for the CPU, Triton for CUDA). Compilation may still
    fail on a given function; :class:`CompiledStep` falls back then.

    Parameters
    ----------
    device : str or torch.device, default="cpu"

    Returns
    -------
    str or None
        A one-line reason, or None.
    """
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        dynamo = importlib.import_module("torch._dynamo")
        if not dynamo.is_dynamo_supported():
            return "torch.compile does not support this Python"
    except Exception as exc:  # an import failure of the compiler stack is an absence too
        return f"torch.compile cannot be imported ({type(exc).__name__}: {exc})"
    kind = torch.device(device).type
    if kind == "cpu":
        try:
            from torch._inductor import cpp_builder

            cpp_builder.get_cpp_compiler()
        except Exception:
            return "no C++ compiler found for torch.compile's CPU backend (install gcc or clang, or set CXX)"
    elif kind == "cuda" and importlib.util.find_spec("triton") is None:
        return "torch.compile on CUDA needs Triton, which is not installed"
    return None


def _dynamo_config():
    """TorchDynamo's config module (imported only once a step is compiled)."""
    return importlib.import_module("torch._dynamo.config")


class CompiledStep:
    """A function compiled with ``torch.compile`` on its first call, eager where that fails.

    Parameters
    ----------
    fn : callable
        The per-step function (tensors in, tensors out), e.g. a minibatch's forward
        pass and loss. It must compute the same thing eagerly and compiled.
    device : str or torch.device, default="cpu"
        Where it runs (chooses the backend check of :func:`compiler_unavailable`).
    what : str, default="the training step"
        Named in the warnings.
    dynamo_config : dict, optional
        TorchDynamo settings while the step is traced, over :data:`DYNAMO_CONFIG`, e.g.
        ``{"trace_autograd_ops": True}`` for a step that calls ``torch.autograd.grad``
        (a gradient penalty), ``{"specialize_float": False}`` for a float argument that
        changes during a run.
    **options
        Passed to ``torch.compile``, over :data:`COMPILE_OPTIONS` (and, for inductor on
        the CPU, an ``options`` dict over :data:`CPU_INDUCTOR_OPTIONS`).

    Attributes
    ----------
    compiled : bool
        Whether calls go through the compiled function (False after a fallback).
    reason : str or None
        Why it runs eagerly, when it does.
    """

    def __init__(self, fn, *, device="cpu", what="the training step", dynamo_config=None, **options):
        self.fn = fn
        self.what = what
        self.dynamo_config = {**DYNAMO_CONFIG, **(dynamo_config or {})}
        self.reason = compiler_unavailable(device)
        self._compiled = None
        if self.reason is None:
            options = {**COMPILE_OPTIONS, **options}
            if torch.device(device).type == "cpu" and options.get("backend", "inductor") == "inductor":
                options["options"] = {**CPU_INDUCTOR_OPTIONS, **options.get("options", {})}
            try:
                self._compiled = torch.compile(fn, **options)
            except Exception as exc:
                self.reason = f"torch.compile raised {type(exc).__name__}: {exc}"
        if self.reason is not None:
            warn(f"compile=True: {self.reason}; {self.what} runs eagerly (same results, no speed-up).")

    @property
    def compiled(self):
        return self._compiled is not None

    def __call__(self, *args, **kwargs):
        if self._compiled is None:
            return self.fn(*args, **kwargs)
        try:
            with _dynamo_config().patch(**self.dynamo_config):
                return self._compiled(*args, **kwargs)
        except Exception as exc:
            # Compilation failed (or the function itself raised: the eager call below then raises
            # the same error, without a misleading warning). A failed compilation raises before its
            # graph runs, so the eager call starts from the same state.
            out = self.fn(*args, **kwargs)
            self._compiled = None
            self.reason = f"compilation failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            warn(f"compile=True: {self.reason}; {self.what} runs eagerly from here (same results, no speed-up).")
            return out


def compile_step(fn, enabled, *, device="cpu", what="the training step", dynamo_config=None, **options):
    """``fn`` itself when not ``enabled``, else ``fn`` wrapped in a :class:`CompiledStep`.

    Parameters
    ----------
    fn : callable
    enabled : bool or CompileRule
        The estimator's ``compile`` parameter. A :class:`CompileRule`: eager for its
        probe, then compiled only if the rule finds that compiling repays itself.
    device : str or torch.device, default="cpu"
    what : str, default="the training step"
    dynamo_config : dict, optional
        TorchDynamo settings while tracing (:class:`CompiledStep`).
    **options
        For ``torch.compile``.

    Returns
    -------
    callable
    """
    if not enabled:
        return fn
    if isinstance(enabled, CompileRule):
        return enabled.wrap(fn, device=device, what=what, dynamo_config=dynamo_config, **options)
    return CompiledStep(fn, device=device, what=what, dynamo_config=dynamo_config, **options)


#: Keys of the steps compiled in this process (:meth:`CompileRule.wrap`): a later compilation of the
#: same step finds its code in inductor's cache, and costs the rule's ``warm_cost``.
_COMPILED_HERE = set()


class CompileRule:
    """Compile a training step only where its expected saving repays its expected compilation.

    The step runs eagerly for its first ``probe_steps + 1`` calls; the CPU time of the last
    ``probe_steps`` (the first is left out: it pays one-off costs) gives the eager time per
    step, ``t``. With ``n`` steps left, compiling is expected to save
    ``n * t * (1 - 1 / speedup)`` CPU seconds and to cost ``cold_cost`` (``warm_cost`` when
    this process compiled the same step before, so inductor's cache holds its code). The
    step is compiled for the rest of the run if the saving exceeds the cost, and stays
    eager otherwise. ``t`` and ``n`` are measured on the run; ``speedup`` and the costs are
    properties of the step's graph and of the machine, which its owner states.

    Parameters
    ----------
    total_steps : int
        Calls the step will receive in this run.
    probe_steps : int
        Eager steps timed before deciding (e.g. one epoch's).
    speedup : float
        Expected ratio of the eager to the compiled time of a whole step (forward,
        backward, optimiser), e.g. per epoch.
    cold_cost : float
        Expected CPU seconds of compiling the step on an empty inductor cache.
    warm_cost : float, optional
        The same when the cache holds the step (default ``cold_cost``).
    name : str, default="step"
        Names the step in :attr:`decision`.
    graph : hashable, optional
        What tells this step's graph from another of the same function (the data it
        sees, its dtype, its device): a step is judged warm only after this process
        compiled the same function *and* graph.

    Attributes
    ----------
    decision : dict or None
        Once decided: ``name``, ``eager_step_s`` (``t``), ``steps_left`` (``n``),
        ``expected_saving_s``, ``expected_cost_s``, ``cache`` (``"cold"`` or ``"warm"``),
        ``compiled`` (bool). A run too short to probe, a step whose ``speedup`` is at
        most 1, or a machine without a compiler decides eager at once (``eager_step_s``
        None).
    """

    def __init__(self, total_steps, probe_steps, speedup, cold_cost, warm_cost=None, name="step", graph=None):
        self.total_steps, self.probe_steps = int(total_steps), max(1, int(probe_steps))
        self.speedup, self.cold_cost = float(speedup), float(cold_cost)
        self.warm_cost = self.cold_cost if warm_cost is None else float(warm_cost)
        self.name, self.graph = name, graph
        self.decision = None

    def decide(self, eager_step_s, steps_left, warm):
        """Record and return whether to compile (the rule above)."""
        saving = steps_left * eager_step_s * (1.0 - 1.0 / self.speedup) if eager_step_s is not None else 0.0
        cost = self.warm_cost if warm else self.cold_cost
        self.decision = {"name": self.name, "eager_step_s": eager_step_s, "steps_left": int(steps_left),
                         "expected_saving_s": saving, "expected_cost_s": cost, "cache": "warm" if warm else "cold",
                         "compiled": eager_step_s is not None and saving > cost}
        return self.decision["compiled"]

    def wrap(self, fn, *, device="cpu", what="the training step", dynamo_config=None, **options):
        """``fn`` behind the rule: eager until decided, then compiled or eager for good."""
        if self.speedup <= 1.0:
            # A step that compiles no faster can never repay: eager at once, nothing probed or said.
            self.decide(None, self.total_steps, False)
            return fn
        reason = compiler_unavailable(device)
        if reason is not None:
            # Said at once, whatever the rule would decide: the caller asked for compilation.
            warn(f"compile=True: {reason}; {what} runs eagerly (same results, no speed-up).")
            self.decide(None, self.total_steps, False)
            return fn
        key = (getattr(fn, "__qualname__", repr(fn)), self.graph, what, repr(sorted(options.items())), repr(dynamo_config))
        return _RuledStep(fn, self, key, dict(device=device, what=what, dynamo_config=dynamo_config, **options))


class _RuledStep:
    """A step under a :class:`CompileRule`: eager while probing, then compiled or eager."""

    def __init__(self, fn, rule, key, compile_kwargs):
        self.fn, self.rule, self.key, self.compile_kwargs = fn, rule, key, compile_kwargs
        self.calls, self.start, self.step = 0, None, fn
        if rule.total_steps < rule.probe_steps + 2:  # nothing left to compile after the probe
            rule.decide(None, max(0, rule.total_steps - rule.probe_steps - 1), key in _COMPILED_HERE)

    def __call__(self, *args, **kwargs):
        if self.rule.decision is None:
            self.calls += 1
            if self.calls == 2:
                self.start = time.process_time()
            elif self.calls == self.rule.probe_steps + 2:
                per_step = (time.process_time() - self.start) / self.rule.probe_steps
                steps_left = self.rule.total_steps - self.calls + 1
                if self.rule.decide(per_step, steps_left, self.key in _COMPILED_HERE):
                    self.step = CompiledStep(self.fn, **self.compile_kwargs)
                    out = self.step(*args, **kwargs)
                    if self.step.compiled:
                        _COMPILED_HERE.add(self.key)
                    return out
        return self.step(*args, **kwargs)
