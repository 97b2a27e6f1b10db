"""sktransfer_cluster: scikit-learn-compatible transferable deep clustering on PyTorch."""

from .cluster import CCNCluster, SinkhornKMeans, TDCMCluster
from .metrics import clustering_accuracy, n_dominant_clusters

__version__ = "0.1.0"

__all__ = [
    "CCNCluster",
    "SinkhornKMeans",
    "TDCMCluster",
    "clustering_accuracy", "n_dominant_clusters", "__version__"]
