"""Optimal transport on torch.

* :func:`sinkhorn` and :func:`sinkhorn_potentials` -- entropic OT shaped like POT's
  ``ot.sinkhorn`` (:mod:`.sinkhorn`; its differences from POT are tabulated in
  ``docs/ot.md``).
* :func:`semi_dual_newton` -- the semi-dual solver the estimators use (:mod:`.semi_dual`).
* :func:`plan_from_potentials` -- the plan of a pair of potentials (:mod:`.plan`).
* :mod:`.lloyd` -- OT-Lloyd, k-means whose assignment is an entropic plan under a cluster-size
  prior: SinkhornKMeans' kernels, and the GAN's re-estimation of its points on a transfer.
"""

from .plan import plan_from_potentials
from .semi_dual import semi_dual_newton
from .sinkhorn import SinkhornResult, sinkhorn, sinkhorn_potentials

__all__ = ["sinkhorn", "sinkhorn_potentials", "semi_dual_newton", "plan_from_potentials", "SinkhornResult"]
