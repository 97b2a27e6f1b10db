"""CCNCluster: learning to cluster in order to transfer across domains and tasks.

Hsu, Lv & Kira, *Learning to cluster in order to transfer across domains and
tasks*, ICLR 2018 (the constrained clustering network, CCN). The defaults depart
from the paper where measurements on real MNIST and digits said so;
:data:`PAPER_PARAMS` restores the paper's. Numeric kernels live in
:mod:`sktransfer_cluster.cluster.ccn.pairs`; measurements and the variants tried and dropped
in ``docs/notes/ccn.md``.
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
from sklearn.utils.validation import column_or_1d

from ...base import (
    COMMON_PARAMETER_CONSTRAINTS,
    TransferClusterMixin,
    check_image_shape,
    chunk_rows,
    chunked,
    compact_labels,
    minibatches,
)
from ...base.contract import inplace_activations
from ...metrics import n_dominant_clusters
from ...nn import init_module, knn_indices
from . import pairs
from .networks import SimilarityEnsemble, fold_batch_norm
from .streamed import NeighbourRadii, RowBatches

__all__ = ["PAPER_PARAMS", "CCNCluster"]

#: The paper's settings of the parameters whose defaults depart from it
#: (``CCNCluster(K, **PAPER_PARAMS)``; add ``estimate_n_clusters=True`` for an
#: upper-bound ``K``, which the paper sets to 100). Its network widths are
#: data-set specific and not reproduced here.
PAPER_PARAMS = {
    "representation": "input",
    "pair_features": "concat",
    "similarity_threshold": 0.5,
    "criterion": "kcl",
    "n_similarity_nets": 1,
    "clustering_epochs": 40,
    "similar_neighbors": None,
    "balance_weight": 0.0,
}


# representation="neighbours": the neighbour graph and encoder at the defaults of
# sktransfer_cluster.representation.NeighbourEmbedding (docs/notes/representation.md).
_GRAPH_NEIGHBOURS = 15
_GRAPH_MAX_SHIFT = 1  # pixels, with image_shape
_GRAPH_BLUR = 1.0  # pixels, with image_shape
_ENCODER_DIMS = (256, 256)
_CODE_DIM = 10
_EDGES_PER_STEP = 4096
# Largest entry of a normalised row fed to the networks (see CCNCluster._tensor): fitted data
# have entries of order 1; float32 holds the products of G's pair features up to ~1e19.
_FAR_ROW = 1e8
# similarity_threshold="auto": G calls this share of the target's neighbour pairs similar.
_THRESHOLD_RECALL = [0.9, 0.99]
# estimate_n_clusters: rows on which G's links between outputs are judged.
_LINK_ROWS = 1000


def _row_peaks(rows, shift, scale):
    """The largest normalised entry of each row, in float64 (the far-row check's exact pass)."""
    # Divide before subtracting: rows near float64's largest value stay finite.
    return np.abs(rows.astype(np.float64) / scale - shift / scale).max(1, initial=0.0)


def image_data(X):
    """Whether the rows look like intensities or counts: no negative entry, and some zeros.

    Read in row chunks (:func:`~sktransfer_cluster.representation.auto_metric`'s rule): a
    memmap is never copied.
    """
    from ...representation import auto_metric

    return auto_metric(X) == "cosine"


class CCNCluster(TransferClusterMixin, ClusterMixin, BaseEstimator):
    """Constrained clustering network driven by a transferred pairwise similarity.

    By default (``representation="neighbours"``) ``G`` and ``f`` work on the codes
    of a neighbour encoder (parametric UMAP on the k-NN graph of the rows,
    :mod:`sktransfer_cluster.representation`) trained on the source in ``fit``
    and trained on, on the target's own graph, in ``transfer``: a similarity
    learned on codes of seen classes carries over to the codes of unseen ones,
    where one learned on raw pixels does not (``docs/notes/ccn.md``).
    ``fit(X, y)`` learns a pair network ``G`` on labelled source data
    (cross-entropy on the same/different-class pairs of minibatches drawn from
    a few classes), then a clustering network ``f`` on ``X``. ``transfer(X)``
    trains a fresh ``f`` (``n_clusters`` softmax outputs) on the target with
    MCL or the paper's KCL on fixed ``G``'s binarised labels of all pairs of
    each minibatch: ``KL(P*||Q) + KL(Q*||P)`` for similar pairs, ``max(0,
    sigma - KL(P*||Q)) + max(0, sigma - KL(Q*||P))`` for dissimilar ones
    (``*`` held constant); ``source=(X_s, y_s)`` makes it CCN+. With
    ``estimate_n_clusters=True`` the number of clusters is the paper's count of
    dominant outputs, and only those label the rows.

    Parameters
    ----------
    n_clusters : int, default=10
        Outputs ``K`` of ``f``: the number of clusters, or an upper bound on it.
    estimate_n_clusters : bool, default=False
        Whether ``n_clusters`` is an upper bound and the number of clusters is
        estimated: outputs that ``G`` links (the share of their cross pairs it
        calls similar at ``link_threshold_`` stands out,
        :func:`~.pairs.linked_outputs`) are joined, groups that win at least
        ``n / (2 k)`` of the ``n`` rows, ``k`` the number of groups so kept,
        are the clusters (:func:`~.pairs.kept_groups`), and a row won by a
        smaller group gets its most probable output of a kept group. The
        "auto" balance weight follows it.
    representation : {"neighbours", "input"}, default="neighbours"
        What ``G`` and ``f`` see: the 10 codes of a neighbour encoder (MLP 256-256,
        UMAP's loss on the 15-NN graph with shared-neighbour weights; cosine
        distances for non-negative rows holding zeros such as pixel intensities,
        else Euclidean ones on the normalised rows; with ``image_shape`` the
        distances ignore 1-pixel shifts and follow a 1-pixel blur), or the
        normalised rows themselves ("input", the paper; ``image_shape`` then
        gives both networks a convolutional stem). Past
        :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows (50,000),
        in ``fit`` and ``transfer``, no step holds a float copy of ``X`` (an
        ``np.memmap`` is read in pieces): the encoder trains on the graph of as
        many landmark rows drawn by index and every row's code is computed chunk
        by chunk ("neighbours"), or ``G`` and ``f`` read their minibatches from
        ``X`` by index ("input"); each row's ``similar_neighbors`` neighbourhood
        is then a radius estimated from 5,000 reference rows
        (:class:`~sktransfer_cluster.cluster.ccn.streamed.NeighbourRadii`). CCN+'s
        ``source`` rows are held in memory; ``score`` and
        ``pairwise_similarity`` cost ``O(n^2)``.
    embedding_epochs : int, default=40
        Passes over the source graph's edges that train the encoder in ``fit``.
    refine_epochs : int, default=20
        Passes over the target graph's edges in ``transfer`` (from the source's
        encoder; 0 keeps the source's encoder).
    sigma : float, default=2.0
        Hinge margin of the KCL loss for dissimilar pairs.
    hidden_dims : tuple of int, default=(128, 64)
        Hidden widths of ``f`` (batch norm + ReLU), and of ``G``'s backbone when
        ``similarity_hidden_dims`` is None.
    similarity_hidden_dims : tuple of int or None, default=(128,)
        Backbone widths of ``G`` (None: ``hidden_dims``). Small: a deeper ``G``
        learns to tell the source classes apart rather than to compare.
    pair_features : {"auto", "difference", "symmetric", "symmetric+raw", "concat"}, default="auto"
        ``G``'s features of a pair ``(h_i, h_j)``: ``|h_i - h_j|`` (a learned
        distance: it cannot tell where a pair lies, only how far apart),
        ``[|h_i - h_j|, h_i * h_j]``, the same with the inputs appended to
        ``h``, or the paper's ``[h_i, h_j]``. "auto": "difference" on the
        neighbour codes (target pair AUC 0.955 against 0.869 for "symmetric" on
        MNIST 5-9), "symmetric" on the input.
    image_shape : tuple of int or None, default=None
        ``(h, w)`` or ``(c, h, w)`` of one image when the rows of ``X`` are
        flattened images (channel-major): ``G``'s backbone and ``f`` then start
        with a small convolutional network (``conv_channels``) whose linear
        output has the first width of their hidden layers. None: MLPs, for
        any data. Never guessed from the data.
    conv_channels : tuple of int, default=(32, 64)
        Channels of the 5x5 stride-2 convolutions used with ``image_shape``.
    pair_hidden : int, default=32
        Width of ``G``'s hidden layer on the pair features.
    similarity_epochs : int, default=3
        Training epochs of ``G`` (``ceil(n / batch_size)`` minibatches each).
        Few: longer training specialises ``G`` to the source classes.
    similar_weight : float or "balanced", default=0.5
        Weight of similar pairs in ``G``'s loss (dissimilar: 1; "balanced": equal
        class totals per minibatch). Below 1, as wrong "similar" pairs merge clusters.
    n_similarity_nets : int, default=3
        Networks ``G`` whose "similar" probabilities are averaged (1 = the
        paper's), to even out single networks' errors; time grows linearly.
    second_order_threshold : float or None, default=None
        A float in (0, 1) relabels ``G``'s labels ``S`` per minibatch as
        ``[S S / sqrt(deg_i deg_j) > threshold]`` (``score`` keeps ``S``; None:
        the paper). Raises similar-pair recall, so classes split less.
    similarity_threshold : float in (0, 1) or "auto", default="auto"
        ``G``'s probability above which a pair is similar. "auto", a rule that
        needs no labels: the threshold at which ``G`` calls 90 % of the pairs of
        each row and its ``similar_neighbors_`` nearest rows similar (at most
        0.5), and pairs that ``G`` scores between the 99 % point of those pairs
        and that threshold are left out of the loss rather than called
        dissimilar. ``G`` learns its scale on the source, where classes are
        tighter; at 0.5 it recalled 16 % of the unseen digits' pairs.
    criterion : {"kcl", "mcl"}, default="mcl"
        Loss of ``f``: the paper's KCL or the successor's MCL (Hsu et al., ICLR
        2019), which fragments an upper-bound ``n_clusters`` far less.
    similar_neighbors : int, None or "auto", default="auto"
        ``k``: a pair is similar when ``G`` says so *and* either sample is among
        the other's ``k`` nearest input-space neighbours, dissimilar when
        neither, else out of the loss (None: ``G`` alone, the paper). ``G``
        brings the source's knowledge, neighbours the target's geometry.
        "auto": ``ceil(n / 15)`` for ``n`` rows. Neighbours are searched among
        the codes with the neighbour representation.
    balance_weight : float or "auto", default="auto"
        Weight of minus the entropy of a minibatch's mean assignment (0: the
        paper; not on CCN+ batches): it favours equal sizes, so it suits a
        *known* number of balanced clusters. "auto": 1, 0 with ``estimate_n_clusters``.
    classes_per_batch : int, default=5
        Source classes per minibatch of ``G`` (fewer = more similar pairs).
    clustering_epochs : int, default=20
        Training epochs of ``f`` in ``fit`` and (by default) in ``transfer``.
    n_init : int, default=1
        Starts of ``f``; the one of lowest objective (no CCN+ rows, eval mode,
        one pass in row order) is kept, as starts that merge clusters end higher.
    batch_size : int, default=100
        Minibatch size; each yields ``batch_size**2`` pairs (O(b^2) time, memory).
    learning_rate : float, default=1e-3
        Adam learning rate of both networks.
    adapt_bn : bool, default=True
        Re-estimate (a copy of) ``G``'s batch-norm statistics on the target in
        ``transfer``, so ``G`` sees target samples under the target's statistics.
    keep_best : bool, default=False
        After a ``KeyboardInterrupt``, True keeps the network being trained at
        its lowest-loss epoch, skips later phases and completes with a warning
        (needs one finished epoch); False restores the estimator.
    callbacks : list of objects, default=None
        Observers of training (:class:`~sktransfer_cluster.base.TrainingCallback`):
        each method they define (``on_phase_begin``, ``on_epoch_end``,
        ``on_record``, ``on_phase_end``) is called during every training
        phase. They change no result.
    device : str or torch.device, default="auto"
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    random_state : int, RandomState instance or None, default=None
        Seeds local generators only; equal values give identical results on CPU.
    verbose : int, default=0
        ``>= 1`` shows progress bars with the running loss.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Labels of the last data set of ``fit``/``transfer``, consecutive from 0:
        label ``l`` is output ``cluster_outputs_[l]``.
    similar_neighbors_, balance_weight_ : int or None, float
        The values used by the last ``fit``/``transfer`` ("auto" resolved).
    similarity_threshold_, dissimilar_threshold_ : float, float or None
        ``G``'s thresholds used by the last ``fit``/``transfer``.
    link_threshold_ : float
        ``G``'s "similar" threshold at which ``estimate_n_clusters`` judges
        the links between outputs: with "auto", the threshold at which ``G``
        calls 90 % of the neighbour pairs similar, not capped at 0.5 (where
        ``G`` scores even those pairs above 0.5, 0.5 calls pairs of distinct
        unseen classes similar); else ``similarity_threshold``.
    encoder_, target_encoder_ : torch.nn.Module or None
        The neighbour encoder trained on the source, and its copy trained on by
        the last ``transfer`` (None before one, or with ``representation="input"``).
    graph_metric_ : {"cosine", "euclidean"}
        The neighbour graph's distance (neighbour representation only).
    n_clusters_ : int
        Number of distinct labels in ``labels_`` (as for every estimator of
        the package): with ``estimate_n_clusters``, the estimate of the
        number of clusters.
    n_dominant_clusters_ : int
        The paper's estimate of the number of clusters: outputs of ``f`` that
        win at least ``n / n_clusters`` of the ``n`` rows (before any output
        is joined or row moved).
    cluster_outputs_ : ndarray of shape (n_used,)
        The outputs of ``f`` that name the clusters, increasing: label ``l`` is
        ``cluster_outputs_[l]`` (with ``estimate_n_clusters``, the smallest
        output of a kept group of linked outputs); ``predict`` picks the most
        probable output of a kept group.
    similarity_net_ : SimilarityNetwork or SimilarityEnsemble
        ``G`` as learned on the source (an ensemble if ``n_similarity_nets > 1``).
    target_similarity_net_ : SimilarityNetwork or None
        ``G`` adapted to the last target's batch-norm statistics, or None.
    clustering_net_ : torch.nn.Module
        The clustering network ``f`` of the last ``fit``/``transfer``.
    n_iter_ : int
        Epochs run by the last ``fit`` (both networks) or ``transfer`` (all starts).
    history_ : list of dict
        Per finished epoch ``{"phase", "epoch", "loss"}``: phase "similarity"
        (``G``), "fit" or "transfer" (``f``, with ``"init"``, its start).
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
    >>> ccn.n_clusters_ == len(set(ccn.labels_))
    True
    """

    _requires_y = True
    _width_params = ("hidden_dims", "similarity_hidden_dims", "conv_channels")
    _input_normalization = "affine"
    _cpu_dtype = torch.float32

    # Models pickled at 5f9d6e7 held the representation fit used here (see _migrate_legacy_record).
    _LEGACY_FITTED_PARAMS = {"_representation": ("representation",)}

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "representation": [StrOptions({"neighbours", "input"})],
        "embedding_epochs": [Interval(Integral, 1, None, closed="left")],
        "refine_epochs": [Interval(Integral, 0, None, closed="left")],
        "sigma": [Interval(Real, 0, None, closed="neither")],
        "hidden_dims": [tuple, list],
        "image_shape": [None, tuple, list],
        "conv_channels": [tuple, list],
        "pair_hidden": [Interval(Integral, 1, None, closed="left")],
        "similarity_epochs": [Interval(Integral, 1, None, closed="left")],
        "classes_per_batch": [Interval(Integral, 1, None, closed="left")],
        "clustering_epochs": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 2, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "adapt_bn": ["boolean"],
        "pair_features": [StrOptions({"auto", "concat", "symmetric", "symmetric+raw", "difference"})],
        "similarity_hidden_dims": [None, tuple, list],
        "similar_weight": [Interval(Real, 0, None, closed="neither"), StrOptions({"balanced"})],
        "n_similarity_nets": [Interval(Integral, 1, None, closed="left")],
        "second_order_threshold": [None, Interval(Real, 0, 1, closed="neither")],
        "similarity_threshold": [Interval(Real, 0, 1, closed="neither"), StrOptions({"auto"})],
        "criterion": [StrOptions({"kcl", "mcl"})],
        "similar_neighbors": [None, Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "balance_weight": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "estimate_n_clusters": ["boolean"],
        **COMMON_PARAMETER_CONSTRAINTS,
    }

    _transfer_parameter_constraints = {
        "source": "no_validation",  # checked by _check_source, which knows the fitted model
        "epochs": [Interval(Integral, 1, None, closed="left"), None],
        "adapt_bn": ["boolean", None],
    }

    def __init__(
        self,
        n_clusters=10,
        *,
        estimate_n_clusters=False,
        representation="neighbours",
        embedding_epochs=40,
        refine_epochs=20,
        sigma=2.0,
        hidden_dims=(128, 64),
        image_shape=None,
        conv_channels=(32, 64),
        pair_hidden=32,
        similarity_epochs=3,
        classes_per_batch=5,
        clustering_epochs=20,
        n_init=1,
        batch_size=100,
        learning_rate=1e-3,
        adapt_bn=True,
        pair_features="auto",
        similarity_hidden_dims=(128,),
        similar_weight=0.5,
        n_similarity_nets=3,
        second_order_threshold=None,
        similarity_threshold="auto",
        criterion="mcl",
        similar_neighbors="auto",
        balance_weight="auto",
        keep_best=False,
        callbacks=None,
        device="auto",
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.estimate_n_clusters = estimate_n_clusters
        self.representation = representation
        self.embedding_epochs = embedding_epochs
        self.refine_epochs = refine_epochs
        self.sigma = sigma
        self.hidden_dims = hidden_dims
        self.image_shape = image_shape
        self.conv_channels = conv_channels
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
        self.similarity_threshold = similarity_threshold
        self.criterion = criterion
        self.similar_neighbors = similar_neighbors
        self.balance_weight = balance_weight
        self.keep_best = keep_best
        self.callbacks = callbacks
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    def _check_params_vs_input(self, X, *, reset):
        super()._check_params_vs_input(X, reset=reset)
        if X.shape[0] < 2:
            raise ValueError(
                f"n_samples={X.shape[0]}: {type(self).__name__} needs at least 2 samples "
                "(it learns from pairs, with batch normalisation)."
            )
        if reset and self.image_shape is not None:
            check_image_shape(self.image_shape, X.shape[1])
            if self._uses_codes():
                return  # the image shape only shapes the neighbour graph's distance
            if not tuple(self.conv_channels):
                raise ValueError(
                    "with image_shape, conv_channels must name at least one convolution, e.g. (32, 64)."
                )
            if not tuple(self.hidden_dims) or (
                self.similarity_hidden_dims is not None and not tuple(self.similarity_hidden_dims)
            ):
                raise ValueError(
                    "with image_shape, hidden_dims and similarity_hidden_dims need at least one width "
                    "(the output width of the convolutions)."
                )

    # ------------------------------------------------------------------ inputs
    def _tensor(self, X):
        """The normalised rows as the networks take them, rows far beyond the fitted data pulled in.

        A row whose normalised entries exceed :data:`_FAR_ROW` in magnitude is scaled
        towards the fitted mean until its largest entry is that bound. The networks are
        piecewise linear, so beyond that distance a row's softmax outputs and pair
        decisions are those of its direction; in float32 such rows overflowed to NaN
        (``score(X * 1e150)``, issue 30 R3). Rows of the fitted scale are not touched.
        """
        affine = getattr(self, "_input_affine", None)
        if affine is None:
            return super()._tensor(X)
        shift, scale = np.asarray(affine[0], dtype=np.float64), float(affine[1])
        X = np.asarray(X)
        step = chunk_rows(X.shape[1])
        # A chunk inside half the bound on every feature holds no far row: it skips the float64
        # pass (17 % of predict). The half keeps the screen's rounding on the safe side. First
        # the tightest bounds over all features, two whole-chunk reductions (8 us per 1,024 x 64
        # float32 chunk against 71 us for the per-feature ones); a NaN fails both screens.
        low, high = shift - 0.5 * _FAR_ROW * scale, shift + 0.5 * _FAR_ROW * scale
        low_all, high_all = low.max(initial=-np.inf), high.min(initial=np.inf)
        far = []
        for start in range(0, X.shape[0], step):
            chunk = X[start : start + step]
            if chunk.size and (
                (chunk.min() >= low_all and chunk.max() <= high_all)
                or (np.all(chunk.min(0) >= low) and np.all(chunk.max(0) <= high))
            ):
                continue
            peak = _row_peaks(chunk, shift, scale)
            far += [(start + i, peak[i]) for i in np.flatnonzero(peak > _FAR_ROW)]
        if far:
            X = np.array(X, dtype=np.float64)
            rows, peaks = np.array([i for i, _ in far]), np.array([p for _, p in far])
            X[rows] = (X[rows] / scale - shift / scale) * (_FAR_ROW / peaks)[:, None] * scale + shift
        return super()._tensor(X)

    # ---------------------------------------------------------- representation
    def _uses_codes(self):
        # The representation the networks are fitted on: set_params(representation=...) after fit
        # changes nothing until the next fit.
        return self._fitted_param("representation") == "neighbours"

    def _graph(self, X):
        """The k-NN graph of the validated raw rows ``X`` (``graph_metric_``; image shifts and blur with ``image_shape``)."""
        if self.graph_metric_ == "cosine":
            # Cosine distances ignore each row's scale: rows divided by their largest entry have
            # the same neighbours and stay inside float32 (where the graph is built) at any magnitude.
            rows = np.asarray(X, dtype=np.float64)
            rows = rows / np.maximum(np.abs(rows).max(1, keepdims=True), np.finfo(np.float64).tiny)
        else:
            rows = self._tensor(X).cpu().numpy()  # the geometry the networks see
        return self._graph_of(rows)

    def _graph_of(self, rows):
        """The k-NN graph of ``rows`` prepared by :meth:`_graph` (or as landmarks, :meth:`_encode`)."""
        from ...representation import neighbour_graph

        image = self.image_shape is not None
        return neighbour_graph(
            rows,
            min(_GRAPH_NEIGHBOURS, rows.shape[0] - 1),
            metric=self.graph_metric_,
            image_shape=tuple(self.image_shape) if image else None,
            max_shift=_GRAPH_MAX_SHIFT if image else 0,
            blur=_GRAPH_BLUR if image else 0.0,
            shared_neighbours=True,
        )

    def _train_encoder(self, encoder, graph, inputs, epochs, torch_gen, phase):
        """Train the neighbour encoder in place on ``graph`` over the normalised float32 rows ``inputs``, on the CPU."""
        from ...representation import steps_per_epoch, train_neighbour_encoder

        n_edges = int((graph.data > 0).sum())
        if n_edges == 0:  # every row identical: nothing to pull together
            return encoder.eval()
        steps = steps_per_epoch(n_edges, _EDGES_PER_STEP)
        encoder = encoder.to("cpu", torch.float32)
        with self._training(phase, epochs, state=[encoder]) as run:
            step = run.step_callback(steps)

            train_neighbour_encoder(
                encoder, inputs, graph, n_epochs=epochs,
                batch_size=_EDGES_PER_STEP, generator=torch_gen, callback=step,
            )
        return encoder.eval().to(device=self.device_, dtype=self._dtype())

    def _encode(self, encoder, X, epochs, torch_gen, phase, rng):
        """``(encoder, codes)``: ``encoder`` trained ``epochs`` times on the graph of ``X``, and the codes of ``X``.

        Past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows no step holds
        ``X``: the graph is that of as many landmark rows drawn by ``rng`` and read by
        index, and the codes are computed chunk by chunk
        (:mod:`sktransfer_cluster.representation.landmarks`). ``epochs`` 0 codes only.
        """
        from ...representation import encode_chunks, landmark_graph_inputs, landmark_indices, uses_landmarks

        if not uses_landmarks(X.shape[0]):
            Xn = self._tensor(X)
            if epochs > 0:
                inputs = Xn.detach().to("cpu", torch.float32).numpy()
                encoder = self._train_encoder(encoder, self._graph(X), inputs, epochs, torch_gen, phase)
            return encoder, self._codes(Xn, encoder)
        shift, scale = self._input_affine
        if epochs > 0:
            index = landmark_indices(X.shape[0], rng)
            # The graph of the raw landmarks scaled per row (cosine) or of the rows the networks see.
            graph, rows = landmark_graph_inputs(X, index, self.graph_metric_, shift, scale, self._graph_of)
            encoder = self._train_encoder(encoder, graph, rows, epochs, torch_gen, phase)
            del rows, graph
        return encoder, encode_chunks(encoder, X, shift, scale).to(self.device_, self._dtype())

    def _rows(self, X):
        """The normalised rows as ``representation="input"`` trains on them: a tensor, or read on demand
        (:class:`~sktransfer_cluster.representation.StreamedRows`) past
        :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows."""
        from ...representation import StreamedRows, uses_landmarks

        if not uses_landmarks(X.shape[0]):
            return self._tensor(X)
        shift, scale = self._input_affine
        return StreamedRows(X, shift, scale, self.device_, self._dtype())

    def _batches(self, Xt, batches=None):
        """The rows ``Xt`` in row-order minibatches (``batches``, default :meth:`_row_batches`):
        tensors, or read when iterated for streamed rows."""
        batches = self._row_batches(Xt.shape[0]) if batches is None else batches
        if torch.is_tensor(Xt):
            return [Xt[i] for i in batches]
        Xt.plan(batches)  # read in order, a group of batches per round trip for a dask array
        return RowBatches(Xt, batches)

    def _current_encoder(self):
        enc = getattr(self, "target_encoder_", None)
        return self.encoder_ if enc is None else enc

    def _codes(self, Xn, encoder=None):
        """Rows as ``G`` and ``f`` see them: the encoder's codes of the normalised rows ``Xn``, or ``Xn``."""
        if not self._uses_codes():
            return Xn
        encoder = self._current_encoder() if encoder is None else encoder
        return chunked(encoder, Xn)

    # ----------------------------------------------------------------- helpers
    def _row_batches(self, n):
        """Minibatch indices of ``n`` rows in row order (deterministic passes over a data set)."""
        return minibatches(torch.arange(n, device=self.device_), self.batch_size)

    def _resolve_auto(self, n):
        """Set ``similar_neighbors_`` and ``balance_weight_`` for ``n`` rows."""
        self.similar_neighbors_, self.balance_weight_ = pairs.resolve_auto(
            self.similar_neighbors, self.balance_weight, self.estimate_n_clusters, n
        )

    def _image(self):
        """``(image_shape, conv_channels)`` of the networks' convolutional stem, or ``(None, ())``."""
        if self.image_shape is None or self._uses_codes():
            return None, ()
        return tuple(self.image_shape), tuple(self.conv_channels)

    def _pair_features(self):
        """``pair_features`` with "auto" resolved: "difference" on the neighbour codes, else "symmetric"."""
        if self.pair_features != "auto":
            return self.pair_features
        return "difference" if self._uses_codes() else "symmetric"

    def _current_g(self):
        g = getattr(self, "target_similarity_net_", None)
        return self.similarity_net_ if g is None else g

    def _train_similarity(self, Xt, codes, n_classes, rng, torch_gen):
        """Cross-entropy on all same/different pairs of class-balanced minibatches."""
        n, d = Xt.shape
        g_dims = self.hidden_dims if self.similarity_hidden_dims is None else self.similarity_hidden_dims
        g = pairs.similarity_network(d, g_dims, self.pair_hidden, self._pair_features(), *self._image())
        g = init_module(g, torch_gen).to(device=self.device_, dtype=self._dtype())
        opt = torch.optim.Adam(g.parameters(), lr=self.learning_rate)
        class_index = [np.flatnonzero(codes == k) for k in range(n_classes)]
        codes_t = torch.as_tensor(codes, device=self.device_)
        iters, per_batch = max(1, math.ceil(n / self.batch_size)), self.classes_per_batch
        g.train()
        # G alone clusters nothing: an interrupt here is rolled back even with keep_best.
        with self._training("similarity", self.similarity_epochs, state=[g], keeps_model=False) as run:
            for _ in run.epochs():
                for _ in range(iters):
                    idx = pairs.class_balanced_batch(class_index, self.batch_size, per_batch, rng)
                    idx_t = torch.as_tensor(idx, device=self.device_)
                    target = pairs.same_class_pairs(codes_t[idx_t])
                    logits = g(Xt[idx_t]).reshape(-1, 2)
                    run.step(opt, F.cross_entropy(logits, target, weight=self._pair_class_weight(target)))
                run.end_epoch()
        g.eval()
        return g

    def _pair_class_weight(self, target):
        """Cross-entropy weights (dissimilar, similar) of ``G``'s pair classes."""
        weight = pairs.pair_class_weight(target, self.similar_weight)
        return weight.to(device=self.device_, dtype=self._dtype())

    def _cluster(self, Xt, g, epochs, torch_gen, phase, source=None, rng=None):
        """Train ``n_init`` fresh ``f`` on ``Xt``; keep the one of lowest :meth:`_target_loss`."""
        from ...representation import uses_landmarks

        n = Xt.shape[0]
        self._resolve_auto(n)
        g.eval()
        if uses_landmarks(n):
            # No n x k neighbour table (k = n / 15) nor n x width features: radii from reference rows
            # (their own generator: the draw must not shift the training's random stream), features per batch.
            feats = radii = None
            if self.similar_neighbors_ is not None or self.similarity_threshold == "auto":
                k = self.similar_neighbors_ or pairs.resolve_auto("auto", "auto", False, n)[0]  # the threshold's k
                radii = NeighbourRadii(Xt, k, np.random.default_rng(0))
            knn = None if self.similar_neighbors_ is None else radii
        else:
            knn = None if self.similar_neighbors_ is None else knn_indices(Xt, self.similar_neighbors_)
            # G is fixed: its backbone features of every row, once (n x width, not n x n).
            feats = chunked(g.backbone, Xt)
            radii = knn
        self.similarity_threshold_, self.dissimilar_threshold_, self.link_threshold_ = self._threshold(
            g, Xt, feats, radii, rng)
        best, best_loss = None, math.inf
        for init in range(self.n_init):
            f = self._train_clustering(Xt, g, knn, epochs, torch_gen, phase, init, source, rng, feats)
            loss = self._target_loss(f, Xt, g, knn, feats) if self.n_init > 1 else 0.0
            if loss < best_loss:
                best, best_loss = f, loss
            if self._training_stopped:
                break  # an interrupt kept by keep_best: no further start
        return best

    def _threshold(self, g, Xt, feats, knn, rng):
        """``G``'s thresholds on the rows ``Xt``: "similar" and "dissimilar" for ``f``'s labels, and
        "similar" for judging links between ``f``'s outputs (``similarity_threshold``, "auto" resolved)."""
        if self.similarity_threshold != "auto":
            return float(self.similarity_threshold), None, float(self.similarity_threshold)
        if isinstance(knn, NeighbourRadii):  # past the landmark count: neighbours among reference rows
            p = knn.pair_probabilities(g, Xt)
            t = [pairs.recall_threshold(p, r, cap=None) for r in _THRESHOLD_RECALL]
        else:
            if knn is None:
                knn = knn_indices(Xt, pairs.resolve_auto("auto", "auto", False, Xt.shape[0])[0])
            # A generator of its own: the draw must not shift the training's random stream.
            t = [pairs.neighbour_threshold(g, feats, knn, r, rng=np.random.default_rng(0), cap=None)
                 for r in _THRESHOLD_RECALL]
        # f's labels cap both at 0.5; the links between f's outputs are judged at the uncapped
        # threshold: where G scores even the neighbour pairs above 0.5 (digits: their 10 % point is
        # 0.75-0.77), 0.5 calls a quarter of the unseen pairs similar at precision 0.71-0.77 and
        # links classes (5 with 8); at the uncapped point its precision is 0.99.
        return min(0.5, t[0]), (None if _THRESHOLD_RECALL[1] is None else min(0.5, t[1])), t[0]

    def _batch_loss(self, f, xb, idx, g, knn, source=None, rng=None, feats=None):
        """``f``'s loss on target minibatch ``xb`` (rows ``idx`` of the target); CCN+ with ``source``.

        ``feats``: ``G``'s backbone features of the whole target (None: computed here).
        """
        with torch.no_grad():
            fb = None if feats is None else feats[idx]
            sim = self._pair_targets(g, xb, fb)
            sim, known = (sim, None) if knn is None else pairs.agree_with_neighbors(sim, knn, idx, xb)
            t_dis = getattr(self, "dissimilar_threshold_", None)
            if t_dis is not None and t_dis < self.similarity_threshold_:
                # G's middling pairs are not called dissimilar: on unseen classes they are
                # mostly far pairs of one class, which a dissimilar label would split.
                logits = g(xb) if fb is None else g.pair_logits(fb)
                unsure = (sim < 0.5) & (torch.softmax(logits, -1)[..., 1] >= t_dis)
                known = ~unsure if known is None else known & ~unsure
        if source is not None:
            return self._ccn_plus_loss(f, xb, sim, source, rng, known=known)
        log_p = F.log_softmax(f(xb), dim=1)
        bw = self.balance_weight_
        return pairs.clustering_loss(log_p, sim, self.criterion, self.sigma, mask=known, balance_weight=bw)

    @torch.no_grad()
    def _target_loss(self, f, Xt, g, knn, feats=None):
        """Mean :meth:`_batch_loss` of a trained ``f`` (eval mode) over the target in row order."""
        f.eval()
        batches = self._row_batches(Xt.shape[0])
        rows = self._batches(Xt, batches)
        losses = [self._batch_loss(f, xb, i, g, knn, None, None, feats).item() for i, xb in zip(batches, rows)]
        return sum(losses) / len(batches)

    def _train_clustering(
        self, Xt, g, knn, epochs, torch_gen, phase, init=0, source=None, rng=None, feats=None
    ):
        """Train a fresh ``f`` on ``Xt`` with the pair loss driven by ``g`` (+ CE on source rows)."""
        n, d = Xt.shape
        f = pairs.clustering_network(d, self.hidden_dims, self.n_clusters, *self._image())
        f = init_module(f, torch_gen).to(device=self.device_, dtype=self._dtype())
        opt = torch.optim.Adam(f.parameters(), lr=self.learning_rate)
        g.eval()
        f.train()
        with self._training(phase, epochs, state=[f]) as run:
            for _ in run.epochs():
                batches = run.batches(n, self.batch_size, torch_gen, self.device_)
                if not torch.is_tensor(Xt):
                    Xt.plan(batches)  # a dask array's rows then come a group of batches per round trip
                for idx in batches:
                    run.step(opt, self._batch_loss(f, Xt[idx], idx, g, knn, source, rng, feats))
                run.end_epoch(init=init)
        # Exact batch-norm statistics of f on the data it clusters (deterministic order).
        return pairs.reestimate_batchnorm(f, self._batches(Xt))

    def _pair_targets(self, g, xb, fb=None):
        """Pair labels of a minibatch for ``f``: G's binarised "similar" predictions (``fb``: features)."""
        return pairs.similarity_labels(
            g, xb, self.second_order_threshold, features=fb, threshold=self.similarity_threshold_
        )

    def _ccn_plus_loss(self, f, xb, sim, source, rng, known=None):
        """CCN+: ``f``'s loss on a batch of [random source rows; target rows ``xb``]."""
        Xs, codes_s = source
        m = min(Xs.shape[0], max(2, self.batch_size // 3))
        idx_s = torch.as_tensor(rng.choice(Xs.shape[0], size=m, replace=False), device=self.device_)
        log_p = F.log_softmax(f(torch.cat([Xs[idx_s], xb])), dim=1)
        return pairs.ccn_plus_loss(log_p, codes_s[idx_s], sim, self.criterion, self.sigma, known=known)

    def _assign(self, f, Xt, g=None):
        """Labels of ``Xt`` from ``f``; sets the used outputs, ``n_clusters_`` and ``n_dominant_clusters_``.

        With ``estimate_n_clusters`` outputs that ``G`` links are first joined
        (:func:`~.pairs.linked_outputs`, on at most :data:`_LINK_ROWS` rows): a class
        split over two outputs is one cluster. A group that wins fewer than
        half an equal share of the rows among the groups kept
        (:func:`~.pairs.kept_groups`) is a fragment and its rows go to their
        most probable output of a kept group, so the labels have as many
        clusters as estimated.
        """
        # Inference only from here on: batch norm folded into the Linear layers.
        self._inference_net = fold_batch_norm(f)
        # Streamed rows (representation="input" past the landmark count) map their chunks where they
        # live: a dask array's on its workers, only the logits coming back.
        logits = Xt.map_chunks(self._inference_net) if hasattr(Xt, "map_chunks") else chunked(self._inference_net, Xt)
        out = logits.argmax(1).cpu().numpy()
        n, K = out.shape[0], self.n_clusters
        self.n_dominant_clusters_ = n_dominant_clusters(out, n_clusters=K)
        root = np.arange(K)
        if self.estimate_n_clusters:
            g = self._current_g() if g is None else g
            sub = np.unique(np.linspace(0, n - 1, min(n, _LINK_ROWS)).astype(np.int64))
            similar = pairs.pair_probabilities(g, Xt[sub]) > self.link_threshold_
            root = pairs.linked_outputs(similar, out[sub], K)
            sizes = np.bincount(root[out], minlength=K)
            kept = np.flatnonzero(np.isin(root, np.flatnonzero(pairs.kept_groups(sizes, K))))
            out = kept[logits.cpu().numpy()[:, kept].argmax(1)]
        groups = root[out]
        labels, self.cluster_outputs_ = compact_labels(groups, K)
        # predict: the most probable output among those of a kept group, then its group's label.
        used = np.flatnonzero(np.isin(root, self.cluster_outputs_))
        self._outputs = torch.as_tensor(used, device=self.device_)
        self._output_labels = np.searchsorted(self.cluster_outputs_, root[used])
        self.clustering_net_ = f
        self.n_clusters_ = int(self.cluster_outputs_.shape[0])
        self.labels_ = labels
        return labels

    # -------------------------------------------------------------- protocol
    def _fit(self, X, y, *, rng, torch_gen):
        codes = np.unique(column_or_1d(y), return_inverse=True)[1].astype(np.int64)
        self.target_similarity_net_ = None
        self.encoder_ = self.target_encoder_ = None
        if self._uses_codes():
            from ...representation import make_encoder

            # Cosine distances measure angles about the origin: meaningful where the origin
            # means "nothing" (intensities, counts: non-negative data holding zeros), not
            # for rows with an arbitrary origin (blobs, standardised tables, offset data).
            self.graph_metric_ = "cosine" if image_data(X) else "euclidean"
            encoder = make_encoder(X.shape[1], _CODE_DIM, _ENCODER_DIMS, generator=torch_gen)
            self.encoder_, Xt = self._encode(encoder, X, self.embedding_epochs, torch_gen, "embedding", rng)
        else:
            Xt = self._rows(X)
        n_classes = int(codes.max()) + 1
        nets = []
        for _ in range(self.n_similarity_nets):
            if self._training_stopped and nets:
                # An interrupt kept by keep_best: no further member. The first is always built
                # (with no epochs after an interrupt in the encoder's phase), so the model predicts.
                break
            nets.append(self._train_similarity(Xt, codes, n_classes, rng, torch_gen))
        self.similarity_net_ = nets[0] if len(nets) == 1 else SimilarityEnsemble(nets)
        f = self._cluster(Xt, self.similarity_net_, self.clustering_epochs, torch_gen, "fit")
        self._assign(f, Xt)
        self.n_iter_ = len(self.history_)  # finished epochs of G and f (fewer after a kept interrupt)

    def transfer(self, X, *, source=None, epochs=None, adapt_bn=None):
        """Cluster an unlabelled target with a clustering network driven by ``G``.

        A fresh clustering network with ``n_clusters`` outputs is trained on
        ``X`` with pair labels from the similarity network learned by ``fit``;
        afterwards ``labels_`` holds the target's labels and ``predict`` serves
        the target.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Target data, same features as the source.
        source : tuple (X_source, y_source), default=None
            CCN+: labelled source rows join every minibatch with cross-entropy
            (class ``k`` of ``y_source`` on output ``k``; at most ``n_clusters``
            classes).
        epochs : int, default=None
            Training epochs; None is ``clustering_epochs``.
        adapt_bn : bool, default=None
            Re-estimate ``G``'s batch-norm statistics on the target; None is the
            ``adapt_bn`` parameter.

        Returns
        -------
        labels : ndarray of shape (n_samples,)

        Examples
        --------
        >>> from sktransfer_cluster import CCNCluster
        >>> from sktransfer_cluster.datasets import load_digits_transfer
        >>> task = load_digits_transfer()
        >>> model = CCNCluster(5, similarity_epochs=1, clustering_epochs=1, random_state=0)
        >>> model.fit(task.X_source, task.y_source).transfer(task.X_target, epochs=1).shape
        (896,)
        """
        return super().transfer(X, source=source, epochs=epochs, adapt_bn=adapt_bn)

    def _transfer(self, X, *, rng, torch_gen, source=None, epochs=None, adapt_bn=None):
        """Train the clustering network on the unlabelled target (validated ``X``), driven by ``G``.

        ``source=(X_source, y_source)``: CCN+, labelled source rows in every
        minibatch with cross-entropy (class ``k`` of ``y_source`` on output
        ``k``; needs at most ``n_clusters`` classes). ``epochs`` defaults to
        ``clustering_epochs``, ``adapt_bn`` (re-estimate ``G``'s batch-norm
        statistics on the target) to the parameter.
        """
        epochs = self.clustering_epochs if epochs is None else int(epochs)
        adapt_bn = self.adapt_bn if adapt_bn is None else bool(adapt_bn)
        source = None if source is None else self._check_source(source)  # before any training
        self.target_encoder_ = None
        if self._uses_codes():
            # The source's encoder, trained on, on the target's own graph (no labels):
            # the codes of the unseen classes cluster, so G compares what it learned to compare.
            encoder = copy.deepcopy(self.encoder_)
            self.target_encoder_, Xt = self._encode(encoder, X, self.refine_epochs, torch_gen, "refine", rng)
        else:
            Xt = self._rows(X)
        src = None if source is None else self._source_codes(*source)
        g = self.similarity_net_
        self.target_similarity_net_ = None
        if adapt_bn:
            g = copy.deepcopy(g)
            pairs.reestimate_batchnorm(g, self._batches(Xt))
            self.target_similarity_net_ = g
        done = len(self.history_)
        f = self._cluster(Xt, g, epochs, torch_gen, "transfer", source=src, rng=rng)
        self.n_iter_ = len(self.history_) - done  # epochs of f over all its starts
        return self._assign(f, Xt)

    def _check_source(self, source):
        """CCN+'s ``source=(X_source, y_source)`` validated: ``(X_source, class codes)``."""
        try:
            Xs, ys = source
        except (TypeError, ValueError) as exc:
            raise ValueError("source must be a pair (X_source, y_source).") from exc
        if ys is None:
            raise ValueError(
                "source=(X_source, None): CCN+ needs the source labels y_source (it ties outputs to "
                "source classes); pass them, or leave source out to transfer without source rows."
            )
        try:
            # The rows as the target's, the labels as fit's (one per row, finite).
            Xs, ys = self._validate_input(Xs, reset=False, y=ys, stream=False)
        except ValueError as exc:
            raise ValueError(f"source=(X_source, y_source): {exc}") from None
        if Xs.shape[0] < 2:
            raise ValueError(f"source has n_samples={Xs.shape[0]}; CCN+ needs at least 2 source rows.")
        classes, codes = np.unique(ys, return_inverse=True)
        if classes.shape[0] > self.n_clusters:
            raise ValueError(
                f"source has {classes.shape[0]} classes but n_clusters={self.n_clusters}; CCN+ "
                "maps each source class to an output, so raise n_clusters."
            )
        return Xs, codes

    def _source_codes(self, Xs, codes):
        """Checked source rows as ``f`` sees them (the current encoder's codes) and their class codes."""
        return self._codes(self._tensor(Xs)), torch.as_tensor(codes.astype(np.int64), device=self.device_)

    def _predict(self, X):
        Xn = self._tensor(X)
        if Xn.shape[0] <= chunk_rows(math.prod(Xn.shape[1:])):
            # One chunk of _codes' chunked: the encoder and f as one chain, the same layers in order.
            logits = self._predict_chain()(Xn)
        else:
            logits = self._inference_net(self._codes(Xn))
        # Most probable *used* output: returns labels 0 .. len(cluster_outputs_) - 1 only.
        return self._output_labels[logits.index_select(1, self._outputs).argmax(1).cpu().numpy()]

    def _predict_chain(self):
        """The current encoder (when codes are used) and ``f`` at inference as one ``nn.Sequential``.

        The same layers and order as ``f(encoder(x))``, so the same values: the ``Identity``
        left by :func:`~.networks.fold_batch_norm` dropped and each ReLU after a linear layer
        in place (:func:`~sktransfer_cluster.base.contract.inplace_activations`, on copies of
        the activations: the fitted modules are not changed). One module call per chunk
        instead of two and a nested ``chunked``: with the screen in :meth:`_tensor`, 2 x 10^5
        rows predicted in 9 % less time (docs/notes/roofline_2026-11-27.md). Rebuilt when
        the encoder or ``f`` is replaced (``transfer``, a refit).
        """
        encoder = self._current_encoder() if self._uses_codes() else None
        cached = getattr(self, "_chain", None)
        if cached is not None and cached[0] is encoder and cached[1] is self._inference_net:
            return cached[2]
        layers = []
        for part in (encoder, self._inference_net):
            if part is not None:
                layers += list(part) if isinstance(part, torch.nn.Sequential) else [part]
        activations = (torch.nn.ReLU, torch.nn.LeakyReLU)
        layers = [copy.copy(m) if isinstance(m, activations) else m for m in layers if not isinstance(m, torch.nn.Identity)]
        chain = torch.nn.Sequential(*layers)
        inplace_activations(chain)
        self._chain = (encoder, self._inference_net, chain)
        return chain

    def pairwise_similarity(self, X, X2=None):
        """Probability of "similar" that the current ``G`` gives each pair (``X`` x ``X2``).

        ``G`` is adapted to the last target with ``adapt_bn``. Computed block by
        block; the output is dense, O(n m) memory.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        X2 : array-like of shape (m_samples, n_features), default=None
            Defaults to ``X``.

        Returns
        -------
        similarity : ndarray of shape (n_samples, m_samples)
        """
        # Both sets are held in memory (the output is n x m): a dask input is computed.
        X = self._fitted_input(X, stream=False)
        X2 = None if X2 is None else self._codes(self._tensor(self._validate_input(X2, reset=False, stream=False)))
        return pairs.pair_probabilities(self._current_g(), self._codes(self._tensor(X)), X2)

    def score(self, X, y=None):
        """Minus the mean KCL loss of ``f`` on all ordered pairs of ``X`` under ``G``'s binarised labels.

        Always KCL, whatever ``criterion``, ``similar_neighbors`` or
        ``balance_weight``. Higher is better, no labels needed; block by block
        (bounded memory, O(n^2) time).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        score : float
        """
        X = self._fitted_input(X, stream=False)  # every pair of rows: held in memory
        return pairs.kcl_pair_score(self._current_g(), self.clustering_net_, self._codes(self._tensor(X)), self.sigma)
