"""TDCMCluster: transferable deep clustering with learnable centroid-updating blocks.

Zhang & Zhao, *Transferable Deep Clustering Model*. An encoder ``g`` embeds the
samples; ``K`` orthogonal centroids (rows of the identity) pass ``L`` learnable
attention blocks that reassign the samples and move the centroids, so the
centroids adapt to whatever data set is pushed through: that forward pass is the
transfer to a new domain.

Reading of the paper used here (its equations are garbled in the text):

* score ``l(z, c) = -sigma(q(z - c))`` with ``q(p) = (W_Q p) . (W_K p)`` (Eq. 2);
  block ``l`` assigns ``delta^(l) = softmax_j(l(z_i, c_j^(l-1)) / tau)`` and sets
  ``c_j^(l) = sum_i delta_ij^(l) z_i / sum_i delta_ij^(l)`` (Eq. 1; the
  ``sum_i sum_j`` normaliser printed in Eq. 1 is read as the per-centroid mass, as
  in soft k-means, which Theorem 4.2 says the block generalises).
* ``L_clust = -sum_l alpha_l mean_i sum_j delta_ij^(l) l(z_i, c_j^(l))`` (Eq. 4):
  the assignments of block ``l`` weight the similarity to the centroids they
  produced, i.e. a learned within-cluster scatter, minimised. ``tau`` is left
  out of ``l`` in the loss (identical to the paper at its ``tau = 1``) so losses
  and :meth:`TDCMCluster.score` stay comparable across ``tau``.
* ``L_ent = sum_l alpha_l sum_j pi_j log pi_j``, ``pi_j = mean_i delta_ij``
  (Eq. 5 with the sign that *favours balanced clusters* when minimised; Eq. 5 as
  printed would reward putting every sample in one cluster).
* ``alpha_l = 2 l / (L (L + 1))``: linearly increasing, summing to one.
* the constraint ``W W^T = I`` becomes the penalty
  ``ortho_weight * sum_blocks (||W_Q W_Q^T - I||^2 + ||W_K W_K^T - I||^2)``.
* sums over samples are means, so the loss does not scale with the batch size.

Encoder (a measured departure from the paper's 3-layer MLP for vectors, issue 3):
the default encoder is *linear* (``hidden_dims=()``: one affine layer, then the
normalisation ``embedding_norm``, frozen to the source statistics after fit).
Trained with ``L_clust``, an MLP encoder learns to send each region of the
source's input space to one tight point per cluster, i.e. it
becomes a classifier of the source partition. A shifted target is then embedded
along the source's decision boundaries, and no centroid update can undo that:
on the synthetic protocol (K = 2/3/5/10, 2 data sets, 100 epochs) KMeans refitted
on the MLP's *target embedding* scored only 1.00/0.80/0.74/0.72 NMI, the same as
predicting with the source centroids (1.00/0.80/0.76/0.71), and longer training
(the paper's 500 epochs) made it worse. An affine encoder cannot fold the input
space, so the target keeps its cluster geometry in the embedding and the blocks'
soft k-means steps do move the centroids onto it (KMeans on the target embedding
1.00/0.99/0.88/0.89; TDCM transfer 1.00/0.98/0.82/0.86 on the same sets). The
MLP stays available through ``hidden_dims``; it can still pay off where a linear
map of the input is not clusterable.

A linear encoder can still *project*: the clustering loss is smallest when the
embedding keeps only the directions separating the source clusters, and a
target whose clusters moved apart along another direction is then lost (one of
three K = 2 sets: 0.09 NMI). ``isometry_weight`` keeps the linear map a scaled
partial isometry, which stops that (3 sets per K, 100 epochs, target NMI
K = 2/3/5/10: 0.70/0.96/0.79/0.84 without, 1.00/0.96/0.80/0.85 with). The
isometry is only lossless when ``embedding_dim >= n_features``: a narrower
embedding is a projection, chosen on the source (digits cross-task below).
``extra_adapt_steps`` repeats the last block when adapting to a whole data set;
16 extra steps gave 1.00/0.96/0.81/0.86 (and +0.01 to +0.04 NMI on the digits
cross-task), a small gain kept behind the parameter (default 0, the paper's
forward pass).

Normalisation of the embedding (``embedding_norm``, default ``"scalar"``): the
earlier default, a per-dimension batch norm, re-weights the embedding's
directions by the inverse *source* spread, so even an isometric linear encoder
yields a distorted metric (condition number 5-8 on the synthetic sets) tuned to
the source; KMeans on such a target embedding scored 0.73 NMI on a K = 2 set
where KMeans on the raw target scores 0.96. ``"scalar"`` centres each dimension
and divides all by one scale, which keeps the input geometry. Full protocol
(10 data sets per K, 100 epochs, ``n_init=5``, paper's forward pass), target NMI
K = 2/3/5/10: ``"batch"`` 0.880/0.979/0.881/0.833, ``"scalar"``
0.901/0.981/0.916/0.843. On the digits cross-task, with the embedding as wide as
the input (64, a full isometry): ``"batch"`` 0.686, ``"scalar"`` 0.762 (2 seeds;
at width 32 both stay near 0.40-0.45).

Starting centroids of the adaptation (``adapt_n_init``, default 8): the forward
pass from the fixed ``c^(0)`` is a few soft k-means steps from one start and
can stop in a local optimum on a shifted target (merging two target clusters,
splitting another). Trying ``c^(0)`` plus k-means++ seeds of the data set's
embedding and keeping the lowest final objective (no labels) raised the full
protocol, with ``embedding_norm="scalar"`` and ``n_init=5``, to
0.903/0.981/0.924/0.878 (4 or 16 starts: the same within 0.002). It also does
most of ``n_init``'s work: with ``n_init=1`` the same numbers were
0.903/0.980/0.923/0.878 (forward pass only: 0.903/0.945/0.880/0.833), at a fifth
of the training cost, and the source NMI of ``labels_`` was the same too
(0.826/0.958/0.862/0.846 against 0.827/0.958/0.862/0.847); hence ``n_init=1``
is the default. On digits (width 64) it cost 0.03 NMI (0.736 vs 0.762).
Adapting costs ``adapt_n_init`` passes over the data set (2 * 10^5 points,
K = 10: 12 s against 1.1 s for one start); ``predict`` is unaffected.
Unsupervised fine-tuning on the target, ``transfer(X, fine_tune_epochs=30)``,
added +0.01 at K = 2 (0.915) and nothing elsewhere, and +0.04 on digits (0.803,
above KMeans refitted on digits 5-9, 0.773). For reference, models refitted on
the target itself (not a transfer) score: KMeans 0.910/0.981/0.924/0.881, a
full-covariance Gaussian mixture 0.931/-/-/0.893; at K = 2 two of the ten
target sets have overlapping clusters (KMeans 0.46 and 0.76), which bounds
every method far below the paper's 0.989.

Training 500 epochs (the paper) instead of 100 did not help, at five times the
fit cost (``n_init=1``, 5 sets per K): per-dimension batch norm
0.956/0.907/0.848/0.814 against 0.975/0.906/0.813/0.813 at 100 epochs;
``"scalar"`` with ``adapt_n_init=8`` 0.987/0.980/0.967/0.854 against
0.987/0.979/0.967/0.859.

Tried and not adopted (measured on 3 synthetic data sets per K, see
``benchmarks/results/tdcm_quality.md`` for the final numbers): re-estimating the
batch-norm statistics on the target at transfer time (K = 2: 0.93 -> 0.75 with
a whitened MLP embedding); a full batch-whitening of the embedding instead of
per-dimension batch norm (MLP, 100 epochs: 0.93/0.89/0.85/0.75, but
0.74/0.74/0.76/0.71 after 500 epochs as the MLP overfits the source partition;
linear: 0.81/0.86/0.87/0.72); a residual MLP (linear skip + MLP:
0.82/0.73/0.72/0.69); a smaller ``tau`` (0.05-0.3; no gain, the paper's 1.0 kept).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.cluster import kmeans_plusplus
from sklearn.utils._param_validation import Interval, StrOptions

from ..base import COMMON_PARAMETER_CONSTRAINTS, TransferClusterMixin, make_generators
from ..losses import negative_size_entropy, orthogonality_penalty
from ..nn import CentroidUpdateBlock, centroids_from_stats, init_module, mlp

__all__ = ["TDCMCluster"]

# Cap on n_chunk * K score entries held at once when adapting centroids on a full data set.
_ADAPT_ENTRIES = 2**22


def _block_weights(n_blocks):
    """Linearly increasing ``alpha_l = 2 l / (L (L + 1))``, ``l = 1..L`` (sums to one)."""
    L = n_blocks
    return [2.0 * (l + 1) / (L * (L + 1)) for l in range(L)]


def _initial_centroids(n_clusters, dim, dtype, device):
    """Orthogonal starting centroids ``c_j^(0) = e_j`` (rows of the identity)."""
    return torch.eye(n_clusters, dim, dtype=dtype, device=device)


def _run_blocks(Z, blocks, C0, tau):
    """One-shot (differentiable) pass of all blocks on ``Z``: ``[(delta_l, C_l)]``."""
    out = []
    C = C0
    for blk in blocks:
        delta, C = blk(Z, C, tau)
        out.append((delta, C))
    return out


def _loss_terms(Z, blocks, C0, tau):
    """``(clustering, negative entropy)`` of a batch, each summed over blocks with ``alpha_l``."""
    alphas = _block_weights(len(blocks))
    clust = Z.new_zeros(())
    negent = Z.new_zeros(())
    for a, blk, (delta, C) in zip(alphas, blocks, _run_blocks(Z, blocks, C0, tau)):
        clust = clust + a * (delta * blk.act(blk.quadratic(Z, C))).sum(1).mean()
        negent = negent + a * negative_size_entropy(delta)
    return clust, negent


def _ortho_term(blocks):
    total = None
    for blk in blocks:
        WQ, WK = blk.matrices()
        t = orthogonality_penalty(WQ) + orthogonality_penalty(WK)
        total = t if total is None else total + t
    return total


def _isometry_penalty(W):
    """``||G / mean(diag G) - I||_F^2`` with ``G`` the smaller Gram matrix of ``W``.

    Zero exactly when ``W`` is a scaled partial isometry: orthonormal columns
    (``W^T W``, embedding at least as wide as the input) or orthonormal rows
    (``W W^T``, a projection). Scale-free, because the batch norm after the
    encoder fixes the scale anyway; what it forbids is collapsing the embedding
    onto the few directions that separate the *source* clusters.
    """
    G = W.T @ W if W.shape[0] >= W.shape[1] else W @ W.T
    G = G / G.diagonal().mean().clamp_min(torch.finfo(G.dtype).tiny)
    eye = torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    return ((G - eye) ** 2).sum()


def _chunk_rows(n, n_clusters, chunk_size=None):
    if chunk_size is None:
        chunk_size = max(1, _ADAPT_ENTRIES // max(1, n_clusters))
    return [(s, min(n, s + chunk_size)) for s in range(0, n, chunk_size)]


@torch.no_grad()
def _adapt_centroids(Z, blocks, C0, tau, chunk_size=None):
    """All blocks on the full ``Z`` with streamed sufficient statistics.

    For each block, ``sum_i delta_ij z_i`` and ``sum_i delta_ij`` are accumulated
    over row chunks, so only a ``chunk x K`` assignment matrix exists at a time.
    Equals :func:`_run_blocks` up to floating-point summation order.

    Returns
    -------
    list of torch.Tensor
        ``[C_1, ..., C_L]``, each of shape (K, b).
    """
    K = C0.shape[0]
    chunks = _chunk_rows(Z.shape[0], K, chunk_size)
    C = C0
    out = []
    for blk in blocks:
        wsum = torch.zeros_like(C0)
        mass = torch.zeros(K, dtype=C0.dtype, device=C0.device)
        for s, e in chunks:
            delta = blk.assign(Z[s:e], C, tau)
            wsum += delta.T @ Z[s:e]
            mass += delta.sum(0)
        C = centroids_from_stats(wsum, mass, C)
        out.append(C)
    return out


def _block_terms(Z, blk, C_assign, C, tau, chunks):
    """One block's mean scatter and size negentropy over the full ``Z``, streamed by ``chunks``.

    ``delta = blk.assign(Z, C_assign)`` scores ``Z`` against ``C`` with
    ``blk.act(blk.quadratic(., C))``; returns
    ``(mean_i sum_j delta_ij sigma(q_ij), sum_j pi_j log pi_j)`` as floats.
    """
    K = C.shape[0]
    mass = torch.zeros(K, dtype=C.dtype, device=C.device)
    scatter = Z.new_zeros(())
    for s, e in chunks:
        delta = blk.assign(Z[s:e], C_assign, tau)
        mass += delta.sum(0)
        scatter += (delta * blk.act(blk.quadratic(Z[s:e], C))).sum()
    n = Z.shape[0]
    return float(scatter) / n, float(negative_size_entropy((mass / n).unsqueeze(0)))


@torch.no_grad()
def _streamed_loss_terms(Z, blocks, C0, centroids, tau, chunk_size=None):
    """``(clustering, negative entropy)`` of the full ``Z`` given the adapted ``centroids``."""
    chunks = _chunk_rows(Z.shape[0], C0.shape[0], chunk_size)
    clust = 0.0
    negent = 0.0
    prev = C0
    for a, blk, C in zip(_block_weights(len(blocks)), blocks, centroids):
        scatter, neg = _block_terms(Z, blk, prev, C, tau, chunks)
        clust += a * scatter
        negent += a * neg
        prev = C
    return clust, negent


@torch.no_grad()
def _final_objective(Z, block, C, tau, beta, chunk_size=None):
    """Objective of the *converged* state: ``block``'s scatter and size term at centroids ``C``.

    ``mean_i sum_j delta_ij sigma(q(z_i - c_j)) + beta sum_j pi_j log pi_j`` with
    ``delta = block.assign(Z, C)``, streamed over row chunks. Used to choose
    among several starting centroids of the adaptation (``adapt_n_init``).
    """
    scatter, negent = _block_terms(Z, block, C, C, tau, _chunk_rows(Z.shape[0], C.shape[0], chunk_size))
    return scatter + beta * negent


class _ScalarNorm(torch.nn.BatchNorm1d):
    """Centre each embedding dimension, divide all by one scale (``embedding_norm="scalar"``).

    Like a non-affine batch norm, but the scale is ``sqrt(mean_k var_k)``, one
    number for all dimensions, so the normalisation is a translation plus a
    uniform scaling: it fixes the embedding's size (no collapse) without
    re-weighting its directions. Uses ``running_mean``/``running_var`` outside
    training, like :class:`torch.nn.BatchNorm1d`, so the exact statistics of a
    data set can be written into them.
    """

    def __init__(self, num_features):
        super().__init__(num_features, affine=False)

    def forward(self, x):
        if self.training:
            mean = x.mean(0)
            var = x.var(0, unbiased=False)
            with torch.no_grad():
                n = x.shape[0]
                m = self.momentum
                self.running_mean.mul_(1 - m).add_(m * mean)
                self.running_var.mul_(1 - m).add_(m * var * n / max(n - 1, 1))
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var.mean() + self.eps)


class TDCMCluster(TransferClusterMixin, ClusterMixin, TransformerMixin, ClassNamePrefixFeaturesOutMixin, BaseEstimator):
    """Transferable Deep Clustering Model: an encoder plus learnable centroid-updating blocks.

    An encoder (linear by default, an MLP with ``hidden_dims``) embeds the
    samples in ``R^embedding_dim``. ``n_clusters``
    centroids start as the first rows of the identity and pass ``n_blocks``
    attention blocks; block ``l`` assigns
    ``delta_ij = softmax_j(-sigma((W_Q (z_i - c_j)) . (W_K (z_i - c_j))) / tau)``
    and moves each centroid to the ``delta``-weighted mean of the embeddings,
    with ``W_Q``, ``W_K`` symmetric by construction. Encoder and blocks are
    trained unsupervised on the source with Adam on
    ``L_clust + beta * L_ent + ortho_weight * ||W W^T - I||^2`` plus, for the
    linear encoder, ``isometry_weight`` times its isometry penalty (see Notes).
    Because the centroids are produced by a forward pass rather than learned as
    fixed parameters, :meth:`transfer` adapts them to a new domain by running the
    blocks on its embeddings (from ``c^(0)`` and, by default, from a few
    k-means++ seeds of those embeddings, keeping the best by the objective).

    The paper's model is ``TDCMCluster(hidden_dims=(64, 64), embedding_norm=None,
    isometry_weight=0, adapt_n_init=1, n_init=1, max_epochs=500)``; the defaults
    are measured departures from it (module notes).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters ``K``.
    hidden_dims : tuple of int, default=()
        Hidden widths of the MLP encoder. The default ``()`` is a linear
        (affine) encoder, which keeps the target's cluster geometry so that the
        blocks can adapt the centroids to it; the paper's 3-layer MLP, e.g.
        ``(64, 64)``, learns the source partition and transfers worse on
        shifted targets (see the module notes).
    embedding_dim : int, default=10
        Embedding dimension ``b``; must be ``>= n_clusters`` (the starting
        centroids are orthogonal unit vectors).
    n_blocks : int, default=4
        Number of centroid-updating blocks ``L`` (paper: 4 synthetic, 5 real).
    extra_adapt_steps : int, default=0
        Extra applications of the last block when the centroids are adapted to
        a whole data set (the end of ``fit`` and ``transfer``), to let
        the soft k-means-like updates converge further than the ``L`` trained
        blocks; training is unchanged. ``0`` is the paper's forward pass.
    adapt_n_init : int, default=8
        Number of starting centroids tried when the centroids are adapted to a
        whole data set (the end of ``fit`` and ``transfer``): the paper's
        ``c^(0)`` (rows of the identity) and ``adapt_n_init - 1`` k-means++
        seedings drawn on that data set's embeddings (seeded by
        ``random_state``). Each start runs through the blocks (and
        ``extra_adapt_steps``); the adapted centroids with the lowest objective
        of the last block at its final state (scatter plus ``beta`` times the
        size term; no labels) are kept. Training is unchanged; adaptation costs
        ``adapt_n_init`` forward passes. Not in the paper; ``1`` is the paper's
        forward pass from ``c^(0)``. Measured in the module notes: +0.03 to
        +0.04 target NMI at K = 5, 10 on the synthetic protocol.
    tau : float, default=1.0
        Softmax temperature of the assignments.
    activation : {"relu", "leaky_relu"}, default="relu"
        The non-decreasing ``sigma`` applied to the quadratic score.
    symmetric : bool, default=True
        Parametrise ``W_Q``, ``W_K`` as ``(A + A^T) / 2``. ``False`` is the
        paper's variant-R ablation.
    embedding_norm : {"scalar", "batch"} or None, default="scalar"
        Normalisation of the encoder's output (not in the paper; without one
        the clustering loss can shrink the embedding to a point).
        ``"batch"``: a non-affine batch norm, each dimension standardised
        separately (re-weights the embedding's directions by the *source*
        spread). ``"scalar"``: each dimension centred, all divided by one
        common scale, so a linear encoder kept isometric by
        ``isometry_weight`` preserves the input geometry up to scale, which
        transfers better (module notes). After training, the exact statistics
        of the training data are used. ``None``: no normalisation (the paper).
    beta : float, default=1.0
        Weight of the cluster-size entropy term (``0`` is the variant-E ablation).
    ortho_weight : float, default=1.0
        Weight of the orthogonality penalty (``0`` is the variant-O ablation).
    isometry_weight : float, default=1.0
        Weight of the penalty that keeps a *linear* encoder (``hidden_dims=()``)
        a scaled partial isometry, ``||G / mean(diag G) - I||^2`` with ``G``
        the smaller Gram matrix of its weight. Without it the clustering loss
        projects the embedding onto the directions that separate the source
        clusters and the target's other directions are lost (see the module
        notes). Not in the paper; ``0`` switches it off. Ignored for an MLP
        encoder.
    max_epochs : int, default=100
        Training epochs on the source (the paper trains 500 on synthetic data).
    n_init : int, default=1
        Independent training runs from different initial weights; the run with
        the lowest training objective on the whole source is kept (like
        :class:`~sklearn.cluster.KMeans`' ``n_init``; the paper trains once).
        Training can end in a local optimum that merges two source clusters and
        splits another, and the objective singles such runs out: on the
        synthetic protocol (10 data sets per K, ``embedding_norm="batch"``,
        ``adapt_n_init=1``) target NMI for K = 2/3/5/10 was
        0.887/0.873/0.825/0.826 with one run and 0.880/0.979/0.881/0.833 with
        five. ``adapt_n_init`` repairs the same failures at adaptation time, so
        with its default one run scores as well as five (module notes) and
        ``n_init=1`` is the default. ``fit`` costs ``n_init`` times one run.
    batch_size : int, default=256
    learning_rate : float, default=5e-3
        Adam learning rate (paper: 5e-3 synthetic, 5e-4 real data).
    weight_decay : float, default=5e-4
        Adam weight decay.
    keep_best : bool, default=False
        What a ``KeyboardInterrupt`` during training leaves. False: the
        estimator as it was before the call. True: training stops, the encoder
        and blocks of the epoch with the lowest loss so far are kept and the
        call completes with a warning (needs one finished epoch).
    device : str or torch.device, default="auto"
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    random_state : int, RandomState instance or None, default=None
        Seeds local generators only; equal values give identical results on CPU.
    verbose : int, default=0
        ``>= 1`` shows a progress bar with the running loss.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, embedding_dim)
        Centroids adapted to the last data set seen by ``fit`` (the source) or
        ``transfer`` (the target), in the embedding space. Clusters that
        received no sample of that data set are ordered last.
    labels_ : ndarray of shape (n_samples,)
        Labels of that data set (argmax of the last block's assignment).
    n_iter_ : int
        Training epochs run by ``fit``.
    history_ : list of dict
        Per-epoch mean losses (``loss``, ``clustering``, ``entropy``,
        ``orthogonality``, ``isometry``) with ``phase`` ``"fit"`` or ``"transfer"``;
        with ``n_init > 1``, those of the kept run.
    encoder_ : torch.nn.Module
    blocks_ : torch.nn.ModuleList of CentroidUpdateBlock
    device_ : torch.device
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string feature names.

    See Also
    --------
    SinkhornKMeans : fixed centres, transferred by warm-started OT k-means.

    Notes
    -----
    The loss, per batch (sums over samples are means):

    * ``L_clust = sum_l alpha_l mean_i sum_j delta_ij^(l) sigma(q_l(z_i - c_j^(l)))``,
      i.e. ``-sum alpha delta l(z, c)`` with the similarity score
      ``l = -sigma(q)``: assignments are rewarded for high similarity to the
      centroids they produce;
    * ``L_ent = sum_l alpha_l sum_j pi_j log pi_j`` with ``pi_j = mean_i delta_ij``:
      minus the entropy of the cluster sizes, so minimising it favours balanced
      clusters;
    * ``alpha_l = 2 l / (L (L + 1))`` increases linearly and sums to one.
    * the linear encoder's isometry penalty (``isometry_weight``, not in the
      paper) keeps its weight a scaled partial isometry, so the embedding keeps
      the target's directions the source did not need.

    ``predict`` never adapts: it assigns to the stored centroids with the last
    block's rule, so a row's label does not depend on the other rows.
    ``transfer`` re-runs the blocks on the target (streamed over row chunks, in
    bounded memory; once per start with ``adapt_n_init > 1``) and stores the
    adapted centroids.

    Examples
    --------
    >>> from sktransfer_cluster import TDCMCluster
    >>> from sktransfer_cluster.datasets import make_tdcm_transfer
    >>> task = make_tdcm_transfer(n_clusters=3, n_samples_per_cluster=50, shift=1.0, random_state=0)
    >>> model = TDCMCluster(n_clusters=3, hidden_dims=(16,), embedding_dim=4, max_epochs=5,
    ...                     device="cpu", random_state=0).fit(task.X_source)
    >>> model.cluster_centers_.shape
    (3, 4)
    >>> model.transfer(task.X_target).shape
    (150,)
    >>> model.transform(task.X_target).shape
    (150, 4)
    """

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "hidden_dims": [tuple, list],
        "embedding_dim": [Interval(Integral, 1, None, closed="left")],
        "n_blocks": [Interval(Integral, 1, None, closed="left")],
        "extra_adapt_steps": [Interval(Integral, 0, None, closed="left")],
        "adapt_n_init": [Interval(Integral, 1, None, closed="left")],
        "tau": [Interval(Real, 0, None, closed="neither")],
        "activation": [StrOptions({"relu", "leaky_relu"})],
        "symmetric": ["boolean"],
        "embedding_norm": [StrOptions({"batch", "scalar"}), None],
        "beta": [Interval(Real, 0, None, closed="left")],
        "ortho_weight": [Interval(Real, 0, None, closed="left")],
        "isometry_weight": [Interval(Real, 0, None, closed="left")],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        **COMMON_PARAMETER_CONSTRAINTS,
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        hidden_dims=(),
        embedding_dim=10,
        n_blocks=4,
        extra_adapt_steps=0,
        adapt_n_init=8,
        tau=1.0,
        activation="relu",
        symmetric=True,
        embedding_norm="scalar",
        beta=1.0,
        ortho_weight=1.0,
        isometry_weight=1.0,
        max_epochs=100,
        n_init=1,
        batch_size=256,
        learning_rate=5e-3,
        weight_decay=5e-4,
        keep_best=False,
        device="auto",
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.hidden_dims = hidden_dims
        self.embedding_dim = embedding_dim
        self.n_blocks = n_blocks
        self.extra_adapt_steps = extra_adapt_steps
        self.adapt_n_init = adapt_n_init
        self.tau = tau
        self.activation = activation
        self.symmetric = symmetric
        self.embedding_norm = embedding_norm
        self.beta = beta
        self.ortho_weight = ortho_weight
        self.isometry_weight = isometry_weight
        self.max_epochs = max_epochs
        self.n_init = n_init
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.keep_best = keep_best
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ----------------------------------------------------------------- helpers
    def _c0(self):
        return _initial_centroids(self.n_clusters, self.embedding_dim, self._dtype(), self.device_)

    def _embed(self, X):
        return self.encoder_(self._tensor(X))

    def _embed_all(self, X):
        """Embeddings of all rows (torch, no grad), computed in row chunks."""
        with torch.no_grad():
            parts = [self._embed(X[s:e]) for s, e in _chunk_rows(X.shape[0], 1, 65536)]
        return torch.cat(parts, 0)

    def _linear_encoder_weight(self):
        """Weight of the encoder's only Linear layer, or None for an MLP encoder."""
        linears = [m for m in self.encoder_.modules() if isinstance(m, torch.nn.Linear)]
        return linears[0].weight if len(linears) == 1 else None

    def _isometry_term(self):
        W = self._linear_encoder_weight()
        if W is None or self.isometry_weight == 0:
            return None
        return _isometry_penalty(W)

    def _adapt_blocks(self):
        """The blocks run on a whole data set: the ``L`` trained ones, then the last repeated."""
        return list(self.blocks_) + [self.blocks_[-1]] * int(self.extra_adapt_steps)

    def _objective(self, Z):
        clust, negent = _loss_terms(Z, self.blocks_, self._c0(), self.tau)
        ortho = _ortho_term(self.blocks_)
        loss = clust + self.beta * negent
        if self.ortho_weight > 0:
            loss = loss + self.ortho_weight * ortho
        iso = self._isometry_term()
        if iso is None:
            iso = loss.new_zeros(())
        else:
            loss = loss + self.isometry_weight * iso
        return loss, clust, negent, ortho, iso

    def _train(self, Xt, epochs, torch_gen, phase):
        params = list(self.encoder_.parameters()) + list(self.blocks_.parameters())
        opt = torch.optim.Adam(params, lr=self.learning_rate, weight_decay=self.weight_decay)
        n = Xt.shape[0]
        self.encoder_.train()
        with self._training(phase, epochs, state=[self.encoder_, self.blocks_]) as run:
            for epoch in run.epochs():
                perm = torch.randperm(n, generator=torch_gen).to(Xt.device)
                sums = np.zeros(5)
                for start in range(0, n, self.batch_size):
                    xb = Xt[perm[start : start + self.batch_size]]
                    if xb.shape[0] < 2 and self.embedding_norm is not None:
                        continue  # batch norm cannot standardise a single sample
                    terms = self._objective(self.encoder_(xb))
                    loss = terms[0]
                    if not torch.isfinite(loss):
                        run.end_epoch(loss.item())  # raises before a step on NaN
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sums += np.array([float(t.detach()) for t in terms]) * xb.shape[0]
                mean = sums / n
                record = {
                    "phase": phase,
                    "epoch": epoch,
                    "loss": mean[0],
                    "clustering": mean[1],
                    "entropy": mean[2],
                    "orthogonality": mean[3],
                    "isometry": mean[4],
                }
                run.end_epoch(record["loss"])
                self.history_.append(record)
        self.encoder_.eval()
        return run.completed

    @torch.no_grad()
    def _set_norm_stats(self, X):
        """Exact mean/variance of the pre-normalisation embeddings of ``X`` (streamed).

        Replaces batch norm's running averages, so the normalisation used by
        ``predict``/``transfer`` is deterministic and does not depend on the
        last training batches.
        """
        if self.embedding_norm is None:
            return
        body, bn = self.encoder_[0], self.encoder_[1]
        s1 = s2 = None
        n = X.shape[0]
        for s, e in _chunk_rows(n, 1, 65536):
            h = body(self._tensor(X[s:e]))
            a, b = h.sum(0), (h * h).sum(0)
            s1, s2 = (a, b) if s1 is None else (s1 + a, s2 + b)
        mean = s1 / n
        bn.running_mean.copy_(mean)
        bn.running_var.copy_((s2 / n - mean * mean).clamp_min(0.0))

    def _adapt_starts(self, Z):
        """Starting centroids of the adaptation: ``c^(0)``, then ``adapt_n_init - 1`` k-means++ seeds."""
        starts = [self._c0()]
        if self.adapt_n_init > 1:
            rng, _ = make_generators(self.random_state, "cpu")
            Zn = Z.cpu().numpy()
            for _ in range(self.adapt_n_init - 1):
                seeds, _ = kmeans_plusplus(Zn, self.n_clusters, random_state=int(rng.integers(2**31 - 1)))
                starts.append(torch.as_tensor(seeds, dtype=Z.dtype, device=Z.device))
        return starts

    def _adapt(self, X):
        """Run the blocks on all of ``X``; store the centroids; return the labels."""
        Z = self._embed_all(X)
        blocks = self._adapt_blocks()
        starts = self._adapt_starts(Z)
        if len(starts) == 1:
            C = _adapt_centroids(Z, blocks, starts[0], self.tau)[-1]
        else:
            best = None
            for C0 in starts:  # keep the first (the paper's start) on ties
                C = _adapt_centroids(Z, blocks, C0, self.tau)[-1]
                objective = _final_objective(Z, blocks[-1], C, self.tau, self.beta)
                if best is None or objective < best[0]:
                    best = (objective, C)
            C = best[1]
        with torch.no_grad():
            labels = self._assign(Z, C)
        # Occupied clusters first (in their order), so labels_ are 0..m-1 consecutive.
        counts = np.bincount(labels, minlength=self.n_clusters)
        order = np.concatenate([np.flatnonzero(counts > 0), np.flatnonzero(counts == 0)])
        remap = np.empty_like(order)
        remap[order] = np.arange(order.shape[0])
        self._centroids = C[torch.as_tensor(order, device=C.device)].detach()
        self.cluster_centers_ = self._centroids.cpu().numpy()
        return remap[labels].astype(np.int64)

    def _assign(self, Z, C):
        """Argmax of the last block's assignment against fixed centroids ``C``."""
        return self.blocks_[-1].logits(Z, C, self.tau).argmax(1).cpu().numpy().astype(np.int64)

    # -------------------------------------------------------------- protocol
    def _fit(self, X, y, *, rng, torch_gen):
        self._check_n_clusters(X.shape[0], self.n_clusters)
        if self.embedding_dim < self.n_clusters:
            raise ValueError(
                f"embedding_dim={self.embedding_dim} must be >= n_clusters={self.n_clusters}: "
                "the initial centroids are orthogonal unit vectors of the embedding space; "
                "raise embedding_dim."
            )
        if self.embedding_norm is not None and X.shape[0] < 2:
            raise ValueError(
                f"n_samples={X.shape[0]}: embedding_norm={self.embedding_norm!r} normalises the embeddings "
                "over a batch and needs at least 2 samples; pass more samples or "
                "embedding_norm=None."
            )
        best = None
        for _ in range(self.n_init):
            # Each run starts from new weights drawn from the same seeded generator.
            self.encoder_, self.blocks_ = self._new_networks(X, torch_gen)
            self.history_ = []
            n_iter = self._train(self._tensor(X), self.max_epochs, torch_gen, "fit")
            self._set_norm_stats(X)
            objective = self._full_objective(X)
            if best is None or objective < best[0]:
                best = (objective, self.encoder_, self.blocks_, self.history_, n_iter)
            if self.__dict__.get("_training_stopped", False):
                break  # interrupted under keep_best: no further runs
        _, self.encoder_, self.blocks_, self.history_, self.n_iter_ = best
        self.labels_ = self._adapt(X)

    def _new_networks(self, X, torch_gen):
        """A freshly initialised encoder and ``n_blocks`` blocks on the working device."""
        dims = [X.shape[1], *[int(h) for h in self.hidden_dims], int(self.embedding_dim)]
        encoder = init_module(mlp(dims), torch_gen)
        if self.embedding_norm == "batch":
            encoder = torch.nn.Sequential(encoder, torch.nn.BatchNorm1d(self.embedding_dim, affine=False))
        elif self.embedding_norm == "scalar":
            encoder = torch.nn.Sequential(encoder, _ScalarNorm(self.embedding_dim))
        blocks = torch.nn.ModuleList(
            CentroidUpdateBlock(self.embedding_dim, symmetric=self.symmetric, activation=self.activation)
            .reset_parameters(torch_gen)
            for _ in range(self.n_blocks)
        )
        dtype = self._dtype()
        return encoder.to(device=self.device_, dtype=dtype), blocks.to(device=self.device_, dtype=dtype)

    def _transfer(self, X, fine_tune_epochs=0):
        """Adapt the centroids to the target by a forward pass of the blocks.

        Parameters
        ----------
        X : ndarray
            Validated target data.
        fine_tune_epochs : int, default=0
            Unsupervised training epochs (same loss) of encoder and blocks on the
            target before the forward pass; 0 is the paper's pure forward-pass
            transfer.
        """
        fine_tune_epochs = int(fine_tune_epochs)
        if fine_tune_epochs < 0:
            raise ValueError(f"fine_tune_epochs must be >= 0, got {fine_tune_epochs}.")
        if fine_tune_epochs > 0:
            _, torch_gen = make_generators(self.random_state, "cpu")
            self._train(self._tensor(X), fine_tune_epochs, torch_gen, "transfer")
            self._set_norm_stats(X)
        return self._adapt(X)

    def _predict(self, X):
        return self._assign(self._embed(X), self._centroids)

    def transform(self, X):
        """Embed ``X`` with the encoder.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        Z : ndarray of shape (n_samples, embedding_dim)
        """
        X = self._fitted_input(X)
        return self._chunked(lambda xc: self._embed(xc).cpu().numpy(), X)

    def score(self, X, y=None):
        """Minus the training objective on ``X`` (higher is better, no labels needed).

        The blocks run on all of ``X`` (streamed), and
        ``-(L_clust + beta L_ent + ortho_weight ||W W^T - I||^2)`` is returned,
        with sample means, so values are comparable across data set sizes.
        The fitted model is not changed.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        score : float
        """
        return -self._full_objective(self._fitted_input(X))

    @torch.no_grad()
    def _full_objective(self, X):
        """The training objective on all of ``X`` (blocks streamed), as a float."""
        Z = self._embed_all(X)
        C0 = self._c0()
        centroids = _adapt_centroids(Z, self.blocks_, C0, self.tau)
        clust, negent = _streamed_loss_terms(Z, self.blocks_, C0, centroids, self.tau)
        ortho = float(_ortho_term(self.blocks_)) if self.ortho_weight > 0 else 0.0
        iso = self._isometry_term()
        iso = 0.0 if iso is None else float(iso)
        return clust + self.beta * negent + self.ortho_weight * ortho + self.isometry_weight * iso

    @property
    def _n_features_out(self):
        return int(self.embedding_dim)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
