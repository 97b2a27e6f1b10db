"""sktransfer_cluster: scikit-learn-compatible transferable deep clustering on PyTorch."""

from . import cluster
from .base import pipeline_transfer
from .cluster import *  # noqa: F403 -- every estimator, as listed in cluster.__all__
from .metrics import clustering_accuracy, match_labels, n_dominant_clusters

__version__ = "0.1.0"

# The estimators are exported where they are defined (sktransfer_cluster/cluster/__init__.py),
# so adding one touches its module and that export only.
__all__ = [
    *cluster.__all__,
    "clustering_accuracy",
    "match_labels",
    "n_dominant_clusters",
    "pipeline_transfer",
    "__version__",
]
