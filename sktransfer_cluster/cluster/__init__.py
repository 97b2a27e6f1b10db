"""One module per estimator."""

from .ccn import CCNCluster
from .sinkhorn_kmeans import SinkhornKMeans
from .tdcm import TDCMCluster

__all__ = ["CCNCluster", "SinkhornKMeans", "TDCMCluster"]
