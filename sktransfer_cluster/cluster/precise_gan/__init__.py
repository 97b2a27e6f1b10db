"""PreciseFeatureGAN: a cluster-conditioned WGAN-GP whose classifier finds the feature
that matches the requested clusters (Gan et al.).

Read top to bottom: :mod:`.estimator`, :mod:`.networks` (G, D, C and one update of each).
Inputs too large to copy are read through :mod:`sktransfer_cluster.representation.landmarks`.
"""

from .estimator import PAPER_PARAMS, PreciseFeatureGAN

__all__ = ["PreciseFeatureGAN", "PAPER_PARAMS"]
