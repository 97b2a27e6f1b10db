"""Errors and input limits shared by the command line and the main job (torch-free)."""

import math
from numbers import Integral, Real

__all__ = ["SEED_MAX", "UsageError", "check_count", "check_megabytes"]

#: The largest seed numpy's and scikit-learn's random states take.
SEED_MAX = 2**32 - 1


class UsageError(ValueError):
    """A user mistake reported as one line, no traceback (exit status 2)."""


def check_count(value, name):
    """``UsageError`` unless ``value`` is None or an integer >= 1 (not a bool, not a str, not 2.5).

    ``compare()``'s ``n_clusters`` and ``threads``: from Python, ``True`` or ``"3"`` would
    otherwise fail deep in a run with a ``TypeError`` (the command line parses them as such).

    Examples
    --------
    >>> check_count(3, "threads")
    >>> check_count(True, "threads")
    Traceback (most recent call last):
    ...
    sktransfer_cluster.errors.UsageError: threads must be a positive integer or None, got True
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, Integral) or value < 1):
        raise UsageError(f"{name} must be a positive integer or None, got {value!r}")


def check_megabytes(value, name):
    """``UsageError`` unless ``value`` is a finite number of MiB above 0: NaN, inf, 0 and
    negative limits would refuse every file, or none (``--max-array-mb``, ``max_array_mb``).

    Examples
    --------
    >>> check_megabytes(512.0, "max_array_mb")
    >>> check_megabytes(float("nan"), "--max-array-mb")
    Traceback (most recent call last):
    ...
    sktransfer_cluster.errors.UsageError: --max-array-mb must be a positive, finite number of MiB, got nan
    """
    if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a positive, finite number of MiB, got {value!r}")
