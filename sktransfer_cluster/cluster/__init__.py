"""One module per estimator, imported when an estimator is first used.

Importing the package does not import torch, so ``sktransfer-cluster --help``
starts at once; ``from sktransfer_cluster import SinkhornKMeans`` works as usual.
"""

import importlib

# Each estimator and the module of this package that defines it.
_MODULES = {
    "C2MCluster": "c2m",
    "CCNCluster": "ccn",
    "PreciseFeatureGAN": "precise_gan",
    "SinkhornKMeans": "sinkhorn_kmeans",
    "TDCMCluster": "tdcm",
}

__all__ = list(_MODULES)


def __getattr__(name):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_MODULES[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted({*globals(), *__all__})
