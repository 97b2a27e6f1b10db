"""CCNCluster: a pairwise similarity learned on a labelled source drives a clustering
network on the target through the KCL/MCL loss (Hsu, Lv & Kira).

Read top to bottom: :mod:`.estimator`, :mod:`.pairs` (pair labels, batches, the networks
built for a task), :mod:`.losses` (KCL, MCL), :mod:`.networks` (the similarity network G).
"""

from .estimator import PAPER_PARAMS, CCNCluster

__all__ = ["CCNCluster", "PAPER_PARAMS"]
