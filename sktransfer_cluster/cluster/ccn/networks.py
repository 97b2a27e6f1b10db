"""CCN's networks: the pairwise similarity network G (Hsu, Lv & Kira, *Learning to
cluster in order to transfer across domains and tasks*), its pair enumeration, and
batch norm folded into the preceding linear layer for inference.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ...nn import mlp

__all__ = ["fold_batch_norm", "pair_enumerate", "PairEnum", "WithInput", "SimilarityNetwork", "SimilarityEnsemble"]


def fold_batch_norm(module):
    """An eval-mode copy of ``module`` with each affine map absorbed into the layer before.

    Inside every ``nn.Sequential``, a ``BatchNorm1d`` that directly follows an
    ``nn.Linear`` is, at inference, the affine map ``y -> (y - mean) * gamma / sqrt(var +
    eps) + beta`` of the running statistics; it is folded into that Linear's weight and
    bias and replaced by ``nn.Identity``, saving a full pass over the activations per
    layer. The result equals ``module.eval()``'s up to float rounding. ``module`` itself
    is not changed; the copy has no gradients.
    """
    folded = copy.deepcopy(module).eval()
    with torch.no_grad():
        for seq in folded.modules():
            if not isinstance(seq, nn.Sequential):
                continue
            for i in range(1, len(seq)):
                lin, bn = seq[i - 1], seq[i]
                if not (isinstance(lin, nn.Linear) and type(bn) is nn.BatchNorm1d and bn.track_running_stats
                        and bn.running_mean is not None):
                    continue
                scale = torch.rsqrt(bn.running_var + bn.eps)
                shift = -bn.running_mean * scale
                if bn.affine:
                    scale, shift = scale * bn.weight, shift * bn.weight + bn.bias
                bias = lin.bias if lin.bias is not None else torch.zeros_like(bn.running_mean)
                fused = nn.Linear(lin.in_features, lin.out_features, device=lin.weight.device, dtype=lin.weight.dtype)
                fused.weight.copy_(lin.weight * scale.unsqueeze(-1))
                fused.bias.copy_(bias * scale + shift)
                seq[i - 1], seq[i] = fused, nn.Identity()
    for p in folded.parameters():
        p.requires_grad_(False)
    return folded

# ------------------------------------------------------- pair enumeration and the G network
# Hsu, Lv & Kira, *Learning to cluster in order to transfer across domains and tasks*.


def pair_enumerate(a, b=None, symmetric=False):
    """All ordered pairs of rows: row ``i * m + j`` describes the pair ``(a_i, b_j)``.

    Vectorised with ``expand`` + ``cat`` (no Python loop over pairs). Self-pairs
    are included, as in the paper's pair-enumeration layer: a (10, 512) input
    gives a (100, 1024) output. Memory is O(n m d).

    Parameters
    ----------
    a : torch.Tensor of shape (n, d)
    b : torch.Tensor of shape (m, d), default=None
        Defaults to ``a`` (all n^2 pairs of a minibatch).
    symmetric : bool, default=False
        False: the paper's concatenation ``[a_i, b_j]``. True:
        ``[|a_i - b_j|, a_i * b_j]``, the same for ``(i, j)`` and ``(j, i)``.

    Returns
    -------
    torch.Tensor of shape (n * m, 2 * d)
    """
    if b is None:
        b = a
    n, m = a.shape[0], b.shape[0]
    left = a.unsqueeze(1).expand(n, m, a.shape[1])
    right = b.unsqueeze(0).expand(n, m, b.shape[1])
    if symmetric == "difference":
        return (left - right).abs().reshape(n * m, a.shape[1])
    parts = [(left - right).abs(), left * right] if symmetric else [left, right]
    return torch.cat(parts, dim=2).reshape(n * m, a.shape[1] + b.shape[1])

class PairEnum(nn.Module):
    """Module form of :func:`pair_enumerate`."""

    def __init__(self, symmetric=False):
        super().__init__()
        self.symmetric = symmetric

    def forward(self, a, b=None):
        return pair_enumerate(a, b, symmetric=self.symmetric)

class WithInput(nn.Module):
    """``net(x)`` followed by ``x`` itself."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return torch.cat([self.net(x), x], dim=1)

class SimilarityNetwork(nn.Module):
    """The pairwise similarity network ``G``: backbone -> pair enumeration -> FC -> 2 classes.

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int, default=(128, 64)
        Backbone widths (batch norm + ReLU after each; with ``symmetric`` the
        last layer is linear, since a ReLU would zero part of ``|h_i - h_j|``).
    pair_hidden : int, default=64
        Width of the hidden fully connected layer on the pair features.
    batch_norm : bool, default=True
    symmetric : bool, default=False
        Pair features ``[|h_i - h_j|, h_i * h_j]`` instead of the paper's
        ``[h_i, h_j]``: the head sees how two features agree, not where each
        lies, so it cannot learn "i is a 3 and j is a 3" and has to learn a
        comparison, which carries over to classes never seen in training. The
        prediction is then symmetric in ``(i, j)``.
    raw_features : bool, default=False
        Append the input itself to the backbone's features ``h``.

    ``forward(x)`` returns logits of shape (n, n, 2) for all ordered pairs of the
    minibatch (class 1 = similar); ``forward(x, x2)`` those of the (n, m) cross pairs.
    """

    def __init__(
        self, n_features, hidden_dims=(128, 64), pair_hidden=64, batch_norm=True, symmetric=False, raw_features=False
    ):
        super().__init__()
        dims = [n_features, *hidden_dims]
        self.backbone = mlp(dims, batch_norm=batch_norm, final_activation=not symmetric)
        if raw_features:
            self.backbone = WithInput(self.backbone)
        self.pair_enum = PairEnum(symmetric)
        h = dims[-1] + (n_features if raw_features else 0)
        self.feature_dim = h  # width of backbone(x)
        layers = [nn.Linear(h if symmetric == "difference" else 2 * h, pair_hidden)]
        if batch_norm:
            layers.append(nn.BatchNorm1d(pair_hidden))
        layers += [nn.ReLU(), nn.Linear(pair_hidden, 2)]
        self.head = nn.Sequential(*layers)

    def pair_logits(self, fa, fb=None):
        """Logits (n, m, 2) from backbone features ``fa`` (n, h) and ``fb`` (m, h)."""
        n = fa.shape[0]
        m = n if fb is None else fb.shape[0]
        return self.head(self.pair_enum(fa, fb)).reshape(n, m, 2)

    def forward(self, x, x2=None):
        fa = self.backbone(x)
        fb = None if x2 is None else self.backbone(x2)
        return self.pair_logits(fa, fb)

class SimilarityEnsemble(nn.Module):
    """Several :class:`SimilarityNetwork` ``G`` whose "similar" probabilities are averaged.

    Has the members' interface, so code written for one ``G`` works unchanged:
    ``backbone(x)`` returns the members' features side by side and
    ``pair_logits(fa, fb)`` splits them again. The returned "logits" are the log
    of the averaged pair probabilities, so their softmax is that average and
    their argmax the ensemble's prediction.

    Parameters
    ----------
    members : sequence of SimilarityNetwork
    """

    def __init__(self, members):
        super().__init__()
        self.members = nn.ModuleList(members)
        self._widths = [m.feature_dim for m in self.members]

    def backbone(self, x):
        return torch.cat([m.backbone(x) for m in self.members], dim=1)

    def pair_logits(self, fa, fb=None):
        """Log of the members' mean pair probabilities, shape (n, m, 2)."""
        fas = torch.split(fa, self._widths, dim=1)
        fbs = [None] * len(fas) if fb is None else torch.split(fb, self._widths, dim=1)
        prob = sum(torch.softmax(m.pair_logits(a, b), -1) for m, a, b in zip(self.members, fas, fbs))
        prob = prob / len(self.members)
        return torch.log(prob.clamp_min(torch.finfo(prob.dtype).tiny))

    def forward(self, x, x2=None):
        fa = self.backbone(x)
        fb = None if x2 is None else self.backbone(x2)
        return self.pair_logits(fa, fb)
