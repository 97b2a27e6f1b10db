"""TDCMCluster: transferable deep clustering with centroid-updating attention blocks
(Zhang & Zhao).

Read top to bottom: :mod:`.estimator`, :mod:`.model` (encoder, objective, adaptation of
the centroids to a data set), :mod:`.blocks` (the attention block).
"""

from .estimator import PAPER_PARAMS, TDCMCluster

__all__ = ["TDCMCluster", "PAPER_PARAMS"]
