"""C2M's critic over whole clusterings: the clique-graph GAE and the set critic
(Alami, Kaddah & Read, *Transferable Deep Metric Learning for Clustering*).
"""

from __future__ import annotations

import torch
from torch import nn

from ...nn import knn_indices, mlp

__all__ = [
    "clique_propagate", "cluster_margin_features", "cluster_size_features", "neighbour_label_features",
    "tree_label_features", "CliqueGAE",
    "gram_pool", "ClusteringCritic",
]


# ------------------------------------------------- clique-graph GAE and set critic (C2M)
# Alami, Kaddah & Read, *Transferable Deep Metric Learning for Clustering*.
# A labelling y of n points is the graph whose cliques are the clusters. With
# Kipf & Welling's propagation A_hat = D^-1/2 (A + I) D^-1/2 and A the clique
# adjacency (A_ij = 1 iff y_i == y_j, i != j), A + I is block-diagonal all-ones
# and D_ii = |C(i)|, so (A_hat H)_i is the mean of H over i's cluster: a segment
# sum, O(n h), never an n x n matrix. Sums run over the points in their order
# whatever the cluster ids are, so everything below is exactly (bit for bit)
# invariant to renaming the clusters.


def _population_labels(labels):
    """``labels`` as an int64 tensor of shape (P, n) (a 1-D labelling is P = 1)."""
    labels = torch.as_tensor(labels)
    if labels.ndim == 1:
        labels = labels.unsqueeze(0)
    if labels.ndim != 2:
        raise ValueError(f"labels must have shape (n,) or (P, n), got {tuple(labels.shape)}.")
    return labels.long()

def _segment_index(labels):
    """Flat segment ids ``p * n_slots + y_pi`` of a (P, n) labelling, and ``n_slots``."""
    n_slots = int(labels.max()) + 1 if labels.numel() else 1
    offsets = n_slots * torch.arange(labels.shape[0], device=labels.device).unsqueeze(1)
    return (labels + offsets).reshape(-1), n_slots

def clique_propagate(H, labels):
    """GCN propagation ``A_hat H`` on the clique graph of each labelling: cluster means.

    Parameters
    ----------
    H : torch.Tensor of shape (n, h) or (P, n, h)
        Node features, shared by all labellings (2-D) or one set per labelling.
    labels : torch.Tensor of shape (n,) or (P, n)
        Non-negative integer cluster ids; P labellings of the same n points.
        Memory grows with ``P * (max id + 1)``: use consecutive ids.

    Returns
    -------
    torch.Tensor of shape (P, n, h)
        Row ``i`` of labelling ``p`` is the mean of ``H`` over the points that
        ``p`` puts in ``i``'s cluster, computed with segment sums
        (``index_add_``) in O(P n h) time and memory.
    """
    labels = _population_labels(labels)
    P, n = labels.shape
    means, _, idx, _ = _segment_means(H, labels)
    return means[idx].reshape(P, n, H.shape[-1])

def _segment_means(H, labels):
    """Per-cluster means of ``H`` (n, h) or (P, n, h) under ``labels`` (P, n), by segment sums.

    Returns ``means`` (P * slots, h), ``counts`` (P * slots,), the segment index
    of every point (P * n,) and ``slots``; empty slots have mean 0.
    """
    P, n = labels.shape
    h = H.shape[-1]
    idx, n_slots = _segment_index(labels)
    flat = H.expand(P, n, h).reshape(P * n, h)
    sums = flat.new_zeros(P * n_slots, h).index_add_(0, idx, flat)
    counts = torch.bincount(idx, minlength=P * n_slots)
    return sums / counts.clamp_min(1).unsqueeze(1).to(H.dtype), counts, idx, n_slots

def cluster_margin_features(X, labels, chunk_elements=2**22):
    """Distance of each point to its own cluster mean and to the nearest other one.

    ``a_i = ||x_i - m_C(i)||`` and ``b_i = min_{c != C(i)} ||x_i - m_c||``
    (``b_i = 0`` when the labelling has a single cluster): the two ingredients
    of the silhouette, with cluster means in place of all pairs, so the cost is
    O(P n k d) for k clusters, never O(n^2).

    Parameters
    ----------
    X : torch.Tensor of shape (n, d)
    labels : torch.Tensor of shape (n,) or (P, n)
    chunk_elements : int
        Bound on the elements of one block of point-to-mean distances.

    Returns
    -------
    torch.Tensor of shape (P, n, 2)
    """
    labels = _population_labels(labels)
    P, n = labels.shape
    d = X.shape[-1]
    means, counts, _, n_slots = _segment_means(X, labels)
    means, counts = means.reshape(P, n_slots, d), counts.reshape(P, n_slots)
    unused = (counts == 0).unsqueeze(1)  # (P, 1, slots)
    out = X.new_empty(P, n, 2)
    rows = max(1, chunk_elements // max(1, P * n_slots))
    for s in range(0, n, rows):
        xs = X[s : s + rows]  # (r, d)
        # Direct differences, not the ||x||^2 + ||m||^2 - 2 x.m matrix-product trick:
        # each distance is computed the same way whatever its cluster's id.
        dist = torch.cdist(
            xs.expand(P, xs.shape[0], d), means, compute_mode="donot_use_mm_for_euclid_dist"
        )  # (P, r, slots)
        own = labels[:, s : s + rows].unsqueeze(-1)
        a = dist.gather(-1, own).squeeze(-1)
        other = dist.scatter(-1, own, float("inf")).masked_fill(unused, float("inf"))
        b = other.min(-1).values
        out[:, s : s + rows, 0] = a
        out[:, s : s + rows, 1] = torch.where(torch.isfinite(b), b, torch.zeros_like(b))
    return out

def cluster_size_features(labels):
    """The size of each point's cluster relative to an equal share, for P labellings at once.

    ``log(k |C(i)| / n)`` for a labelling with k non-empty clusters: 0 for every point when
    the clusters are equally large, positive in a cluster larger than its share, negative in
    a smaller one. The clique-graph encoder cannot see sizes otherwise (its propagation is a
    per-cluster mean), so a metric learned on classes of given relative sizes cannot tell a
    labelling that merges two of them, or splits one, by the sizes it leaves. O(P n);
    exactly invariant to renaming the clusters.

    Parameters
    ----------
    labels : torch.Tensor of shape (n,) or (P, n)

    Returns
    -------
    torch.Tensor of shape (P, n, 1), float64
    """
    labels = _population_labels(labels)
    P, n = labels.shape
    idx, slots = _segment_index(labels)
    counts = torch.bincount(idx, minlength=P * slots).reshape(P, slots)
    k = (counts > 0).sum(1, keepdim=True).to(torch.float64)
    size = counts.reshape(-1)[idx].reshape(P, n).to(torch.float64)
    return torch.log(size * k / n).unsqueeze(-1)

def neighbour_label_features(labels, neighbours):
    """How each point's label agrees with its nearest neighbours', for P labellings at once.

    Two features per point in [-1, 1] (``2 f - 1`` of a fraction ``f``): the
    fraction of its k nearest neighbours with its label, and the number of its
    nearest neighbours (nearest first) sharing its label before the first that
    does not, over k. O(P n k); exactly invariant to renaming the clusters.

    Parameters
    ----------
    labels : torch.Tensor of shape (n,) or (P, n)
    neighbours : torch.Tensor of shape (n, k)
        From :func:`knn_indices` (the graph depends on the points only).

    Returns
    -------
    torch.Tensor of shape (P, n, 2), float64
    """
    labels = _population_labels(labels)
    k = neighbours.shape[1]
    same = labels[:, neighbours] == labels.unsqueeze(-1)
    agree = same.to(torch.float64).mean(-1)
    ranks = torch.arange(k, device=labels.device)
    run = torch.where(same, torch.full_like(ranks, k), ranks).min(-1).values.to(torch.float64) / k
    return torch.stack([2.0 * agree - 1.0, 2.0 * run - 1.0], -1)

def tree_label_features(labels, tree, floor=-5.0):
    """How a labelling cuts a set's minimum spanning tree, for P labellings at once.

    Five features per point, from the tree edges of
    :func:`~sktransfer_cluster.cluster.c2m.graph.spanning_tree` (log lengths
    relative to the median edge, so free of the set's scale): the longest tree
    edge inside the point's cluster (``floor`` for a single point), the
    shortest tree edge leaving it, the same two over the whole labelling, and
    1 when the labelling has more than one cluster (the cut lengths are 0
    otherwise). A good clustering in single linkage's sense cuts long edges
    only and keeps none inside; a blob cut in two cuts a short edge, two rings
    taken as one keep the long edge between them -- whatever the clusters'
    shapes. O(P n); exactly invariant to renaming the clusters.

    Parameters
    ----------
    labels : torch.Tensor of shape (n,) or (P, n)
    tree : dict with ``u``, ``v`` (E,) and ``w`` (E,)

    Returns
    -------
    torch.Tensor of shape (P, n, 5), like ``tree["w"]``
    """
    labels = _population_labels(labels)
    P, n = labels.shape
    u, v, w = tree["u"], tree["v"], tree["w"]
    idx, slots = _segment_index(labels)
    offsets = slots * torch.arange(P, device=labels.device).unsqueeze(1)
    su, sv = labels[:, u] + offsets, labels[:, v] + offsets  # (P, E) segment of each end
    same = su == sv
    wp = w.expand(P, -1)
    inner = w.new_full((P * slots,), floor).scatter_reduce(0, su[same], wp[same], "amax")
    cut = w.new_full((P * slots,), float("inf"))
    cut = cut.scatter_reduce(0, su[~same], wp[~same], "amin").scatter_reduce(0, sv[~same], wp[~same], "amin")
    inner_all = inner.reshape(P, slots).max(1).values
    cut_all = cut.reshape(P, slots).min(1).values
    split = torch.isfinite(cut_all)
    cut = torch.where(torch.isfinite(cut), cut, torch.zeros_like(cut))
    cut_all = torch.where(split, cut_all, torch.zeros_like(cut_all))
    per_set = torch.stack([inner_all, cut_all, split.to(w.dtype)], -1).unsqueeze(1).expand(P, n, 3)
    per_point = torch.stack([inner[idx], cut[idx]], -1).reshape(P, n, 2)
    return torch.cat([per_point, per_set], -1)

class CliqueGAE(nn.Module):
    """Graph convolutional encoder of a labelled set, on the clique graph of its clusters.

    Layer ``l``: ``H_{l+1} = act(A_hat H_l W_l [+ H_l U_l + b_l])`` with ``A_hat H``
    from :func:`clique_propagate` (cluster means); ReLU between layers, the last
    layer linear, as in Kipf & Welling's GAE encoder.

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int, default=(32, 16)
        Layer widths; the node embedding size is ``hidden_dims[-1]``.
    skip : bool, default=True
        Add a per-node term ``H U + b`` to every layer. Without it (the plain GCN
        of the paper) every point of a cluster gets the same embedding, a
        function of the cluster mean only, so the encoder cannot see how the
        points spread inside their cluster.

    ``forward(H, labels)``: ``H`` of shape (n, d) or (P, n, d), ``labels`` of
    shape (n,) or (P, n); returns ``Z`` of shape (P, n, hidden_dims[-1]).
    """

    def __init__(self, n_features, hidden_dims=(32, 16), skip=True):
        super().__init__()
        dims = [int(n_features), *[int(h) for h in hidden_dims]]
        self.propagate = nn.ModuleList(
            nn.Linear(dims[i], dims[i + 1], bias=False) for i in range(len(dims) - 1)
        )
        self.self_loop = (
            nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)) if skip else None
        )

    def forward(self, H, labels):
        labels = _population_labels(labels)
        n_layers = len(self.propagate)
        for i in range(n_layers):
            out = clique_propagate(self.propagate[i](H), labels)
            if self.self_loop is not None:
                out = out + self.self_loop[i](H)
            H = torch.relu(out) if i < n_layers - 1 else out
        return H

def gram_pool(Z, eps=1e-12):
    """Size-free embedding of a set: upper triangle of ``Z_n^T Z_n / n``.

    ``Z_n`` is ``Z`` with each row scaled to unit L2 norm (rows of norm below
    ``eps`` are left as they are), so the result is the mean over the points of
    ``z_i z_i^T / ||z_i||^2``: its scale depends neither on the number of points
    (the paper's ``Z^T Z`` grows linearly with n) nor on the encoder's output
    scale (trace 1), and duplicating every point leaves it unchanged.

    Parameters
    ----------
    Z : torch.Tensor of shape (..., n, m)

    Returns
    -------
    torch.Tensor of shape (..., m (m + 1) / 2)
        Row-major upper triangle, diagonal included.
    """
    m = Z.shape[-1]
    Zn = Z / Z.norm(dim=-1, keepdim=True).clamp_min(eps)
    G = Zn.transpose(-1, -2) @ Zn / Z.shape[-2]
    iu = torch.triu_indices(m, m, device=Z.device)
    return G[..., iu[0], iu[1]]

class ClusteringCritic(nn.Module):
    """The C2M metric ``r(X, y) = c(pool(GAE(graph(X, y))))``, batched over labellings.

    Parameters
    ----------
    n_features : int
    gae_dims : sequence of int, default=(32, 16)
    critic_dims : sequence of int, default=(256, 256, 512, 512)
        Hidden widths of the critic MLP (LeakyReLU, then one linear output).
    skip : bool, default=True
        See :class:`CliqueGAE`.
    margin_features : bool, default=True
        Feed :func:`cluster_margin_features` (distance to the own and to the
        nearest other cluster mean) to the encoder beside the coordinates.
    n_neighbors : int or None, default=None
        Also feed :func:`neighbour_label_features` over the ``n_neighbors``
        nearest neighbours of each point (``None``: not).
    tree_features : bool, default=False
        Also feed :func:`tree_label_features` (how the labelling cuts the set's
        minimum spanning tree; ``tree=`` from
        :func:`~sktransfer_cluster.cluster.c2m.graph.spanning_tree`).
    n_spectral : int, default=0
        Also feed this many columns of a per-set embedding of the points
        (``spectral=``, e.g. the set's spectral embedding), which depends on
        the points only.
    size_features : bool, default=False
        Also feed :func:`cluster_size_features` (each point's cluster size
        relative to an equal share).
    coordinates : bool, default=True
        Feed the coordinates ``X`` themselves; ``False``: only the features
        above, which depend on the set's k-NN graph, not on where its points lie.
    negative_slope : float, default=0.2

    ``embed(X, labels)`` returns the pooled embeddings (P, e); ``head(e)`` the
    scores; ``forward(X, labels)`` both, shape (P,). ``X`` (n, d) is shared by the
    P labellings of ``labels`` (P, n). Both take ``neighbours=`` (the set's
    :func:`knn_indices`, computed when omitted) so a CEM population reuses it.
    """

    def __init__(
        self,
        n_features,
        gae_dims=(32, 16),
        critic_dims=(256, 256, 512, 512),
        skip=True,
        margin_features=True,
        n_neighbors=None,
        n_spectral=0,
        coordinates=True,
        tree_features=False,
        size_features=False,
        negative_slope=0.2,
    ):
        super().__init__()
        self.margin_features = bool(margin_features)
        self.n_neighbors = None if n_neighbors is None else int(n_neighbors)
        self.n_spectral = int(n_spectral)
        self.coordinates = bool(coordinates)
        self.tree_features = bool(tree_features)
        self.size_features = bool(size_features)
        n_in = (int(n_features) if self.coordinates else 0) + (2 if self.margin_features else 0)
        n_in += (0 if n_neighbors is None else 2) + self.n_spectral + (5 if self.tree_features else 0)
        n_in += 1 if self.size_features else 0
        if n_in == 0:
            raise ValueError(
                "coordinates=False leaves the critic no node features: give it n_neighbors, n_spectral or tree_features."
            )
        self.gae = CliqueGAE(n_in, gae_dims, skip=skip)
        m = int(gae_dims[-1])
        slope = float(negative_slope)
        self.head = mlp([m * (m + 1) // 2, *critic_dims, 1], activation=lambda: nn.LeakyReLU(slope))

    def embed(self, X, labels, neighbours=None, spectral=None, tree=None):
        labels = _population_labels(labels)
        P, n = labels.shape
        parts = [X.expand(P, n, X.shape[-1])] if self.coordinates else []
        if self.n_spectral:
            if spectral is None:
                raise ValueError("this critic reads the set's spectral embedding: pass spectral=(n, n_spectral).")
            parts.append(spectral.to(X.dtype).expand(P, n, self.n_spectral))
        if self.margin_features:
            parts.append(cluster_margin_features(X, labels))
        if self.n_neighbors is not None:
            if neighbours is None:
                neighbours = knn_indices(X, self.n_neighbors)
            parts.append(neighbour_label_features(labels, neighbours).to(X.dtype))
        if self.tree_features:
            if tree is None:
                raise ValueError("this critic reads the set's spanning tree: pass tree=spanning_tree(X).")
            parts.append(tree_label_features(labels, tree).to(X.dtype))
        if self.size_features:
            parts.append(cluster_size_features(labels).to(X.dtype))
        H = torch.cat(parts, -1) if len(parts) > 1 else parts[0]
        return gram_pool(self.gae(H, labels))

    def forward(self, X, labels, neighbours=None, spectral=None, tree=None):
        return self.head(self.embed(X, labels, neighbours, spectral, tree)).squeeze(-1)
