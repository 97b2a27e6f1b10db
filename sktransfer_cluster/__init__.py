"""sktransfer_cluster: scikit-learn-compatible transferable deep clustering on PyTorch."""

import importlib

from .cluster import __all__ as _ESTIMATORS

__version__ = "0.1.0"

# Public names and the module that defines each, imported on first use (torch and
# scikit-learn load only when needed). The estimators are listed where they are
# defined (sktransfer_cluster/cluster/__init__.py), so adding one touches that
# module only.
_LAZY = {
    **dict.fromkeys(_ESTIMATORS, ".cluster"),
    "clustering_accuracy": ".metrics",
    "match_labels": ".metrics",
    "n_dominant_clusters": ".metrics",
    "within_cluster_sum_of_squares": ".metrics",
    "pipeline_transfer": ".pipeline",
    "TransferPipeline": ".pipeline",
    "make_transfer_pipeline": ".pipeline",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})
