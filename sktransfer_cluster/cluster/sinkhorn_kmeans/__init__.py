"""SinkhornKMeans: k-means as entropic optimal transport with cluster-size priors and an
optional autoencoder embedding (Genevay, Dulac-Arnold & Vert).

Read top to bottom: :mod:`.estimator` (the estimator), :mod:`.objective` (the minibatch OT
loss), :mod:`.networks` (the autoencoders); OT-Lloyd on the semi-dual, which the GAN's transfer
also uses, lies below the wings in :mod:`sktransfer_cluster.ot.lloyd`.
"""

from .estimator import PAPER_PARAMS, SinkhornKMeans

__all__ = ["SinkhornKMeans", "PAPER_PARAMS"]
