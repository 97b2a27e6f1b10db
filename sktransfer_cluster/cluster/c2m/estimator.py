"""C2MCluster: transferable deep metric learning for clustering.

Alami, Kaddah & Read, *Transferable Deep Metric Learning for Clustering*
(IDA 2023). ``fit`` learns a metric ``r(X, y)`` of whole labelled sets -- a
graph autoencoder over the clique graph of the clusters, pooled and scored by a
critic -- from labelled source sets as a WGAN critic against the labellings the
cross-entropy method proposes (the paper's Algorithm 2). Clustering any set,
the source in ``fit`` or an unseen target in ``transfer``, is maximising ``r``
over the weights of a small MLP with the cross-entropy method
(:mod:`sktransfer_cluster.cluster.c2m.cem`); the number of clusters is not given.
By default (``representation="auto"``) a source that is one data set (no ``groups``) of
intensities or counts (images) is read through the shared neighbour-graph encoder, refined on
each target, and the ``"auto"`` companions then train and search as measured on images; grouped
sets and tables are read as they are, as before.
With ``tree_features`` and ``tree_candidates`` the metric reads how a labelling cuts the set's
minimum spanning tree and the search scores single-linkage clusterings: a metric learned on
blobs then finds two moons and two rings (opt-in; it merges touching blobs). For a source given as ``groups``
(the paper's protocol) a second metric with those tree features is learned beside the main one
and vetoes it where the main labelling joins across a gap that its own labelling cuts
(``gap_critic``): two rings and two moons are then found without losing blobs. With
``size_features`` the metric also reads each cluster's size relative to an equal share, which
a per-cluster mean cannot see: on classes that touch, a merge shows by the sizes it leaves.

Past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows (``np.memmap`` or any array
too large to copy) ``fit`` and ``transfer`` never hold a float copy of ``X``: the encoder's graph
is built on that many landmark rows read by index and every row is encoded chunk by chunk (only
the codes are held); each critic step reads its set (at most ``set_size`` rows) by index; the
clustering's statistics come from one streamed pass, CEM reads its ``max_cem_samples`` rows by
index and every row is labelled chunk by chunk. A dask array is read the same way, its chunks left
on the workers: the moments, the encoder's codes and the labels are computed there, one task per
chunk, and only landmarks, sets and the CEM subsample come to the client by index (equal to the
memmap's fit where the chunks start at multiples of the piece size). Below that count every step is
as before, to the bit. What still needs a whole set in memory: ``max_cem_samples=None`` (CEM on every row, as asked)
and ``score``, which rates ``X`` as one set (the critic pools over all its points).

The encoder and critic are in :mod:`sktransfer_cluster.cluster.c2m.critic`; the clustering MLP,
its spectral inputs, the corrupted labellings and the critic's loss in
:mod:`sktransfer_cluster.cluster.c2m.graph`. Measurements, the variants tried and dropped
and the reasons behind the defaults: ``docs/notes/c2m.md``.
"""

from __future__ import annotations

import functools
import math
import weakref
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_consistent_length, column_or_1d

from ...base import COMMON_PARAMETER_CONSTRAINTS, TransferClusterMixin, check_widths, chunk_rows, compact_labels
from ...base.runtime import compute_threads
from ...base.streaming import DaskRows, RowReader, _subchunks, iter_row_chunks
from .graph import (
    cem_clustering,
    centroid_mlp_weights,
    certified_labels,
    corrupt_labels,
    gap_veto,
    kmeans_candidates,
    mlp_inputs,
    mlp_labels,
    mlp_labels_population,
    population_logits,
    predict_screen,
    screen_labels,
    smooth_labels,
    source_sets,
    spanning_tree,
    spectral_embedding,
    spectral_reference,
    standardize,
    times_power_of_two,
    wgan_critic_loss,
)
from ...metrics import clustering_accuracy
from ...nn import init_module, knn_indices
from .critic import ClusteringCritic

__all__ = ["C2MCluster", "PAPER_PARAMS"]

# A k-means candidate at least this accurate against the (smoothed) truth is the truth, not a fake.
_SAME_AS_TRUTH = 0.99
# augment=True: the largest standard deviation of the noise added to a standardised training set.
_AUGMENT_NOISE = 0.5
# What the "auto" companions resolve to, on the rows as they are (the paper's grouped sets) and on
# the encoder's codes of a one-data-set source (docs/notes/c2m.md, sixth session): critic steps per
# epoch, and the largest set CEM clusters directly.
_SETS_PER_EPOCH = {"rows": 10, "codes": 30}
_CODES_CEM_SAMPLES = 5000
# predict: the rows of each chunk screened first (graph.screen_labels), and the share of them the
# screen must prove for the rest of the chunk to be screened too (below it, the float64 path).
_SCREEN_PROBE = 256
_SCREEN_MIN_PROVED = 0.5
# predict: after a probe that proves too few rows, the chunks that go to the float64 path unprobed.
_SCREEN_SKIP = 7
# predict's screens, per estimator and predict state, with whether the screen proved most rows of the
# last chunk (kept off the estimator: not pickled or copied).
_SCREENS = weakref.WeakKeyDictionary()
# gap_critic: the second metric's settings over the estimator's own (the third session's tree critic).
_GAP_CRITIC = {"tree_features": True, "tree_candidates": True, "candidate_fakes": True}
# gap_critic: the largest set the veto's spanning tree is built on (one dense n x n distance matrix).
_GAP_ROWS = 4096
# The fitted state that predict reads, taken from the gap critic's search when the veto picks it.
_PREDICT_STATE = ("_mlp_ref", "_cem_w", "_input_mean", "input_scale_", "cluster_outputs_", "_outputs",
                  "cem_weights_", "cem_score_", "input_mean_", "n_clusters_", "labels_")
# The parameters that shape the clustering MLP (hidden width, outputs), recorded with it (_mlp_dims).
_MLP_PARAMS = ("cem_hidden", "max_clusters")



def _streams(n_samples):
    """Whether a set of ``n_samples`` rows is read by index and in chunks rather than copied: past
    :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows, as the other wings' fits."""
    from ...representation import uses_landmarks

    return uses_landmarks(n_samples)


def _centred(rows):
    """Centre a float64 piece of rows in place on its column means; ``(means, largest |deviation|)``."""
    piece_mean = rows.mean(0)
    rows -= piece_mean
    return piece_mean, float(np.abs(rows).max(initial=0.0))


def _merge_moments(pieces, d):
    """Chan et al.'s pairwise merge of per-piece moments, in row order: ``(n, mean, ss, peak)``.

    ``pieces`` yields ``(m, piece_mean, deviation, squares)``: a piece's row count, its column
    means, its largest deviation from them, and ``squares(p)``, the column sums of
    ``((x - piece_mean) / p) ** 2`` over its rows for the running peak ``p``. The sums of
    squares are carried divided by the square of the largest deviation met so far, so squares
    neither over- nor underflow. The means and peaks do not depend on ``squares``.
    """
    n, mean, ss, peak = 0, np.zeros(d), np.zeros(d), 0.0
    for m, piece_mean, deviation, squares in pieces:
        delta = piece_mean - mean
        new_peak = max(peak, deviation, float(np.abs(delta).max(initial=0.0)))
        if new_peak > 0:
            ss = ss * (peak / new_peak) ** 2 + squares(new_peak) + (delta / new_peak) ** 2 * (n * m / (n + m))
            peak = new_peak
        mean = mean + delta * (m / (n + m))
        n += m
    return n, mean, ss, peak


def _scaled_squares(rows, p):
    return ((rows / p) ** 2).sum(0)


def _pieces_of(start, block, step):
    """``(lo, float64 copy of rows lo:hi)`` of one dask chunk (rows ``start:``), cut at the multiples
    of ``step`` as :func:`~sktransfer_cluster.base.streaming.iter_row_chunks` cuts an array."""
    rows = np.asarray(block)
    for _, lo, hi in _subchunks(start, start + rows.shape[0], step):
        yield lo, np.array(rows[lo - start : hi - start], dtype=np.float64, copy=True)


def _block_moments(start, block, step):
    """Pass 1 of :func:`_streamed_standardize` on one dask chunk, on its worker:
    ``(lo, m, piece_mean, deviation)`` per piece."""
    return [(lo, rows.shape[0], *_centred(rows)) for lo, rows in _pieces_of(start, block, step)]


def _block_squares(start, block, step, means, peaks):
    """Pass 2 of :func:`_streamed_standardize` on one dask chunk, on its worker: ``(lo, squares)``
    per piece that the merge scales (``peaks[lo]``), about the piece's mean from pass 1."""
    out = []
    for lo, rows in _pieces_of(start, block, step):
        if lo in peaks:
            rows -= means[lo]
            out.append((lo, _scaled_squares(rows, peaks[lo])))
    return out


def _block_extremes(start, block, step):
    """:func:`_streamed_shift_and_peak` of one dask chunk, on its worker: the float64 sums of its
    pieces in order, with its column minima and maxima (None for an empty chunk)."""
    sums, low, high = [], None, None
    for _, rows in _pieces_of(start, block, step):
        sums.append(rows.sum(0))
        low = rows.min(0) if low is None else np.minimum(low, rows.min(0))
        high = rows.max(0) if high is None else np.maximum(high, rows.max(0))
    return sums, low, high


def _encoder_input(X, shift, exponent):
    """``X`` less ``shift`` (when not None) times ``2 ** -exponent``, in ``X``'s dtype (:meth:`C2MCluster._encoder_rows`)."""
    if shift is not None:
        X = X - shift.astype(X.dtype, copy=False)
    return X if exponent == 0 else times_power_of_two(X, -exponent)


def _encode_rows(representation, rows, shift, exponent):
    """:meth:`C2MCluster._encode` of ``rows`` with the fitted ``representation``."""
    return np.asarray(representation.transform(_encoder_input(rows, shift, exponent)), dtype=rows.dtype)


def _block_codes(start, block, step, dtype, representation, shift, exponent):
    """:meth:`C2MCluster._encode_all` of one dask chunk, on its worker: the codes of its pieces
    (cut as :func:`~sktransfer_cluster.base.streaming.iter_row_chunks` cuts), None if empty."""
    with compute_threads():
        codes = [_encode_rows(representation, rows.astype(dtype, copy=False), shift, exponent)
                 for _, rows in _pieces_of(start, block, step)]
    return np.concatenate(codes) if codes else None


def _as_given(X):
    """``X`` as an estimator takes it: a :class:`~sktransfer_cluster.base.streaming.DaskRows`'s dask array."""
    return X.array if isinstance(X, DaskRows) else X


def _streamed_standardize(X, enabled=True):
    """``(mean, scale)`` of :func:`~.graph.standardize` over the rows of ``X`` in one streamed pass.

    Per chunk (float64 copies, a memmap's pages handed back): its mean and the sums of squares
    about it, merged by Chan et al.'s pairwise update (:func:`_merge_moments`). The scale is
    the mean over features of the unbiased standard deviations, as ``standardize``'s; equal to
    it up to rounding (another summation order). A constant set keeps scale 1.

    A dask array's rows (:class:`~sktransfer_cluster.base.streaming.DaskRows`) are read on
    their workers in two passes, one task per chunk each, only per-piece sums coming back:
    each piece's mean and largest deviation, from which the client runs the merge's means and
    peaks; then each piece's sums of squares scaled by the peak the merge reached there. The
    pieces are the same rows at the same offsets, merged in the same order by the same code,
    so where the chunks start at multiples of the piece size the result is the memmap's to
    the bit.

    Returns
    -------
    mean : ndarray of float64, shape (n_features,)
    scale : float
    """
    d = X.shape[1]
    if not enabled:
        return np.zeros(d), 1.0
    if isinstance(X, DaskRows):
        step = chunk_rows(d)
        pieces = [piece for part in X.map_blocks(_block_moments, step) for piece in part]
        peaks = {}

        def record(lo):
            return lambda p: peaks.__setitem__(lo, p) or 0.0

        _merge_moments(((m, mu, dev, record(lo)) for lo, m, mu, dev in pieces), d)
        means = {lo: mu for lo, _, mu, _ in pieces if lo in peaks}
        squares = dict(piece for part in X.map_blocks(_block_squares, step, means, peaks) for piece in part)
        n, mean, ss, peak = _merge_moments(((m, mu, dev, lambda p, lo=lo: squares[lo]) for lo, m, mu, dev in pieces), d)
    else:
        n, mean, ss, peak = _merge_moments(
            ((stop - start, *_centred(rows), functools.partial(_scaled_squares, rows))
             for start, stop, rows in iter_row_chunks(X)), d)
    scale = float((peak * np.sqrt(ss / max(n - 1, 1))).mean())
    if not math.isfinite(scale) or scale <= 0:
        return mean, 1.0
    return mean, scale


def _streamed_shift_and_peak(X, centre):
    """``(shift, peak)`` in one streamed pass: the column means of ``X`` (``centre``, else None)
    and the largest magnitude of ``X - shift``.

    The shift is the float64 sum of the chunks' sums over n; the peak is read from each column's
    extremes, ``max(max_j - shift_j, shift_j - min_j)``: rounding is monotonic, so it is the
    largest rounded ``|x - shift|`` exactly. A dask array's rows (``DaskRows``) are summed on
    their workers, one task per chunk returning its pieces' sums and its extremes, added on
    the client in the same order (the memmap's bits where chunks start at multiples of the
    piece size).
    """
    d = X.shape[1]
    total, low, high = np.zeros(d), np.full(d, np.inf), np.full(d, -np.inf)
    if isinstance(X, DaskRows):
        for sums, chunk_low, chunk_high in X.map_blocks(_block_extremes, chunk_rows(d)):
            for piece_sum in sums:
                total += piece_sum
            if chunk_low is not None:
                low, high = np.minimum(low, chunk_low), np.maximum(high, chunk_high)
    else:
        for _, _, rows in iter_row_chunks(X):
            total += rows.sum(0)
            low, high = np.minimum(low, rows.min(0)), np.maximum(high, rows.max(0))
    shift = total / X.shape[0] if centre else None
    at = np.zeros(d) if shift is None else shift
    return shift, float(np.maximum(high - at, at - low).max(initial=0.0))


#: The paper's configuration (Alami, Kaddah & Read, Sec. 4: critic 256-256-512-512,
#: RMSprop lr 0.01 decay 0.95, WGAN weight clipping, GAE 32-16, CEM MLP hidden 16,
#: 10 epochs over 20 training sets of 200 points, the raw truth against CEM proposals
#: only): ``C2MCluster(max_clusters, **PAPER_PARAMS)``; the paper uses
#: ``max_clusters=50`` and ``gae_dims=(100, 50)`` on images. Its CEM population,
#: elite fraction and iteration count are not given; ours are kept.
PAPER_PARAMS = {
    "critic_dims": (256, 256, 512, 512),
    "gae_dims": (32, 16),
    "cem_hidden": 16,
    "learning_rate": 0.01,
    "rmsprop_decay": 0.95,
    "lipschitz": "clip",
    "max_epochs": 10,
    "sets_per_epoch": 20,
    "set_size": 200,
    "gae_skip": False,
    "margin_features": False,
    "n_neighbors": None,
    "spectral_features": None,
    "n_negatives": 0,
    "kmeans_candidates": False,
    "candidate_fakes": False,
    "augment": False,
    "spectral_candidates": False,
    "tree_candidates": False,
    "critic_spectral": None,
    "critic_coordinates": True,
    "tree_features": False,
    "size_features": False,
    "smooth_truth": False,
    "representation": None,
    "gap_critic": False,
}


class C2MCluster(TransferClusterMixin, ClusterMixin, BaseEstimator):
    """Clustering by maximising a learned, transferable metric of whole labelled sets.

    The metric is ``r(X, y) = c(pool(GAE(G(X, y))))``:

    * ``G(X, y)``: the graph on the points of ``X`` whose cliques are the
      clusters of ``y``. With Kipf & Welling's normalised adjacency, graph
      convolution on a clique graph is a per-cluster mean, computed with
      segment sums in O(n d) -- no n x n matrix is ever formed.
    * ``GAE``: a two-layer graph convolutional encoder (``gae_dims``).
    * ``pool``: the upper triangle of ``Z^T Z / n`` with the rows of ``Z``
      scaled to unit norm, a vector whose size and scale do not depend on n.
    * ``c``: a critic MLP (``critic_dims``, LeakyReLU 0.2).

    It is batched over labellings: a CEM population is scored in one pass.

    ``fit(X, y, groups=None)`` learns ``r`` from labelled source sets (the rows
    of each ``groups`` value form one set; without ``groups`` all of ``X`` is one
    set). Each epoch draws ``sets_per_epoch`` sub-sets of ``set_size`` points;
    for each, the cross-entropy method (CEM) clusters it by maximising the
    current ``r`` and the critic takes one WGAN step with the true labelling as
    real and the CEM labelling (plus ``n_negatives`` corrupted copies of the
    truth) as fake. ``labels_`` is then the clustering of ``X`` by the learned
    metric.

    ``transfer(X)`` clusters an unlabelled target: CEM over the weights of an
    MLP ``d -> cem_hidden (ReLU) -> max_clusters`` maximises ``r(X, argmax MLP(X))``.
    The number of clusters is not given: it is the number of outputs the best
    MLP uses (``n_clusters_``).

    Read more in ``docs/notes/c2m.md`` and ``benchmarks/results/c2m/c2m_quality.md``.

    Parameters
    ----------
    max_clusters : int, default=10
        Outputs of the clustering MLP: an upper bound on the number of clusters,
        which is not given.
    cem_hidden : int, default=16
        Hidden width of the clustering MLP (the paper's 16).
    population : int, default=16
        CEM samples per iteration (in training and in clustering). Small:
        the k-means candidates (``kmeans_candidates``) carry most of the
        search, and every training set runs one CEM.
    elite_frac : float, default=0.1
        Fraction of the population the CEM distribution is refitted to.
    cem_iter : int, default=5
        CEM iterations per clustering.
    cem_init_std : float, default=1.0
        Initial standard deviation of the CEM weight distribution (mean 0).
    cem_min_std : float, default=0.0
        Floor on the CEM standard deviations, which keeps CEM exploring.
    n_init : int, default=1
        Independent CEM runs per clustering (``labels_``, ``transfer``); the
        one with the highest metric is kept.
    kmeans_candidates : bool, default=True
        Score, beside the CEM runs, k-means labellings of the set for every
        k = 1 .. ``max_clusters``, each written as clustering-MLP weights
        (:func:`~sktransfer_cluster.cluster.c2m.graph.kmeans_candidates`), and keep the
        best-scored of all -- in training (the proposals the critic learns
        against) and in clustering. ``False``: CEM alone (the paper).
    candidate_fakes : bool or "auto", default="auto"
        In training, every k-means candidate of a training set (with
        ``kmeans_candidates``) that differs from the true labelling (clustering
        accuracy below 0.99) joins the fakes of its critic step, so the critic
        learns to rank the truth above every number of clusters, not only above
        the labelling the search currently returns. ``False``: the search's
        pick and the ``n_negatives`` corruptions only. ``"auto"``: on when the
        metric reads the neighbour encoder's codes (``representation_`` set
        by ``fit``), off on the rows: it lowers two moons in the paper's
        synthetic table (0.823 -> 0.742, ``docs/notes/c2m.md``, fifth session,
        D6).
    augment : bool, default=False
        Vary each training set: keep a random 2..C of its C classes, rotate
        it at random and add Gaussian noise of a random strength (standard
        deviation up to 0.5 of the standardised set's), so the critic learns how good clusterings are
        arranged rather than where one source's clusters lie (a source that is
        one data set otherwise shows the same classes at the same places in
        every step).
    spectral_candidates : bool, default=False
        With ``kmeans_candidates`` and ``spectral_features``, also score the
        k-means labellings (k = 2 .. ``max_clusters``) of the clustering MLP's
        spectral inputs, written as MLP weights: spectral clusterings of the
        set, which follow its k-NN graph (moons, rings). The training
        proposals then read the spectral inputs too (CEM and candidates), so
        the critic learns against such labellings.
    tree_candidates : bool, default=False
        Feed the clustering MLP, beside its other inputs, which side of each of
        the ``max_clusters - 1`` longest cuts of the set's minimum spanning tree
        every point lies on (:func:`~sktransfer_cluster.cluster.c2m.graph.tree_cut_embedding`;
        cuts that would leave fewer than ``n // 20`` points on a side are
        skipped), and, with ``kmeans_candidates``, score the labellings its
        first k - 1 cuts leave (k = 2 .. ``max_clusters``): single-linkage
        clusterings, which follow gaps whatever the clusters' shapes (rings,
        moons). In training too, so the critic learns against them.
    gae_dims : tuple of int, default=(32, 16)
        Widths of the graph encoder (the paper's for 2-D sets).
    critic_dims : tuple of int, default=(128, 128)
        Hidden widths of the critic (the paper's: (256, 256, 512, 512)).
    gae_skip : bool, default=True
        Add a per-node linear term to each graph convolution, so the encoder
        sees how points spread inside their cluster. ``False`` is the plain GCN
        of the paper, in which every point of a cluster gets the same embedding.
    margin_features : bool, default=False
        Give the encoder each point's distance to its own cluster mean and to
        the nearest other cluster mean (O(n k d)). Off by default: distances to
        means tie the metric to k-means-like cuts; ``n_neighbors`` tells a cut
        blob from a blob without that bias. ``False`` is the paper's input.
    n_neighbors : int or None, default=20
        Give the encoder, for each point, how its label agrees with those of its
        ``n_neighbors`` nearest neighbours in the set
        (:func:`~sktransfer_cluster.cluster.c2m.critic.neighbour_label_features`; the k-NN
        graph is computed once per set); it makes the metric far less bound to
        blob shapes. ``None``: off, the paper's encoder input.
    spectral_features : int or None, default=2
        Feed the clustering MLP (not the metric), beside the coordinates, this
        many leading eigenvectors of the ``spectral_neighbors``-NN graph of the
        set CEM clusters (:func:`~sktransfer_cluster.cluster.c2m.graph.mlp_inputs`), so an
        MLP argmax can express non-convex cuts (rings, moons). For ``labels_``
        and ``transfer`` only, not the proposals that train the critic.
        ``None``: coordinates only (the paper).
    spectral_neighbors : int, default=10
        Neighbours of the graph behind ``spectral_features`` (unused without it).
    critic_spectral : int or None, default=None
        Give the metric's encoder, beside the coordinates, this many leading
        eigenvectors of the ``spectral_neighbors``-NN graph of the set it
        scores (:func:`~sktransfer_cluster.cluster.c2m.graph.spectral_embedding`),
        computed once per set. ``None``: off.
    critic_coordinates : bool, default=True
        Give the metric's encoder the coordinates of the points. ``False``:
        only the features that depend on the set's k-NN graph
        (``n_neighbors``, ``critic_spectral``), so the metric cannot tie a good
        clustering to where and how spread the points lie.
    tree_features : bool, default=False
        Give the metric's encoder how the labelling cuts the set's minimum
        spanning tree (:func:`~sktransfer_cluster.cluster.c2m.critic.tree_label_features`:
        the longest tree edge inside each cluster and the shortest leaving it,
        relative to the median edge; the tree is computed once per set): a
        scale-free account of gaps, so a metric learned on blobs can rank two
        rings or two moons above one cluster and above a cut through a dense
        part, whatever the clusters' shapes.
    size_features : bool or "auto", default="auto"
        Give the metric's encoder the size of each point's cluster relative
        to an equal share, ``log(k |C| / n)``
        (:func:`~sktransfer_cluster.cluster.c2m.critic.cluster_size_features`).
        The clique-graph propagation is a per-cluster mean, so without it the
        metric cannot see cluster sizes: a metric learned on classes of
        similar sizes can then not tell a labelling that merges two of them
        by the sizes it leaves (``docs/notes/c2m.md``, fifth session).
        ``"auto"``: on the codes, as ``candidate_fakes``.
    smooth_truth : bool, default=True
        The real labelling of each critic step is the true one with every
        point relabelled by the majority of itself and its ``n_neighbors``
        (10 when None) nearest neighbours
        (:func:`~sktransfer_cluster.cluster.c2m.graph.smooth_labels`). On real data the
        true classes overlap, so the truth disagrees with its k-NN graph in a
        way no partition found by a search does; against the raw truth the
        critic learns to spot that signature instead of a good clustering,
        and on unseen classes prefers coarse, clean partitions. ``False``: the
        raw truth (the paper).
    n_negatives : int, default=4
        Corrupted copies of each true labelling (split, merge, noisy and tiny
        clusters) added to the fake side of each critic step, so the critic
        sees near misses. 0 is the paper's Algorithm 2 (CEM proposals only).
    lipschitz : {"gp", "clip"}, default="gp"
        How the critic is kept 1-Lipschitz: a gradient penalty on embeddings
        interpolated between real and fake (Gulrajani et al.), or weight
        clipping to ``[-clip_value, clip_value]`` (Arjovsky et al., the
        paper's reference [1]; clips the critic MLP only).
    gp_weight : float, default=10.0
        Weight of the gradient penalty (``lipschitz="gp"``).
    clip_value : float, default=0.01
        Bound of the weight clipping (``lipschitz="clip"``).
    learning_rate : float, default=1e-3
        RMSprop learning rate. The paper's 0.01 with weight clipping left the
        critic nearly constant in our runs.
    rmsprop_decay : float, default=0.95
        RMSprop smoothing constant (torch's ``alpha``, TensorFlow's ``decay``):
        the paper's "decay rate of 0.95".
    max_epochs : int, default=20
        Critic training epochs.
    sets_per_epoch : int or "auto", default="auto"
        Sub-sets drawn per epoch; each costs one CEM clustering and one critic
        step. ``"auto"``: 10 on the rows; 30 on the codes, where the critic
        learns from one source's classes seen through many random sub-sets:
        at 200 steps it rated one cluster above the truth of digits 5-9 (seed
        2 found 9 clusters), at 600 it ranked the truth above one cluster and
        every other k-means cut (``docs/notes/c2m.md``, D6). The epoch count
        (``max_epochs``) stays the budget ``compare`` scales.
    set_size : int, default=200
        Points per training sub-set (the paper's 200); a smaller group is used
        whole.
    standardize : bool, default=True
        Centre each set and divide it by its mean per-feature standard
        deviation before the metric and the clustering MLP see it, so the
        metric does not depend on the set's location and scale.
    representation : {"auto", "neighbours"} or None, default="auto"
        What the metric and the search read. ``"neighbours"``: ``fit`` trains
        a neighbour-graph encoder
        (:class:`~sktransfer_cluster.representation.NeighbourEmbedding`, 10
        components, at its defaults) on the source and learns the metric on the
        source's codes; ``transfer`` refines a copy of that encoder on the
        target's own k-NN graph and clusters the target's codes; ``predict``
        and ``score`` encode their rows with the current encoder. ``None``:
        the rows themselves (the paper). ``"auto"``: ``"neighbours"`` when the
        source is one data set (``fit`` without ``groups``) whose rows look like
        intensities or counts (no negative value, some zeros: images, spectra,
        histograms; :func:`~sktransfer_cluster.representation.auto_metric`'s
        cosine case, CCN's ``image_data`` rule, read from the values, never from
        the number of columns); ``None`` when ``groups`` splits the source into
        separate small sets, whose coordinates are not one space (the paper's
        synthetic protocol), and for rows at an arbitrary origin (tables,
        coordinates), where the codes lost (tdcm-shift, K = 5, seeds 0-2:
        ACC 0.601 on the rows, 0.526 on the codes; ``docs/notes/c2m.md``,
        sixth session). With ``"neighbours"`` such rows get a Euclidean graph
        on the centred rows, so shifting them changes nothing. On the codes
        the ``"auto"`` companions (``candidate_fakes``, ``size_features``,
        ``sets_per_epoch``, ``max_cem_samples``) take the route measured on
        images: MNIST 0-4 -> 5-9 (K unknown, ``max_clusters=20``) K 6, 6, 5
        and ACC 0.862 [0.846, 0.956] over seeds 0-2, where the pixels gave K
        20, 16, 4; digits 0-4 -> 5-9 K 6, 6, 4, 0.876 [0.757, 0.881];
        mfeat-pix 0-4 -> 5-9 K 5, 5, 5, 0.982.
    image_shape : tuple of int or None, default=None
        ``(h, w)`` or ``(c, h, w)`` of each row, passed to the neighbour
        encoder (its k-NN graph then ignores small translations and blurs);
        never inferred from the number of columns.
    max_cem_samples : int, "auto" or None, default="auto"
        Largest set CEM clusters directly; a larger ``X`` is clustered through
        a random subsample of this size and every row is then assigned by the
        best MLP, which bounds the cost. ``"auto"``: on the rows ``set_size``,
        so the metric scores sets of the size it was trained on (its k-NN
        features depend on the density of the set); on the codes 5,000 (or
        ``set_size`` if larger): with hundreds of rows a class, cutting where
        two unseen classes touch costs the neighbour features less than in a
        200-row set (MNIST seed 0: K 4, 0.774 on 200 rows; 6, 0.846 on the
        whole target), and 5,000 rows keep one CEM iteration to seconds.
        ``None``: no limit.
    gap_critic : bool or "auto", default="auto"
        Also learn a second metric that reads how a labelling cuts the set's minimum spanning
        tree (``tree_features``, ``tree_candidates`` and ``candidate_fakes`` on, the rest as
        this estimator's; attribute ``gap_model_``) and let it veto: every set is clustered by
        both, and the gap metric's labelling replaces the main one when it cuts the longest
        tree edge the main labelling keeps inside a cluster and that edge is a gap (at least
        ``e`` times the median tree edge; edges that would cut off fewer than ``n // 20``
        points are none; :func:`~sktransfer_cluster.cluster.c2m.graph.gap_veto`,
        on at most ``max_cem_samples`` rows). Each metric is kept where it is right: the main
        one on blobs that touch (which the gap metric merges), the gap metric where the main
        one joins what a gap separates (one cluster over two rings). About twice the fit time.
        ``score`` stays the main metric's; ``set_params(gap_critic=False)`` after a fit
        transfers without the veto. ``"auto"``: on for a source given as ``groups``
        (many small sets, the paper's protocol) read as rows, where it was measured: the
        paper's Table 2 (critic learned on blob sets only, K not given, seeds 0-2, 50 sets a
        kind) moons 0.744 -> 0.951 and circles 0.526 -> 0.921 (median ACC), blobs 0.831 ->
        0.837 and anisotropic blobs 0.644 -> 0.665, no seed lower on any kind
        (``docs/notes/c2m.md``, seventh session); off for one data set (images, tables),
        whose paths are unchanged to the bit.
    keep_best : bool, default=False
        On a ``KeyboardInterrupt`` during training, keep the critic of the last
        finished epoch (adversarial losses do not rank critics) and complete
        ``fit`` with a warning; False: the estimator is left as before the call.
    callbacks : list of objects, default=None
        Observers of training (:class:`~sktransfer_cluster.base.TrainingCallback`):
        each method they define (``on_phase_begin``, ``on_epoch_end``,
        ``on_record``, ``on_phase_end``) is called during every training
        phase. They change no result.
    device : str or torch.device, default="auto"
        Where the critic, the search and ``predict`` run, and where the neighbour
        encoder (``representation_``) computes its codes; the encoder trains on the
        CPU whatever the device (its steps are small and launch-bound).
    random_state : int, RandomState instance or None, default=None
        Seeds local generators only; equal values give identical results on CPU.
    verbose : int, default=0

    Attributes
    ----------
    critic_ : ClusteringCritic
        The learned metric (graph encoder + critic).
    representation_ : NeighbourEmbedding or None
        The neighbour encoder the metric reads (``representation``): the
        source's after ``fit``, refined on the target after ``transfer``;
        None when the rows are read as they are.
    labels_ : ndarray of shape (n_samples,)
        Labels of the last set clustered by ``fit`` or ``transfer``,
        consecutive from 0 in increasing order of the MLP output behind them.
    n_clusters_ : int
        Number of clusters found in that set.
    cluster_outputs_ : ndarray of shape (n_clusters_,)
        MLP output behind each label, increasing (label ``j`` is output
        ``cluster_outputs_[j]``).
    cem_weights_ : ndarray of shape (n_params,)
        Flat weights of the best clustering MLP found (see ``predict``).
    cem_score_ : float
        Metric value of the clustering CEM found (on the CEM sample); the gap metric's value
        when its labelling was taken (``gap_critic``).
    gap_model_ : C2MCluster or None
        The gap metric's estimator (``gap_critic``), fitted on the same source; None without it.
    gap_vetoed_ : bool
        Whether the last clustering (``fit``'s or ``transfer``'s) is the gap metric's.
    input_mean_ : ndarray of shape (n_features,) or (n_components,)
    input_scale_ : float
        Standardisation of the clustered set, reused by ``predict``.
    history_ : list of dict
        One record per critic training epoch: ``phase`` ("critic training"),
        ``epoch``, ``loss`` (mean WGAN critic loss, penalty included),
        ``real_score``/``fake_score`` (mean critic values) and
        ``proposal_accuracy`` (mean clustering accuracy of the CEM proposals
        against the true labels of the training sets).
    n_iter_ : int
        Finished critic epochs of the last ``fit``; CEM iterations of the last
        ``transfer``.
    device_ : torch.device
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Notes
    -----
    The paper's own configuration is ``C2MCluster(max_clusters, **PAPER_PARAMS)``
    (:data:`PAPER_PARAMS`); our defaults add the changes measured in
    ``benchmarks/c2m_quality.py`` (``docs/notes/c2m.md``).

    ``predict`` is the stored clustering MLP: a row goes to the most
    activated of the outputs used on the clustered set (outputs that won no
    point there are ignored), so ``predict`` on that set equals ``labels_``
    and never depends on the other rows.

    Examples
    --------
    Learn the metric on labelled blob sets, cluster a new set without giving K:

    >>> from sktransfer_cluster.cluster.c2m import C2MCluster
    >>> from sktransfer_cluster.datasets import make_c2m_sets
    >>> X, y, groups = make_c2m_sets("blobs", n_sets=4, random_state=0)
    >>> c2m = C2MCluster(critic_dims=(32, 32), population=32, cem_iter=5,
    ...                  max_epochs=1, sets_per_epoch=4, device="cpu",
    ...                  random_state=0).fit(X, y, groups=groups)
    >>> Xt, yt, _ = make_c2m_sets("blobs", n_sets=1, random_state=1)
    >>> c2m.transfer(Xt).shape
    (200,)

    The metric ranks any labellings of a set, including other algorithms':

    >>> from sklearn.cluster import KMeans
    >>> scores = {k: c2m.score(Xt, KMeans(k, n_init=3, random_state=0).fit_predict(Xt))
    ...           for k in (2, 3, 4)}
    >>> best_k = max(scores, key=scores.get)
    """

    _requires_y = True
    _width_params = ("gae_dims", "critic_dims")
    #: Epochs of the neighbour encoder on the source graph (``NeighbourEmbedding``'s default);
    #: benchmarks/memmap_fit.py lowers it to bound a measurement's CPU time.
    _neighbour_epochs = 40
    #: Epochs of its refinement on a target in ``transfer`` (None: ``NeighbourEmbedding``'s
    #: ``refine_epochs``); lowered by the same benchmark.
    _refine_epochs = None
    # float64 on the CPU: in float32 the critic's scores of one cluster and of the right
    # clustering came within rounding on digits (seed 0 chose one cluster), for 1.3x speed.

    # Models pickled at 5f9d6e7 held the clustering MLP's widths here (see _migrate_legacy_record).
    _LEGACY_FITTED_PARAMS = {"_mlp_shape": _MLP_PARAMS}

    _parameter_constraints = {
        "max_clusters": [Interval(Integral, 1, None, closed="left")],
        "cem_hidden": [Interval(Integral, 1, None, closed="left")],
        "population": [Interval(Integral, 2, None, closed="left")],
        "elite_frac": [Interval(Real, 0, 1, closed="right")],
        "cem_iter": [Interval(Integral, 1, None, closed="left")],
        "cem_init_std": [Interval(Real, 0, None, closed="neither")],
        "cem_min_std": [Interval(Real, 0, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "kmeans_candidates": ["boolean"],
        "candidate_fakes": ["boolean", StrOptions({"auto"})],
        "augment": ["boolean"],
        "spectral_candidates": ["boolean"],
        "tree_candidates": ["boolean"],
        "gae_dims": [tuple, list],
        "critic_dims": [tuple, list],
        "gae_skip": ["boolean"],
        "margin_features": ["boolean"],
        "n_neighbors": [Interval(Integral, 1, None, closed="left"), None],
        "spectral_features": [Interval(Integral, 1, None, closed="left"), None],
        "spectral_neighbors": [Interval(Integral, 1, None, closed="left")],
        "critic_spectral": [Interval(Integral, 1, None, closed="left"), None],
        "critic_coordinates": ["boolean"],
        "tree_features": ["boolean"],
        "size_features": ["boolean", StrOptions({"auto"})],
        "smooth_truth": ["boolean"],
        "n_negatives": [Interval(Integral, 0, None, closed="left")],
        "lipschitz": [StrOptions({"gp", "clip"})],
        "gp_weight": [Interval(Real, 0, None, closed="left")],
        "clip_value": [Interval(Real, 0, None, closed="neither")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "rmsprop_decay": [Interval(Real, 0, 1, closed="neither")],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "sets_per_epoch": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "set_size": [Interval(Integral, 2, None, closed="left")],
        "standardize": ["boolean"],
        "representation": [StrOptions({"auto", "neighbours"}), None],
        "image_shape": [tuple, list, None],
        "max_cem_samples": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"}), None],
        "gap_critic": ["boolean", StrOptions({"auto"})],
        **COMMON_PARAMETER_CONSTRAINTS,
    }

    def __init__(
        self,
        max_clusters=10,
        *,
        cem_hidden=16,
        population=16,
        elite_frac=0.1,
        cem_iter=5,
        cem_init_std=1.0,
        cem_min_std=0.0,
        n_init=1,
        kmeans_candidates=True,
        candidate_fakes="auto",
        augment=False,
        spectral_candidates=False,
        tree_candidates=False,
        gae_dims=(32, 16),
        critic_dims=(128, 128),
        gae_skip=True,
        margin_features=False,
        n_neighbors=20,
        spectral_features=2,
        spectral_neighbors=10,
        critic_spectral=None,
        critic_coordinates=True,
        tree_features=False,
        size_features="auto",
        smooth_truth=True,
        n_negatives=4,
        lipschitz="gp",
        gp_weight=10.0,
        clip_value=0.01,
        learning_rate=1e-3,
        rmsprop_decay=0.95,
        max_epochs=20,
        sets_per_epoch="auto",
        set_size=200,
        standardize=True,
        representation="auto",
        image_shape=None,
        max_cem_samples="auto",
        gap_critic="auto",
        keep_best=False,
        callbacks=None,
        device="auto",
        random_state=None,
        verbose=0,
    ):
        self.max_clusters = max_clusters
        self.cem_hidden = cem_hidden
        self.population = population
        self.elite_frac = elite_frac
        self.cem_iter = cem_iter
        self.cem_init_std = cem_init_std
        self.cem_min_std = cem_min_std
        self.n_init = n_init
        self.kmeans_candidates = kmeans_candidates
        self.candidate_fakes = candidate_fakes
        self.augment = augment
        self.spectral_candidates = spectral_candidates
        self.tree_candidates = tree_candidates
        self.gae_dims = gae_dims
        self.critic_dims = critic_dims
        self.gae_skip = gae_skip
        self.margin_features = margin_features
        self.n_neighbors = n_neighbors
        self.spectral_features = spectral_features
        self.spectral_neighbors = spectral_neighbors
        self.critic_spectral = critic_spectral
        self.critic_coordinates = critic_coordinates
        self.tree_features = tree_features
        self.size_features = size_features
        self.smooth_truth = smooth_truth
        self.n_negatives = n_negatives
        self.lipschitz = lipschitz
        self.gp_weight = gp_weight
        self.clip_value = clip_value
        self.learning_rate = learning_rate
        self.rmsprop_decay = rmsprop_decay
        self.max_epochs = max_epochs
        self.sets_per_epoch = sets_per_epoch
        self.set_size = set_size
        self.standardize = standardize
        self.representation = representation
        self.image_shape = image_shape
        self.max_cem_samples = max_cem_samples
        self.gap_critic = gap_critic
        self.keep_best = keep_best
        self.callbacks = callbacks
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    def _check_params_vs_input(self, X, *, reset):
        """The shared checks, non-empty layer widths and at least 2 samples."""
        super()._check_params_vs_input(X, reset=reset)
        if reset:
            for name in self._width_params:
                check_widths(name, getattr(self, name), allow_empty=False)
        if X.shape[0] < 2:
            raise ValueError(
                f"n_samples={X.shape[0]}: {type(self).__name__} needs at least 2 samples (it scores "
                "labellings of whole sets)."
            )

    # ----------------------------------------------------------------- helpers
    def _neighbour_kwargs(self, critic, Xs):
        """Extra critic arguments for the set ``Xs``: its k-NN indices and its spectral embedding
        when the critic uses them (both depend on the points only, so a population shares them)."""
        out = {}
        if critic.n_neighbors is not None:
            out["neighbours"] = knn_indices(Xs, critic.n_neighbors)
        if critic.n_spectral:
            emb = spectral_embedding(Xs, critic.n_spectral, self.spectral_neighbors)
            out["spectral"] = torch.as_tensor(emb, dtype=Xs.dtype, device=Xs.device)
        if critic.tree_features:
            out["tree"] = spanning_tree(Xs, self.spectral_neighbors)
        return out

    def _candidates(self, Xs, H, rng):
        """Clustering-MLP weights of the k-means labellings of ``Xs`` and, when the MLP reads
        spectral inputs (``H`` wider than ``Xs``), of those inputs: spectral clusterings, which
        cut along the set's k-NN graph (rings, moons). None without ``kmeans_candidates``."""
        if not self.kmeans_candidates:
            return None
        out = kmeans_candidates(Xs, H.shape[1], self.cem_hidden, self.max_clusters, rng)
        d = Xs.shape[1]
        n_cuts = self._n_cuts()
        n_spec = H.shape[1] - d - n_cuts
        if self.spectral_candidates and n_spec > 0:
            spec = kmeans_candidates(
                H[:, d : d + n_spec], H.shape[1], self.cem_hidden, self.max_clusters, rng, offset=d, k_min=2
            )
            out = torch.cat([out, spec])
        if n_cuts and H.shape[1] > d + n_spec:
            cuts = H[:, d + n_spec :]
            # Single linkage with k clusters: the pieces left by the k - 1 longest cuts, each piece
            # one row of signs in the first k - 1 columns, so nearest-centre weights give it exactly.
            tree = []
            for k in range(2, min(self.max_clusters, n_cuts + 1) + 1):
                cols = cuts[:, : k - 1]
                if not bool(cols.abs().any()):
                    break
                centres = torch.unique(cols, dim=0)
                tree.append(centroid_mlp_weights(centres, H.shape[1], self.cem_hidden, self.max_clusters, cols,
                                                 offset=d + n_spec))
            if tree:
                out = torch.cat([out, torch.stack(tree)])
        return out

    def _n_cuts(self):
        """Tree-cut columns of the clustering MLP's inputs (``tree_candidates``)."""
        return max(1, self.max_clusters - 1) if self.tree_candidates else 0

    def _reads_codes(self):
        """Whether the metric reads the neighbour encoder's codes (decided by ``fit``)."""
        return getattr(self, "_source_representation", None) is not None

    def _resolved(self, name):
        """Parameter ``name`` with ``"auto"`` resolved by what the metric reads: the rows as they
        are (the paper's path, unchanged) or the encoder's codes of a one-data-set source."""
        value = getattr(self, name)
        if not isinstance(value, str) or value != "auto":
            return value
        codes = self._reads_codes()
        if name == "sets_per_epoch":
            return _SETS_PER_EPOCH["codes" if codes else "rows"]
        if name == "max_cem_samples":
            return max(self.set_size, _CODES_CEM_SAMPLES) if codes else self.set_size
        if name == "gap_critic":
            return bool(getattr(self, "_grouped", False)) and not codes
        return codes  # candidate_fakes, size_features

    def _mlp_state(self, Xs, spectral=True):
        """What :func:`mlp_inputs` needs for the set ``Xs`` (None: the coordinates alone)."""
        n_spec = (self.spectral_features or 0) if spectral else 0
        if not n_spec and not self.tree_candidates:
            return None
        return spectral_reference(Xs, n_spec, self.spectral_neighbors, n_cuts=self._n_cuts())

    def _cem(self, critic, Xs, rng, torch_gen, critic_kwargs, H=None, candidates="compute"):
        """Best clustering-MLP weights for the standardised set ``Xs`` (a ``CEMResult``); the
        MLP reads ``H`` (default ``Xs``); ``critic_kwargs``: :meth:`_neighbour_kwargs` of ``Xs``;
        ``candidates``: weights scored beside the CEM runs (default :meth:`_candidates`)."""
        H = Xs if H is None else H
        if isinstance(candidates, str):
            candidates = self._candidates(Xs, H, rng)
        widths = (self.cem_hidden, self.max_clusters, max(self.gae_dims), Xs.shape[1] + 4, H.shape[1])
        width = max(*widths, self.n_neighbors or 0)
        search = dict(population=self.population, elite_frac=self.elite_frac, n_iter=self.cem_iter)
        return cem_clustering(
            critic, Xs, H, self.cem_hidden, self.max_clusters, width=width, n_init=self.n_init,
            std=self.cem_init_std, min_std=self.cem_min_std, generator=torch_gen, critic_kwargs=critic_kwargs,
            candidates=candidates, **search,
        )

    def _cluster(self, X, rng, torch_gen):
        """Cluster ``X`` by maximising the critic; sets the predict state and returns labels.

        Past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows nothing holds
        ``X``: the statistics of :func:`~.graph.standardize` come from one streamed pass
        (:func:`_streamed_standardize`), the CEM subsample is read by index and every row
        is labelled chunk by chunk, as ``predict`` labels it.
        """
        n = X.shape[0]
        streamed = _streams(n)
        if streamed:
            mean_np, scale = _streamed_standardize(X, self.standardize)
            mean = torch.as_tensor(mean_np, dtype=self._dtype(), device=self.device_)
            Xs = None
        else:
            Xs, mean, scale = standardize(self._tensor(X), self.standardize)
        cap = self._resolved("max_cem_samples")
        if cap is not None and n > cap:
            sub = np.sort(rng.choice(n, size=cap, replace=False))
            if streamed:
                Xc = (self._read_rows(RowReader(X), sub) - mean) / scale
            else:
                Xc = Xs[torch.as_tensor(sub, device=Xs.device)]
        elif streamed:
            Xc = (self._read_rows(RowReader(X), np.arange(n)) - mean) / scale
        else:
            Xc = Xs
        state = self._mlp_state(Xc)
        graph = self._neighbour_kwargs(self.critic_, Xc)
        with self._progress(1, "clustering (CEM)") as bar:
            res = self._cem(self.critic_, Xc, rng, torch_gen, graph, mlp_inputs(Xc, state))
            self._tick(bar, metric=float(res.best_score))
        self._mlp_ref = state
        self._cem_w = res.best.detach().clone()
        # The clustering MLP's shape, as this fit or transfer built it: predict reads it (_mlp_dims), not the parameters.
        self._record_params(cem_hidden=self.cem_hidden, max_clusters=self.max_clusters)
        self._input_mean = mean.detach().clone()
        self.input_scale_ = float(scale)

        def outputs(rows):
            return mlp_labels(res.best, mlp_inputs(rows, state), self.cem_hidden, self.max_clusters).cpu().numpy()

        if streamed:
            # Each chunk standardised as predict does it: (x - mean) / scale, in the working dtype.
            out = self._chunked(lambda rows: outputs((self._as_tensor(rows) - mean) / scale), X, dtype=np.int64)
        else:
            # The MLP's inputs chunk by chunk (the blocks mlp_inputs searches in), not all n rows at once.
            step = chunk_rows(Xs.shape[1])
            out = np.concatenate([outputs(Xs[s : s + step]) for s in range(0, n, step)])
        labels, used = compact_labels(out, self.max_clusters)
        self.cluster_outputs_ = used
        self._outputs = torch.as_tensor(used, device=self.device_)
        self.cem_weights_ = res.best.detach().cpu().numpy().copy()
        self.cem_score_ = float(res.best_score)
        self.input_mean_ = mean.detach().cpu().numpy().copy()
        self.n_clusters_ = int(used.shape[0])
        self.labels_ = labels
        return labels, res.n_iter

    def _as_tensor(self, rows):
        """Rows as a tensor of the working dtype, as :meth:`_tensor` makes them (a copy: memmap
        chunks are read-only)."""
        return torch.as_tensor(np.array(rows, copy=True), dtype=self._dtype(), device=self.device_)

    def _read_rows(self, source, rows):
        """The rows ``rows`` (sorted indices) of ``source``: a tensor of every row, or a
        :class:`~sktransfer_cluster.base.streaming.RowReader` reading them from ``X`` (exact
        float64 copies, so the same bits as the tensor's)."""
        if torch.is_tensor(source):
            return source[torch.as_tensor(rows, device=self.device_)]
        return torch.as_tensor(source(rows), dtype=self._dtype(), device=self.device_)

    # ---------------------------------------------------------------- training
    def _critic_step(self, critic, opt, Xall, codes, sets, rng, torch_gen, run):
        """One critic step on a random source sub-set; (loss, real score, fake score, proposal ACC).

        ``Xall``: every source row as a tensor, or a row reader (:meth:`_read_rows`)."""
        rows = sets[int(rng.integers(len(sets)))]
        if self.augment:
            classes = np.unique(codes[rows])
            if classes.shape[0] > 2:
                # A random 2..C of the set's C classes: the number of clusters varies from step
                # to step even when the source is one data set with C classes.
                keep = rng.choice(classes, size=int(rng.integers(2, classes.shape[0] + 1)), replace=False)
                rows = rows[np.isin(codes[rows], keep)]
        if rows.shape[0] > self.set_size:
            rows = np.sort(rng.choice(rows, size=self.set_size, replace=False))
        y_true = compact_labels(codes[rows])[0]
        Xs, _, _ = standardize(self._read_rows(Xall, rows), self.standardize)
        if self.augment and Xs.shape[1] > 1:
            # A random rotation: where the clusters lie is no cue, only how the set is arranged.
            Q, R = torch.linalg.qr(torch.randn(Xs.shape[1], Xs.shape[1], generator=torch_gen, dtype=Xs.dtype))
            Xs = Xs @ (Q * torch.sign(torch.diagonal(R))).to(Xs.device)
            # Noise of a random strength: clusters as tight as the source's and looser ones.
            noise = torch.randn(Xs.shape, generator=torch_gen, dtype=Xs.dtype).to(Xs.device)
            Xs = Xs + float(torch.rand((), generator=torch_gen, dtype=Xs.dtype)) * _AUGMENT_NOISE * noise
        graph = self._neighbour_kwargs(critic, Xs)  # shared by CEM and the critic step
        critic.eval()
        # The proposals read the spectral inputs (with spectral_candidates) and the tree cuts (with
        # tree_candidates) as in clustering, so the critic learns against the labellings they give.
        H = mlp_inputs(Xs, self._mlp_state(Xs, spectral=self.spectral_candidates))
        candidates = self._candidates(Xs, H, rng)
        try:
            res = self._cem(critic, Xs, rng, torch_gen, graph, H, candidates=candidates)
        except FloatingPointError as exc:
            raise FloatingPointError(
                f"{type(self).__name__}: the critic returned only NaN/inf scores at epoch "
                f"{run.completed}; lower learning_rate, use lipschitz='gp' or standardize=True."
            ) from exc
        y_hat = mlp_labels(res.best, H, self.cem_hidden, self.max_clusters).cpu().numpy()
        if self.smooth_truth and y_true.shape[0] > 1:
            nb = graph["neighbours"] if "neighbours" in graph else knn_indices(Xs, min(10, Xs.shape[0] - 1))
            y_real = smooth_labels(y_true, nb)
        else:
            y_real = y_true
        wrong = [y_hat] + corrupt_labels(Xs.cpu().numpy(), y_true, rng, self.n_negatives)
        if self._resolved("candidate_fakes") and candidates is not None:
            # Every k-means labelling that is not the truth is a fake too: the critic then learns to
            # rank the truth above each number of clusters, not only above the search's current pick.
            for lab in mlp_labels_population(candidates, H, self.cem_hidden, self.max_clusters):
                if clustering_accuracy(y_real, lab) < _SAME_AS_TRUTH:
                    wrong.append(compact_labels(lab)[0])
        real = torch.as_tensor(y_real, device=self.device_).unsqueeze(0)
        fake = torch.as_tensor(np.stack(wrong), device=self.device_)
        critic.train()
        gp_weight = self.gp_weight if self.lipschitz == "gp" else 0.0
        loss, real_score, fake_score = wgan_critic_loss(
            critic, Xs, real, fake, gp_weight=gp_weight, generator=torch_gen, **graph
        )
        run.step(opt, loss)
        if self.lipschitz == "clip":
            with torch.no_grad():
                for p in critic.head.parameters():
                    p.clamp_(-self.clip_value, self.clip_value)
        return loss.item(), real_score, fake_score, clustering_accuracy(y_true, y_hat)

    def _train(self, X, codes, sets, rng, torch_gen):
        """Train ``critic_`` as a WGAN critic on the source sets; returns the finished epochs."""
        critic = ClusteringCritic(
            X.shape[1],
            gae_dims=self.gae_dims,
            critic_dims=self.critic_dims,
            skip=self.gae_skip,
            margin_features=self.margin_features,
            n_neighbors=self.n_neighbors,
            n_spectral=self.critic_spectral or 0,
            coordinates=self.critic_coordinates,
            tree_features=self.tree_features,
            size_features=self._resolved("size_features"),
        )
        critic = init_module(critic, torch_gen).to(device=self.device_, dtype=self._dtype())
        self.critic_ = critic
        opt = torch.optim.RMSprop(critic.parameters(), lr=self.learning_rate, alpha=self.rmsprop_decay)
        # Past the landmark count the sets are read by index (at most set_size rows a step), not copied.
        Xall = RowReader(X) if _streams(X.shape[0]) else self._tensor(X)
        with self._training("critic training", self.max_epochs, state=[critic], select="last") as run:
            for _ in run.epochs():
                steps = [
                    self._critic_step(critic, opt, Xall, codes, sets, rng, torch_gen, run)
                    for _ in range(self._resolved("sets_per_epoch"))
                ]
                loss, real, fake, acc = (float(np.mean(column)) for column in zip(*steps))
                run.end_epoch(loss, real_score=real, fake_score=fake, proposal_accuracy=acc)
        critic.eval()
        for p in critic.parameters():
            p.requires_grad_(False)
        return run.completed

    # -------------------------------------------------------------- protocol
    def _encoder_metric(self, X, groups):
        """The metric of the encoder's graph when the metric reads codes of ``X``, else None.

        ``"auto"`` takes the encoder only for a source that is one data set whose rows look
        like intensities or counts (:func:`~sktransfer_cluster.representation.auto_metric`'s
        cosine case, CCN's ``image_data`` rule; read from the values, never the width)."""
        if self.representation is None or (self.representation == "auto" and groups is not None):
            return None
        from ...representation import auto_metric

        metric = auto_metric(X)
        if self.representation == "auto" and metric != "cosine":
            return None
        return metric

    def _encoder_rows(self, X):
        """``X`` (less the source's column means where the graph is Euclidean) times the power of
        two that brought the source's peak near 1 (exact, so ordinary data keep their bits): the
        encoder's squares neither under- nor overflow at any scale, and the float32 graph resolves
        rows whose spread is small beside their offset."""
        return _encoder_input(X, self._rep_shift, self._rep_exponent)

    def _encode(self, X):
        """The rows the metric reads: ``X`` itself, or its codes under ``representation_``."""
        if self.representation_ is None:
            return X
        return _encode_rows(self.representation_, X, self._rep_shift, self._rep_exponent)

    def _fit(self, X, y, *, rng, torch_gen, groups=None):
        sets, codes = source_sets(column_or_1d(y), groups)
        self.representation_ = self._source_representation = None
        self._grouped = groups is not None
        self._rep_exponent = 0
        self._rep_shift = None
        metric = self._encoder_metric(X, groups)
        if metric is not None:
            from ...representation import NeighbourEmbedding

            shape = None if self.image_shape is None else tuple(self.image_shape)
            seed = int(rng.integers(2**31 - 1))
            streamed = _streams(X.shape[0])
            # Cosine only where the origin means something (intensities, counts: no negative value,
            # some zeros); rows at an arbitrary origin get Euclidean distances, which no shift moves,
            # read from the centred rows (the encoder's graph is built in float32).
            if streamed:
                self._rep_shift, peak = _streamed_shift_and_peak(X, centre=metric == "euclidean")
            else:
                if metric == "euclidean":
                    self._rep_shift = X.mean(0, dtype=np.float64)
                peak = float(np.abs(self._encoder_rows(X)).max())
            self._rep_exponent = math.frexp(peak)[1] if 0.0 < peak < math.inf else 0
            # The encoder trains on the CPU; its codes are computed on this estimator's device.
            embedding = NeighbourEmbedding(image_shape=shape, metric=metric, n_epochs=self._neighbour_epochs,
                                          random_state=seed, device=self.device_)
            self._source_representation = embedding.fit(self._encoder_landmarks(X, rng))
            self.representation_ = self._source_representation
        Z = self._encode_all(X)
        self.n_iter_ = self._train(Z, codes, sets, rng, torch_gen)
        self.gap_model_ = self._fit_gap_model(Z, y, groups)
        self._cluster(Z, rng, torch_gen)
        self._gap_veto(Z, None if self.gap_model_ is None else self.gap_model_.labels_, rng)

    def _fit_gap_model(self, Z, y, groups):
        """The gap metric's estimator fitted on the rows the main metric reads (``gap_critic``),
        else None: this estimator's settings, resolved, with the tree's on."""
        if not self._resolved("gap_critic"):
            return None
        params = self.get_params(deep=False)
        resolved = {name: self._resolved(name) for name in ("size_features", "sets_per_epoch", "max_cem_samples")}
        params.update(resolved, **_GAP_CRITIC, gap_critic=False, representation=None, callbacks=None)
        # A dask array's rows go to the nested fit as the dask array (validation wraps it again).
        return C2MCluster(**params).fit(_as_given(Z), y, groups=groups)

    def _gap_veto(self, Z, gap_labels, rng):
        """Take the gap metric's clustering ``gap_labels`` of ``Z`` (and its predict state) when
        :func:`~.graph.gap_veto` says the main clustering ``labels_`` joins across a gap it cuts;
        on at most ``max_cem_samples`` (and ``_GAP_ROWS``) rows drawn by ``rng``."""
        self.gap_vetoed_ = False
        if gap_labels is None:
            return
        n = Z.shape[0]
        m = min(n, self._resolved("max_cem_samples") or n, _GAP_ROWS)
        rows = np.arange(n) if m == n else np.sort(rng.choice(n, size=m, replace=False))
        sample = torch.as_tensor(np.asarray(Z[rows], dtype=np.float64))
        if gap_veto(sample, self.labels_[rows], np.asarray(gap_labels)[rows]):
            for name in _PREDICT_STATE:
                setattr(self, name, getattr(self.gap_model_, name))
            # Its clustering MLP is the gap metric's, of the widths that model was fitted with.
            self._record_params(**{name: self.gap_model_._fitted_param(name) for name in _MLP_PARAMS})
            self.labels_ = np.asarray(gap_labels).copy()
            self.gap_vetoed_ = True

    def _encoder_landmarks(self, X, rng):
        """The rows the encoder's graph is built on, as :meth:`_encoder_rows` prepares them: ``X``
        itself, or past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows as many drawn
        uniformly by ``rng`` and read by index into one float64 array, shifted and scaled in place
        (the encoder reads float64: no other copy; a memmap's pages handed back as they are read)."""
        if not _streams(X.shape[0]):
            return self._encoder_rows(X)
        from ...representation import landmark_indices

        index = landmark_indices(X.shape[0], rng)
        reader, step = RowReader(X), chunk_rows(X.shape[1])
        rows = np.empty((index.shape[0], X.shape[1]))
        for start in range(0, index.shape[0], step):
            rows[start : start + step] = reader(index[start : start + step])
        if self._rep_shift is not None:
            rows -= self._rep_shift
        half = self._rep_exponent // 2
        if self._rep_exponent:  # times_power_of_two(rows, -e), in place
            rows *= 2.0 ** -half
            rows *= 2.0 ** (half - self._rep_exponent)
        return rows

    def _encode_all(self, X):
        """:meth:`_encode` of every row of ``X``; past the landmark count chunk by chunk, so
        only the codes (``n x n_components``) are held. On the CPU a dask array's chunks are
        encoded on their workers in the same pieces at the same offsets (:func:`_block_codes`)."""
        if self.representation_ is None or not _streams(X.shape[0]):
            return self._encode(X)
        # On an accelerator a dask array's chunks come to the client, where the device is (as predict's).
        if isinstance(X, DaskRows) and torch.device(self.device_).type == "cpu":
            # Each chunk encoded on its worker, in the pieces below (the encoder travels once); only codes come back.
            parts = X.map_blocks(_block_codes, chunk_rows(X.shape[1]), X.dtype, self.representation_,
                                 self._rep_shift, self._rep_exponent)
            return np.concatenate([p for p in parts if p is not None])
        Z = None
        for start, stop, rows in iter_row_chunks(X):
            codes = self._encode(rows.astype(X.dtype, copy=False))
            if Z is None:
                Z = np.empty((X.shape[0], codes.shape[1]), dtype=X.dtype)
            Z[start:stop] = codes
        return Z

    def transfer(self, X):
        """Cluster an unlabelled target by maximising the learned metric on it.

        The cross-entropy method searches labellings of ``X`` (k-means
        candidates included) for the one the critic learned by ``fit`` rates
        highest, choosing K up to ``max_clusters``; afterwards ``labels_`` holds
        the target's labels and ``predict`` serves the target.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Target data, same features as the source.

        Returns
        -------
        labels : ndarray of shape (n_samples,)

        Examples
        --------
        >>> from sklearn.datasets import make_blobs
        >>> from sktransfer_cluster import C2MCluster
        >>> X, y = make_blobs(n_samples=120, centers=3, random_state=0)
        >>> model = C2MCluster(max_clusters=5, max_epochs=1, sets_per_epoch=2, random_state=0).fit(X, y)
        >>> model.transfer(X[:60] + 0.5).shape
        (60,)
        """
        return super().transfer(X)

    def _transfer(self, X, *, rng, torch_gen):
        """Cluster the unlabelled target ``X`` by maximising the learned metric with CEM."""
        if self._source_representation is not None:
            import copy

            # A copy of the source's encoder, so every transfer starts from what fit learned.
            target_rows = self._encoder_landmarks(X, rng)
            self.representation_ = copy.deepcopy(self._source_representation).refine(target_rows, self._refine_epochs)
            del target_rows
        Z = self._encode_all(X)
        labels, n_iter = self._cluster(Z, rng, torch_gen)
        self.n_iter_ = int(n_iter)
        # gap_critic=False set after fit: a transfer without the veto (the gap metric is kept).
        if getattr(self, "gap_model_", None) is not None and self.gap_critic is not False:
            self._gap_veto(Z, np.asarray(self.gap_model_.transfer(_as_given(Z))), rng)
            labels = self.labels_
        elif getattr(self, "gap_model_", None) is not None:
            self.gap_vetoed_ = False
        return labels

    def _predict(self, X):
        codes = self._encode(X)
        screen = self._predict_screen() if torch.device(self.device_).type == "cpu" else None
        if screen is None:
            return self._exact_predict(codes)
        codes = np.ascontiguousarray(codes)
        if not codes.flags.writeable:
            codes = codes.copy()  # torch cannot wrap read-only memory (a memmap's rows) without a warning
        # A probe first, unless the screen proved most rows of the previous chunk: where it proves
        # too few (features that vary between close reference rows), the float64 path costs less
        # than screening and then searching, and the next _SCREEN_SKIP chunks go to it unprobed.
        # Either way the labels are the float64 path's.
        hint = _SCREENS[self][2]
        if hint[0] is not True and hint[0] > 0:
            hint[0] -= 1
            return self._exact_predict(codes)
        probe = codes.shape[0] if hint[0] is True else min(codes.shape[0], _SCREEN_PROBE)
        labels, proved = screen_labels(screen, codes[:probe])
        if int(proved.sum()) < _SCREEN_MIN_PROVED * probe:
            hint[0] = _SCREEN_SKIP
            return self._exact_predict(codes)
        hint[0] = True
        if probe < codes.shape[0]:
            rest, rest_proved = screen_labels(screen, codes[probe:])
            labels, proved = torch.cat([labels, rest]), torch.cat([proved, rest_proved])
        if not bool(proved.all()):
            rows = torch.nonzero(~proved).squeeze(1)
            Xs = (self._tensor(codes[rows.numpy()]) - self._input_mean) / self.input_scale_
            again, sure = certified_labels(Xs, self._mlp_ref, self._cem_w, *self._mlp_dims(),
                                           self._outputs)
            if not bool(sure.all()):
                # Ties to the last bits: only predict's own float64 pass, on the whole chunk, settles them.
                return self._exact_predict(codes)
            labels[rows] = again
        return labels.numpy()

    def _mlp_dims(self):
        """The clustering MLP's ``(hidden, outputs)`` as the last fit or transfer built it: a
        ``set_params`` of ``cem_hidden`` or ``max_clusters`` since changes nothing predict reads."""
        return tuple(self._fitted_param(name) for name in _MLP_PARAMS)

    def _exact_predict(self, codes):
        """Labels of a chunk of rows (as :meth:`_encode` gives them) by the float64 path: standardised
        rows, their :func:`mlp_inputs` and the clustering MLP, as ``fit`` labels its rows."""
        Xs = (self._tensor(codes) - self._input_mean) / self.input_scale_
        H = mlp_inputs(Xs, self._mlp_ref)
        logits = population_logits(H, self._cem_w.unsqueeze(0), *self._mlp_dims())[0]
        # Most activated *used* output: labels 0 .. n_clusters_ - 1 only.
        return logits[:, self._outputs].argmax(1).cpu().numpy()

    def _predict_screen(self):
        """:func:`predict_screen` of the current predict state, cached while that state is the same
        objects (``fit`` and ``transfer`` replace them); None where no screen applies."""
        state = (self._mlp_ref, self._cem_w, self._input_mean, self.input_scale_, self._outputs)
        cached = _SCREENS.get(self)
        if cached is None or len(cached[0]) != len(state) or any(a is not b for a, b in zip(cached[0], state)):
            screen = predict_screen(self._mlp_ref, self._cem_w, *self._mlp_dims(), self._outputs,
                                    self._input_mean, self.input_scale_)
            cached = (state, screen, [0])  # [2]: True (the last chunk mostly proved) or chunks to skip
            _SCREENS[self] = cached
        return cached[1]

    def score(self, X, y=None):
        """The learned metric ``r(X, y)``: higher means a better clustering ``y`` of ``X``.

        Ranks candidate labellings of one set -- the model's own or another
        algorithm's, e.g. k-means for several k (see the class Examples).
        Values compare labellings of the same ``X`` under one fitted model;
        their scale (a WGAN critic's) is arbitrary across fits.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Standardised with its own statistics (``standardize=True``).
        y : array-like of shape (n_samples,), default=None
            The labelling to score, of any hashable type (the value does not
            depend on the label names); ``None``: the labels of :meth:`predict`.

        Returns
        -------
        score : float
        """
        X = self._fitted_input(X, stream=False)  # the metric of the whole set: every row held
        if X.shape[0] < 2:
            # The metric reads each point's neighbours: one point has none.
            raise ValueError(
                f"C2MCluster.score needs at least 2 samples to rate a clustering, got {X.shape[0]}."
            )
        if y is None:
            codes = self.predict(X)
        else:
            y = column_or_1d(y)
            check_consistent_length(X, y)
            codes = np.unique(y, return_inverse=True)[1]
        with torch.no_grad():
            Xs, _, _ = standardize(self._tensor(self._encode(X)), self.standardize)
            labels = torch.as_tensor(codes.astype(np.int64), device=self.device_)
            value = self.critic_(Xs, labels, **self._neighbour_kwargs(self.critic_, Xs))
        return float(value[0])
