"""One module per estimator."""

from .c2m import C2MCluster
from .ccn import CCNCluster
from .precise_gan import PreciseFeatureGAN
from .sinkhorn_kmeans import SinkhornKMeans
from .tdcm import TDCMCluster

__all__ = ["C2MCluster", "CCNCluster", "PreciseFeatureGAN", "SinkhornKMeans", "TDCMCluster"]
