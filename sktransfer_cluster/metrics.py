"""Clustering metrics that are invariant to how cluster ids are numbered."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.utils.validation import check_consistent_length, column_or_1d

__all__ = ["clustering_accuracy", "match_labels", "n_dominant_clusters", "within_cluster_sum_of_squares"]  # noqa: F822 (lazy)


def _contingency(labels_true, labels_pred):
    _, t = np.unique(labels_true, return_inverse=True)
    _, p = np.unique(labels_pred, return_inverse=True)
    table = np.zeros((t.max() + 1, p.max() + 1), dtype=np.int64)
    np.add.at(table, (t, p), 1)
    return table


def clustering_accuracy(labels_true, labels_pred):
    """Accuracy under the best one-to-one matching of clusters to classes.

    The matching is found with the Hungarian algorithm on the contingency table.
    When the numbers of clusters and classes differ, the unmatched clusters (or
    classes) count as errors -- this is accuracy, not purity: merging every
    sample into one cluster scores ``max class share``, and splitting every
    sample into its own cluster scores ``n_classes / n_samples``.

    Parameters
    ----------
    labels_true : array-like of shape (n_samples,)
        Ground-truth class labels (any hashable, sortable values).
    labels_pred : array-like of shape (n_samples,)
        Cluster labels to evaluate.

    Returns
    -------
    accuracy : float
        In [0, 1]; 1.0 means the clustering equals the classes up to renaming.

    Examples
    --------
    >>> from sktransfer_cluster.metrics import clustering_accuracy
    >>> clustering_accuracy([0, 0, 1, 1, 2, 2], [1, 1, 0, 0, 2, 0])
    0.8333333333333334
    """
    labels_true = column_or_1d(labels_true)
    labels_pred = column_or_1d(labels_pred)
    check_consistent_length(labels_true, labels_pred)
    if labels_true.shape[0] == 0:
        raise ValueError("clustering_accuracy needs at least one sample.")
    table = _contingency(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / labels_true.shape[0])


def match_labels(labels_true, labels_pred):
    """Rename predicted clusters to the classes they best match (Hungarian).

    Useful to colour plots consistently or to read a confusion matrix.
    Clusters left unmatched (more clusters than classes) get fresh ids after
    the largest class id.

    Parameters
    ----------
    labels_true : array-like of shape (n_samples,)
        Integer class labels (integers stored as floats, such as ``1.0``, are
        taken): the renamed clusters take these ids.
    labels_pred : array-like of shape (n_samples,)

    Returns
    -------
    renamed : ndarray of shape (n_samples,)

    Raises
    ------
    ValueError
        If ``labels_true`` holds anything but integers that fit in int64 (``0.5``,
        text, ``1e30``, ``2**63``): ids cannot be made of them; if unmatched clusters
        get no fresh id after the largest class id within int64; or for no samples.
        :func:`clustering_accuracy` takes any labels.

    Examples
    --------
    >>> from sktransfer_cluster.metrics import match_labels
    >>> match_labels([0, 0, 1, 1], [1, 1, 0, 0]).tolist()
    [0, 0, 1, 1]
    """
    labels_true = column_or_1d(labels_true)
    labels_pred = column_or_1d(labels_pred)
    check_consistent_length(labels_true, labels_pred)
    if labels_true.shape[0] == 0:
        raise ValueError("match_labels needs at least one sample.")
    labels_true = _integer_labels(labels_true)
    classes = np.unique(labels_true)
    clusters, pred_idx = np.unique(labels_pred, return_inverse=True)
    table = _contingency(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(table, maximize=True)
    mapping = np.empty(clusters.shape[0], dtype=np.int64)
    mapping[cols] = classes[rows]
    unmatched = np.setdiff1d(np.arange(clusters.shape[0]), cols)
    if unmatched.shape[0]:
        first = int(classes.max()) + 1  # a Python int: no int64 wrap-around
        if first + unmatched.shape[0] - 1 > _INT64_MAX:
            raise ValueError(
                f"match_labels: {unmatched.shape[0]} unmatched cluster(s) need fresh ids after the largest class id "
                f"{first - 1}, which int64 cannot hold; encode the classes as integers first, e.g. with "
                "np.unique(y, return_inverse=True)."
            )
        mapping[unmatched] = first + np.arange(unmatched.shape[0])
    return mapping[pred_idx]


_INT64_MAX = int(np.iinfo(np.int64).max)


def _int64_overflow(bad):
    return ValueError(f"match_labels: labels_true must fit in int64, got {bad!r}; encode the classes "
                      "as integers first, e.g. with np.unique(y, return_inverse=True).")


def _integer_labels(labels_true):
    """``labels_true`` with every class label an integer (``1.0`` is one, also in an object array:
    those come back as int64); ``ValueError`` for ``0.5`` or text."""
    kind = labels_true.dtype.kind
    if kind == "u" and labels_true.size and int(labels_true.max()) > _INT64_MAX:
        raise _int64_overflow(int(labels_true.max()))
    if kind in "iub":
        return labels_true
    values = labels_true
    if kind == "O":
        if all(isinstance(v, Integral) for v in labels_true):
            try:  # exact, not through float64 (which merges integers past 2**53)
                return np.asarray(labels_true.tolist(), dtype=np.int64)
            except OverflowError:
                raise _int64_overflow(max(labels_true.tolist(), key=abs)) from None
        numeric = all(isinstance(v, Real) for v in labels_true)
        values = labels_true.astype(np.float64) if numeric else None
    if values is not None and values.dtype.kind == "f":
        whole = np.isfinite(values) & (values == np.round(values))
        if whole.all():
            # 2.0**63 is the first float past int64 (whose largest value rounds up to it).
            fits = (values >= -(2.0**63)) & (values < 2.0**63)
            if not fits.all():
                bad = labels_true[~fits][0]
                raise _int64_overflow(bad.item() if hasattr(bad, "item") else bad)
            return values.astype(np.int64) if kind == "O" else labels_true
        bad = labels_true[~whole][0]
    else:
        bad = next((v for v in labels_true if not isinstance(v, Real)), labels_true[0])
    bad = bad.item() if hasattr(bad, "item") else bad
    raise ValueError(
        f"match_labels: labels_true must be integers (the renamed clusters take their ids), got {bad!r} "
        f"(dtype {labels_true.dtype}); encode the classes as integers first, e.g. with np.unique(y, return_inverse=True)."
    )


def n_dominant_clusters(labels, n_clusters=None):
    """Number of dominant clusters, ``NDC = sum_k [|C_k| >= n / K]``.

    This is the estimate of the number of clusters used by Hsu et al. when the
    clustering network is given an upper bound ``K`` on the number of clusters.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Cluster labels.
    n_clusters : int, default=None
        The ``K`` of the threshold ``n / K`` (the number of outputs of the
        clustering model). Defaults to the number of distinct labels.

    Returns
    -------
    ndc : int

    Examples
    --------
    >>> from sktransfer_cluster.metrics import n_dominant_clusters
    >>> n_dominant_clusters([0] * 45 + [1] * 50 + [2] * 5, n_clusters=10)
    2
    """
    labels = column_or_1d(labels)
    if labels.shape[0] == 0:
        raise ValueError("n_dominant_clusters needs at least one sample.")
    _, counts = np.unique(labels, return_counts=True)
    k = counts.shape[0] if n_clusters is None else int(n_clusters)
    if k < 1:
        raise ValueError(f"n_clusters must be >= 1, got {n_clusters}.")
    return int(np.sum(counts >= labels.shape[0] / k))


def __getattr__(name):
    # within_cluster_sum_of_squares is computed with torch in base.arrays; importing the
    # metrics stays torch-free until it is first used.
    if name == "within_cluster_sum_of_squares":
        from .base.arrays import within_cluster_sum_of_squares

        return within_cluster_sum_of_squares
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
