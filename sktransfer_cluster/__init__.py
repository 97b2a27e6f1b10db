"""sktransfer_cluster: scikit-learn-compatible transferable deep clustering on PyTorch."""

from .base import pipeline_transfer
from .cluster import C2MCluster, CCNCluster, PreciseFeatureGAN, SinkhornKMeans, TDCMCluster
from .metrics import clustering_accuracy, match_labels, n_dominant_clusters

__version__ = "0.1.0"

__all__ = [
    "C2MCluster",
    "CCNCluster",
    "PreciseFeatureGAN",
    "SinkhornKMeans",
    "TDCMCluster",
    "clustering_accuracy",
    "match_labels",
    "n_dominant_clusters",
    "pipeline_transfer",
    "__version__",
]
