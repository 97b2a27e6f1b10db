"""PreciseFeatureGAN: a cluster-conditioned WGAN-GP whose classifier finds the feature
that matches the requested clusters (Gan et al.).

Read top to bottom: :mod:`.estimator`, :mod:`.networks` (G, D, C and one update of each),
:mod:`.streamed` (inputs too large to copy: landmarks, rows read by index).
"""

from .estimator import PAPER_PARAMS, PreciseFeatureGAN

__all__ = ["PreciseFeatureGAN", "PAPER_PARAMS"]
