"""Neighbour-graph representations shared by the estimators (issue 28)."""

from .encoder import encode, make_encoder, shrink_towards, steps_per_epoch, train_neighbour_encoder, umap_curve
from .transformer import NeighbourEmbedding
from .landmarks import (
    LANDMARK_ROWS,
    StreamedRows,
    encode_chunks,
    landmark_graph_inputs,
    landmark_graph_rows,
    landmark_indices,
    normalise_rows,
    read_landmarks,
    row_reader,
    unit_peak_rows,
    uses_landmarks,
)
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
    "LANDMARK_ROWS",
    "NeighbourEmbedding",
    "StreamedRows",
    "auto_metric",
    "encode",
    "encode_chunks",
    "fuzzy_graph",
    "keep_rows",
    "landmark_graph_inputs",
    "landmark_graph_rows",
    "landmark_indices",
    "knn",
    "make_encoder",
    "neighbour_graph",
    "normalise_rows",
    "prepare_rows",
    "read_landmarks",
    "row_reader",
    "shared_neighbour_weights",
    "shifted_images",
    "shrink_towards",
    "steps_per_epoch",
    "train_neighbour_encoder",
    "umap_curve",
    "union_graph",
    "unit_peak_rows",
    "uses_landmarks",
]
