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
fits long enough to repay it (``docs/performance.md``).
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

from .runtime import warn

__all__ = ["compiler_unavailable", "compile_step", "CompiledStep", "COMPILE_OPTIONS", "CPU_INDUCTOR_OPTIONS", "DYNAMO_CONFIG"]


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
    enabled : bool
        The estimator's ``compile`` parameter.
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
    return CompiledStep(fn, device=device, what=what, dynamo_config=dynamo_config, **options)
