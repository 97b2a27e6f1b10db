"""Neighbour-graph representations shared by the estimators (issue 28)."""

from .encoder import encode, make_encoder, shrink_towards, steps_per_epoch, train_neighbour_encoder, umap_curve
from .transformer import NeighbourEmbedding
from .graph import (
    auto_metric,
    fuzzy_graph,
    keep_rows,
    knn,
    neighbour_graph,
    prepare_rows,
    shared_neighbour_weights,
    shifted_images,
    union_graph,
)

__all__ = [
    "NeighbourEmbedding",
    "auto_metric",
    "encode",
    "fuzzy_graph",
    "keep_rows",
    "knn",
    "make_encoder",
    "neighbour_graph",
    "prepare_rows",
    "shared_neighbour_weights",
    "shifted_images",
    "shrink_towards",
    "steps_per_epoch",
    "train_neighbour_encoder",
    "umap_curve",
    "union_graph",
]
