"""Plain numeric helpers of C2M's clustering search and critic training.

* The clustering MLP ``d -> hidden (ReLU) -> n_out`` that the cross-entropy
  method searches, evaluated for a whole population of flat weight vectors at
  once (:func:`population_logits`, :func:`score_population`), and the search
  itself (:func:`cem_clustering`).
* Its optional spectral inputs: the leading eigenvectors of a set's sparse
  k-NN graph (:func:`spectral_embedding`), carried to any row through its
  nearest reference points (:func:`spectral_reference`, :func:`mlp_inputs`).
* The standardisation of a set, the labelled source sets, the corrupted
  labellings that serve as fakes when the critic is trained
  (:func:`corrupt_labels`) and the critic's WGAN loss.

Plain tensors and arrays in and out; nothing here imports an estimator.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import lobpcg
from sklearn.cluster import KMeans
from sklearn.utils.validation import check_consistent_length, column_or_1d

from ...base import chunk_rows, chunked, compact_labels, on_compute_threads
from .cem import cross_entropy_method
from ...losses import gradient_penalty
from ...nn import knn_indices

__all__ = [
    "n_mlp_params",
    "population_logits",
    "mlp_labels",
    "mlp_labels_population",
    "score_population",
    "cem_clustering",
    "centroid_mlp_weights",
    "kmeans_candidates",
    "standardize",
    "times_power_of_two",
    "spectral_embedding",
    "spanning_tree",
    "tree_cut_embedding",
    "gap_veto",
    "spectral_reference",
    "nearest_reference",
    "mlp_inputs",
    "predict_screen",
    "screen_labels",
    "certified_labels",
    "corrupt_labels",
    "smooth_labels",
    "source_sets",
    "wgan_critic_loss",
]


def n_mlp_params(n_features, hidden, n_out):
    """Length of the flat weight vector of the clustering MLP ``d -> hidden -> n_out``."""
    return n_features * hidden + hidden + hidden * n_out + n_out


def population_logits(X, W, hidden, n_out):
    """Outputs of P clustering MLPs at once: ``relu(X W1 + b1) W2 + b2``.

    Parameters
    ----------
    X : torch.Tensor of shape (n, d)
    W : torch.Tensor of shape (P, n_params)
        Flat weights, laid out as ``[W1 (d x hidden), b1, W2 (hidden x n_out), b2]``.
    hidden, n_out : int

    Returns
    -------
    torch.Tensor of shape (P, n, n_out)
    """
    P = W.shape[0]
    d = X.shape[1]
    o = 0
    W1 = W[:, o : o + d * hidden].reshape(P, d, hidden)
    o += d * hidden
    b1 = W[:, o : o + hidden].reshape(P, 1, hidden)
    o += hidden
    W2 = W[:, o : o + hidden * n_out].reshape(P, hidden, n_out)
    o += hidden * n_out
    b2 = W[:, o : o + n_out].reshape(P, 1, n_out)
    return torch.bmm(torch.relu(torch.matmul(X, W1) + b1), W2) + b2


def mlp_labels(W, H, hidden, n_out):
    """Argmax output of the clustering MLP with flat weights ``W`` for every row of ``H`` (chunked)."""
    W = W.unsqueeze(0)
    return chunked(lambda rows: population_logits(rows, W, hidden, n_out)[0].argmax(1), H)


def mlp_labels_population(W, H, hidden, n_out):
    """Argmax labellings of the rows ``H`` (n, d) by each of the P clustering MLPs in ``W``: ndarray (P, n)."""
    with torch.no_grad():
        return population_logits(H, W, hidden, n_out).argmax(-1).cpu().numpy()


def score_population(critic, Xs, W, H, hidden, n_out, *, width, chunk_elements=2**22, **critic_kwargs):
    """Critic values, shape (P,), of the labellings of the set ``Xs`` by the P MLPs in ``W``.

    The MLPs read ``H`` (``Xs`` or its :func:`mlp_inputs`). The population is
    scored in chunks whose (chunk x n x ``width``) activations stay under
    ``chunk_elements`` (``width``: the widest per-point layer), so memory is
    bounded whatever P and n. ``critic_kwargs`` go to the critic.
    """
    chunk = max(1, chunk_elements // max(1, Xs.shape[0] * width))
    out = []
    for Wc in W.split(chunk):
        labels = population_logits(H, Wc, hidden, n_out).argmax(-1)
        out.append(critic(Xs, labels, **critic_kwargs))
    return torch.cat(out)


def cem_clustering(
    critic, Xs, H, hidden, n_out, *, width, n_init=1, std=1.0, generator=None, critic_kwargs=None,
    chunk_elements=2**22, candidates=None, **cem_kwargs
):
    """Clustering-MLP weights that maximise the critic on the set ``Xs``, by the cross-entropy method.

    ``n_init`` runs of :func:`~sktransfer_cluster.cluster.c2m.cem.cross_entropy_method`
    from the mean 0 and standard deviation ``std``, drawing from ``generator``
    in turn; the population is scored by :func:`score_population` (``H``,
    ``width``, ``chunk_elements``, ``critic_kwargs``). ``cem_kwargs`` go to
    the CEM (``population``, ``elite_frac``, ``n_iter``, ``min_std``).
    ``candidates`` (C, n_params), e.g. :func:`kmeans_candidates`, are scored
    as well; one that beats every CEM run is returned as ``best``.

    Returns
    -------
    CEMResult
        The run of highest score (the first among equals), with ``best`` and
        ``best_score`` replaced by the best candidate when it scores higher.
    """
    kwargs = critic_kwargs or {}
    mean0 = torch.zeros(n_mlp_params(H.shape[1], hidden, n_out), dtype=Xs.dtype, device=Xs.device)
    best = None
    with torch.no_grad():
        for _ in range(n_init):
            res = cross_entropy_method(
                lambda W: score_population(
                    critic, Xs, W, H, hidden, n_out, width=width, chunk_elements=chunk_elements, **kwargs
                ),
                mean0,
                std,
                generator=generator,
                **cem_kwargs,
            )
            if best is None or res.best_score > best.best_score:
                best = res
        if candidates is not None and candidates.shape[0] > 0:
            scores = score_population(
                critic, Xs, candidates, H, hidden, n_out, width=width, chunk_elements=chunk_elements, **kwargs
            )
            scores = torch.where(torch.isfinite(scores), scores, torch.full_like(scores, -math.inf))
            i = int(scores.argmax())
            if float(scores[i]) > best.best_score:
                best = best._replace(best=candidates[i].clone(), best_score=float(scores[i]))
    return best


def centroid_mlp_weights(centers, n_inputs, hidden, n_out, X, offset=0):
    """Flat clustering-MLP weights whose argmax is the nearest of ``centers`` (k, d).

    The MLP reads rows whose columns ``offset .. offset + d - 1`` are the
    coordinates of ``X`` (every other of its ``n_inputs`` columns gets weight 0). Nearest centre is the argmax of
    ``x . (mu_j - m) - ||mu_j||^2 / 2`` (m the mean centre), a linear map of
    rank at most k - 1: its top ``hidden`` directions ``B_i`` become hidden
    units ``relu(x . B_i + s_i)`` with ``s_i`` ten times the largest
    ``|x . B_i|`` over the rows ``X`` (n, d), so the ReLU is the identity there
    and the output layer recovers the linear map exactly when k - 1 <= hidden
    (otherwise its best rank-``hidden`` approximation). Outputs k .. n_out - 1
    get a bias far below every used output on ``X``; one centre gives output 0
    everywhere.

    Returns
    -------
    torch.Tensor of shape (n_mlp_params(n_inputs, hidden, n_out),), like ``centers``
    """
    centers = torch.as_tensor(centers, dtype=X.dtype, device=X.device)
    k, d = centers.shape
    W1 = X.new_zeros(n_inputs, hidden)
    b1 = X.new_zeros(hidden)
    W2 = X.new_zeros(hidden, n_out)
    b2 = X.new_zeros(n_out)
    const = -0.5 * (centers**2).sum(1)  # (k,)
    if k > 1:
        D = centers - centers.mean(0)
        U, S, Vh = torch.linalg.svd(D, full_matrices=False)
        r = int(min(hidden, int((S > 1e-12 * max(float(S[0]), 1e-300)).sum())))
        B = Vh[:r]  # (r, d), orthonormal rows
        A = U[:, :r] * S[:r]  # (k, r): D ~ A B
        proj = X @ B.T  # (n, r)
        shift = 10.0 * proj.abs().max(0).values + 1.0
        W1[offset : offset + d, :r] = B.T
        b1[:r] = shift
        W2[:r, :k] = A.T
        b2[:k] = const - A @ shift
        logits = proj @ A.T + const
        low = float(logits.min()) - 10.0 * (float(logits.max() - logits.min()) + 1.0)
    else:
        low = -1.0
    b2[k:] = low
    return torch.cat([W1.reshape(-1), b1, W2.reshape(-1), b2])


def kmeans_candidates(Xs, n_inputs, hidden, n_out, rng, *, n_init=1, offset=0, k_min=1):
    """Clustering-MLP weights of k-means labellings of the set ``Xs`` for k = ``k_min`` .. n_out.

    One k-means run per k (``n_init`` starts, seeded from ``rng``), each turned
    into weights by :func:`centroid_mlp_weights` (``Xs`` being the MLP's input
    columns from ``offset`` on): a cheap, diverse set of starting proposals for
    a search over every number of clusters (k is capped at the number of distinct rows).

    Returns
    -------
    torch.Tensor of shape (n_candidates, n_mlp_params(n_inputs, hidden, n_out)), like ``Xs``
    """
    Xn = Xs.detach().cpu().numpy()
    rows = []
    # At most one centre per distinct row: k-means cannot find more (it would warn, in the user's face).
    for k in range(k_min, min(n_out, np.unique(Xn, axis=0).shape[0]) + 1):
        if k == 1:
            centers = Xn.mean(0, keepdims=True)
        else:
            seed = int(rng.integers(2**31 - 1))
            centers = KMeans(k, n_init=n_init, random_state=seed).fit(Xn).cluster_centers_
        rows.append(centroid_mlp_weights(torch.as_tensor(centers), n_inputs, hidden, n_out, Xs, offset))
    if not rows:
        return Xs.new_zeros(0, n_mlp_params(n_inputs, hidden, n_out))
    return torch.stack(rows)


def times_power_of_two(x, e):
    """``x * 2**e`` in two exact steps, so that neither factor over- or underflows (|e| up to ~2100)."""
    half = e // 2
    return x * 2.0**half * 2.0 ** (e - half)


def standardize(X, enabled=True):
    """A set centred and divided by its mean per-feature standard deviation.

    Returns ``(Xs, mean, scale)``; with ``enabled=False`` ``X`` itself, a zero
    mean and scale 1. One scalar scale keeps the set's shape; a constant set
    keeps scale 1.

    The statistics are computed on ``X`` times the power of two that brings its
    largest magnitude near 1: exact, so ordinary data give the same bits as
    without it, while the squares in the standard deviation can no longer
    underflow (data at 1e-170) or overflow (1e160), which had left such sets at
    scale 1 and broke the neighbour graph (issue 30 R3).
    """
    if not enabled:
        return X, torch.zeros(X.shape[1], dtype=X.dtype, device=X.device), 1.0
    peak = float(X.abs().max()) if X.numel() else 0.0
    e = math.frexp(peak)[1] if 0.0 < peak < math.inf else 0
    Z = times_power_of_two(X, -e) if e else X
    mean = Z.mean(0)
    scale = float(Z.std(0).mean())
    if not math.isfinite(scale) or scale <= 0:
        mean = X.mean(0)
        return X - mean, mean, 1.0
    return (Z - mean) / scale, times_power_of_two(mean, e), times_power_of_two(scale, e)


def spectral_embedding(X, n_components, n_neighbors):
    """Leading non-trivial eigenvectors of the normalised k-NN graph of ``X``: (n, n_components).

    The graph links each point to its ``n_neighbors`` nearest others (symmetrised,
    unit weights: O(n k) memory, no n x n matrix); the vectors are the top
    eigenvectors of ``A = D^-1/2 W D^-1/2`` orthogonal to its trivial one
    ``D^1/2 1``, mapped back by ``D^-1/2`` (random-walk eigenvectors), each
    centred and scaled to unit standard deviation. Fewer than ``n_components``
    columns are padded with zeros.

    A block solver (``scipy.sparse.linalg.lobpcg``, fixed random start block, so
    deterministic) rather than Lanczos: when the graph falls apart into c
    components, eigenvalue 1 has multiplicity c, and Lanczos from one start
    vector finds one copy only, which collapsed all but one of four separated
    blobs onto a single value. Deflating ``D^1/2 1`` then leaves the c - 1
    vectors that tell the components apart.
    """
    n = X.shape[0]
    out = np.zeros((n, n_components))
    m = min(n_components, n - 2)
    if m < 1:
        return out
    nb = knn_indices(X, n_neighbors).cpu().numpy()
    rows = np.repeat(np.arange(n), nb.shape[1])
    W = sp.csr_matrix((np.ones(rows.shape[0]), (rows, nb.ravel())), shape=(n, n))
    W = ((W + W.T) > 0).astype(np.float64)
    deg = np.asarray(W.sum(1)).ravel()
    dinv = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
    A = sp.diags(dinv) @ W @ sp.diags(dinv)
    trivial = np.sqrt(deg / deg.sum())[:, None]  # unit eigenvector of eigenvalue 1
    if n <= 5 * (m + 1):  # too small for a block solver: dense, tiny sets only
        vals, vecs = np.linalg.eigh(A.toarray() - trivial @ trivial.T)
    else:
        start = np.random.default_rng(0).normal(size=(n, m))
        with warnings.catch_warnings():
            # Not reaching the tolerance still leaves a usable subspace.
            warnings.simplefilter("ignore", UserWarning)
            vals, vecs = lobpcg(A, start, Y=trivial, largest=True, tol=1e-6, maxiter=200)
    U = vecs[:, np.argsort(-vals)[:m]] * dinv[:, None]
    U = U - U.mean(0)
    sd = U.std(0)
    out[:, :m] = U / np.where(sd > 1e-12, sd, 1.0)
    return out


# spanning_tree: above this many points the tree is built on the k-NN graph, not on all pairs.
_DENSE_TREE_MAX = 4096


def spanning_tree(X, n_neighbors=10):
    """Euclidean minimum spanning tree of a set, as edges with scale-free log lengths.

    The tree of all pairwise distances up to ``_DENSE_TREE_MAX`` points (O(n^2)
    memory); beyond, the spanning forest of the symmetrised ``n_neighbors``-NN
    graph (pieces the graph leaves apart then have no edge between them). Each
    length is divided by the median tree edge, so the result does not depend
    on the set's scale: a gap between two dense parts is a long edge whatever
    the units (single linkage's view of a set).

    Returns
    -------
    dict with ``u``, ``v`` (int64 tensors of shape (E,)) and ``w`` (log of the
    relative lengths, floored at -5, like ``X``), on ``X``'s device.
    """
    from scipy.sparse.csgraph import minimum_spanning_tree
    from scipy.spatial.distance import cdist

    Xn = X.detach().cpu().numpy()
    n = Xn.shape[0]
    if n <= _DENSE_TREE_MAX:
        D = cdist(Xn, Xn)
    else:
        nb = knn_indices(X, n_neighbors).cpu().numpy()
        rows = np.repeat(np.arange(n), nb.shape[1])
        dist = np.linalg.norm(Xn[rows] - Xn[nb.ravel()], axis=1)
        D = sp.csr_matrix((dist, (rows, nb.ravel())), shape=(n, n))
        D = D.maximum(D.T)
    # Exact duplicates have distance 0, which csgraph reads as "no edge": a tiny positive length.
    if sp.issparse(D):
        D.data = np.maximum(D.data, 1e-300)
    else:
        D = np.maximum(D, 1e-300)
        np.fill_diagonal(D, 0.0)
    T = minimum_spanning_tree(D).tocoo()
    w = T.data
    scale = float(np.median(w)) if w.shape[0] else 1.0
    lw = np.log(np.maximum(w / max(scale, 1e-300), np.exp(-5.0))) if w.shape[0] else w
    as_t = lambda a, dt: torch.as_tensor(np.asarray(a), dtype=dt, device=X.device)  # noqa: E731
    return {"u": as_t(T.row, torch.long), "v": as_t(T.col, torch.long), "w": as_t(lw, X.dtype)}


def _tree_sides(u, v, n):
    """Rooted view of a spanning tree with edges ``u``-``v`` on ``n`` points: the BFS order from
    point 0 (parents first), each point's parent, the child end of every edge and the number of
    points on the smaller side of every edge (what removing it cuts off)."""
    from scipy.sparse.csgraph import breadth_first_order

    A = sp.csr_matrix((np.ones(u.shape[0]), (u, v)), shape=(n, n))
    order, parent = breadth_first_order(A, 0, directed=False, return_predecessors=True)
    size = np.ones(n, dtype=np.int64)
    for node in order[::-1][:-1]:  # children before parents; the root has no parent
        size[parent[node]] += size[node]
    # The child end of each edge: its subtree is the side cut off by removing the edge.
    child = np.where(parent[v] == u, v, u)
    return order, parent, child, np.minimum(size[child], n - size[child])


def tree_cut_embedding(X, n_cuts, min_size=None):
    """Which side of each of the longest cuts of a set's minimum spanning tree a point lies on.

    The tree of :func:`spanning_tree`; its edges are taken longest first, keeping those whose
    removal leaves at least ``min_size`` points on both sides (default ``max(2, n // 20)``:
    a lone outlier is not a cluster, as in robust single linkage), until ``n_cuts``. Column j
    is +1 on one side of edge j and -1 on the other, so the points of one single-linkage
    cluster share a row, and k-means on the columns returns unions of those clusters: rings
    and moons separated by a gap, whatever their shape. Fewer columns are padded with zeros.

    Returns
    -------
    ndarray of shape (n, n_cuts)
    """
    n = X.shape[0]
    out = np.zeros((n, n_cuts))
    if n < 4 or n_cuts < 1:
        return out
    min_size = max(2, n // 20) if min_size is None else int(min_size)
    tree = spanning_tree(X)
    u, v, w = (tree[key].cpu().numpy() for key in ("u", "v", "w"))
    order, parent, child, side = _tree_sides(u, v, n)
    ok = side >= min_size
    chosen = [e for e in np.argsort(-w, kind="stable") if ok[e]][:n_cuts]
    if not chosen:
        return out
    # Subtree membership of each chosen child: walk every node up to the root once.
    depth_order = order  # parents before children
    for j, e in enumerate(chosen):
        inside = np.zeros(n, dtype=bool)
        inside[child[e]] = True
        for node in depth_order:
            if node != child[e] and parent[node] >= 0 and inside[parent[node]]:
                inside[node] = True
        out[:, j] = np.where(inside, 1.0, -1.0)
    return out


def _straddles(u, v, n, labels, min_size):
    """For each edge of a spanning tree: whether some cluster of ``labels`` has at least
    ``min_size`` points on each side of it (removing the edge splits the tree in two). Subtrees
    are slices of the depth-first preorder, so one prefix count per cluster answers every edge."""
    from scipy.sparse.csgraph import depth_first_order

    A = sp.csr_matrix((np.ones(u.shape[0]), (u, v)), shape=(n, n))
    order, parent = depth_first_order(A, 0, directed=False, return_predecessors=True)
    size = np.ones(n, dtype=np.int64)
    for node in order[::-1][:-1]:
        size[parent[node]] += size[node]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    child = np.where(parent[v] == u, v, u)
    codes = compact_labels(np.asarray(labels))[0]
    onehot = np.zeros((n + 1, int(codes.max()) + 1), dtype=np.int64)
    onehot[pos + 1, codes] = 1
    prefix = onehot.cumsum(0)
    start = pos[child]
    inside = prefix[start + size[child]] - prefix[start]  # (E, k): each cluster's points in the subtree
    return (np.minimum(inside, prefix[-1] - inside) >= min_size).any(1)


def gap_veto(X, kept, cutting, min_size=None, min_gap=1.0):
    """Whether the labelling ``cutting`` cuts the widest gap that the labelling ``kept`` keeps
    inside one of its clusters.

    On the set's minimum spanning tree (:func:`spanning_tree`), an edge is *kept* by a labelling
    when one of its clusters has at least ``min_size`` points on each side of the edge (default
    ``max(2, n // 20)``, the rule of :func:`tree_cut_embedding`: a lone outlier, or one point
    given the wrong label, decides nothing), *cut* otherwise. The gap is the longest edge that
    ``kept`` keeps. True when that edge is a gap (at least ``e ** min_gap`` times the median tree
    edge, and longer than the shortest boundary edge ``kept`` draws itself, i.e. than the
    narrowest gap ``kept`` does cut) and ``cutting`` cuts it: ``kept`` then joins, across a gap,
    what ``cutting`` keeps apart (one cluster over two rings), so ``cutting`` is to be preferred.
    False when ``cutting`` keeps the edge too (it is merely coarser, e.g. two touching blobs
    merged) or the edge is short (inside a blob) or no longer than every boundary ``kept``
    draws (a long edge inside one of well-separated blobs, whose boundaries are all longer).
    O(n^2) for the tree of n points.

    Parameters
    ----------
    X : torch.Tensor of shape (n, d)
    kept, cutting : array-like of int of shape (n,)
    min_size : int, default=None
    min_gap : float, default=1.0
        Least log length of the edge, relative to the median tree edge.

    Returns
    -------
    bool
    """
    n = X.shape[0]
    min_size = max(2, n // 20) if min_size is None else int(min_size)
    if n < 2 * min_size:
        return False
    tree = spanning_tree(X)
    u, v, w = (tree[key].cpu().numpy() for key in ("u", "v", "w"))
    by_kept = _straddles(u, v, n, kept, min_size)
    if not by_kept.any():
        return False
    e = int(np.argmax(np.where(by_kept, w, -np.inf)))
    drawn = ~by_kept & (_tree_sides(u, v, n)[3] >= min_size)
    wider = not drawn.any() or w[e] > w[drawn].min()
    return bool(w[e] >= min_gap and wider and not _straddles(u, v, n, cutting, min_size)[e])


def spectral_reference(Xref, n_components, n_neighbors, n_cuts=0):
    """What :func:`mlp_inputs` needs to give any row spectral features of the set ``Xref``.

    Returns a dict: the reference set ``ref``, its :func:`spectral_embedding`
    ``emb`` (a tensor like ``Xref``; ``n_components`` 0: none) and the neighbour count
    ``k``; with ``n_cuts``, also ``cuts``, the :func:`tree_cut_embedding` of ``Xref``.
    """
    emb = spectral_embedding(Xref, n_components, n_neighbors) if n_components else np.zeros((Xref.shape[0], 0))
    out = {"ref": Xref, "emb": torch.as_tensor(emb, dtype=Xref.dtype, device=Xref.device), "k": int(n_neighbors)}
    if n_cuts:
        cuts = tree_cut_embedding(Xref, n_cuts)
        out["cuts"] = torch.as_tensor(cuts, dtype=Xref.dtype, device=Xref.device)
    return out


# nearest_reference: up to this many reference rows, a blocked search; beyond, nn.knn_indices.
_SMALL_REFERENCE = 4096
# nearest_reference: distances per block (row block x reference rows), a float64 block that stays
# in cache (1 MiB) between the product and the selection.
_BLOCK_ELEMENTS = 2**17


def _exact_nearest(ref, k, query, norms):
    """``topk`` of the distances ``|r|^2 - 2 q.r`` (``addmm``, blocks of ``_BLOCK_ELEMENTS``)."""
    rows = max(1, _BLOCK_ELEMENTS // ref.shape[0])
    out = torch.empty((query.shape[0], k), dtype=torch.long, device=ref.device)
    for s in range(0, query.shape[0], rows):
        dist = torch.addmm(norms, query[s : s + rows], ref.T, alpha=-2.0)
        out[s : s + rows] = dist.topk(k, dim=1, largest=False).indices
    return out


def _unproved(top, keys, bits):
    """Rows whose sorted keys (``top``: their bits) do not strictly increase in their high parts, or are not finite."""
    return (np.diff(top >> bits, axis=1) <= 0).any(1) | ~np.isfinite(keys).all(1)


def _sorted_nearest(ref, k, query, norms):
    """:func:`_exact_nearest`'s indices on the CPU, from a sort of float32 keys where it proves them.

    ``topk`` costs about 1.5 us per row of 200 columns (a heap vector and an ``nth_element``
    per row), four times the product; numpy sorts float32 rows with vector instructions in a
    seventh of that. Per block, the same ``addmm`` as the exact search gives the distances
    ``d``; each key is ``d`` rounded to float32, less the row's smallest, with its low ``b``
    bits replaced by its column, so that one sort of values returns the columns. Every step
    (rounding, subtracting one number, clearing low bits of a non-negative float, whose bits
    order as its value) is non-decreasing in ``d``, so where the keys' high parts strictly
    increase along the first ``k + 1`` sorted keys, the distances strictly increase too: the
    columns are ``topk``'s, in ``topk``'s order, with no tie for it to break. Other rows
    (ties, near-ties, non-finite distances) take ``topk`` of the same block's distances.
    """
    n = ref.shape[0]
    m = query.shape[0]
    bits = max(1, (n - 1).bit_length())
    low = (1 << bits) - 1
    width = min(k + 1, n)  # the k-th key must be below the (k + 1)-th; with k = n there is none
    rows = max(1, _BLOCK_ELEMENTS // n)
    # Blocks reused across the loop: fresh ones are page-faulted in anew for every block.
    shape = (min(rows, m), n)
    dist_buffer = torch.empty(shape, dtype=ref.dtype)
    keys = torch.empty(shape, dtype=torch.float32)
    cols = torch.arange(n, dtype=torch.int32)
    out = torch.empty((m, k), dtype=torch.long)
    for s in range(0, m, rows):
        q = query[s : s + rows]
        b = q.shape[0]
        dist = torch.addmm(norms, q, ref.T, alpha=-2.0, out=dist_buffer[:b])
        kb = keys[:b]
        kb.copy_(dist)
        kb.sub_(kb.amin(1, keepdim=True))  # the row offset after rounding: float32 passes cost half
        kb.view(torch.int32).bitwise_and_(~low).bitwise_or_(cols)
        kn = kb.numpy()
        kn.sort(axis=1)
        top = kn[:, :width].view(np.int32)
        out[s : s + b] = torch.from_numpy((top[:, :k] & np.int32(low)).astype(np.int64))
        if width > 1:
            unproved = _unproved(top, kn[:, :width], bits)
            if unproved.any():
                sel = torch.from_numpy(np.flatnonzero(unproved))
                out[s + sel] = dist[sel].topk(k, dim=1, largest=False).indices
    return out


@on_compute_threads
@torch.no_grad()
def nearest_reference(ref, k, query):
    """Indices of the ``k`` nearest rows of ``ref`` (n, d) to each row of ``query`` (m, d), nearest first.

    The neighbours of :func:`~sktransfer_cluster.nn.knn_indices` with ``query`` (``k``
    capped at n; a query row that is a reference row finds itself first), faster for the
    small reference sets of C2M (at most ``_SMALL_REFERENCE`` rows: the CEM subset): one
    product ``|r|^2 - 2 q.r`` per block of query rows (the query's own ``|q|^2`` and the
    square root change no ranking) whose distances stay in cache for the selection, instead
    of ``cdist`` over blocks of millions of distances (issue 31). On the CPU the selection
    is a sort of float32 keys that proves ``topk``'s answer for all but near-tied rows
    (:func:`_sorted_nearest`), at a third of ``topk``'s cost; the result is ``topk``'s.
    Larger reference sets go to ``knn_indices`` (its KD-tree in few dimensions).

    Returns
    -------
    torch.Tensor of int64 of shape (m, min(k, n)), on ``ref``'s device
    """
    n = ref.shape[0]
    k = min(int(k), n)
    if n > _SMALL_REFERENCE or k < 1:
        return knn_indices(ref, k, query=query)
    norms = (ref * ref).sum(1)
    if ref.device.type != "cpu":
        return _exact_nearest(ref, k, query, norms)
    return _sorted_nearest(ref, k, query, norms)


def mlp_inputs(Xs, reference):
    """Inputs of the clustering MLP for the rows ``Xs``.

    The coordinates alone when ``reference`` is None; otherwise, beside them,
    the mean spectral embedding of each row's ``k`` nearest reference points
    (itself included when it is one), so that a row gets the same features
    whichever other rows come with it (up to last-bit ties: the product of a
    block of rows can round otherwise), and, with tree cuts, the nearest
    reference point's sides. One neighbour search (:func:`nearest_reference`)
    serves both: the nearest point is the first of the ``k`` nearest. The
    columns are written into one array, chunk by chunk (no concatenated copies).
    """
    if reference is None:
        return Xs
    ref, emb, k = reference["ref"], reference["emb"], reference["k"]
    cuts = reference.get("cuts")
    n_spec = emb.shape[1]
    if not n_spec and cuts is None:
        return Xs
    d = Xs.shape[1]
    n_cuts = 0 if cuts is None else cuts.shape[1]
    H = torch.empty((Xs.shape[0], d + n_spec + n_cuts), dtype=Xs.dtype, device=Xs.device)
    H[:, :d] = Xs.detach()

    def features(s, rows):
        nb = nearest_reference(ref, k if n_spec else 1, rows)
        if n_spec:
            # emb[nb].mean(1), bit for bit, through index_select (a third less time than the indexing).
            H[s : s + rows.shape[0], d : d + n_spec] = emb.index_select(0, nb.view(-1)).view(*nb.shape, n_spec).mean(1)
        if cuts is not None:
            # The nearest reference point's sides: a row of the reference set keeps its own, exactly.
            H[s : s + rows.shape[0], d + n_spec :] = cuts[nb[:, 0]]

    step = chunk_rows(d)
    with torch.no_grad():
        for s in range(0, Xs.shape[0], step):
            features(s, Xs[s : s + step])
    return H


# predict's certificates (issue 31): the unit roundoffs of float32 and float64, and the levels
# per octave of the radii at which predict_screen tabulates the reference rows' feature ranges.
_U32 = 2.0**-24
_U64 = 2.0**-53
_LEVELS_PER_OCTAVE = 8
# screen_labels: float32 distances per block (rows x reference rows), a block that stays in cache for its argmin.
_SCREEN_BLOCK = 2**18
# screen_labels' level of a ball radius: a table over the leading bits of its float32 (sign, exponent, 4 mantissa bits).
_LEVEL_BITS = 13


def _gamma(n, u):
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative error bound of an n-term sum or dot product."""
    return n * u / (1 - n * u)


def _mlp_parts(weights, n_in, hidden, n_out, outputs):
    """``W1 (n_in, hidden), b1, W2u (hidden, n_used), b2u`` of flat MLP weights, float64 on the CPU;
    ``W2u``/``b2u`` keep the ``outputs`` columns only."""
    W = weights.detach().to("cpu", torch.float64)
    o = n_in * hidden
    W1, b1 = W[:o].reshape(n_in, hidden), W[o : o + hidden]
    o += hidden
    W2, b2 = W[o : o + hidden * n_out].reshape(hidden, n_out), W[o + hidden * n_out : o + hidden * n_out + n_out]
    used = torch.as_tensor(outputs).to("cpu", torch.long)
    return W1, b1, W2[:, used], b2[used]


def _features_of(reference):
    """The reference rows' feature columns as :func:`mlp_inputs` appends them (spectral, then
    tree cuts: float64 ``(n_ref, n_f)``), the neighbours a row's features read (``k``, 1 for
    the cuts alone) and the rounding bound of a mean of ``k`` spectral values per column."""
    emb, cuts = reference["emb"], reference.get("cuts")
    n_spec = emb.shape[1]
    k = min(int(reference["k"]) if n_spec else 1, reference["ref"].shape[0])
    cols = [emb.detach().to("cpu", torch.float64)]
    if cuts is not None:
        cols.append(cuts.detach().to("cpu", torch.float64))
    F = torch.cat(cols, 1)
    emax = float(F[:, :n_spec].abs().max()) if n_spec and F.numel() else 0.0
    # A mean of k values in float64, whatever the order of the sum: within gamma_(k+2) max|emb| of
    # the exact mean; the cuts are copied exactly.
    delta = torch.cat([torch.full((n_spec,), _gamma(k + 2, _U64) * emax, dtype=torch.float64),
                       torch.zeros(F.shape[1] - n_spec, dtype=torch.float64)])
    return F, k, delta


def predict_screen(reference, weights, hidden, n_out, outputs, mean, scale):
    """What :func:`screen_labels` needs to label raw rows in float32 with a proof, or None.

    ``predict`` labels a row ``x`` as the argmax over ``outputs`` of the clustering MLP on
    ``[q, f]``: ``q = (x - mean) / scale`` and ``f`` its :func:`mlp_inputs` features (the
    mean spectral embedding of its ``k`` nearest reference rows, the nearest one's tree
    cuts), all in float64. The screen bounds the features without selecting the
    neighbours: every neighbour lies within ``B = 2 rho_a + rho_k(a)`` of the nearest
    reference row ``a`` (``rho_a`` the row's distance to it, ``rho_k(a)`` the distance from
    ``a`` to its own k-th nearest reference row: triangle inequality), so ``f`` lies in the
    range of the features of the reference rows within ``B`` of ``a``. Those ranges are
    tabulated here per reference row at radii ``2^(l/8)`` apart, already multiplied into
    the first layer: the centre's pre-activations (``table``) and the half-width's reach
    on the used outputs (``reach``, through ``|W1f|`` and ``|W2u|``). Every rounding bound
    (of this float32 evaluation, of predict's float64 one, of the row's float32 copy) is a
    linear function of the row's norm, tabulated as two coefficients. Returns a dict of CPU
    tensors, or None where no screen applies (a reference set searched by ``knn_indices``,
    a zero or non-finite scale, non-finite weights).
    """
    mean = mean.detach().to("cpu", torch.float64)
    scale = float(scale)
    d = mean.shape[0]
    feats = reference is not None and bool(reference["emb"].shape[1] or reference.get("cuts") is not None)
    R = reference["ref"].detach().to("cpu", torch.float64) if feats else torch.zeros(0, d, dtype=torch.float64)
    n_ref = R.shape[0]
    if feats and (n_ref > _SMALL_REFERENCE or n_ref < 1 or int(reference["k"]) < 1):
        return None
    if not (math.isfinite(scale) and 0 < scale < math.inf) or not torch.isfinite(mean).all():
        return None
    F, k, delta = _features_of(reference) if feats else (torch.zeros(0, 0, dtype=torch.float64), 1, None)
    n_f = F.shape[1]
    W1, b1, W2u, b2u = _mlp_parts(weights, d + n_f, hidden, n_out, outputs)
    if not all(bool(torch.isfinite(t).all()) for t in (W1, b1, W2u, b2u, R, F)):
        return None
    W1x, W1f = W1[:d], W1[d:]
    u = _U32
    w2a = W2u.abs()
    out = {"n_ref": n_ref, "scale": scale, "mean": mean.float(), "Mz": torch.cat([W1x / scale, b1.unsqueeze(0)]).float(),
           "W2uT": W2u.T.contiguous().float(), "b2u": b2u.float().unsqueeze(1)}
    zmax = torch.zeros(hidden, dtype=torch.float64)
    zr_norm = 0.0
    fmax_reach = torch.zeros(hidden, dtype=torch.float64)
    infl = 1 + 2.0**-18  # this path's last additions and products of bounds, rounded up
    if feats:
        # Reference-to-reference distances from differences (no cancellation).
        P = torch.cdist(R, R, compute_mode="donot_use_mm_for_euclid_dist")
        P.fill_diagonal_(0.0)
        P, order = P.sort(dim=1, stable=True)
        # Rounded up where a distance bounds a neighbour's (rho_k), down where a row must be counted within a radius.
        rho_k = P[:, k - 1] * (1 + 2.0**-30)
        Ps = P * (1 - 2.0**-30)
        Fo = F[order]  # (n_ref, n_ref, n_f): each row's features, nearest reference first
        lo, hi = torch.cummin(Fo, 1).values, torch.cummax(Fo, 1).values
        top = float(P.max())
        positive = P[P > 0]
        g0 = max(float(positive.min()), top * 2.0**-40) / 2 if top > 0 else 1.0
        L = 1 if top <= g0 else int(math.ceil(_LEVELS_PER_OCTAVE * math.log2(top / g0))) + 1
        radii = g0 * 2.0 ** (torch.arange(L, dtype=torch.float64) / _LEVELS_PER_OCTAVE)
        within = torch.searchsorted(Ps, radii.expand(n_ref, L).contiguous(), right=True).clamp_(min=1)
        within[:, -1] = n_ref  # the last level holds every reference row
        pick = (within - 1).unsqueeze(-1).expand(n_ref, L, n_f)
        lo, hi = lo.gather(1, pick), hi.gather(1, pick)  # (n_ref, L, n_f)
        centre = (lo + hi) / 2
        half = (hi - lo) / 2 + 2 * _U64 * (lo.abs() + hi.abs()) + delta
        Zc = centre @ W1f
        # Every bound rounded up: the centre's product's rounding, then each bound's own products.
        Zr = (half @ W1f.abs() + _gamma(n_f + 1, _U64) * (centre.abs() @ W1f.abs())) * (1 + _gamma(n_f + 2, _U64))
        reach = Zr @ w2a * (1 + _gamma(hidden + 2, _U64)) * infl
        zmax = Zc.abs().amax((0, 1))
        zr_norm = float(Zr.norm(dim=-1).max())
        fmax_reach = F.abs().amax(0) @ W1f.abs()
        # The row's level: the first radius, rounded down to float32, at least B (rounded up).
        radii32 = (radii * (1 - 2.0**-20) / infl).float()
        # The level by the float32 bits of B (sign, exponent, 4 mantissa bits: a bucket spans a factor
        # <= 1 + 2^-4 < 2^(1/8) among normal floats), then one step up; radii_ext's last entry (inf) is
        # the "beyond every radius" level that screen_labels clamps to the last one.
        keys = (torch.arange(2**_LEVEL_BITS, dtype=torch.int32) << (32 - _LEVEL_BITS)).view(torch.float32)
        out.update(level_of_key=torch.bucketize(keys, radii32),
                   radii_ext=torch.cat([radii32, torch.tensor([math.inf], dtype=torch.float32)]))
        out.update(levels=L, radii=radii32, table=Zc.reshape(n_ref * L, hidden).float())
        reach_table = reach.reshape(n_ref * L, -1)  # reach0 is added below, once known
        # The rows' distances |r|^2 - 2 q.r from [x - mean, 1] (the bias as a last row: no broadcast copy).
        out["Md"] = torch.cat([-2.0 * R.T / scale, (R * R).sum(1, keepdim=True).T]).float()
    # Every other bound is a linear function of nq >= |q| (the row's standardised norm, rounded up).
    # The row's error (its float32 copy here, float64 in predict) as a distance: s1 nq + s0.
    n_in = d + n_f
    g32, g64 = _gamma(d + 4, u), _gamma(n_in + 2, _U64)
    s1 = 4 * u + 4 * _U64
    s0 = 8 * u * float(mean.norm()) / scale + 8 * math.sqrt(d) * 2.0**-149 / scale
    # The pre-activations' error per unit of a column's norm: the shift, then both paths' rounding.
    r1, r0 = s1 * (1 + g64) + g32 + g64, s0 * (1 + g64)
    w1n = W1x.norm(dim=0)
    w1f = float(w1n.norm())
    cz = g32 * (zmax + b1.abs()) + g64 * (fmax_reach + b1.abs())
    g_out = _gamma(hidden + 2, u) + _gamma(hidden + 2, _U64)
    w2n = W2u.norm(dim=0)
    # |a| <= |z| <= (nq |W1x|_F + max|table| + |b1|) (1 + rounding); predict's a is within z's reach of it.
    a1 = 1.01 * w1f + r1 * w1f
    a0 = 1.01 * (float(zmax.norm()) + float(b1.norm())) + r0 * w1f + zr_norm + float(cz.norm())
    # The logits' reach beyond the table's: the input's and both paths' rounding, and the slack for this
    # path's own last additions (infl, and 2^-21 |logit| <= 2^-21 (|a| |W2u| + |b2u|)).
    reach0 = (cz @ w2a + r0 * (w1n @ w2a) + g_out * (a0 * w2n + b2u.abs())) * infl + 2.0**-21 * (a0 * w2n + b2u.abs())
    reach1 = (r1 * (w1n @ w2a) + g_out * a1 * w2n) * infl + 2.0**-21 * a1 * w2n
    out["reach0"] = (reach0 * (1 + 2.0**-20)).float().unsqueeze(1)
    if feats:
        # The table's reach with reach0 added (in float64, then rounded up): one (n_used, m) pass less per chunk.
        out["reach"] = ((reach_table + reach0) * (1 + 2.0**-20)).T.contiguous().float()
    out["reach1"] = (reach1 * (1 + 2.0**-20)).float().unsqueeze(1)
    out["nq_scale"] = 1.01 / scale
    if feats:
        # rho_a^2 <= d1 + nq^2 + c4 (nq + rmax)^2 (the float32 distances' rounding, and their sum's);
        # B = 2 rho_a + rho_k(a) + twice the row's shift + sqrt(2 e64) (predict's distances' rounding).
        rmax = float(R.norm(dim=1).max())
        c4 = 2 * _gamma(d + 6, u) + 8 * u
        t = math.sqrt(4 * _gamma(2 * d + 8, _U64))
        b0c = 2 * s0 + t * (s0 + rmax)
        # rho_k(a) + b0c per reference row, in float64 and rounded up: one addition less per chunk.
        out.update(c4=c4, rmax=rmax, b1c=2 * s1 + t * (1 + s1), rho_kb=((rho_k + b0c) * (1 + 2.0**-20)).float())
        step = max(1, _SCREEN_BLOCK // n_ref)
        out.update(step=step, flat=np.arange(step) * n_ref)  # each block row's offset in the flat block
    return out


def _screen_level(screen, B):
    """``torch.bucketize(B, radii).clamp(max=levels - 1)`` (float32 ``B``, int64 levels) without the
    binary search: the level of the bucket of B's leading bits, one step up where its radius is
    below ``B``. Whatever the buckets, a level whose radius is not at least ``B`` (B NaN included)
    becomes the last one, which holds every reference row, so the ball is always covered."""
    key = B.view(torch.int32).bitwise_right_shift(32 - _LEVEL_BITS).bitwise_and_(2**_LEVEL_BITS - 1)
    level = screen["level_of_key"].index_select(0, key)
    radii = screen["radii_ext"]
    level.add_(radii.index_select(0, level) < B)
    # Not ``< B``: a NaN B (whose bits may key any bucket) must reach the last level too.
    level.masked_fill_(radii.index_select(0, level).ge(B).logical_not_(), screen["levels"] - 1)
    return level.clamp_(max=screen["levels"] - 1)


def screen_labels(screen, rows):
    """Labels of raw rows (before standardisation) by :func:`predict_screen`'s float32 proof.

    Returns ``(labels, proved)``: int64 and bool tensors of shape (m,). Where ``proved``,
    the label is the one predict's float64 path gives (the argmax of its logits over the
    used outputs): the float32 logits of ``[q, centre of the feature range]`` are bounded
    against predict's logits, with the feature range's reach, the rounding of both paths
    and the float32 rounding of the row, and the top output's lower bound exceeds every
    other output's upper bound. Rows with non-finite values or near-ties are not proved.
    """
    x = torch.as_tensor(rows)
    x = x.to(torch.float32) if x.dtype != torch.float32 else x
    m, d = x.shape
    y = torch.empty((m, d + 1), dtype=torch.float32)
    torch.sub(x, screen["mean"], out=y[:, :d])
    y[:, d] = 1.0
    nq = torch.linalg.vector_norm(y[:, :d], dim=1).mul_(screen["nq_scale"])
    z = torch.mm(y, screen["Mz"])
    n_ref = screen["n_ref"]
    if n_ref:
        near = np.empty(m, dtype=np.int64)
        d1 = np.empty(m, dtype=np.float32)
        step, flat = screen["step"], screen["flat"]
        buffer = torch.empty((min(step, m), n_ref), dtype=torch.float32)  # stays in cache for the argmin
        for s in range(0, m, step):
            b = min(step, m - s)
            block = torch.mm(y[s : s + step], screen["Md"], out=buffer[:b]).numpy()
            nb = block.argmin(1, out=near[s : s + b])
            block.ravel().take(nb + flat[:b], out=d1[s : s + b])
        near, d1 = torch.from_numpy(near), torch.from_numpy(d1)
        c4, rmax = screen["c4"], screen["rmax"]
        rho = torch.addcmul(d1, nq, torch.add(nq, 2 * c4 * rmax, alpha=1 + c4)).add_(c4 * rmax * rmax)
        B = rho.clamp_(min=0).sqrt_().mul_(2 * (1 + 4 * _U32)).add_(screen["rho_kb"].index_select(0, near))
        B.add_(nq, alpha=screen["b1c"])
        entry = _screen_level(screen, B).add_(near, alpha=screen["levels"])
        z.add_(screen["table"].index_select(0, entry))
        reach = screen["reach"].index_select(1, entry).addcmul_(screen["reach1"], nq)  # (n_used, m), reach0 included
    else:
        reach = torch.addcmul(screen["reach0"], screen["reach1"], nq)
    a = z.clamp_(min=0)
    logits = torch.addmm(screen["b2u"], screen["W2uT"], a.T)  # (n_used, m)
    low = torch.sub(logits, reach).amax(0)
    over = logits.add_(reach).ge_(low)  # 1.0 where an output's upper bound reaches the best lower bound
    proved = over.sum(0) == 1
    labels = over.mul_(torch.arange(over.shape[0], dtype=over.dtype).unsqueeze(1)).sum(0).long()
    return labels, proved


def certified_labels(Xs, reference, weights, hidden, n_out, outputs):
    """Labels of standardised float64 rows, equal to predict's where ``proved``, whatever rows came with them.

    ``Xs`` holds the rows exactly as predict standardises them. The distances are a
    product of these rows alone, so their last bits may differ from those of predict's
    blocks; the ``k`` nearest reference rows (and the nearest, for the tree cuts) are
    taken where the gap after them exceeds both products' rounding bounds, so predict
    selects the same ones; the logits' top output must then beat the others by more
    than both evaluations' rounding. Returns ``(labels, proved)`` (int64, bool).
    """
    u = _U64
    m, d = Xs.shape
    qn = torch.linalg.vector_norm(Xs, dim=1)
    proved = torch.ones(m, dtype=torch.bool)
    if reference is not None and (reference["emb"].shape[1] or reference.get("cuts") is not None):
        ref = reference["ref"]
        F, k, delta = _features_of(reference)
        n_ref = ref.shape[0]
        rn = ref.norm(dim=1).max()
        D = torch.addmm((ref * ref).sum(1), Xs, ref.T, alpha=-2.0)
        vals, nb = D.topk(min(k + 1, n_ref), dim=1, largest=False)
        tol = 2.01 * _gamma(2 * d + 8, u) * (qn + rn) ** 2 + 4 * u * vals.abs().amax(1)
        if k < n_ref:
            proved &= vals[:, k] - vals[:, k - 1] > tol
        if reference.get("cuts") is not None and n_ref > 1:
            proved &= vals[:, 1] - vals[:, 0] > tol
        n_spec = reference["emb"].shape[1]
        Fd = F.to(Xs.dtype)
        parts = [Xs]
        if n_spec:
            parts.append(Fd[:, :n_spec].index_select(0, nb[:, :k].reshape(-1)).view(m, k, n_spec).mean(1))
        if F.shape[1] > n_spec:
            parts.append(Fd[nb[:, 0], n_spec:])
        H = torch.cat(parts, 1)
    else:
        H, delta = Xs, None
    n_in = H.shape[1]
    W1, b1, W2u, b2u = _mlp_parts(weights, n_in, hidden, n_out, outputs)
    z = torch.addmm(b1, H, W1)
    a = z.clamp(min=0)
    logits = torch.addmm(b2u, a, W2u)
    # Both evaluations' rounding (this one's and predict's), and the features' (a mean in another order).
    zdiff = 2 * _gamma(n_in + 2, u) * (torch.linalg.vector_norm(H, dim=1, keepdim=True) * W1.norm(dim=0) + b1.abs())
    if delta is not None:
        zdiff = zdiff + 2 * delta @ W1[d:].abs()  # each mean within delta of the exact one
    g = 2 * _gamma(hidden + 2, u)
    reach = (zdiff @ W2u.abs() + g * ((torch.linalg.vector_norm(a, dim=1, keepdim=True)
                                       + torch.linalg.vector_norm(zdiff, dim=1, keepdim=True)) * W2u.norm(dim=0)
                                      + b2u.abs()))
    reach = reach * (1 + 2.0**-30) + 4 * u * logits.abs()
    top = logits.argmax(1, keepdim=True)
    low = (logits - reach).gather(1, top).squeeze(1)
    others = (logits + reach).scatter(1, top, -math.inf).amax(1) if logits.shape[1] > 1 else torch.full_like(low, -math.inf)
    proved &= low > others
    return top.squeeze(1), proved


def corrupt_labels(X, y, rng, n):
    """``n`` wrong labellings near the true one ``y`` (consecutive ids from 0).

    Cycles through four kinds of error:

    * split: a cluster cut in two by a random hyperplane through it;
    * merge: two clusters joined (a split when there is only one);
    * noise: 2-30 % of the points (at least one) moved to another or a new cluster;
    * tiny: 1-3 points moved to a new cluster.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of int of shape (n_samples,)
    rng : numpy.random.Generator
    n : int

    Returns
    -------
    list of ndarray of int64, each of shape (n_samples,) with consecutive ids from 0
    """
    out = []
    k = int(y.max()) + 1
    n_pts = y.shape[0]
    for j in range(n):
        z = y.copy()
        kind = j % 4
        if kind == 1 and k < 2:
            kind = 0
        if kind == 0:
            sizes = np.bincount(y, minlength=k)
            big = np.flatnonzero(sizes >= 2)
            if big.shape[0] == 0:
                kind = 2
            else:
                members = np.flatnonzero(y == rng.choice(big))
                proj = X[members] @ rng.normal(size=X.shape[1])
                cut = np.quantile(proj, rng.uniform(0.25, 0.75))
                moved = members[proj > cut]
                if moved.shape[0] in (0, members.shape[0]):
                    moved = members[: members.shape[0] // 2]
                z[moved] = k
        if kind == 1:
            a, b = rng.choice(k, size=2, replace=False)
            z[z == b] = a
        elif kind == 2:
            m = max(1, int(round(rng.uniform(0.02, 0.3) * n_pts)))
            idx = rng.choice(n_pts, size=min(m, n_pts), replace=False)
            z[idx] = (z[idx] + rng.integers(1, k + 1, size=idx.shape[0])) % (k + 1)
        elif kind == 3:
            idx = rng.choice(n_pts, size=min(n_pts, int(rng.integers(1, 4))), replace=False)
            z[idx] = k
        out.append(compact_labels(z)[0])
    return out


def smooth_labels(y, neighbours):
    """Each point relabelled by the majority of itself and its nearest neighbours.

    A vote over the point and the rows ``neighbours[i]`` (ties keep the
    point's own label), so a labelling becomes consistent with the k-NN graph
    the way any partition of the space is; consecutive ids from 0 after.

    Parameters
    ----------
    y : ndarray of int of shape (n,)
    neighbours : torch.Tensor or ndarray of int of shape (n, k)

    Returns
    -------
    ndarray of int64 of shape (n,)
    """
    y = np.asarray(y, dtype=np.int64)
    nb = np.asarray(neighbours.cpu() if isinstance(neighbours, torch.Tensor) else neighbours, dtype=np.int64)
    n, k = y.shape[0], int(y.max()) + 1
    votes = np.zeros((n, k))
    np.add.at(votes, (np.repeat(np.arange(n), nb.shape[1]), y[nb].ravel()), 1.0)
    votes[np.arange(n), y] += 1.5  # the point itself, and ties go to its own label
    return compact_labels(votes.argmax(1))[0]


def source_sets(y, groups=None):
    """Labelled source sets: the row indices of each and the integer codes of ``y``.

    The rows of one ``groups`` value form one set (all rows without ``groups``);
    sets of fewer than 2 rows are dropped.

    Raises
    ------
    ValueError
        If ``groups`` does not match ``y`` in length or every set is dropped.
    """
    _, codes = np.unique(y, return_inverse=True)
    codes = codes.astype(np.int64)
    if groups is None:
        return [np.arange(y.shape[0])], codes
    groups = column_or_1d(groups)
    check_consistent_length(y, groups)
    _, gid = np.unique(groups, return_inverse=True)
    sets = [np.flatnonzero(gid == g) for g in range(int(gid.max()) + 1)]
    sets = [s for s in sets if s.shape[0] >= 2]
    if not sets:
        raise ValueError("every group of groups= has fewer than 2 samples; a source set needs at least 2.")
    return sets, codes


def wgan_critic_loss(critic, Xs, real, fakes, *, gp_weight=0.0, generator=None, **critic_kwargs):
    """WGAN loss of a :class:`~sktransfer_cluster.cluster.c2m.critic.ClusteringCritic` on labellings of one set.

    ``mean c(fakes) - c(real)`` plus, when ``gp_weight > 0``, the gradient
    penalty on pooled embeddings interpolated between the real one and each
    fake (the critic MLP ``critic.head`` is what must be 1-Lipschitz).

    Parameters
    ----------
    critic : ClusteringCritic
    Xs : torch.Tensor of shape (n, d)
    real : torch.Tensor of int of shape (1, n)
    fakes : torch.Tensor of int of shape (F, n)
    gp_weight : float, default=0.0
    generator : torch.Generator, default=None
        Source of the interpolation weights.
    **critic_kwargs : dict
        Passed to ``critic.embed`` (e.g. ``neighbours``).

    Returns
    -------
    loss : torch.Tensor (scalar)
    real_score, fake_score : float
        Mean critic values of the real and the fake labellings.
    """
    labels = torch.cat([real, fakes], 0)
    emb = critic.embed(Xs, labels, **critic_kwargs)
    scores = critic.head(emb).squeeze(-1)
    real_s, fake_s = scores[:1], scores[1:]
    loss = fake_s.mean() - real_s.mean()
    if gp_weight > 0:
        e_fake = emb[1:]
        real_e = emb[:1].expand_as(e_fake)
        loss = loss + gradient_penalty(critic.head, real_e, e_fake, weight=gp_weight, generator=generator)
    return loss, float(real_s.detach().mean()), float(fake_s.detach().mean())
