"""Shared machinery of every estimator: validation, device, seeding, chunked
prediction, the transfer protocol, the training loop's mechanics, progress
reporting and pickling of torch state.

Estimators subclass :class:`TransferClusterMixin` (before ``ClusterMixin`` and
``BaseEstimator``; the order is checked when the class is defined) and implement
its abstract hooks:

* ``_fit(X, y, *, rng, torch_gen, **fit_params)`` -- learn from the source; must
  set ``labels_`` and ``n_iter_``.
* ``_transfer(X, **kwargs)`` -- adapt to an unlabelled target; returns its labels.
* ``_predict(X_chunk)`` -- labels for a chunk, from the current model state only.
  An estimator whose labels are the argmax of an affine map of its (normalised)
  input also returns that map from ``_linear_predictor()``; ``predict`` then
  runs one matmul per chunk of raw rows (:func:`fold_affine`).
* ``score(X, y=None)`` -- higher is better, needs no labels.

and, where they need more than the shared checks, ``_check_params_vs_input``
(every data-dependent parameter check) and the class attributes ``_requires_y``
(fit needs labels; read by everything else through the estimator's tags) and
``_width_params`` (layer-width tuples to validate). Training loops run inside
:meth:`TransferClusterMixin._training`, whose :class:`TrainingRun` owns the
minibatches, the finiteness checks, ``history_`` and interrupts.
See ``docs/adding_an_estimator.md``.
"""

from .arrays import (
    CHUNK_BYTES,
    check_image_shape,
    check_resolution,
    check_widths,
    chunk_rows,
    chunked,
    compact_labels,
    fold_affine,
    input_affine,
    within_cluster_sum_of_squares,
)
from .compiled import CompiledStep, CompileRule, compile_step, compiler_unavailable
from .contract import COMMON_PARAMETER_CONSTRAINTS, TransferClusterMixin, WithinClusterScoreMixin
from .runtime import (
    COMPUTE_THREADS,
    compute_threads,
    exact_dtype,
    limit_threads,
    make_generators,
    move_torch,
    on_compute_threads,
    own_torch_rng,
    resolve_device,
    torch_threads,
    warn,
    working_dtype,
)
from .training import LineProgress, TrainingCallback, TrainingRun, minibatches

__all__ = [
    "TransferClusterMixin",
    "WithinClusterScoreMixin",
    "COMMON_PARAMETER_CONSTRAINTS",
    "TrainingRun",
    "TrainingCallback",
    "LineProgress",
    "minibatches",
    "resolve_device",
    "exact_dtype",
    "make_generators",
    "move_torch",
    "own_torch_rng",
    "torch_threads",
    "warn",
    "working_dtype",
    "limit_threads",
    "COMPUTE_THREADS",
    "compute_threads",
    "on_compute_threads",
    "CHUNK_BYTES",
    "chunk_rows",
    "chunked",
    "compact_labels",
    "check_widths",
    "check_image_shape",
    "input_affine",
    "check_resolution",
    "fold_affine",
    "within_cluster_sum_of_squares",
    "compile_step",
    "compiler_unavailable",
    "CompiledStep",
    "CompileRule",
]
