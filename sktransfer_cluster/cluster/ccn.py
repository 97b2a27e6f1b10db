"""CCNCluster: learning to cluster in order to transfer (Hsu, Lv & Kira, ICLR 2018).

``fit`` learns a pairwise similarity network ``G`` (backbone -> pair enumeration
-> hidden FC -> 2 classes) from labelled source data. ``transfer`` then trains a
clustering network ``f`` (K softmax outputs, K an upper bound when the number of
clusters is unknown) on the unlabelled target with the KL-divergence contrastive
loss (KCL / LCO) on ``G``'s binarised dense pair predictions, and estimates the
number of clusters by the number of dominant clusters.

Measured on digits 0-4 -> 5-9 with the number of clusters known (seeds 0-2,
``benchmarks/ccn_quality.py``; defaults: ACC 0.919 / 0.894 / 0.742) and not
adopted: four initialisations of ``f`` per ``G`` average 0.816, so the seed
spread comes from ``f``'s start as much as from ``G`` (seed 2's ``G`` says
"similar" too often: precision 0.57 at 0.5); keeping the best of four runs by
the unsupervised KCL score gives 0.834, because the score does not rank the
solutions (a 0.705 run scored -0.2688, a 0.919 run -0.2702); binarising ``G``
at the quantile that makes a fraction 1/K (or 0.15, 0.25) of the target pairs
"similar", instead of at 0.5, gives 0.797 (0.805, 0.768). Over seeds 0-7 the
defaults average 0.798 (``n_clusters=20``: 0.512); adding mirrored and rotated
(90 and 180 degrees) source digits to ``G``'s training as 15 extra classes gives
0.829 (0.470), within the seed spread.

Opt-ins measured over seeds 0-7 (``benchmarks/ccn_quality.py``, G's target
pair ROC AUC 0.80-0.84 against 0.874 for raw-pixel distance): the MCL loss
(``criterion="mcl"``) lifts ``n_clusters=20`` to ACC 0.702 / K error 1.4 and
leaves ``n_clusters=5`` at 0.779; labelling pairs only where ``G`` and the
target's input-space 120-nearest-neighbour pairs agree
(``similar_neighbors=120``) on top gives 0.866 (K=5) and 0.789 / K error 1.1
(K=20); with ``n_similarity_nets=3, clustering_epochs=20`` as well, 0.857 and
0.859 / K error 0 (longer training of ``f`` fragments clusters when
``n_clusters`` is an upper bound). Soft targets (G's probabilities) and
training ``G`` on one-pixel-shifted source digits made things worse (shifts:
target pair AUC 0.75-0.78 against 0.81). An ablation outside the estimator
(``G`` replaced by the neighbour graph alone: neighbour pairs similar, all
others dissimilar; MCL, 20 epochs) did better still: k=120 gave 0.896 (K=5)
and 0.884 / K error 0.25 (K=20), k=60 0.923 and 0.721 / 2.5. On this split
``G``'s labels cost accuracy wherever they disagree with the input geometry.

A ``G`` that learns from more classes closes that gap for a known K. With the
source's 8 rotations and reflections as 40 classes
(:func:`~sktransfer_cluster.datasets.dihedral_classes`,
``classes_per_batch=10``) and ``criterion="mcl", similar_neighbors=60,
n_similarity_nets=3, clustering_epochs=20, balance_weight=1``,
``n_clusters=5`` gives 0.890 +- 0.071 over seeds 0-7: six seeds 0.904-0.935,
seed 1 0.874, seed 5 0.710 (two digits merged). Five restarts of ``f`` under
the ``G`` of two seeds (a scratch run) gave 3 merged runs (0.75-0.82) and 7
good ones (0.91-0.93); the merged ones ended with the highest training loss
(MCL on the agreeing pairs: it ranks the runs, where the KCL ``score`` above
did not). So ``n_init=5`` keeps the lowest-loss ``f``: 0.924 +- 0.005, every
seed 0.914-0.930 (KMeans 0.895), as good as the neighbour-graph ablation, not
better. Without the dihedral source ``n_init=5`` gives 0.886 (0.885 with one
start); keeping ``G``'s source batch-norm statistics (``adapt_bn=False``)
gives 0.911 +- 0.005. The dihedral ``G`` says "similar" rarely (target pair recall
0.06-0.13, precision 0.91-0.98), so with an upper bound it fragments:
``n_clusters=20`` gave 0.397 / K error 5.1 with that setting and 0.544 / 4.3
with ``similar_neighbors=120`` and no balance term (seeds 0-2), against
0.859 / 0 without the dihedral source.
"""

from __future__ import annotations

import copy
import math
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_consistent_length, column_or_1d

from ..base import COMMON_PARAMETER_CONSTRAINTS, TransferClusterMixin, make_generators
from ..losses import kcl_loss, mcl_loss, negative_size_entropy
from ..metrics import n_dominant_clusters
from ..nn import SimilarityEnsemble, SimilarityNetwork, init_module, knn_indices, mlp

__all__ = ["CCNCluster"]

# Rows per side of a block of pairs in score / pairwise_similarity: a block holds
# _PAIR_BLOCK**2 pairs, which bounds memory whatever n is.
_PAIR_BLOCK = 256


def _minibatches(n, batch_size, perm):
    """Split ``perm`` into batches of ``batch_size``; a last batch of 1 row joins the previous.

    Batch norm in training mode needs at least two rows per batch.
    """
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] < 2:
        starts.pop()
    bounds = starts[1:] + [n]
    return [perm[s:e] for s, e in zip(starts, bounds)]


def _class_balanced_batch(class_index, batch_size, classes_per_batch, rng):
    """Indices of a minibatch drawn from ``classes_per_batch`` random classes, equally.

    Drawing from a few classes makes sure similar pairs exist in every batch.
    """
    n_classes = len(class_index)
    c = min(classes_per_batch, n_classes)
    chosen = rng.choice(n_classes, size=c, replace=False)
    per_class = max(2, batch_size // c)
    parts = []
    for k in chosen:
        idx = class_index[k]
        parts.append(rng.choice(idx, size=min(per_class, idx.shape[0]), replace=False))
    batch = np.concatenate(parts)
    if batch.shape[0] < 2:  # e.g. a single class with a single sample was drawn
        n = sum(ix.shape[0] for ix in class_index)
        batch = rng.choice(np.concatenate(class_index), size=min(n, max(2, batch_size)), replace=False)
    return batch


@torch.no_grad()
def _reestimate_batchnorm(module, batches):
    """Reset every BatchNorm's running statistics and re-estimate them exactly.

    Runs ``module`` in training mode over ``batches`` (callables or tensors fed to
    it) with a cumulative average, then returns the module in eval mode.
    """
    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        module.eval()
        return module
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative moving average = exact mean over batches
    module.train()
    for xb in batches:
        module(xb)
    for bn, mom in zip(bns, momenta):
        bn.momentum = mom
    module.eval()
    return module


def _second_order(similar, threshold):
    """Denoise binary pair labels of a minibatch by their shared neighbours.

    ``C = S S / sqrt(deg_i deg_j)`` (the cosine of the rows of the binary
    similarity matrix ``S``, self-pairs included, so ``deg >= 1``): a pair is
    relabelled similar when the two samples are called similar to mostly the
    same samples of the batch, whatever ``G`` said of the pair itself.
    O(b^2) per minibatch of b rows.

    Parameters
    ----------
    similar : torch.Tensor of shape (b, b)
        0/1 labels with ones on the diagonal.
    threshold : float
        Pairs with ``C > threshold`` are similar.

    Returns
    -------
    torch.Tensor of shape (b, b), 0/1 of the dtype of ``similar``.
    """
    deg = similar.sum(1, keepdim=True).clamp_min(1.0)
    cos = (similar @ similar) / torch.sqrt(deg * deg.T)
    return (cos > threshold).to(similar.dtype)


def _neighbor_pairs(knn, idx):
    """(b, b) boolean: ``idx[j]`` is among the neighbours of ``idx[i]`` or vice versa, or i = j.

    ``knn`` (n, k) holds each row's neighbours. The batch positions of the
    neighbours come from an (n,) lookup: O(n + b k + b^2) memory, no (b, k, b).
    """
    b = idx.shape[0]
    pos = torch.full((knn.shape[0],), -1, dtype=torch.long, device=knn.device)
    pos[idx] = torch.arange(b, device=knn.device)
    cols = pos[knn[idx]]  # (b, k): batch position of each neighbour, -1 outside the batch
    rows = torch.arange(b, device=knn.device).unsqueeze(1).expand_as(cols)
    inside = cols >= 0
    nb = torch.zeros((b, b), dtype=torch.bool, device=knn.device)
    nb[rows[inside], cols[inside]] = True
    nb = nb | nb.T
    nb.fill_diagonal_(True)
    return nb


class CCNCluster(TransferClusterMixin, ClusterMixin, BaseEstimator):
    """Constrained clustering network driven by a transferred pairwise similarity.

    ``fit(X, y)`` learns the similarity network ``G`` on labelled source data:
    a shared MLP backbone, a pair layer over all ``b^2`` ordered pairs of a
    minibatch (by default the symmetric ``[|h_i - h_j|, h_i * h_j]``; the paper's
    concatenation ``[h_i, h_j]`` with ``pair_features="concat"``), a hidden
    fully connected layer and a 2-way output, trained with cross-entropy on
    same/different-class pairs of class-balanced minibatches drawn from a few
    classes. It then trains a clustering network ``f`` on ``X`` itself with the
    KCL loss driven by ``G`` (so ``labels_`` exists).

    ``transfer(X)`` trains a freshly initialised ``f`` with ``n_clusters`` softmax
    outputs on the unlabelled target: for every minibatch, ``G`` predicts the
    similarity of all ordered pairs (binarised at 0.5) and ``f`` minimises
    KCL: ``KL(P*||Q) + KL(Q*||P)`` for similar pairs and
    ``max(0, sigma - KL(P*||Q)) + max(0, sigma - KL(Q*||P))`` for dissimilar
    ones (``*`` = held constant). ``G`` stays fixed (optionally its batch-norm
    statistics are re-estimated on the target). With ``source=(X_s, y_s)`` it
    is CCN+: cross-entropy on labelled source rows mixed into each batch.

    ``n_clusters`` may be an upper bound: the number of clusters is estimated as
    the number of dominant clusters (``n_clusters_``). On the digits
    cross-task split (0-4 -> 5-9, seeds 0-2, defaults otherwise) with
    ``n_clusters=20``, CCN reached ACC 0.47 with K error ``|n_clusters_ - 5|``
    4.3, and CCN+ (the source rows as ``source``, although their classes are
    not the target's) ACC 0.69 with K error 0.3: the cross-entropy keeps
    ``f``'s outputs from fragmenting. With the number of clusters known CCN+
    is worse (ACC 0.73 at ``n_clusters=5``, where source and target classes
    share the outputs; 0.70 at ``n_clusters=10``) than CCN (0.85).

    Parameters
    ----------
    n_clusters : int, default=10
        Number of outputs ``K`` of the clustering network: the number of
        clusters when known, an upper bound otherwise.
    sigma : float, default=2.0
        Hinge margin of the KCL loss for dissimilar pairs.
    hidden_dims : tuple of int, default=(128, 64)
        Hidden widths of ``f`` (batch norm + ReLU), and of ``G``'s backbone when
        ``similarity_hidden_dims`` is None.
    similarity_hidden_dims : tuple of int or None, default=(128,)
        Backbone widths of ``G``; None means ``hidden_dims``. A small ``G``
        transfers better: trained on few source classes, a deeper one learns
        to tell those classes apart rather than to compare (on digits 0-4 ->
        5-9 the target pair ROC AUC after 4-5 epochs was ~0.79 with
        ``(128,)`` against ~0.75 with ``(128, 64)``).
    pair_features : {"symmetric", "symmetric+raw", "concat"}, default="symmetric"
        How ``G`` represents a pair of backbone features ``(h_i, h_j)``:
        ``[|h_i - h_j|, h_i * h_j]`` (symmetric; see
        :class:`~sktransfer_cluster.nn.SimilarityNetwork`), the same with the
        inputs appended to ``h`` ("symmetric+raw"), or the paper's
        concatenation ``[h_i, h_j]`` ("concat").
        On digits 0-4 -> 5-9 the concatenation's similar-pair recall on the
        target was ~0.13; the symmetric form's ~0.45.
    pair_hidden : int, default=32
        Width of ``G``'s hidden layer on the pair features.
    similarity_epochs : int, default=3
        Training epochs of ``G``; an epoch is ``ceil(n / batch_size)``
        class-balanced minibatches. ``G`` learns the source classes in a few
        epochs; training longer specialises it to them and its predictions on
        unseen classes get worse (measured on digits: target pair ROC AUC
        highest after 2-4 epochs).
    similar_weight : float or "balanced", default=0.5
        Cross-entropy weight of the similar pairs (dissimilar pairs weigh 1)
        in ``G``'s loss; "balanced" gives both pair classes the same total
        weight in every minibatch. Below 1, ``G`` says "similar" only when
        surer, which trades similar-pair recall for precision; wrong
        "similar" pairs merge clusters, and on digits the precision mattered
        more (K-known accuracy ~0.81 at 1.0, ~0.85 at 0.5).
    n_similarity_nets : int, default=1
        Number of similarity networks ``G`` trained on the source, each from
        its own initialisation and minibatches; their "similar" probabilities
        are averaged (1 = the paper's single ``G``). Training time grows
        linearly. On digits 0-4 -> 5-9 (seeds 0-2) 5 networks raised the
        target pair ROC AUC from 0.80-0.82 to 0.82-0.85 and narrowed the
        similar-pair precision at 0.5 from 0.57-0.84 to 0.67-0.78, but the
        clustering accuracy barely moved (``n_clusters=5``: 0.85 against 0.85;
        ``n_clusters=20``: 0.52 against 0.47, K error 4.7 against 4.3).
    second_order_threshold : float or None, default=None
        None: ``f`` learns from ``G``'s binarised predictions, as in the paper.
        A float in (0, 1): inside every minibatch the binary labels ``S`` are
        replaced by ``[S S / sqrt(deg_i deg_j) > threshold]``, two samples
        being similar when ``G`` calls them similar to mostly the same samples
        of the batch (O(b^2) per minibatch, no n x n matrix). This raises the
        similar-pair recall, which an upper-bound ``n_clusters`` needs to keep
        classes from splitting, and costs precision, which a known
        ``n_clusters`` needs to keep classes from merging. ``score`` keeps
        using ``G``'s own binarised predictions. On digits (seeds 0-2, with
        ``n_similarity_nets=5``), 0.5 gave ``n_clusters=20`` ACC 0.60-0.61
        with K error 2-3 (0.52 and 4.7 without) and ``n_clusters=5`` ACC
        0.82-0.83 (0.85 without); 0.3 gave 0.65 with K error 1.0, and 0.76.
    criterion : {"kcl", "mcl"}, default="kcl"
        Pairwise loss of ``f``. "kcl": the paper's KL-divergence contrastive
        loss (hinge margin ``sigma``). "mcl": the meta classification
        likelihood of Hsu et al. (ICLR 2019), the authors' successor to KCL:
        ``P(same) = p_i . p_j`` for the two softmax outputs and a binary
        cross-entropy against the pair label (see
        :func:`~sktransfer_cluster.losses.mcl_loss`); ``sigma`` is unused.
        On digits 0-4 -> 5-9 (seeds 0-7, other parameters default) "mcl"
        gave ``n_clusters=20`` ACC 0.702 with K error 1.4 (KCL: 0.512, 3.8)
        and ``n_clusters=5`` ACC 0.779 (KCL: 0.798).
    similar_neighbors : int or None, default=None
        None: every pair of a minibatch gets ``G``'s label, as in the paper.
        An int ``k``: the ``k`` nearest neighbours (Euclidean, in the input
        space) of every target sample are found once per training run
        (:func:`~sktransfer_cluster.nn.knn_indices`, O(n k) memory, no n x n
        matrix), a pair being "neighbours"
        when either is among the other's ``k``; a pair is then labelled
        similar when ``G`` says similar *and* it is a neighbour pair,
        dissimilar when ``G`` says dissimilar and it is not, and pairs where
        the two disagree are left out of the loss (unknown, not dissimilar).
        ``G`` carries what was learned on the source, the neighbourhoods the
        target's own geometry; on digits raw-pixel distance ranks target pairs
        better (ROC AUC 0.874) than ``G`` does (0.80-0.84). On digits 0-4 ->
        5-9 (seeds 0-7) with ``criterion="mcl"`` and ``k=120``: ``n_clusters=5``
        ACC 0.866 and ``n_clusters=20`` ACC 0.789, K error 1.1 (defaults:
        0.798 and 0.512, 3.8); adding ``n_similarity_nets=3`` and
        ``clustering_epochs=20``: ``n_clusters=20`` ACC 0.859 with K error 0
        on every seed, ``n_clusters=5`` ACC 0.857.
    balance_weight : float, default=0.0
        Weight of minus the entropy of the minibatch's mean cluster
        assignment added to ``f``'s loss (0 = the paper's loss). It favours
        clusters of equal size, so it only suits a *known* number of roughly
        balanced clusters: with an upper-bound ``n_clusters`` it spreads the
        samples over all outputs. Not applied to CCN+ batches. On digits
        (seeds 0-7, with ``criterion="mcl", similar_neighbors=120,
        n_similarity_nets=3, clustering_epochs=20``) 1.0 raised
        ``n_clusters=5`` ACC from 0.857 to 0.877 (every seed 0.865-0.886)
        and dropped ``n_clusters=20`` to 0.348 (K error 6). With
        ``similar_neighbors=60`` instead: 0.885 +- 0.008 (30: 0.873; 90:
        0.881; 60 with 40 epochs of ``f``: 0.887; 60 without it: 0.868),
        against KMeans' 0.895 on the same target.
    classes_per_batch : int, default=5
        Number of source classes each minibatch of ``G`` is drawn from (fewer
        classes = more similar pairs).
    clustering_epochs : int, default=40
        Training epochs of ``f`` in ``fit`` and (by default) in ``transfer``.
    n_init : int, default=1
        Number of clustering networks ``f`` trained from different
        initialisations and minibatch orders in ``fit`` and ``transfer`` (as
        KMeans' ``n_init``); the one with the lowest loss on the data it
        clusters is kept: ``f``'s training objective (without CCN+'s source
        rows), ``f`` in eval mode, over one pass of minibatches in row order.
        Time grows linearly. On digits 0-4 -> 5-9 (seeds 0-7, G trained on
        ``datasets.dihedral_classes`` of the source, see the module notes)
        ``n_init=5`` raised ``n_clusters=5`` ACC from 0.890 +- 0.071 to
        0.924 +- 0.005 by leaving out the starts that merge two digits.
    batch_size : int, default=100
        Minibatch size; each minibatch yields ``batch_size**2`` pairs, so time
        and memory per step grow as O(batch_size^2).
    learning_rate : float, default=1e-3
        Adam learning rate of both networks.
    adapt_bn : bool, default=True
        Re-estimate ``G``'s batch-norm statistics on the target in ``transfer``
        (a copy is adapted; the source ``G`` is kept). On the digits cross-task
        split this lifted G's target pair precision from ~0.35 to ~0.5 and
        the K-known accuracy from ~0.6 to ~0.85-0.9.
    keep_best : bool, default=False
        What a ``KeyboardInterrupt`` during training leaves. False: the
        estimator as it was before the call. True: training stops, the network
        being trained goes back to its lowest-loss epoch so far, later phases
        are skipped (an interrupted ``G`` leaves ``f`` untrained) and the call
        completes with a warning (needs one finished epoch).
    device : str or torch.device, default="auto"
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    random_state : int, RandomState instance or None, default=None
        Seeds local generators only; equal values give identical results on CPU.
    verbose : int, default=0
        ``>= 1`` shows progress bars with the running loss.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster labels of the last data set seen by ``fit`` or ``transfer``,
        consecutive from 0 and ordered by decreasing cluster size (ties by
        output id): labels ``0 .. n_clusters_ - 1`` are the dominant clusters.
    n_clusters_ : int
        Number of dominant clusters, ``sum_k [|C_k| >= n / n_clusters]`` (the
        paper's estimate of the number of clusters).
    cluster_outputs_ : ndarray of shape (n_used,)
        Output unit of ``f`` behind each label: label ``l`` is output
        ``cluster_outputs_[l]``. Outputs that won no sample of the fitted data
        have no label; ``predict`` assigns a sample to its most probable *used*
        output, so it only ever returns labels in ``0 .. n_used - 1`` and
        ``predict`` on the fitted data equals ``labels_``.
    similarity_net_ : SimilarityNetwork or SimilarityEnsemble
        The network ``G`` learned on the source (never changed by ``transfer``);
        its class follows ``pair_features``. With ``n_similarity_nets > 1``, a
        :class:`~sktransfer_cluster.nn.SimilarityEnsemble` of the networks.
    target_similarity_net_ : SimilarityNetwork or None
        ``G`` with batch-norm statistics re-estimated on the last target
        (``adapt_bn=True``), else None.
    clustering_net_ : torch.nn.Module
        The clustering network ``f`` of the last ``fit``/``transfer``.
    n_iter_ : int
        Epochs run by the last ``fit`` (both networks) or ``transfer``, over
        all ``n_init`` starts of ``f``.
    history_ : list of dict
        Per-epoch mean losses, with the phase ("similarity", "fit", "transfer");
        those of ``f`` also give its start ("init", ``0 .. n_init - 1``).
    device_ : torch.device
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string feature names.

    See Also
    --------
    sktransfer_cluster.metrics.n_dominant_clusters : the estimate of K.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from sktransfer_cluster.cluster.ccn import CCNCluster
    >>> X, y = make_blobs(n_samples=120, centers=4, random_state=0)
    >>> Xs, ys, Xt = X[y < 2], y[y < 2], X[y >= 2]
    >>> ccn = CCNCluster(n_clusters=2, hidden_dims=(16,), pair_hidden=16,
    ...                  similarity_epochs=5, clustering_epochs=5, batch_size=30,
    ...                  device="cpu", random_state=0).fit(Xs, ys)
    >>> ccn.transfer(Xt).shape
    (60,)
    >>> bool(ccn.n_clusters_ >= 1)
    True
    """

    _requires_y = True

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "sigma": [Interval(Real, 0, None, closed="neither")],
        "hidden_dims": [tuple, list],
        "pair_hidden": [Interval(Integral, 1, None, closed="left")],
        "similarity_epochs": [Interval(Integral, 1, None, closed="left")],
        "classes_per_batch": [Interval(Integral, 1, None, closed="left")],
        "clustering_epochs": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 2, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "adapt_bn": ["boolean"],
        "pair_features": [StrOptions({"concat", "symmetric", "symmetric+raw"})],
        "similarity_hidden_dims": [None, tuple, list],
        "similar_weight": [Interval(Real, 0, None, closed="neither"), StrOptions({"balanced"})],
        "n_similarity_nets": [Interval(Integral, 1, None, closed="left")],
        "second_order_threshold": [None, Interval(Real, 0, 1, closed="neither")],
        "criterion": [StrOptions({"kcl", "mcl"})],
        "similar_neighbors": [None, Interval(Integral, 1, None, closed="left")],
        "balance_weight": [Interval(Real, 0, None, closed="left")],
        **COMMON_PARAMETER_CONSTRAINTS,
    }

    def __init__(
        self,
        n_clusters=10,
        *,
        sigma=2.0,
        hidden_dims=(128, 64),
        pair_hidden=32,
        similarity_epochs=3,
        classes_per_batch=5,
        clustering_epochs=40,
        n_init=1,
        batch_size=100,
        learning_rate=1e-3,
        adapt_bn=True,
        pair_features="symmetric",
        similarity_hidden_dims=(128,),
        similar_weight=0.5,
        n_similarity_nets=1,
        second_order_threshold=None,
        criterion="kcl",
        similar_neighbors=None,
        balance_weight=0.0,
        keep_best=False,
        device="auto",
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.sigma = sigma
        self.hidden_dims = hidden_dims
        self.pair_hidden = pair_hidden
        self.similarity_epochs = similarity_epochs
        self.classes_per_batch = classes_per_batch
        self.clustering_epochs = clustering_epochs
        self.n_init = n_init
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.adapt_bn = adapt_bn
        self.pair_features = pair_features
        self.similarity_hidden_dims = similarity_hidden_dims
        self.similar_weight = similar_weight
        self.n_similarity_nets = n_similarity_nets
        self.second_order_threshold = second_order_threshold
        self.criterion = criterion
        self.similar_neighbors = similar_neighbors
        self.balance_weight = balance_weight
        self.keep_best = keep_best
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ----------------------------------------------------------------- helpers
    def _check_samples(self, n):
        self._check_n_clusters(n, self.n_clusters)
        if n < 2:
            raise ValueError(
                f"n_samples={n}: {type(self).__name__} needs at least 2 samples "
                "(it learns from pairs, with batch normalisation)."
            )

    def _row_batches(self, n):
        """Minibatch indices of ``n`` rows in row order (deterministic passes over a data set)."""
        return _minibatches(n, self.batch_size, torch.arange(n, device=self.device_))

    def _current_g(self):
        g = getattr(self, "target_similarity_net_", None)
        return self.similarity_net_ if g is None else g

    def _train_similarity(self, Xt, codes, n_classes, rng, torch_gen):
        """Cross-entropy on all same/different pairs of class-balanced minibatches."""
        n, d = Xt.shape
        g_dims = list(self.hidden_dims if self.similarity_hidden_dims is None else self.similarity_hidden_dims)
        g = SimilarityNetwork(
            d,
            g_dims,
            self.pair_hidden,
            symmetric=self.pair_features != "concat",
            raw_features=self.pair_features == "symmetric+raw",
        )
        g = init_module(g, torch_gen).to(device=self.device_, dtype=self._dtype())
        opt = torch.optim.Adam(g.parameters(), lr=self.learning_rate)
        class_index = [np.flatnonzero(codes == k) for k in range(n_classes)]
        codes_t = torch.as_tensor(codes, device=self.device_)
        iters = max(1, math.ceil(n / self.batch_size))
        g.train()
        with self._training("similarity", self.similarity_epochs, state=[g]) as run:
            for epoch in run.epochs():
                total = 0.0
                for _ in range(iters):
                    idx = _class_balanced_batch(class_index, self.batch_size, self.classes_per_batch, rng)
                    idx_t = torch.as_tensor(idx, device=self.device_)
                    yb = codes_t[idx_t]
                    target = (yb.unsqueeze(1) == yb.unsqueeze(0)).long().reshape(-1)
                    logits = g(Xt[idx_t]).reshape(-1, 2)
                    loss = F.cross_entropy(logits, target, weight=self._pair_class_weight(target))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += loss.item()
                record = {"phase": "similarity", "epoch": epoch, "loss": total / iters}
                run.end_epoch(record["loss"])
                self.history_.append(record)
        g.eval()
        return g

    def _pair_class_weight(self, target):
        """Cross-entropy weights (dissimilar, similar) of ``G``'s pair classes."""
        if self.similar_weight == "balanced":
            # Each class weighs in as a whole as much as the other, whatever its share of pairs.
            n_sim = target.sum().clamp_min(1)
            n_dis = (target.numel() - target.sum()).clamp_min(1)
            w = torch.stack([target.numel() / (2 * n_dis), target.numel() / (2 * n_sim)])
        else:
            w = torch.tensor([1.0, float(self.similar_weight)])
        return w.to(device=self.device_, dtype=self._dtype())

    def _cluster(self, Xt, g, epochs, torch_gen, phase, source=None, rng=None):
        """Train ``n_init`` fresh ``f`` on ``Xt``; keep the one of lowest target loss.

        The loss that ranks them (:meth:`_target_loss`) is the training
        objective without CCN+'s source rows, on one fixed pass of minibatches.
        """
        knn = None if self.similar_neighbors is None else knn_indices(Xt, self.similar_neighbors)
        best, best_loss = None, math.inf
        for init in range(self.n_init):
            f = self._train_clustering(Xt, g, knn, epochs, torch_gen, phase, init, source, rng)
            loss = self._target_loss(f, Xt, g, knn) if self.n_init > 1 else 0.0
            if loss < best_loss:
                best, best_loss = f, loss
            if self.__dict__.get("_training_stopped", False):
                break  # an interrupt kept by keep_best: no further start
        return best

    def _batch_loss(self, f, xb, idx, g, knn):
        """``f``'s loss on the pairs of target minibatch ``xb`` (rows ``idx`` of the target)."""
        sim, known = self._batch_targets(g, xb, idx, knn)
        log_p = F.log_softmax(f(xb), dim=1)
        loss = self._pair_loss(log_p, sim, mask=known)
        if self.balance_weight > 0:
            # Minus the entropy of the batch's mean assignment: favours equal sizes.
            loss = loss + self.balance_weight * negative_size_entropy(log_p.exp())
        return loss

    def _batch_targets(self, g, xb, idx, knn):
        """Pair labels of a minibatch and the mask of pairs that have one (None: all)."""
        with torch.no_grad():
            sim = self._pair_targets(g, xb)
            if knn is None:
                return sim, None
            # Labels only where G and the input-space neighbourhoods agree.
            nb = _neighbor_pairs(knn, idx)
            return sim * nb.to(sim.dtype), (sim > 0.5) == nb

    @torch.no_grad()
    def _target_loss(self, f, Xt, g, knn):
        """Mean :meth:`_batch_loss` of a trained ``f`` (eval mode) over the target in row order."""
        f.eval()
        batches = self._row_batches(Xt.shape[0])
        return sum(self._batch_loss(f, Xt[idx], idx, g, knn).item() for idx in batches) / len(batches)

    def _train_clustering(self, Xt, g, knn, epochs, torch_gen, phase, init=0, source=None, rng=None):
        """Train a fresh ``f`` on ``Xt`` with KCL driven by ``g`` (+ CE on source rows)."""
        n, d = Xt.shape
        f = mlp([d, *self.hidden_dims, self.n_clusters], batch_norm=True)
        f = init_module(f, torch_gen).to(device=self.device_, dtype=self._dtype())
        opt = torch.optim.Adam(f.parameters(), lr=self.learning_rate)
        g.eval()
        f.train()
        with self._training(phase, epochs, state=[f]) as run:
            for epoch in run.epochs():
                perm = torch.randperm(n, generator=torch_gen).to(self.device_)
                batches = _minibatches(n, self.batch_size, perm)
                total = 0.0
                for idx in batches:
                    xb = Xt[idx]
                    if source is None:
                        loss = self._batch_loss(f, xb, idx, g, knn)
                    else:
                        sim, known = self._batch_targets(g, xb, idx, knn)
                        loss = self._ccn_plus_loss(f, xb, sim, source, rng, known=known)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += loss.item()
                record = {"phase": phase, "init": init, "epoch": epoch, "loss": total / len(batches)}
                run.end_epoch(record["loss"])
                self.history_.append(record)
        # Exact batch-norm statistics of f on the data it clusters (deterministic order).
        return _reestimate_batchnorm(f, [Xt[i] for i in self._row_batches(n)])

    def _pair_targets(self, g, xb):
        """Pair labels of a minibatch for ``f``: G's binarised "similar" predictions."""
        sim = g(xb).argmax(-1)  # G's probability of "similar" > 0.5
        if self.second_order_threshold is not None:
            return _second_order(sim.to(xb.dtype), self.second_order_threshold)
        return sim

    def _pair_loss(self, log_p, sim, mask=None):
        """The clustering criterion of ``f`` on the pairs of a minibatch."""
        if self.criterion == "mcl":
            return mcl_loss(log_p, sim, mask=mask)
        return kcl_loss(log_p, sim, mask=mask, margin=self.sigma)

    def _ccn_plus_loss(self, f, xb, sim, source, rng, known=None):
        """CCN+: one batch of [source rows; target rows]; CE on source, KCL on target pairs.

        Pairs that involve a source row have unknown similarity here and are
        masked out of KCL (not treated as dissimilar).
        """
        Xs, codes_s = source
        m = min(Xs.shape[0], max(2, self.batch_size // 3))
        idx_s = torch.as_tensor(rng.choice(Xs.shape[0], size=m, replace=False), device=self.device_)
        nt = xb.shape[0]
        log_p = F.log_softmax(f(torch.cat([Xs[idx_s], xb])), dim=1)
        n_all = m + nt
        sim_all = torch.zeros(n_all, n_all, dtype=sim.dtype, device=sim.device)
        sim_all[m:, m:] = sim
        mask = torch.zeros(n_all, n_all, dtype=torch.bool, device=sim.device)
        mask[m:, m:] = True if known is None else known
        cluster = self._pair_loss(log_p, sim_all, mask=mask)
        cls = F.nll_loss(log_p[:m], codes_s[idx_s])
        return cls + cluster

    def _assign(self, f, Xt):
        """Labels of ``Xt`` from ``f``; sets the relabelling map and ``n_clusters_``."""
        with torch.no_grad():
            out = torch.cat(
                [f(Xt[s : s + 65536]).argmax(1) for s in range(0, Xt.shape[0], 65536)]
            ).cpu().numpy()
        counts = np.bincount(out, minlength=self.n_clusters)
        used = np.flatnonzero(counts)
        # Largest cluster first, ties by output id: dominant clusters get the smallest labels.
        used = used[np.lexsort((used, -counts[used]))]
        self.cluster_outputs_ = used.astype(np.int64)
        self._outputs = torch.as_tensor(self.cluster_outputs_, device=self.device_)
        relabel = np.full(self.n_clusters, -1, dtype=np.int64)
        relabel[used] = np.arange(used.shape[0])
        labels = relabel[out]
        self.clustering_net_ = f
        self.n_clusters_ = n_dominant_clusters(labels, n_clusters=self.n_clusters)
        self.labels_ = labels
        return labels

    # -------------------------------------------------------------- protocol
    def _fit(self, X, y, *, rng, torch_gen):
        self._check_samples(X.shape[0])
        y = column_or_1d(y)
        _, codes = np.unique(y, return_inverse=True)
        codes = codes.astype(np.int64)
        self.history_ = []
        self.target_similarity_net_ = None
        Xt = self._tensor(X)
        n_classes = int(codes.max()) + 1
        nets = []
        for _ in range(self.n_similarity_nets):
            if self.__dict__.get("_training_stopped", False):
                break  # an interrupt kept by keep_best: no further member
            nets.append(self._train_similarity(Xt, codes, n_classes, rng, torch_gen))
        self.similarity_net_ = nets[0] if len(nets) == 1 else SimilarityEnsemble(nets)
        f = self._cluster(Xt, self.similarity_net_, self.clustering_epochs, torch_gen, "fit")
        self._assign(f, Xt)
        self.n_iter_ = len(self.history_)  # finished epochs of G and f (fewer after a kept interrupt)

    def _transfer(self, X, source=None, epochs=None, adapt_bn=None):
        """Train the clustering network on the unlabelled target with KCL driven by ``G``.

        Parameters
        ----------
        X : ndarray
            Validated target data.
        source : tuple (X_source, y_source), default=None
            CCN+ mode: labelled source rows are mixed into every minibatch with
            a cross-entropy loss (``y_source`` is mapped to output units
            ``0 .. n_source_classes - 1``; needs ``n_source_classes <= n_clusters``).
        epochs : int, default=None
            Training epochs of ``f``; defaults to ``clustering_epochs``.
        adapt_bn : bool, default=None
            Re-estimate ``G``'s batch-norm statistics on the target; defaults
            to the ``adapt_bn`` parameter.
        """
        self._check_samples(X.shape[0])
        epochs = self.clustering_epochs if epochs is None else int(epochs)
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}.")
        adapt_bn = self.adapt_bn if adapt_bn is None else bool(adapt_bn)
        rng, torch_gen = make_generators(self.random_state, "cpu")
        Xt = self._tensor(X)
        src = None
        if source is not None:
            src = self._validate_source(source)
        g = self.similarity_net_
        self.target_similarity_net_ = None
        if adapt_bn:
            g = copy.deepcopy(g)
            _reestimate_batchnorm(g, [Xt[i] for i in self._row_batches(Xt.shape[0])])
            self.target_similarity_net_ = g
        done = len(self.history_)
        f = self._cluster(Xt, g, epochs, torch_gen, "transfer", source=src, rng=rng)
        self.n_iter_ = len(self.history_) - done  # epochs of f over all its starts
        return self._assign(f, Xt)

    def _validate_source(self, source):
        try:
            Xs, ys = source
        except (TypeError, ValueError) as exc:
            raise ValueError("source must be a pair (X_source, y_source).") from exc
        Xs = self._validate_input(Xs, reset=False)
        ys = column_or_1d(ys)
        check_consistent_length(Xs, ys)
        if Xs.shape[0] < 2:
            raise ValueError(f"source has n_samples={Xs.shape[0]}; CCN+ needs at least 2 source rows.")
        classes, codes = np.unique(ys, return_inverse=True)
        if classes.shape[0] > self.n_clusters:
            raise ValueError(
                f"source has {classes.shape[0]} classes but n_clusters={self.n_clusters}; CCN+ "
                "maps each source class to an output, so raise n_clusters."
            )
        return self._tensor(Xs), torch.as_tensor(codes.astype(np.int64), device=self.device_)

    def _predict(self, X):
        logits = self.clustering_net_(self._tensor(X))
        # Most probable *used* output: returns labels 0 .. len(cluster_outputs_) - 1 only.
        return logits[:, self._outputs].argmax(1).cpu().numpy()

    # ------------------------------------------------------------ pair blocks
    def _blocks(self, n):
        return [(s, min(s + _PAIR_BLOCK, n)) for s in range(0, n, _PAIR_BLOCK)]

    def pairwise_similarity(self, X, X2=None):
        """Probability that ``G`` assigns to each pair being similar.

        Uses the current ``G`` (adapted to the last target if ``adapt_bn``).
        Computed block by block; the output is dense, O(n m) memory.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        X2 : array-like of shape (m_samples, n_features), default=None
            Defaults to ``X``.

        Returns
        -------
        similarity : ndarray of shape (n_samples, m_samples)
        """
        X = self._fitted_input(X)
        X2 = X if X2 is None else self._validate_input(X2, reset=False)
        g = self._current_g()
        out = np.empty((X.shape[0], X2.shape[0]))
        with torch.no_grad():
            fa = g.backbone(self._tensor(X))
            fb = fa if X2 is X else g.backbone(self._tensor(X2))
            for i0, i1 in self._blocks(X.shape[0]):
                for j0, j1 in self._blocks(X2.shape[0]):
                    p = torch.softmax(g.pair_logits(fa[i0:i1], fb[j0:j1]), -1)[..., 1]
                    out[i0:i1, j0:j1] = p.cpu().numpy()
        return out

    def score(self, X, y=None):
        """Minus the mean KCL loss of ``f`` on all ordered pairs of ``X`` under ``G``.

        Always KCL with ``G``'s binarised labels, whatever ``criterion``,
        ``similar_neighbors`` or ``balance_weight``.

        Higher is better and no labels are needed. Pairs are processed block by
        block (bounded memory, O(n^2) time).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        score : float
        """
        X = self._fitted_input(X)
        g = self._current_g()
        n = X.shape[0]
        total = 0.0
        with torch.no_grad():
            Xt = self._tensor(X)
            feats = g.backbone(Xt)
            log_p = F.log_softmax(self.clustering_net_(Xt), dim=1)
            log_p = torch.maximum(log_p, torch.log(log_p.new_tensor(torch.finfo(log_p.dtype).tiny)))
            p = log_p.exp()
            neg_ent = (p * log_p).sum(1)
            for i0, i1 in self._blocks(n):
                for j0, j1 in self._blocks(n):
                    sim = g.pair_logits(feats[i0:i1], feats[j0:j1]).argmax(-1).to(log_p.dtype)
                    d = neg_ent[i0:i1, None] - p[i0:i1] @ log_p[j0:j1].T  # KL(P_i || P_j)
                    cost = sim * d + (1 - sim) * (self.sigma - d).clamp_min(0.0)
                    total += cost.sum().item()
        return -total / (n * n)
