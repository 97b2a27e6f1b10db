"""A torch encoder trained with a parametric-UMAP loss on a neighbour graph.

The loss is UMAP's fuzzy cross-entropy (McInnes et al., 2018; Sainburg et al.,
2021 for the parametric form): edges of the graph are drawn with probability
proportional to their weight and pulled together under the low-dimensional
similarity ``q = 1 / (1 + a d^(2b))``; random pairs drawn from the same batch
are pushed apart with ``-log(1 - q)``. Because the embedding is the output of
a network, new rows (``predict``, ``transfer``) are mapped without refitting,
and an encoder trained on one data set can start the training on another.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from ..base.compiled import compile_step
from ..base.runtime import on_compute_threads
from .graph import shifted_images

__all__ = ["make_encoder", "umap_curve", "train_neighbour_encoder", "encode", "steps_per_epoch", "shrink_towards",
           "draw_edges", "MULTINOMIAL_CATEGORIES"]

#: The most categories ``torch.multinomial`` draws from (2^24); :func:`draw_edges` draws from
#: larger graphs by inverting their cumulative weights.
MULTINOMIAL_CATEGORIES = 2**24


def draw_edges(weights, n, generator=None):
    """``n`` edge indices drawn with replacement, each with probability proportional to its weight.

    ``torch.multinomial`` up to :data:`MULTINOMIAL_CATEGORIES` edges (the draws of every
    training before the limit was handled); beyond, which ``torch.multinomial`` refuses,
    ``n`` uniform numbers placed among the cumulative weights (``searchsorted``): the same
    distribution, other draws.

    Parameters
    ----------
    weights : torch.Tensor of shape (n_edges,)
        Non-negative float64, not all zero.
    n : int
    generator : torch.Generator, optional

    Returns
    -------
    torch.Tensor of int64, shape (n,)
    """
    if weights.numel() <= MULTINOMIAL_CATEGORIES:
        return torch.multinomial(weights, n, replacement=True, generator=generator)
    cumulative = torch.cumsum(weights, 0)
    total = cumulative[-1]
    u = torch.rand(n, generator=generator, dtype=cumulative.dtype) * total
    # u < total, so an edge of weight zero (whose cumulative weight equals its predecessor's) is never chosen.
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cumulative, u, right=True)


def make_encoder(n_features, n_components=10, hidden_dims=(256, 256), generator=None):
    """An MLP ``n_features -> hidden_dims -> n_components`` (ReLU), seeded by ``generator``.

    Parameters
    ----------
    n_features, n_components : int
    hidden_dims : sequence of int, default=(256, 256)
    generator : torch.Generator, optional
        Draws the initial weights (global torch RNG untouched when given).

    Returns
    -------
    torch.nn.Sequential
    """
    dims = [int(n_features), *[int(h) for h in hidden_dims], int(n_components)]
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        with torch.random.fork_rng(devices=[]):  # nn.Linear's own init draws from the global RNG
            lin = nn.Linear(a, b)
        with torch.no_grad():
            bound = 1.0 / math.sqrt(a)
            # Kaiming-uniform-like scale for ReLU layers, drawn from the local generator.
            gain = math.sqrt(6.0) if i < len(dims) - 2 else math.sqrt(3.0)
            lin.weight.copy_((torch.rand(b, a, generator=generator) * 2 - 1) * gain * bound)
            lin.bias.copy_((torch.rand(b, generator=generator) * 2 - 1) * bound)
        layers.append(lin)
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def steps_per_epoch(n_edges, batch_size):
    """Adam steps in one pass over a graph's ``n_edges`` edges drawn ``batch_size`` at a time.

    ``max(1, round(n_edges / min(batch_size, n_edges)))``: a batch never holds more
    edges than the graph, and a graph smaller than a batch still makes one step.
    The epoch of :func:`train_neighbour_encoder` and of every wing's training record.

    Examples
    --------
    >>> steps_per_epoch(10_000, 4096), steps_per_epoch(100, 4096), steps_per_epoch(0, 4096)
    (2, 1, 1)
    """
    n_edges, batch_size = int(n_edges), int(batch_size)
    if n_edges <= 0:
        return 1
    return max(1, int(round(n_edges / max(1, min(batch_size, n_edges)))))


@torch.no_grad()
def shrink_towards(module, fresh, keep):
    """Shrink a trained network towards a fresh initialisation, in place: ``keep * w + (1 - keep) * w0``.

    The warm start of a refinement on new data (shrink and perturb, Ash & Adams,
    2020: a network trained to convergence on one data set and trained further
    on another ends worse than one started afresh; shrinking its weights and
    adding fresh-initialisation noise restores the fresh start's result while
    keeping part of what was learnt). ``fresh`` is a network of the same
    architecture at its initialisation (e.g. :func:`make_encoder` with a seeded
    generator); ``keep=1`` leaves ``module`` as it is, ``keep=0`` makes it a copy of
    ``fresh``.

    Parameters
    ----------
    module, fresh : torch.nn.Module
        Same parameter shapes, in the same order.
    keep : float in [0, 1]

    Returns
    -------
    module

    Examples
    --------
    >>> import torch
    >>> a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    >>> with torch.no_grad():
    ...     _ = a.weight.fill_(1.0), b.weight.fill_(0.0)
    >>> shrink_towards(a, b, 0.25).weight.tolist()
    [[0.25, 0.25]]
    """
    keep = float(keep)
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep must lie in [0, 1], got {keep!r}.")
    params, fresh_params = list(module.parameters()), list(fresh.parameters())
    if [p.shape for p in params] != [q.shape for q in fresh_params]:
        raise ValueError("module and fresh must have the same parameter shapes.")
    for p, q in zip(params, fresh_params):
        p.mul_(keep).add_(q.to(p.device, p.dtype), alpha=1.0 - keep)
    return module


@functools.lru_cache(maxsize=16)
def umap_curve(min_dist=0.0, spread=1.0):
    """``(a, b)`` of ``1 / (1 + a d^(2b))`` fitted to UMAP's target similarity curve.

    The target is 1 below ``min_dist`` and ``exp(-(d - min_dist) / spread)``
    beyond; fitted by least squares on 300 points of ``[0, 3 spread]``.

    Examples
    --------
    >>> a, b = umap_curve(0.0)
    >>> round(a, 2), round(b, 2)
    (1.93, 0.79)
    """
    from scipy.optimize import curve_fit

    x = np.linspace(0, spread * 3, 300)
    y = np.where(x < min_dist, 1.0, np.exp(-(x - min_dist) / spread))
    (a, b), _ = curve_fit(lambda x, a, b: 1.0 / (1.0 + a * x ** (2 * b)), x, y, p0=(1.0, 1.0))
    return float(a), float(b)


def _random_shifts(X, image_shape, max_shift, generator):
    """Each row translated by its own random shift in ``[-max_shift, max_shift]^2``."""
    n = X.shape[0]
    span = 2 * max_shift + 1
    code = torch.randint(0, span * span, (n,), generator=generator)
    out = X.clone()
    for c in code.unique().tolist():
        dy, dx = c // span - max_shift, c % span - max_shift
        if dy == 0 and dx == 0:
            continue
        rows = (code == c).nonzero().squeeze(1)
        out[rows] = shifted_images(X[rows], image_shape, dy, dx)
    return out


class _Adam:
    """Plain Adam (Kingma & Ba, 2015). ``torch.optim.Adam`` would do the same, but its
    first construction imports torch's compiler stack (about 2 CPU-seconds)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps, self.t = params, lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m / c1, (v / c2).sqrt_().add_(self.eps), value=-self.lr)


def _step_loss(bs, negative_rate, a, b, neighbour_weight, decoder, reconstruction_weight, node_loss):
    """One step's loss of :func:`train_neighbour_encoder`, as a function of the batch (what ``compile=True`` compiles).

    The constants of a training run are bound here, so that ``torch.compile`` sees the
    floats as constants (as arguments they would be traced as symbols, then specialised
    after a second trace). The returned ``loss(encoder, xb, inverse, neg_idx, pick, nodes)``
    takes the batch's rows ``xb``; ``inverse``, each of the ``bs`` edges' two ends as a row
    of ``xb`` (heads, then tails); ``neg_idx``, the rows of the ``negative_rate * bs``
    negative pairs' second ends; ``pick``, the rows reconstructed (None: all); ``nodes``,
    the rows' indices into the data (for ``node_loss``).
    """

    def loss_of(encoder, xb, inverse, neg_idx, pick, nodes):
        Z = encoder(xb)
        zi, zj = Z[inverse[:bs]], Z[inverse[bs:]]
        d2 = ((zi - zj) ** 2).sum(1)
        pos = torch.log1p(a * (d2 + 1e-8) ** b)
        zn = Z[neg_idx]
        d2n = ((zi.repeat(negative_rate, 1) - zn) ** 2).sum(1)
        adn = a * (d2n + 1e-8) ** b
        neg = torch.log1p(adn) - torch.log(adn + 1e-4)
        loss = neighbour_weight * (pos.mean() + negative_rate * neg.mean())
        if decoder is not None:
            Zr, xr = (Z, xb) if pick is None else (Z[pick], xb[pick])
            loss = loss + reconstruction_weight * ((decoder(Zr) - xr) ** 2).mean()
        if node_loss is not None:
            loss = loss + node_loss(Z, nodes)
        return loss

    return loss_of


#: torch.compile's options for the neighbour encoder's step (over base.COMPILE_OPTIONS). Vectorised
#: kernels (scalar ones made an MNIST-5k epoch 1.85 CPU s against 1.3 eager), with the ISA read
#: from the CPU's flags: inductor's own check builds and loads a test library per ISA, about 9 CPU s
#: on a cold cache (a compiler that cannot build the ISA fails the compilation, which then falls
#: back to eager mode with a warning). docs/notes/performance.md, 2026-11-27.
NEIGHBOUR_COMPILE_OPTIONS = {"options": {"cpp.vec_isa_ok": True}}


def check_input_range(rows):
    """ValueError when float32 ``rows`` (a tensor or an ndarray) hold values whose squares overflow float32.

    The encoder's products and the loss's squared distances cannot be computed from such
    rows: training would turn NaN a few steps in, with a message about the step size, and a
    Euclidean k-NN graph would call them non-finite. Inputs are normalised rows, so this means
    rows far outside the scale the normalisation was taken from (a transfer's target about
    1e20 times its source's, say). NaN rows are refused too.

    Examples
    --------
    >>> import numpy as np
    >>> check_input_range(np.ones((2, 3), dtype=np.float32))
    >>> check_input_range(np.full((2, 3), 1e20, dtype=np.float32))
    Traceback (most recent call last):
    ...
    ValueError: the encoder's inputs reach 1e+20 after normalisation, ...
    """
    peak = 0.0
    if rows.size if isinstance(rows, np.ndarray) else rows.numel():
        # min and max, no |rows| copy: 150 MiB at 50,000 x 784 (NaN propagates into peak).
        lo, hi = (rows.min(), rows.max()) if isinstance(rows, np.ndarray) else torch.aminmax(rows)
        peak = float(max(-lo, hi)) if isinstance(rows, np.ndarray) else float(torch.maximum(-lo, hi))
    if not peak <= _SQUARE_SAFE:
        raise ValueError(
            f"the encoder's inputs reach {peak:.3g} after normalisation, beyond the {_SQUARE_SAFE:.3g} whose "
            "square float32 holds: the rows are far outside the scale the encoder's input was normalised for "
            "(for a transfer, the source's). Rescale them to the source's units."
        )


# The largest float32 value whose square is finite.
_SQUARE_SAFE = float(np.sqrt(np.finfo(np.float32).max))


# On the package's thread policy (one thread), whatever the process's count: another library
# (numba, as umap-learn loads it) may have raised OpenMP's threads, and the reductions' order,
# hence the codes, would then depend on what ran before in the process.
@on_compute_threads
def train_neighbour_encoder(
    encoder,
    X,
    graph,
    *,
    n_epochs=30,
    batch_size=4096,
    negative_rate=5,
    learning_rate=1e-3,
    min_dist=0.0,
    image_shape=None,
    augment_shift=0,
    generator=None,
    callback=None,
    decoder=None,
    neighbour_weight=1.0,
    reconstruction_weight=1.0,
    reconstruction_rows=None,
    node_loss=None,
    extra_params=(),
    compile=False,
):
    """Train ``encoder`` in place so that the graph's edges stay close in its output.

    Each step draws ``batch_size`` edges of ``graph`` with probability
    proportional to their weight, embeds their distinct end points (with a
    random translation of up to ``augment_shift`` pixels each when
    ``image_shape`` is given), and takes one Adam step on UMAP's cross-entropy:
    ``log(1 + a d^(2b))`` for each edge and ``-log(1 - q)`` for
    ``negative_rate`` random pairs per edge, drawn among the batch's nodes.
    With a ``decoder`` the step's loss also holds the mean squared
    reconstruction error of the batch's nodes (an autoencoder whose codes keep
    the graph's neighbourhoods, as in parametric UMAP with reconstruction).

    Parameters
    ----------
    encoder : torch.nn.Module
        Maps ``(n, n_features)`` float32 tensors to ``(n, n_components)``.
    X : array-like of shape (n_samples, n_features), or callable
        Not modified. A callable ``X(nodes)`` returns the float32 rows (a tensor)
        at ``nodes``, a sorted int64 tensor of distinct indices: each step reads
        only its batch's rows (e.g. :func:`~.landmarks.row_reader` over a memmap).
    graph : scipy.sparse matrix of shape (n_samples, n_samples)
        Symmetric non-negative weights (:func:`~.graph.neighbour_graph`).
    n_epochs : int, default=30
        Edges drawn in all = ``n_epochs`` times the number of stored edges.
    batch_size : int, default=4096
        Edges per step.
    negative_rate : int, default=5
    learning_rate : float, default=1e-3
    min_dist : float, default=0.0
        UMAP's ``min_dist`` (0: clusters as tight as the loss allows).
    image_shape : tuple, optional
    augment_shift : int, default=0
        With ``image_shape``: random translations, in pixels, applied to every
        embedded row at every step (invariance to small shifts).
    generator : torch.Generator, optional
        Every random draw (edges, negatives, shifts) comes from it.
    callback : callable, optional
        ``callback(step, loss)`` after every step.
    decoder : torch.nn.Module, optional
        Maps codes back to rows; trained with the encoder on
        ``reconstruction_weight`` times the squared error averaged over the
        batch's nodes and features (so its scale does not grow with the
        number of features: about 1 at the start for centred, unit-RMS rows).
    neighbour_weight : float, default=1.0
        Weight of UMAP's cross-entropy (0 with a ``decoder``: a plain
        autoencoder trained on the graph's nodes).
    reconstruction_weight : float, default=1.0
        Weight of the reconstruction error (only with ``decoder``).
    reconstruction_rows : int, optional
        Reconstruct at most this many of the batch's nodes, drawn at random
        each step (an unbiased estimate of the batch's error for less decoder
        work); None: all of them.
    node_loss : callable, optional
        ``node_loss(Z, nodes)``: a scalar tensor added to each step's loss,
        from the codes ``Z`` of the batch's distinct nodes (indices ``nodes``
        into ``X``), e.g. a clustering loss.
    extra_params : sequence of torch.Tensor, default=()
        Further leaf tensors ``node_loss`` depends on, updated by the same Adam
        (e.g. cluster centres).
    compile : bool or CompileRule, default=False
        Compile each step's forward pass and loss (and so its backward) with
        ``torch.compile`` (:func:`~sktransfer_cluster.base.compile_step`; one graph
        for every number of distinct nodes). A :class:`~sktransfer_cluster.base.CompileRule`
        compiles only if, after its eager probe, the expected saving repays the
        compilation. The random draws are the same as in eager mode, so the results
        agree within floating-point rounding; without a compiler it warns and trains
        eagerly.

    Returns
    -------
    losses : list of float
        Mean loss of each epoch.
    """
    if callable(X):
        read = X
    else:
        rows = torch.as_tensor(np.asarray(X, dtype=np.float32))
        check_input_range(rows)
        # index_select: the same rows as X[nodes], gathered in about 60 % of the time (5,000 x 784).
        read = functools.partial(torch.index_select, rows, 0)
    G = sp.coo_matrix(graph)
    keep = G.data > 0
    heads = torch.as_tensor(G.row[keep], dtype=torch.int64)
    tails = torch.as_tensor(G.col[keep], dtype=torch.int64)
    weights = torch.as_tensor(G.data[keep], dtype=torch.float64)
    if heads.numel() == 0:
        raise ValueError(
            "the neighbour graph has no edges: every row's neighbour weights are zero or not finite. "
            "This happens when the rows are far outside the scale the encoder's input was normalised "
            "for (a target about 1e30 times the source's, say): rescale them to the source's units.")
    a, b = umap_curve(min_dist)
    n_edges = heads.numel()
    bs = int(min(batch_size, n_edges))
    per_epoch = steps_per_epoch(n_edges, batch_size)
    n_steps = int(n_epochs) * per_epoch
    augment = image_shape is not None and augment_shift > 0
    params = list(encoder.parameters())
    if decoder is not None:
        params += list(decoder.parameters())
        decoder.train()
    params += list(extra_params)
    opt = _Adam(params, learning_rate)
    encoder.train()
    losses, running = [], 0.0
    # compile=True: the step's forward pass and loss (and so its backward) as fused kernels. The
    # random draws stay outside (same generator, same order), so only the arithmetic differs.
    loss_of = compile_step(
        _step_loss(bs, negative_rate, a, b, neighbour_weight, decoder, reconstruction_weight, node_loss),
        compile, what="the neighbour encoder's training step", **NEIGHBOUR_COMPILE_OPTIONS,
    )
    for step in range(n_steps):
        e = draw_edges(weights, bs, generator)
        ends = torch.cat([heads[e], tails[e]])
        nodes, inverse = torch.unique(ends, return_inverse=True)
        xb = read(nodes)
        if augment:
            xb = _random_shifts(xb, image_shape, int(augment_shift), generator)
        neg_idx = torch.randint(0, nodes.numel(), (bs * negative_rate,), generator=generator)
        pick = None
        if decoder is not None and reconstruction_rows is not None and nodes.numel() > reconstruction_rows:
            pick = torch.randperm(nodes.numel(), generator=generator)[: int(reconstruction_rows)]
        loss = loss_of(encoder, xb, inverse, neg_idx, pick, nodes)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += float(loss.detach())
        if callback is not None:
            callback(step, float(loss.detach()))
        if (step + 1) % per_epoch == 0:
            losses.append(running / per_epoch)
            running = 0.0
    encoder.eval()
    if decoder is not None:
        decoder.eval()
    return losses


@on_compute_threads
@torch.no_grad()
def encode(encoder, X, batch_rows=4096):
    """``encoder`` applied to ``X`` in blocks of rows, as a float64 ndarray."""
    Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
    was = encoder.training
    encoder.eval()
    out = torch.cat([encoder(Xt[s : s + batch_rows]) for s in range(0, Xt.shape[0], batch_rows)])
    encoder.train(was)
    return out.double().numpy()
