"""C2MCluster: a critic over whole clusterings, learned on labelled source sets and
maximised on the target with the cross-entropy method (Alami, Kaddah & Read).

Read top to bottom: :mod:`.estimator`, :mod:`.graph` (candidates, CEM search, the critic's
training loss), :mod:`.critic` (clique-graph GAE and set critic), :mod:`.cem`.
"""

from .estimator import PAPER_PARAMS, C2MCluster

__all__ = ["C2MCluster", "PAPER_PARAMS"]
