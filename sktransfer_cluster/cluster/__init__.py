"""One module per estimator."""

from .sinkhorn_kmeans import SinkhornKMeans

__all__ = ["SinkhornKMeans"]
