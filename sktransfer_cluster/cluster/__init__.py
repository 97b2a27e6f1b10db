"""The estimators, one wing (sub-package) each, imported when an estimator is first used.

Importing the package does not import torch, so ``sktransfer-cluster --help``
starts at once; ``from sktransfer_cluster import SinkhornKMeans`` works as usual.
Which estimator lives in which wing is read from :mod:`sktransfer_cluster.registry`.
"""

import importlib

from ..registry import estimator_modules

# Each estimator of this package and the wing that defines it.
_MODULES = estimator_modules()

__all__ = list(_MODULES)


def __getattr__(name):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted({*globals(), *__all__})
