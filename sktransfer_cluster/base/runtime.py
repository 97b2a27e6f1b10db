"""The torch runtime: devices, the working float dtype, threads and random generators."""

from __future__ import annotations

import copy
import functools
import sys
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.utils import check_random_state

__all__ = [
    "resolve_device",
    "loaded_device",
    "exact_dtype",
    "torch_threads",
    "own_torch_rng",
    "make_generators",
    "move_torch",
    "warn",
    "working_dtype",
    "limit_threads",
    "COMPUTE_THREADS",
    "compute_threads",
    "on_compute_threads",
]


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

@contextmanager
def limit_threads(n):
    """torch's intra-op threads and BLAS/OpenMP's (threadpoolctl) set to ``n``, restored afterwards.

    For a whole run (the ``compare`` command line, a benchmark); :func:`torch_threads`
    is the per-phase rule inside an estimator.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with limit_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        with threadpool_limits(int(n)):
            yield
    finally:
        torch.set_num_threads(before)


#: Threads of the package's own computations on the CPU: training phases, the OT solvers,
#: OT-Lloyd, predict, k-NN graphs. One, measured (``docs/performance.md``, "Threads"):
#: these are chains of passes over (n, K) arrays or of small network operations, each a
#: parallel region whose threads meet at a barrier; beside another CPU-bound process a
#: descheduled thread stalls every region (SinkhornKMeans' fit on 10^5 rows took 30 s
#: wall on 2 threads against 5 s on one), and on an idle 2-core machine the second thread
#: gained little (a 20,000 x 10 Sinkhorn solve took 0.80 s on 2 threads, 0.09 s on one).
#: Parallelism comes from processes instead: joblib, Dask, a grid search's n_jobs.
COMPUTE_THREADS = 1


@contextmanager
def compute_threads(device="cpu", *, blas=False):
    """Run the enclosed CPU computation on :data:`COMPUTE_THREADS` thread(s), then restore.

    The one thread policy of the package: torch's intra-op threads (as
    :func:`torch_threads`) and, with ``blas=True``, numpy's BLAS and scikit-learn's
    OpenMP pools through threadpoolctl (what :class:`~sklearn.cluster.KMeans` does
    around its own loops), for code that calls them (k-means++ seeding, k-NN
    searches). The caller's settings come back on exit and on error; a caller who
    already runs fewer threads keeps them. threadpoolctl costs about a millisecond
    per entry, so ``blas=True`` belongs around a whole call, not inside loops.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with compute_threads():
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    device = torch.device(device)
    with torch_threads(device, COMPUTE_THREADS):
        if not blas or device.type != "cpu":
            yield
            return
        from threadpoolctl import threadpool_limits

        with threadpool_limits(COMPUTE_THREADS):
            yield


def on_compute_threads(fn):
    """Decorator: ``fn`` runs inside :func:`compute_threads` (torch's threads only).

    For the public solvers, whose callers may be on any thread count. Costs about a
    microsecond per call.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with compute_threads():
            return fn(*args, **kwargs)

    return wrapper


def own_torch_rng(device):
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

def move_torch(obj, device):
    """Copy of ``obj`` with every tensor/module moved to ``device`` (containers walked)."""
    if isinstance(obj, torch.nn.Module):
        return copy.deepcopy(obj).to(device)
    if torch.is_tensor(obj):
        return obj.detach().to(device)
    if isinstance(obj, dict):
        return {k: move_torch(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and any(
        isinstance(v, torch.nn.Module) or torch.is_tensor(v) for v in obj
    ):
        return type(obj)(move_torch(v, device) for v in obj)
    return obj



def exact_dtype(device):
    """float64, the dtype small problems are solved in, or float32 on MPS (it has no float64)."""
    return torch.float32 if torch.device(device).type == "mps" else torch.float64


def working_dtype(device, cpu=torch.float64, accelerator=torch.float32):
    """The float dtype to compute in on ``device``: ``cpu`` on the CPU, ``accelerator`` elsewhere.

    The one device-to-dtype rule of the package (with :func:`exact_dtype`): on a CPU a
    float64 pass over memory-bound arrays costs little more than a float32 one, while
    accelerators run float32 many times faster (and MPS has no float64).

    Examples
    --------
    >>> working_dtype("cpu"), working_dtype("cpu", cpu=torch.float32)
    (torch.float64, torch.float32)
    """
    return cpu if torch.device(device).type == "cpu" else accelerator



# Frames of these modules are skipped when a warning looks for the user's line: the package's
# own, and contextlib's (a warning raised in a generator context manager passes through it).
_INTERNAL = (__name__.split(".")[0], "contextlib")


def loaded_device(device):
    """The device of an unpickled model: ``device`` where it is available here, else the CPU,
    with a warning (a model fitted on a GPU opened on a machine without one).

    Examples
    --------
    >>> import torch
    >>> loaded_device(torch.device("cpu"))
    device(type='cpu')
    """
    if device is None or device.type == "cpu":
        return device
    try:
        resolve_device(device)
    except ValueError:
        warn(f"This model was fitted on {device} which is not available here; it was loaded on the CPU.", UserWarning)
        return torch.device("cpu")
    return device


def warn(message, category=UserWarning):
    """``warnings.warn`` attributed to the caller's line: the first frame outside this package.

    Counting stack levels by hand breaks whenever a call moves between
    modules; walking the stack cannot.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn("look here")
    >>> str(caught[0].message)
    'look here'
    """
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in _INTERNAL:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
