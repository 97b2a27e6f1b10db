"""Pair sampling and pair labels for learning from pairwise similarity.

Plain numeric helpers of :class:`~sktransfer_cluster.cluster.CCNCluster` (Hsu, Lv
& Kira, ICLR 2018): minibatches drawn from a few classes (so that similar pairs
exist), the class weights of a same/different-pair classifier, denoised and
neighbourhood-restricted pair labels of a minibatch, exact batch-norm statistics
of a network on a data set, the pairwise (and CCN+) losses of a clustering
network, the resolution of the "auto" parameters, and block-wise passes over all
pairs of a data set in bounded memory. Arrays, tensors and torch modules in,
arrays and tensors out; nothing here imports an estimator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ...losses import negative_size_entropy
from ...nn import ConvNet, mlp
from .losses import kcl_loss, mcl_loss
from .networks import SimilarityNetwork, WithInput

__all__ = [
    "agree_with_neighbors",
    "ccn_plus_loss",
    "class_balanced_batch",
    "clustering_loss",
    "clustering_network",
    "dominant_outputs",
    "kcl_pair_score",
    "linked_outputs",
    "neighbor_pairs",
    "neighbour_probabilities",
    "neighbour_threshold",
    "pair_class_weight",
    "pair_probabilities",
    "recall_threshold",
    "reestimate_batchnorm",
    "resolve_auto",
    "same_class_pairs",
    "second_order",
    "similarity_labels",
    "similarity_network",
    "with_unknown_rows",
]

# Rows per side of a block of pairs: a block holds PAIR_BLOCK**2 pairs, which
# bounds memory whatever n is.
PAIR_BLOCK = 256


def class_balanced_batch(class_index, batch_size, classes_per_batch, rng):
    """Indices of a minibatch drawn from ``classes_per_batch`` random classes, equally.

    Drawing from a few classes makes sure similar pairs exist in every batch.

    Parameters
    ----------
    class_index : list of ndarray
        The row indices of each class.
    batch_size : int
        Rows wanted; each chosen class gives ``max(2, batch_size // c)`` rows
        (fewer when it has fewer).
    classes_per_batch : int
        Classes drawn (at most the number of classes).
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of int
        At least two row indices, without repeats.

    Examples
    --------
    >>> import numpy as np
    >>> idx = class_balanced_batch([np.arange(5), np.arange(5, 10)], 4, 1, np.random.default_rng(0))
    >>> len(idx), len(set(idx // 5))
    (4, 1)
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
def reestimate_batchnorm(module, batches):
    """Set every BatchNorm's running statistics to the exact mean and variance of its input.

    The statistics are those the layer sees at inference on all rows of
    ``batches`` (inputs fed to ``module``): one pass in eval mode per batch-norm
    layer, in the order the layers run, each layer measured with the layers
    before it already set. Unlike averaging per-batch statistics (PyTorch's
    cumulative running average), the result does not depend on how the rows are
    split into batches: rows stored sorted by class gave batches of one class,
    whose within-batch variance misses the variance between classes, and the
    adapted network then mislabelled most rows (MNIST's target is stored so).
    Returns the module in eval mode.
    """
    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    module.eval()
    if not bns:
        return module
    # A sequence is read once per layer (rows read on demand are not all held); anything else is listed.
    batches = batches if isinstance(batches, Sequence) else list(batches)
    for bn in bns:
        totals = {}

        def hook(layer, inputs, totals=totals):
            x = inputs[0].double()
            dims = [0, *range(2, x.dim())]
            totals["n"] = totals.get("n", 0) + x.numel() // x.shape[1]
            totals["s"] = totals.get("s", 0.0) + x.sum(dims)
            totals["q"] = totals.get("q", 0.0) + (x * x).sum(dims)

        handle = bn.register_forward_pre_hook(hook)
        try:
            for xb in batches:
                module(xb)
        finally:
            handle.remove()
        n = totals["n"]
        mean = totals["s"] / n
        # Unbiased, as PyTorch stores it; centred sums would be exact too, the rows are of order 1.
        var = ((totals["q"] - n * mean * mean) / max(n - 1, 1)).clamp_min(0.0)
        bn.running_mean.copy_(mean.to(bn.running_mean.dtype))
        bn.running_var.copy_(var.to(bn.running_var.dtype))
        if bn.num_batches_tracked is not None:
            bn.num_batches_tracked.fill_(len(batches))
    return module


def second_order(similar, threshold):
    """Denoise binary pair labels of a minibatch by their shared neighbours.

    ``C = S S / sqrt(deg_i deg_j)`` (the cosine of the rows of the binary
    similarity matrix ``S``, self-pairs included, so ``deg >= 1``): a pair is
    relabelled similar when the two samples are called similar to mostly the
    same samples of the batch, whatever was said of the pair itself.
    O(b^2) memory per minibatch of b rows.

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


def neighbor_pairs(knn, idx):
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


def with_unknown_rows(sim, known, m):
    """Pair labels and mask of a batch ``[m other rows; b rows]`` whose ``(b, b)`` pairs are known.

    ``sim`` (b, b) labels the last ``b`` rows' pairs, ``known`` (b, b) tells which
    of them are known (None: all). Every pair that involves one of the first
    ``m`` rows is unknown: masked out, not dissimilar.
    """
    n_all = m + sim.shape[0]
    sim_all = torch.zeros(n_all, n_all, dtype=sim.dtype, device=sim.device)
    sim_all[m:, m:] = sim
    mask = torch.zeros(n_all, n_all, dtype=torch.bool, device=sim.device)
    mask[m:, m:] = True if known is None else known
    return sim_all, mask


def pair_class_weight(target, similar_weight):
    """Cross-entropy weights (dissimilar, similar) of a same/different-pair classifier.

    ``target`` holds the 0/1 pair classes of a minibatch. A float gives the
    similar pairs that weight (dissimilar pairs weigh 1); ``"balanced"`` gives
    both classes the same total weight, whatever their share of the pairs.

    Examples
    --------
    >>> pair_class_weight(torch.tensor([1, 0, 0, 0]), "balanced").tolist()
    [0.6666666865348816, 2.0]
    """
    if similar_weight == "balanced":
        n_sim = target.sum().clamp_min(1)
        n_dis = (target.numel() - target.sum()).clamp_min(1)
        return torch.stack([target.numel() / (2 * n_dis), target.numel() / (2 * n_sim)])
    return torch.tensor([1.0, float(similar_weight)])


def resolve_auto(similar_neighbors, balance_weight, upper_bound, n):
    """``(similar_neighbors, balance_weight)`` with "auto" resolved for ``n`` clustered rows.

    ``ceil(n / 15)`` neighbours, whether the number of clusters is known or
    bounded (a fixed count, 120 until 2026-11-27, covered every row of a data
    set of 121 rows or fewer, so no pair was dissimilar and clusters merged:
    issue 30 S3); a balance weight of 1 with a known number of clusters, none
    under an upper bound. Explicit values pass through (the weight as a float).
    Measured in ``docs/notes/ccn.md``.

    Examples
    --------
    >>> resolve_auto("auto", "auto", False, 300), resolve_auto("auto", 0.5, True, 300)
    ((20, 1.0), (20, 0.5))
    """
    upper = bool(upper_bound)
    if similar_neighbors == "auto":
        similar_neighbors = math.ceil(n / 15)
    balance_weight = (0.0 if upper else 1.0) if balance_weight == "auto" else float(balance_weight)
    return similar_neighbors, balance_weight


def dominant_outputs(scores, outputs, n_outputs):
    """Each row's most probable *dominant* output.

    An output is dominant when it wins at least ``n / n_outputs`` of the ``n``
    rows (the count of Hsu et al. that estimates the number of clusters under
    an upper bound ``n_outputs``). Rows won by a dominant output keep it; the
    others move to their highest-scoring dominant output, so the labels have
    exactly as many clusters as estimated.

    Parameters
    ----------
    scores : ndarray of shape (n, n_outputs)
        Logits or probabilities of the outputs.
    outputs : ndarray of int, shape (n,)
        The winning output of each row (``scores.argmax(1)``).
    n_outputs : int

    Returns
    -------
    ndarray of int64, shape (n,)

    Examples
    --------
    >>> import numpy as np
    >>> scores = np.array([[3, 0, 1], [3, 0, 1], [0, 3, 1], [0, 3, 1], [1, 0, 3]])
    >>> dominant_outputs(scores, scores.argmax(1), 3).tolist()  # output 2 wins 1 < 5 / 3 rows
    [0, 0, 1, 1, 0]
    """
    outputs = np.asarray(outputs, dtype=np.int64)
    sizes = np.bincount(outputs, minlength=n_outputs)
    dominant = np.flatnonzero(sizes >= outputs.shape[0] / n_outputs)  # never empty: max size >= n / K
    moved = ~np.isin(outputs, dominant)
    result = outputs.copy()
    result[moved] = dominant[np.asarray(scores)[moved][:, dominant].argmax(1)]
    return result


def linked_outputs(similar, outputs, n_outputs, link=0.1, min_rows=5):
    """Each output's representative after joining the outputs that a pair network links.

    ``similar`` (m, m) holds a pair network's "similar" calls on m rows and
    ``outputs`` (m,) the output that wins each row. Two groups of outputs ``A``
    and ``B`` are linked when the share of their cross pairs called similar
    exceeds ``link`` times the geometric mean of their within-group shares. A
    class that a clustering network split in two keeps a clear share of similar
    cross pairs (on MNIST 5-9: 0.09-0.20 against 0.41-0.85 within), two classes
    almost none (at most 0.02). A link must also exceed three times the median
    share over all pairs of outputs, so a network that calls many pairs similar
    links nothing. Groups are joined one pair at a time, the most linked first,
    and the shares of a joined group are those of all its rows (average
    linkage): an output that mixes two classes joins the one it shares most
    with and does not chain the two classes together (MNIST seed 2: an output of
    5s and 8s linked to both, and single links joined 5 and 8). Outputs with
    fewer than ``min_rows`` of the m rows are not judged.

    Returns
    -------
    ndarray of int64, shape (n_outputs,)
        The smallest output of each one's group (itself when unlinked).

    Examples
    --------
    >>> import numpy as np
    >>> S = np.kron(np.eye(3, dtype=bool), np.ones((6, 6), dtype=bool))  # three classes of 6 rows
    >>> outputs = np.repeat([0, 1, 2, 3], [3, 3, 6, 6])  # the first class split over outputs 0 and 1
    >>> linked_outputs(S, outputs, 4, min_rows=3).tolist()
    [0, 0, 2, 3]
    """
    similar, outputs = np.asarray(similar, dtype=bool), np.asarray(outputs)
    root = np.arange(n_outputs)
    used = [o for o in np.unique(outputs) if (outputs == o).sum() >= min_rows]
    if len(used) < 2:
        return root.astype(np.int64)
    member = np.stack([outputs == o for o in used]).astype(np.float64)  # (u, m)
    off = similar & ~np.eye(similar.shape[0], dtype=bool)
    calls = member @ off @ member.T  # similar calls between (and within) outputs, diagonal excluded
    sizes = member.sum(1)
    iu = np.triu_indices(len(used), 1)
    # A link must also stand out from the pairs of outputs at large: where the network
    # calls many cross pairs similar (a weak network), no pair of outputs is singled out.
    floor = 3.0 * float(np.median(calls[iu] / np.outer(sizes, sizes)[iu]))
    groups = [[i] for i in range(len(used))]
    while len(groups) > 1:
        n = np.array([sizes[g].sum() for g in groups])
        c = np.array([[calls[np.ix_(a, b)].sum() for b in groups] for a in groups])
        within = np.diag(c) / np.maximum(n * (n - 1), 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = c / np.outer(n, n)
            strength = cross / np.sqrt(np.outer(within, within))
        ok = (cross > link * np.sqrt(np.outer(within, within))) & (cross > floor)
        ok &= np.triu(np.ones_like(ok), 1)
        if not ok.any():
            break
        a, b = np.unravel_index(np.where(ok, np.nan_to_num(strength, nan=np.inf), -np.inf).argmax(), ok.shape)
        groups[a] = groups[a] + groups[b]
        del groups[b]
    for g in groups:
        outs = [used[i] for i in g]
        root[outs] = min(outs)
    return root.astype(np.int64)


def kept_groups(sizes, bound):
    """Which groups of outputs are clusters: those of at least half an equal share of the rows
    among the clusters kept.

    A group is kept when it wins at least ``n / (2 k)`` of the ``n`` rows, ``k``
    the number of groups kept: from ``k = bound`` (the upper bound on the number
    of clusters) the count is lowered until it holds. Half a share keeps a true
    cluster a little below ``n / k`` (issue 30 S3: 33 of 100 rows under a bound
    of 3); the share of the clusters found, not of the bound, drops a fragment
    that is small beside them whatever the bound (mfeat-pix 5-9 under a bound of
    20: a group of 25 style-sixes beside five of about 200 rows sat exactly on
    ``n / (2 bound) = 25``). A cluster smaller than half the mean of those kept
    is dropped with them: the rule assumes roughly balanced clusters, as the
    paper's count of dominant outputs does.

    Parameters
    ----------
    sizes : ndarray of int, shape (n_groups,)
        Rows won by each group (0 for an empty one).
    bound : int
        Upper bound on the number of clusters.

    Returns
    -------
    ndarray of bool, shape (n_groups,)

    Examples
    --------
    >>> import numpy as np
    >>> kept_groups(np.array([200, 200, 200, 200, 175, 25]), 20).tolist()  # 25 >= 1000 / 40, < 1000 / 12
    [True, True, True, True, True, False]
    >>> kept_groups(np.array([34, 33, 33]), 3).tolist()
    [True, True, True]
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    n, k = sizes.sum(), int(bound)
    while True:
        kept = sizes >= n / (2 * k)  # the largest group always: it holds at least n / k rows
        if kept.sum() >= k:
            return kept
        k = int(kept.sum())


def _conv_stem(image_shape, conv_channels, width, activate):
    """:class:`~sktransfer_cluster.nn.ConvNet` from flat image rows to ``width`` (+ batch norm, ReLU)."""
    layers = [ConvNet(image_shape, conv_channels, width)]
    if activate:
        layers += [torch.nn.BatchNorm1d(width), torch.nn.ReLU()]
    return layers


def similarity_network(
    n_features, backbone_dims, pair_hidden, pair_features, image_shape=None, conv_channels=()
):
    """An untrained pair network ``G`` whose pair features are ``pair_features``.

    "symmetric": ``[|h_i - h_j|, h_i * h_j]``; "symmetric+raw": the same with
    the inputs appended to the backbone features ``h``; "concat": ``[h_i, h_j]``.
    With ``image_shape`` the backbone's first layer is a small convolutional
    network (:class:`~sktransfer_cluster.nn.ConvNet`, ``conv_channels``) whose
    linear output has the first width of ``backbone_dims``.
    """
    dims = list(backbone_dims)
    symmetric, raw = pair_features != "concat", pair_features == "symmetric+raw"
    if pair_features == "difference":
        symmetric = "difference"
    if image_shape is None:
        return SimilarityNetwork(n_features, dims, pair_hidden, symmetric=symmetric, raw_features=raw)
    g = SimilarityNetwork(dims[0], dims[1:], pair_hidden, symmetric=symmetric)
    stem = _conv_stem(image_shape, conv_channels, dims[0], activate=len(dims) > 1 or not symmetric)
    g.backbone = torch.nn.Sequential(*stem, g.backbone)
    if raw:

        g.backbone = WithInput(g.backbone)
        g.feature_dim += n_features
        g.head[0] = torch.nn.Linear(2 * g.feature_dim, pair_hidden)
    return g


def clustering_network(n_features, hidden_dims, n_clusters, image_shape=None, conv_channels=()):
    """An untrained clustering network ``f``: an MLP (batch norm + ReLU) to ``n_clusters`` logits.

    With ``image_shape`` a small convolutional network
    (:class:`~sktransfer_cluster.nn.ConvNet`, ``conv_channels``) replaces the
    first layer.
    """
    dims = list(hidden_dims)
    if image_shape is None:
        return mlp([n_features, *dims, n_clusters], batch_norm=True)
    if not dims:
        return ConvNet(image_shape, conv_channels, n_clusters)
    return torch.nn.Sequential(
        *_conv_stem(image_shape, conv_channels, dims[0], activate=True),
        mlp([*dims, n_clusters], batch_norm=True),
    )


def same_class_pairs(codes):
    """Flat 0/1 classes of all ``b^2`` ordered pairs of a minibatch: 1 where the labels ``codes`` agree."""
    return (codes.unsqueeze(1) == codes.unsqueeze(0)).long().reshape(-1)


def similarity_labels(g, xb, second_order_threshold=None, features=None, threshold=0.5):
    """(b, b) pair labels of minibatch ``xb`` from network ``g``: its "similar" probability > ``threshold``.

    ``features``: ``g.backbone(xb)`` when already computed (a fixed ``g`` in
    eval mode gives each row the same features in any batch), so that only the
    pair head runs. With a second-order threshold the labels are denoised by
    :func:`second_order`.
    """
    logits = g(xb) if features is None else g.pair_logits(features)
    if threshold == 0.5:
        sim = logits.argmax(-1)
    else:
        sim = (torch.softmax(logits, -1)[..., 1] > threshold).long()
    if second_order_threshold is not None:
        return second_order(sim.to(xb.dtype), second_order_threshold)
    return sim


@torch.no_grad()
def neighbour_threshold(g, features, knn, recall=0.9, max_rows=1000, rng=None, cap=0.5):
    """A "similar" threshold on ``g``'s probability that needs no labels: ``g`` calls
    ``recall`` of the target's neighbour pairs similar.

    The pairs of each row with its ``knn`` neighbours (input or code space) are
    almost all of one class, whatever the classes are; a ``g`` learned on other
    classes may score them far below 0.5 (its scale is the source's), but it still
    ranks them high. The threshold is the ``1 - recall`` quantile of ``g``'s
    probability over these pairs, from at most ``max_rows`` rows (drawn by ``rng``,
    else the first ones), capped at ``cap``.

    Parameters
    ----------
    g : SimilarityNetwork or SimilarityEnsemble
    features : torch.Tensor of shape (n, h)
        ``g.backbone`` of the rows.
    knn : torch.Tensor of shape (n, k)
        Each row's neighbours.
    recall : float, default=0.9
    max_rows : int, default=1000
    rng : numpy.random.Generator, optional
    cap : float or None, default=0.5
        Largest threshold returned (None: no cap). The clustering network's
        labels keep 0.5 as the cap; judging links between its outputs uses
        none (see :func:`linked_outputs`).

    Returns
    -------
    float
    """
    n = features.shape[0]
    rows = np.arange(n) if n <= max_rows else (
        np.sort(rng.choice(n, max_rows, replace=False)) if rng is not None else np.arange(max_rows))
    return recall_threshold(neighbour_probabilities(g, features, features, knn, rows), recall, cap)


@torch.no_grad()
def neighbour_probabilities(g, features, neighbour_features, knn, rows=None):
    """``g``'s "similar" probability of each row ``i`` of ``rows`` (default: all) with its neighbours.

    ``features`` (n, h) and ``neighbour_features`` are ``g.backbone`` of the rows and
    of the rows ``knn[i]`` points into (the same rows, or reference rows). Returns
    the probabilities of all these pairs, row after row, as one tensor.
    """
    rows = range(features.shape[0]) if rows is None else rows
    probs = []
    for i in rows:
        logits = g.pair_logits(features[i : i + 1], neighbour_features[knn[i]])
        probs.append(torch.softmax(logits, -1)[0, :, 1])
    return torch.cat(probs)


def recall_threshold(probabilities, recall, cap=0.5):
    """The ``1 - recall`` quantile of the neighbour pairs' ``probabilities``, at most ``cap`` (None: no cap)."""
    q = float(np.quantile(probabilities.double().cpu().numpy(), 1.0 - recall))
    return q if cap is None else min(float(cap), q)


def agree_with_neighbors(sim, knn, idx, xb=None):
    """Pair labels kept where they agree with the input-space neighbourhoods, and their mask.

    A pair of batch rows ``idx`` is similar when ``sim`` says so and the two
    are neighbours (:func:`neighbor_pairs` of a ``k``-NN table ``knn``, or
    ``knn.pairs(idx, xb)`` of neighbourhoods given by radius, ``xb`` the batch's
    rows), dissimilar when neither holds; the mask is False (unknown) where the
    two disagree.
    """
    nb = neighbor_pairs(knn, idx) if torch.is_tensor(knn) else knn.pairs(idx, xb)
    return sim * nb.to(sim.dtype), (sim > 0.5) == nb


def clustering_loss(log_p, sim, criterion, margin, mask=None, balance_weight=0.0):
    """Pairwise loss of a clustering network's log-probabilities ``log_p`` on pair labels ``sim``.

    ``criterion`` "mcl" (:func:`~sktransfer_cluster.cluster.ccn.losses.mcl_loss`) or "kcl"
    (hinge ``margin``); a positive ``balance_weight`` adds that times minus the
    entropy of the mean assignment, which favours equal cluster sizes.
    """
    if criterion == "mcl":
        loss = mcl_loss(log_p, sim, mask=mask)
    else:
        loss = kcl_loss(log_p, sim, mask=mask, margin=margin)
    if balance_weight > 0:
        loss = loss + balance_weight * negative_size_entropy(log_p.exp())
    return loss


def ccn_plus_loss(log_p, codes, sim, criterion, margin, known=None):
    """CCN+ loss of a batch ``[m source rows; b target rows]``: source cross-entropy + pair loss.

    ``codes`` (m,) are the source rows' classes (their output units), ``sim``
    and ``known`` label the target pairs; pairs that involve a source row are
    unknown, masked out of the pair loss (not dissimilar).
    """
    sim_all, mask = with_unknown_rows(sim, known, codes.shape[0])
    cluster = clustering_loss(log_p, sim_all, criterion, margin, mask=mask)
    return F.nll_loss(log_p[: codes.shape[0]], codes) + cluster


def _blocks(n, block):
    return [(s, min(s + block, n)) for s in range(0, n, block)]


@torch.no_grad()
def pair_probabilities(g, Xa, Xb=None, block=PAIR_BLOCK):
    """Probability that the similarity network ``g`` gives each pair ``(a, b)`` of being similar.

    ``g`` has ``backbone`` and ``pair_logits`` (see
    :class:`~sktransfer_cluster.cluster.ccn.networks.SimilarityNetwork`); ``Xb`` defaults to ``Xa``.
    Pairs are processed ``block`` rows per side at a time; the (n, m) float64
    output is dense.
    """
    fa = g.backbone(Xa)
    fb = fa if Xb is None else g.backbone(Xb)
    out = np.empty((fa.shape[0], fb.shape[0]))
    for i0, i1 in _blocks(fa.shape[0], block):
        for j0, j1 in _blocks(fb.shape[0], block):
            p = torch.softmax(g.pair_logits(fa[i0:i1], fb[j0:j1]), -1)[..., 1]
            out[i0:i1, j0:j1] = p.cpu().numpy()
    return out


@torch.no_grad()
def kcl_pair_score(g, f, X, margin, block=PAIR_BLOCK):
    """Minus the mean KCL cost of ``f``'s clusterings of all ordered pairs of ``X`` under ``g``.

    Pair labels are ``g``'s binarised predictions; a similar pair costs
    ``KL(P_i || P_j)``, a dissimilar one ``max(0, margin - KL(P_i || P_j))``.
    Block by block: O(block^2) memory, O(n^2) time.
    """
    n = X.shape[0]
    feats = g.backbone(X)
    log_p = F.log_softmax(f(X), dim=1)
    log_p = torch.maximum(log_p, torch.log(log_p.new_tensor(torch.finfo(log_p.dtype).tiny)))
    p = log_p.exp()
    neg_ent = (p * log_p).sum(1)
    total = 0.0
    for i0, i1 in _blocks(n, block):
        for j0, j1 in _blocks(n, block):
            sim = g.pair_logits(feats[i0:i1], feats[j0:j1]).argmax(-1).to(log_p.dtype)
            d = neg_ent[i0:i1, None] - p[i0:i1] @ log_p[j0:j1].T  # KL(P_i || P_j)
            cost = sim * d + (1 - sim) * (margin - d).clamp_min(0.0)
            total += cost.sum().item()
    return -total / (n * n)
