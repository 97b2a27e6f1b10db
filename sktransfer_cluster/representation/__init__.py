"""Neighbour-graph representations shared by the estimators (issue 28)."""

from .encoder import encode, make_encoder, steps_per_epoch, train_neighbour_encoder, umap_curve
from .transformer import NeighbourEmbedding
from .graph import fuzzy_graph, knn, neighbour_graph, prepare_rows, shared_neighbour_weights, shifted_images

__all__ = [
    "NeighbourEmbedding",
    "encode",
    "fuzzy_graph",
    "knn",
    "make_encoder",
    "neighbour_graph",
    "prepare_rows",
    "shared_neighbour_weights",
    "shifted_images",
    "steps_per_epoch",
    "train_neighbour_encoder",
    "umap_curve",
]
