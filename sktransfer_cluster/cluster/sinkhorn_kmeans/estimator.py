"""SinkhornKMeans: k-means as entropic optimal transport with cluster-size priors.

Genevay, Dulac-Arnold & Vert, *Differentiable Deep Clustering with Cluster Size
Constraints*. Without an embedding this is OT-Lloyd: assign with Sinkhorn under
the size prior, move each centre to its plan-weighted mean. With
``embedding="autoencoder"`` an autoencoder learns the codes OT k-means clusters:
by default trained on the data's k-NN graph (parametric UMAP's loss) as well as
on reconstruction; with ``neighbour_weight=0`` it is the paper's Algorithm 2. The
defaults depart from the paper's settings where measurements on digits, real
MNIST and a second image set said so; :data:`PAPER_PARAMS` restores the paper's.
Measurements and the reasons behind the defaults: ``docs/notes/sinkhorn_kmeans.md``.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.cluster import kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from ...ot import lloyd
from ...base import (
    COMMON_PARAMETER_CONSTRAINTS,
    TransferClusterMixin,
    WithinClusterScoreMixin,
    check_image_shape,
    check_widths,
    chunked,
    exact_dtype,
    warn,
    working_dtype,
)
from .objective import nearest_centre, ot_clustering_loss, squared_distances
from ...nn import image_channels_shape, init_module
from .networks import AutoEncoder, ConvAutoEncoder, GraphAutoEncoder
from ...ot import plan_from_potentials, semi_dual_newton
from ...base.streaming import is_dask_array
from .streamed import CODE_CHUNK_ROWS, IndexedRows, StreamedOTKMeansMixin

__all__ = ["SinkhornKMeans", "PAPER_PARAMS"]

#: The paper's MNIST configuration of Algorithm 2 (``SinkhornKMeans(10, **PAPER_PARAMS)``):
#: a plain autoencoder (``neighbour_weight=0``: no k-NN graph) 500-250-10, 200 epochs,
#: batch 300, Adam 1e-3, eps 1e-2. The paper does not give its pre-training length (200
#: here) nor the step decay of its rate (not reproduced); its eps is absolute, ours relative
#: to the mean cost.
PAPER_PARAMS = {
    "embedding": "autoencoder",
    "neighbour_weight": 0.0,
    "hidden_dims": (500, 250, 10),
    "pretrain_epochs": 200,
    "max_epochs": 200,
    "batch_size": 300,
    "learning_rate": 1e-3,
    "epsilon": 0.01,
}

# transport_plan: solved tightly (L1 column-marginal error) by Newton on the semi-dual, which
# converges in a few tens of passes over the (n, K) costs; the cap bounds its time. The solve
# runs in float64 (exact_dtype) whatever the codes' dtype; where there is none (MPS) the
# tolerance is a few hundred roundings of the dtype: float32 column sums stall near 1e-7.
_PLAN_TOL = 1e-9
_PLAN_TOL_EPS = 100
_PLAN_MAX_ITER = 200
# hidden_dims="auto": MLP encoder widths, and (conv channels..., code) with image_shape.
_AUTO_MLP_DIMS = (256, 128, 10)
_AUTO_CONV_DIMS = (16, 32, 10)
# embedding="neighbours": MLP widths (hidden..., code) for hidden_dims="auto", the edges drawn per
# Adam step, and the graph's image settings with image_shape (the representation's defaults:
# distances between images blurred by 1 pixel, minimised over shifts of up to 1 pixel).
_AUTO_NEIGHBOUR_DIMS = (256, 256, 10)
_NEIGHBOUR_EDGES_PER_STEP = 4096
_NEIGHBOUR_BLUR = 1.0
_NEIGHBOUR_MAX_SHIFT = 1
# The graph autoencoder reconstructs at most this many of each step's end points, drawn at
# random (an unbiased estimate of their mean error): on MNIST-5k a step has about 4,000, and the
# decoder on all of them made a fit about 2.8 times the neighbour encoder's (182 CPU-s).
_GRAPH_RECONSTRUCTION_ROWS = 1024
# max_epochs="auto" for the paper's autoencoder (neighbour_weight=0): joint reconstruction + OT epochs.
_AUTO_JOINT_EPOCHS = 20
# transfer's fine_tune_epochs=None with embedding="neighbours": passes over the target graph's edges.
_NEIGHBOUR_REFINE_EPOCHS = 20
# transfer on the graph: the refinement keeps this share of the source's first encoder layer
# (shrunk towards a fresh initialisation, representation.shrink_towards) and starts every later
# layer and the decoder fresh: the first layer's features carry to unseen classes, the layers
# near the code are the source classes' own (on digits 0-4 -> 5-9 they put 34 of 180 nines with
# the eights). Seeds 0-5, medians: digits 0.965 with keep 0.2 everywhere -> 0.977 (target alone
# 0.977), MNIST 0.960 -> 0.960 (0.960), mfeat-pix 0.984 -> 0.983 (0.985); docs/notes/
# sinkhorn_kmeans.md, sections 12 and tenth session (S13, S16).
_REFINE_KEEP_FIRST_LAYER = 0.5
# Check of OT-Lloyd's final plan (a report only): a marginal error above 1e-3
# (0.1% of the mass off the size prior) moves the centres materially.
_CHECK_TOL = 1e-3
_CHECK_MAX_ITER = 10 * lloyd.SINKHORN_MAX_ITER


class SinkhornKMeans(
    StreamedOTKMeansMixin, WithinClusterScoreMixin, TransferClusterMixin, ClusterMixin, TransformerMixin,
    ClassNamePrefixFeaturesOutMixin, BaseEstimator,
):
    """K-means as entropic optimal transport with a cluster-size prior.

    Each iteration solves ``min_P <P, C> + eps KL(P | a w^T)`` with
    ``C_ik = ||x_i - mu_k||^2``, ``a`` uniform over samples and ``w`` the
    cluster proportions, so cluster sizes follow ``w`` instead of collapsing;
    then moves each centre to its plan-weighted mean. With
    ``embedding="autoencoder"`` an MLP autoencoder is trained on the data's
    k-NN graph (:mod:`sktransfer_cluster.representation`): each Adam step
    draws 4096 of the graph's edges and lowers ``neighbour_weight`` times
    parametric UMAP's cross-entropy on them plus the mean squared
    reconstruction error of their end points, so that neighbours stay close
    in the codes and the codes keep the rows; then OT k-means runs on the
    codes; the graph's distance is the cosine when the source's values are
    non-negative with zeros among them (images, counts), else Euclidean. ``transfer``
    continues this training on the target's own graph (as many passes as the
    fit) from the source's first encoder layer, half of it kept (shrunk towards
    a fresh one), and fresh later layers: the layers near the code are the
    source classes' own, and started from them it ended below a fit on the
    target alone; then it runs OT k-means on the target's codes from the
    source centres and from ``n_init`` k-means++ starts.
    ``neighbour_weight=0`` gives the paper's Algorithm 2: the autoencoder is
    pre-trained on reconstruction alone (convolutional with ``image_shape``),
    centres are initialised by OT k-means on its codes, and encoder, decoder
    and centres are trained jointly on ``reconstruction + OT loss``.
    With ``embedding="neighbours"`` an MLP encoder alone is trained with a
    parametric-UMAP loss on the source's k-NN graph
    (:mod:`sktransfer_cluster.representation`), then OT k-means runs on its
    codes; ``transfer`` refines the encoder on the target's own graph and
    warm-starts OT k-means there from the source centres.
    A Sinkhorn solve that defines a result (the final plan of ``fit`` or
    ``transfer``, the plan of :meth:`transport_plan`) and does not converge is
    reported with a :class:`~sklearn.exceptions.ConvergenceWarning`.
    :meth:`score` rates the partition that :meth:`predict` gives, so it
    compares clusterings across ``epsilon`` (and any other parameter) in
    ``GridSearchCV``.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters.
    epsilon : float, default=0.01
        Entropic regularisation relative to the mean cost: the solver uses
        ``epsilon * mean_ik C_ik`` computed at the initial centres (per
        minibatch in the embedding phase), so the same value works whatever the
        scale of the data. Small values approach hard OT assignments.
    cluster_weights : array-like of shape (n_clusters,), default=None
        Prior proportions of the clusters (normalised to sum to one); None is
        uniform. The weights are matched to clusters by size, so their order
        does not matter: in each k-means++ start the largest weight goes to the
        centre with the most nearest rows, the next to the next, and so on;
        the source centres that ``transfer`` starts from keep the weights they
        were fitted with. ``weights_`` then lists the weight of each fitted
        cluster (of ``cluster_centers_`` and the labels, in their order). The
        default assumes roughly balanced clusters: on clearly unbalanced data
        (say 60/30/10 %) the uniform prior splits the large cluster and merges
        small ones, and known sizes belong here (:class:`~sklearn.cluster.KMeans`
        has no size prior to give).
    embedding : {None, "autoencoder", "neighbours"}, default=None
        Cluster raw features, or learn a deep embedding. ``"autoencoder"``:
        an autoencoder trained on the k-NN graph and on reconstruction (see
        ``neighbour_weight``; 0 is the paper's Algorithm 2); ``"neighbours"``
        trains an encoder alone so that the rows' nearest neighbours (cosine
        when the source's values are non-negative with zeros among them,
        Euclidean otherwise;
        weighted by shared neighbours) stay close in its output (UMAP's loss,
        as a network, so that ``predict`` and ``transfer`` map new rows). Then
        OT k-means runs on the codes with the size prior. Each fit on the graph
        builds the exact k-NN graph of X: O(n^2) distance computations. Past
        :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` (50,000) rows the
        graph is that of as many landmark rows drawn by index, the network trains
        on it, and every row's code is computed chunk by chunk: X, in memory or an
        ``np.memmap``, is never copied (``docs/notes/representation.md``). The
        paper's autoencoder (``neighbour_weight=0``) past as many rows reads each
        minibatch by index (the rows the in-memory fit would draw), computes the
        codes chunk by chunk and chooses its OT k-means start on the codes of
        50,000 rows drawn by index: no copy of X either.
    hidden_dims : "auto" or tuple of int, default="auto"
        Encoder widths, at least one, all positive; the last one is the
        embedding dimension. With ``image_shape`` the leading entries are the
        channels of the 5x5 stride-2 convolutions and the last one the code.
        ``"auto"``: ``(256, 256, 10)`` on the graph (``embedding="neighbours"``,
        or ``"autoencoder"`` with ``neighbour_weight > 0``; an MLP also with
        ``image_shape``, its decoder the mirror); for the paper's autoencoder
        (``neighbour_weight=0``) ``(256, 128, 10)`` for the MLP, ``(16, 32, 10)``
        with ``image_shape``. A wider code such as ``(256, 128, 32)`` keeps more of
        what separates classes absent from the source, so it transfers better
        to unseen classes, and clusters the data it was trained on worse.
    image_shape : tuple of int, default=None
        ``(h, w)`` or ``(c, h, w)`` of one image, rows of X read channel-major
        (``h * w * c`` must equal the number of features). On the graph
        (``embedding="neighbours"``, or the default autoencoder) the k-NN graph
        compares images blurred by one pixel and takes the smallest distance
        over shifts of up to one pixel (the networks stay MLPs). The paper's
        autoencoder (``neighbour_weight=0``) becomes convolutional
        (:class:`~sktransfer_cluster.cluster.sinkhorn_kmeans.networks.ConvAutoEncoder`).
        Never inferred from the data (a flat 784-column array is flat); only
        with an embedding.
    pretrain_epochs : int, default=50
        On the graph: passes over the graph's edges when training the encoder
        or autoencoder (0 keeps the random network). The paper's autoencoder:
        pre-training epochs on reconstruction alone; 0 skips it.
    max_epochs : int or "auto", default="auto"
        Joint training epochs on reconstruction + OT loss (autoencoder only;
        on the graph, passes over its edges with UMAP's loss, reconstruction
        and the OT loss of each step's end points, the centres trained too).
        ``"auto"``: 0 on the graph (on MNIST the joint phase lowered the
        accuracy and cost half as much again), 20 for the paper's autoencoder.
    n_neighbors : int, default=15
        Neighbours per row in the k-NN graph (``embedding="neighbours"``, or
        ``"autoencoder"`` with ``neighbour_weight > 0``; at most
        ``n_samples - 1``); unused otherwise.
    neighbour_weight : float, default=1.0
        ``embedding="autoencoder"`` only: weight of parametric UMAP's
        cross-entropy on the k-NN graph beside the reconstruction error (the
        mean squared error per feature of the normalised rows, about 1 for
        an untrained network). 0: no graph, the paper's Algorithm 2 with its
        minibatches of ``batch_size`` rows.
    batch_size : int, default=64
        Rows per Adam step in the embedding phases; a last batch of one row
        joins the previous one, as a one-row step is mostly noise. Small
        batches give small data sets enough Adam steps per epoch for the
        autoencoder to learn (300 rows at batch 300 make one step per epoch).
        On the graph each step draws 4096 of its edges instead.
    learning_rate : float, default=1e-3
        Adam learning rate for the embedding phases.
    n_init : int, default=10
        Number of k-means++ initialisations (solved as one batch); the run with
        the lowest regularised transport cost is kept.
    max_iter : int, default=100
        Maximum OT-Lloyd iterations.
    tol : float, default=1e-4
        Convergence threshold on the squared centre shift, relative to the mean
        feature variance (as in :class:`~sklearn.cluster.KMeans`). With
        ``tol=0`` a run also stops once its hard labels have not changed for
        ``lloyd.LABEL_PATIENCE`` (3) iterations: soft assignments never stop
        moving exactly.
    algorithm : {"auto", "full", "minibatch"}, default="auto"
        How OT k-means without an embedding reads the source. ``"full"``:
        OT-Lloyd on every row at once (it holds a float64 copy of X).
        ``"minibatch"``: OT-Lloyd on 24,576 rows drawn by index, then passes of
        8,192-row batches drawn by index (minibatch OT k-means, as
        :meth:`partial_fit`) until the centres move by less than ``tol`` in a
        pass, at most ``max_iter`` passes, and labels computed chunk by chunk:
        no copy of X is made, so an ``np.memmap`` larger than memory fits.
        ``"auto"``: ``"minibatch"`` when a float64 copy of X would pass 1 GiB,
        else ``"full"``. A dask array is always fitted on its workers
        (:meth:`fit`). Ignored with an embedding: past 50,000 rows the graph
        embeddings read X by landmarks and chunks, the paper's autoencoder
        (``neighbour_weight=0``) by minibatches and chunks (see ``embedding``);
        up to 50,000 rows both hold a normalised copy (a dask array of no
        more rows is computed to numpy first).
    keep_best : bool, default=False
        What a ``KeyboardInterrupt`` during the embedding training leaves. False:
        the estimator as it was before the call. True: fitting stops, the
        autoencoder and centres of the epoch with the lowest loss so far are
        kept and ``fit`` completes with a warning (needs one finished epoch).
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
    cluster_centers_ : ndarray of shape (n_clusters, n_features or embedding dim)
        Centres, in the embedding space when an embedding is used.
    labels_ : ndarray of shape (n_samples,)
        Nearest-centre labels of the last data set seen by ``fit`` or ``transfer``.
    inertia_ : float
        Sum of squared distances of those samples to their nearest centre.
    n_iter_ : int
        OT-Lloyd iterations of the kept run; after ``fit`` with an embedding,
        plus the joint training epochs that ran.
    reg_ : float
        Absolute entropic regularisation used last.
    weights_ : ndarray of shape (n_clusters,)
        Normalised cluster proportions: ``weights_[k]`` is the prior weight of
        cluster ``k`` (``cluster_centers_[k]``, label ``k``).
    autoencoder_ : torch.nn.Module or None
        The autoencoder (``forward`` gives codes and reconstructions;
        :class:`~sktransfer_cluster.cluster.sinkhorn_kmeans.networks.GraphAutoEncoder`
        on the graph), else None. It reads normalised rows, as ``encoder_``.
    encoder_ : torch.nn.Module or None
        The neighbour encoder (``embedding="neighbours"``), else None. It reads
        rows centred by the source's column means and divided by its global
        RMS.
    n_steps_ : int
        Batches seen by :meth:`partial_fit` (set by it only).
    history_ : list of dict
        One record per epoch of the embedding phases (empty without an
        embedding): ``phase`` ("pretrain", "train" or "transfer"), ``epoch``,
        ``loss`` (mean reconstruction + OT loss), ``reconstruction`` and,
        except in pre-training, ``ot``. On the graph an epoch is a pass over its
        edges and ``loss`` the mean over the epoch's steps of the step's loss
        (UMAP's cross-entropy times ``neighbour_weight``, plus the
        reconstruction error for the autoencoder and the OT loss in a joint
        phase); the phases are "neighbours" (``embedding="neighbours"``) or
        "pretrain" and "train" (the autoencoder) in fit, "refine" and, with
        joint epochs, "transfer" in transfer.
    device_ : torch.device
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string feature names.

    See Also
    --------
    sklearn.cluster.KMeans : the unconstrained counterpart.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_blobs
    >>> from sktransfer_cluster import SinkhornKMeans
    >>> X, _ = make_blobs(n_samples=300, centers=3, random_state=0)
    >>> km = SinkhornKMeans(n_clusters=3, random_state=0).fit(X)
    >>> km.cluster_centers_.shape
    (3, 2)
    >>> np.round(km.transport_plan(X).sum(axis=0), 3).tolist()  # the size prior
    [0.333, 0.333, 0.333]
    >>> km.predict(X[:2]).shape
    (2,)
    >>> X_shifted = X + 1.0  # a target domain: transfer warm-starts from the source
    >>> km.transfer(X_shifted).shape
    (300,)
    """

    # Models pickled at 5f9d6e7 held the embedding fit used here (their structure: _fit_structure).
    _LEGACY_FITTED_PARAMS = {"_fitted_embedding": ("embedding",)}

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "cluster_weights": ["array-like", None],
        "embedding": [StrOptions({"autoencoder", "neighbours"}), None],
        "hidden_dims": [tuple, list, StrOptions({"auto"})],
        "image_shape": [tuple, list, None],
        "pretrain_epochs": [Interval(Integral, 0, None, closed="left")],
        "max_epochs": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "neighbour_weight": [Interval(Real, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "algorithm": [StrOptions({"auto", "full", "minibatch"})],
        **COMMON_PARAMETER_CONSTRAINTS,
    }
    _width_params = ("hidden_dims",)

    @property
    def _input_normalization(self):
        # OT k-means is affine-equivariant and only needs centring (exact squared distances
        # at large offsets); the autoencoder needs unit-scale input. The embedding the model was
        # fitted with: a set_params(embedding=...) after fit must not change what predict,
        # transform, score and transport_plan feed the fitted model.
        return "centre" if self._fitted_param("embedding") is None else "affine"

    @property
    def _cpu_dtype(self):
        # The autoencoder is matmul-bound (float32 twice as fast); plain OT k-means keeps float64.
        return torch.float64 if self._fitted_param("embedding") is None else torch.float32

    _transfer_parameter_constraints = {
        "fine_tune_epochs": [Interval(Integral, 0, None, closed="left"), None],
        "n_restarts": [Interval(Integral, 0, None, closed="left"), None],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=0.01,
        cluster_weights=None,
        embedding=None,
        hidden_dims="auto",
        image_shape=None,
        pretrain_epochs=50,
        max_epochs="auto",
        n_neighbors=15,
        neighbour_weight=1.0,
        batch_size=64,
        learning_rate=1e-3,
        n_init=10,
        max_iter=100,
        tol=1e-4,
        algorithm="auto",
        keep_best=False,
        callbacks=None,
        device="auto",
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.cluster_weights = cluster_weights
        self.embedding = embedding
        self.hidden_dims = hidden_dims
        self.image_shape = image_shape
        self.pretrain_epochs = pretrain_epochs
        self.max_epochs = max_epochs
        self.n_neighbors = n_neighbors
        self.neighbour_weight = neighbour_weight
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.algorithm = algorithm
        self.keep_best = keep_best
        self.callbacks = callbacks
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ----------------------------------------------------------------- checks
    def _check_params_vs_input(self, X, *, reset):
        super()._check_params_vs_input(X, reset=reset)  # at transfer, first: _check_unchanged_since_fit
        if reset:
            self.__dict__.pop("_fit_structure", None)  # a model pickled at 5f9d6e7, fitted anew
            if not (isinstance(self.hidden_dims, str) and self.hidden_dims == "auto"):
                check_widths("hidden_dims", self.hidden_dims, allow_empty=False)
            image = self._check_image_shape(X.shape[1]) is not None
            if self._uses_graph() and X.shape[0] < 2:
                raise ValueError(
                    f"embedding={self.embedding!r} builds a k-NN graph and needs at least 2 samples, got "
                    f"n_samples={X.shape[0]}; pass more rows"
                    + (", neighbour_weight=0" if self.embedding == "autoencoder" else "")
                    + " or embedding=None."
                )
            if image and self._conv_autoencoder() and len(self._hidden_dims()) < 2:
                raise ValueError(
                    "with image_shape, hidden_dims must hold at least one convolution's channels and the "
                    f"code width, e.g. (16, 32, 10); got {self.hidden_dims!r}."
                )
            self._proportions()

    def _structure(self):
        """The parameters that shape the fitted model, as fit resolves them.

        The number of centres, the embedding and, with one, its widths, image
        shape and (for the autoencoder) whether it is trained on the graph
        (``neighbour_weight > 0``) or is the paper's.
        """
        structure = {"n_clusters": int(self.n_clusters), "embedding": self.embedding}
        if self.embedding is not None:
            structure["hidden_dims"] = self._hidden_dims()
            structure["image_shape"] = None if self.image_shape is None else tuple(int(v) for v in self.image_shape)
            if self.embedding == "autoencoder":
                structure["neighbour_weight"] = "> 0 (the graph)" if self._uses_graph() else "0 (no graph)"
        return structure

    def _check_unchanged_since_fit(self, what):
        """ValueError naming the parameters that shape the model and changed since fit.

        The contract's check, here with the structure the parameters resolve to
        (:meth:`_structure`, off an unfitted twin) and the record of models pickled at 5f9d6e7.

        ``transfer`` and ``partial_fit`` continue the fitted model with the
        parameters: a changed number of clusters or network would fail deep
        inside (or silently keep the old one). Predict-time methods read the
        fitted state only and need no check.
        """
        record = self.__dict__.get("_fitted_params")
        if record is None:  # a model pickled before the parameters were recorded
            return
        if "n_clusters" in record:
            # The structure the recorded parameters resolve to, read off an unfitted twin that holds them.
            fitted = type(self)(**{**self.get_params(deep=False), **record})._structure()
        else:
            # A model pickled at 5f9d6e7 (its record only the embedding): the structure it kept.
            fitted = self.__dict__.get("_fit_structure")
            if fitted is None:
                return
        now = self._structure()
        changed = [name for name in fitted if name in now and fitted[name] != now[name]]
        if not changed:
            return
        detail = "; ".join(f"{name}: {fitted[name]!r} at fit, {now[name]!r} now" for name in changed)
        raise ValueError(
            f"{type(self).__name__}.{what}: {', '.join(changed)} changed since fit ({detail}), and the "
            f"fitted model was built with the value at fit; call fit again, or set it back."
        )

    def _check_image_shape(self, n_features):
        """The validated ``image_shape`` as ``(c, h, w)``, or None; ValueError with what to pass."""
        if self.image_shape is None:
            return None
        if self.embedding is None:
            raise ValueError(
                f"image_shape={self.image_shape!r} needs an embedding (it shapes the convolutional "
                "autoencoder, or the neighbour graph's image distances); drop it or set "
                "embedding='autoencoder' or 'neighbours'."
            )
        return image_channels_shape(check_image_shape(self.image_shape, n_features))

    def _max_epochs(self):
        """Joint epochs, with ``"auto"`` resolved: 0 for the graph autoencoder, 20 for the paper's."""
        if isinstance(self.max_epochs, str):
            return 0 if self._uses_graph() else _AUTO_JOINT_EPOCHS
        return int(self.max_epochs)

    def _uses_graph(self):
        """Whether the embedding is trained on the k-NN graph (neighbours, or the default autoencoder)."""
        return self.embedding == "neighbours" or (self.embedding == "autoencoder" and self.neighbour_weight > 0)

    def _conv_autoencoder(self):
        """The paper's autoencoder path with ``image_shape``: convolutional, no graph."""
        return self.embedding == "autoencoder" and not self._uses_graph() and self.image_shape is not None

    def _hidden_dims(self):
        """Encoder widths, with the ``"auto"`` rule resolved."""
        if isinstance(self.hidden_dims, str):
            if self._uses_graph():
                return _AUTO_NEIGHBOUR_DIMS
            return _AUTO_CONV_DIMS if self.image_shape is not None else _AUTO_MLP_DIMS
        return tuple(int(h) for h in self.hidden_dims)

    def _make_autoencoder(self, n_features, torch_gen=None):
        dims = self._hidden_dims()
        if self._uses_graph():
            return GraphAutoEncoder(n_features, dims, generator=torch_gen)
        if self.image_shape is None:
            return AutoEncoder(n_features, list(dims))
        return ConvAutoEncoder(n_features, self._check_image_shape(n_features), dims[:-1], dims[-1])

    def _warn_not_converged(self, res, what, tol, max_iter):
        """A ConvergenceWarning when the Sinkhorn solve ``res`` behind ``what`` did not converge."""
        if bool(res.converged):
            return
        warn(
            f"{type(self).__name__}: the transport solve did not converge for {what} (marginal error "
            f"{res.err:.3g} > tol {tol:g} after {res.n_iter} of at most {max_iter} iterations); "
            f"the result may be inaccurate. Raise epsilon (now {self.epsilon:g}): a small epsilon, "
            "or a size prior far from the data's cluster sizes, needs more iterations than the "
            "solver's cap.", ConvergenceWarning)

    # ----------------------------------------------------------------- helpers
    def _proportions(self):
        """The validated ``cluster_weights``, normalised to sum to one (uniform for None)."""
        if self.cluster_weights is None:
            return np.full(self.n_clusters, 1.0 / self.n_clusters)
        w = np.asarray(self.cluster_weights, dtype=np.float64).ravel()
        if w.shape[0] != self.n_clusters or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(
                f"cluster_weights must hold {self.n_clusters} positive finite proportions "
                f"(one per cluster), got {self.cluster_weights!r}."
            )
        return w / w.sum()

    def _log_weights(self):
        """Log of the fitted cluster proportions ``weights_``, as a tensor."""
        return torch.log(torch.as_tensor(self.weights_, dtype=self._dtype(), device=self.device_))

    def _encoder(self):
        """The fitted module that maps normalised rows to codes, or None (raw features)."""
        if getattr(self, "encoder_", None) is not None:
            return self.encoder_
        return None if self.autoencoder_ is None else self.autoencoder_.encoder

    def _embed(self, X):
        """Features the centres live with: raw X or the encoder's codes (torch)."""
        Xt = self._tensor(X)
        encoder = self._encoder()
        return Xt if encoder is None else encoder(Xt)

    def _abs_tol(self, Z):
        return float(self.tol * Z.var(0, unbiased=False).mean().item())

    def _lloyd(self, Z, init_centers, what):
        """OT-Lloyd on ``Z`` from ``init_centers`` (B, K, d); keep the cheapest run.

        The kept run's plan at its final centres is checked to ``_CHECK_TOL``
        (warm-started, usually no extra pass); a ``ConvergenceWarning`` names
        ``what`` if that fails. The check only reports: centres, labels and
        ``reg_`` do not depend on it. On the CPU the solver works in float64
        whatever ``Z``'s dtype (the autoencoder's codes are float32): its marginals
        and Newton systems need it, and the codes are narrow.
        """
        work = working_dtype(Z.device, accelerator=Z.dtype)
        with self._progress(1, f"OT-Lloyd ({init_centers.shape[0]} start(s))") as bar:
            cost, centers, reg, n_iter, check = lloyd.ot_lloyd_best(
                Z.to(work), init_centers.to(work), self.epsilon, self._log_weights(), self.max_iter,
                self._abs_tol(Z), check_tol=_CHECK_TOL, check_max_iter=_CHECK_MAX_ITER,
            )
            centers = centers.to(Z.dtype)
            self._tick(bar, cost=float(cost), iterations=float(n_iter))
        self._warn_not_converged(check, what, _CHECK_TOL, _CHECK_MAX_ITER)
        return cost, centers, reg, n_iter

    def _kmeanspp(self, Z, n_init, rng):
        """``n_init`` k-means++ starts on ``Z`` (B, K, d), each paired with the fitted weights.

        Every start of every path (fit, minibatch fit, ``partial_fit``, Dask fit,
        transfer's restarts) comes from here, so explicit ``cluster_weights`` are
        order-free everywhere: :func:`~sktransfer_cluster.ot.lloyd.pair_with_weights`
        puts the start's largest nearest-centre cell at the largest weight. Uniform
        weights leave the starts as k-means++ drew them.
        """
        Zn = Z.detach().cpu().numpy()
        seeds = rng.integers(0, 2**31 - 1, size=n_init)
        inits = [kmeans_plusplus(Zn, self.n_clusters, random_state=int(s))[0] for s in seeds]
        starts = torch.as_tensor(np.stack(inits), dtype=Z.dtype, device=Z.device)
        return lloyd.pair_with_weights(Z.detach(), starts, self.weights_)

    def _train_embedding(self, Xt, centers, epochs, torch_gen, phase):
        """Minibatch Adam on reconstruction, plus the OT loss when ``centers`` is given.

        Returns the trained centres (None when pre-training) and the number of
        epochs that ran.
        """
        recon_only = centers is None
        ae = self.autoencoder_
        params = list(ae.parameters())
        if not recon_only:
            centers = torch.nn.Parameter(centers.detach().clone())
            params.append(centers)
        opt = torch.optim.Adam(params, lr=self.learning_rate)
        log_w = self._log_weights()
        n = Xt.shape[0]
        with self._training(phase, epochs, state=[ae] if recon_only else [ae, centers]) as run:
            for _ in run.epochs():
                batches = run.batches(n, self.batch_size, torch_gen, Xt.device)
                if isinstance(Xt, IndexedRows):
                    Xt.plan(batches)  # a dask array's rows then come a group of batches per round trip
                for idx in batches:
                    xb = Xt[idx]
                    z, rec = ae(xb)
                    loss_rec = ((rec - xb) ** 2).sum(1).mean()
                    if recon_only:
                        run.step(opt, loss_rec, weight=xb.shape[0], reconstruction=loss_rec)
                        continue
                    with torch.no_grad():
                        reg = lloyd.relative_reg(squared_distances(z, centers), self.epsilon)
                    loss_ot, _ = ot_clustering_loss(z, centers, reg, log_w)
                    run.step(opt, loss_rec + loss_ot, weight=xb.shape[0], reconstruction=loss_rec, ot=loss_ot)
                run.end_epoch()
        return (None if recon_only else centers.detach()), run.completed

    def _finish(self, Z, centers, reg, n_iter, chunk_rows=None):
        """Keep the centres and label the codes ``Z``; ``chunk_rows``: label them that many rows at a time."""
        self.cluster_centers_ = centers.detach().cpu().numpy()
        if self._encoder() is None:
            self.cluster_centers_ = self.cluster_centers_ + self._input_affine[0]  # back from centred X
        self._centers = centers.detach()
        self.reg_ = float(reg)
        self.n_iter_ = int(n_iter)
        if chunk_rows is not None:
            self.labels_, self.inertia_ = self._chunked_labels(Z, chunk_rows)
            return self.labels_
        D = squared_distances(Z.detach(), self._centers)
        mins, labels = D.min(1)
        self.inertia_ = float(mins.sum().item())
        self.labels_ = labels.cpu().numpy().astype(np.int64)
        return self.labels_

    def _chunked_labels(self, Z, chunk_rows):
        """Nearest-centre labels and inertia of the codes ``Z``, holding one chunk's (rows, K) costs."""
        labels = np.empty(Z.shape[0], dtype=np.int64)
        inertia = 0.0
        with torch.no_grad():
            for start in range(0, Z.shape[0], chunk_rows):
                mins, lab = squared_distances(Z[start : start + chunk_rows], self._centers).min(1)
                labels[start : start + lab.shape[0]] = lab.cpu().numpy()
                inertia += float(mins.sum(dtype=torch.float64))
        return labels, inertia

    def _chunked_reg(self, Z, centers, chunk_rows=CODE_CHUNK_ROWS):
        """:func:`lloyd.relative_reg` of the codes ``Z`` at ``centers``, the mean cost summed chunk by chunk."""
        total = 0.0
        with torch.no_grad():
            for start in range(0, Z.shape[0], chunk_rows):
                total += float(squared_distances(Z[start : start + chunk_rows], centers).sum(dtype=torch.float64))
        mean = total / max(1, Z.shape[0] * centers.shape[0])
        return max(self.epsilon * mean, float(torch.finfo(Z.dtype).tiny))

    def _lloyd_from_landmarks(self, Z, index, starts, what):
        """OT-Lloyd from ``starts`` (B, K, d) on the landmarks' codes ``Z[index]``, the cheapest run
        kept, then OT-Lloyd on all of ``Z`` from it: one (n, K) buffer, not B of them."""
        ZL = Z[torch.as_tensor(index, device=Z.device)]
        _, start, _, _ = self._lloyd(ZL, starts, "the OT k-means start on the landmarks' codes")
        del ZL
        return self._lloyd(Z, start.unsqueeze(0), what)

    # -------------------------------------------------------------- protocol
    def _neighbour_graph(self, X, normalised=False):
        """The k-NN graph of the raw rows ``X`` (ndarray) for the neighbour encoder.

        Cosine distances when the source's values are non-negative with zeros among
        them (images, counts), Euclidean otherwise
        (:func:`~sktransfer_cluster.representation.auto_metric`): elsewhere the cosine
        keeps only the direction from an arbitrary origin. ``normalised``: ``X`` holds
        the rows the network reads already (float32), not the raw rows. A ValueError
        (rescale the rows) when the Euclidean graph's float32 rows are beyond the range the
        encoder can square, as the encoder's own check says it.
        """
        from ...representation import check_input_range, neighbour_graph

        image = self.image_shape is not None
        metric = getattr(self, "_graph_metric", "cosine")  # models pickled before the rule: cosine
        if metric == "euclidean":
            if not normalised:
                # The rows the encoder reads (centred, one global scale): the same neighbours as the
                # raw rows, and float32 resolves them whatever the data's offset.
                X = self._tensor(X).detach().to("cpu", torch.float32).numpy()
            # Rows the encoder cannot square would reach the k-NN as infinite: its "impute NaN" is wrong here.
            check_input_range(X)
        return neighbour_graph(
            X,
            min(int(self.n_neighbors), X.shape[0] - 1),
            metric=metric,
            image_shape=tuple(self.image_shape) if image else None,
            max_shift=_NEIGHBOUR_MAX_SHIFT if image else 0,
            blur=_NEIGHBOUR_BLUR if image else 0.0,
            shared_neighbours=True,
        )

    def _train_neighbours(self, X, Xt, epochs, torch_gen, phase, centers=None, graph=None):
        """Train the graph embedding in place on the graph of the raw rows ``X``, inputs ``Xt`` (normalised).

        The neighbour encoder (``encoder_``), or the graph autoencoder
        (``autoencoder_``: UMAP's loss times ``neighbour_weight`` plus the
        reconstruction error). With ``centers`` (joint phase) the OT clustering
        loss of the batch's codes is added and the centres are trained too;
        they are returned (else None). One ``TrainingRun`` epoch per pass over
        the graph's edges (the representation's step count), on the CPU, one
        thread. ``graph``: the graph of ``X`` if already built.
        """
        from ...representation import steps_per_epoch, train_neighbour_encoder

        if epochs == 0:
            return centers
        graph = self._neighbour_graph(X) if graph is None else graph
        per_epoch = steps_per_epoch(int((graph.data > 0).sum()), _NEIGHBOUR_EDGES_PER_STEP)
        ae = self.autoencoder_
        module = self.encoder_ if ae is None else ae
        device, dtype = next(module.parameters()).device, next(module.parameters()).dtype
        module = module.to("cpu", torch.float32)
        encoder, decoder = (module, None) if ae is None else (module.encoder, module.decoder)
        inputs = Xt.detach().to("cpu", torch.float32).numpy()
        extra, node_loss = (), None
        if centers is not None:
            centers = torch.nn.Parameter(centers.detach().to("cpu", torch.float32).clone())
            extra = (centers,)
            log_w = torch.log(torch.as_tensor(self.weights_, dtype=torch.float32))

            def node_loss(Z, nodes):
                with torch.no_grad():
                    reg = lloyd.relative_reg(squared_distances(Z, centers), self.epsilon)
                return ot_clustering_loss(Z, centers, reg, log_w)[0]

        state = [module] + list(extra)
        with self._training(phase, epochs, state=state, unit="epoch") as run:
            step = run.step_callback(per_epoch)

            train_neighbour_encoder(
                encoder, inputs, graph, n_epochs=epochs, batch_size=_NEIGHBOUR_EDGES_PER_STEP,
                learning_rate=self.learning_rate, generator=torch_gen, callback=step,
                decoder=decoder, neighbour_weight=1.0 if ae is None else float(self.neighbour_weight),
                node_loss=node_loss, extra_params=extra, reconstruction_rows=_GRAPH_RECONSTRUCTION_ROWS,
            )
        module.eval()
        module = module.to(device, dtype)
        if ae is None:
            self.encoder_ = module
        else:
            self.autoencoder_ = module
        return None if centers is None else centers.detach().to(device, dtype)

    def _fit_neighbours(self, X, Xt, rng, torch_gen):
        from ...representation import make_encoder

        dims = self._hidden_dims()
        self.encoder_ = make_encoder(X.shape[1], dims[-1], dims[:-1], generator=torch_gen).eval()
        self._train_neighbours(X, Xt, self.pretrain_epochs, torch_gen, "neighbours")
        self.encoder_ = self.encoder_.to(device=self.device_, dtype=self._dtype())
        with torch.no_grad():
            Z = self.encoder_(Xt)
            _, centers, reg, n_iter = self._lloyd(
                Z, self._kmeanspp(Z, self.n_init, rng), "the final plan of fit (OT k-means on the codes)"
            )
        self._finish(Z, centers, reg, n_iter)

    def _fit_graph_autoencoder(self, X, Xt, rng, torch_gen):
        """The default autoencoder: graph + reconstruction pre-training, OT k-means, joint phase."""
        ae = self._make_autoencoder(X.shape[1], torch_gen).eval()
        self.autoencoder_ = ae.to(device=self.device_, dtype=self._dtype())
        graph = self._neighbour_graph(X)
        self._train_neighbours(X, Xt, self.pretrain_epochs, torch_gen, "pretrain", graph=graph)
        with torch.no_grad():
            Z = self.autoencoder_.encoder(Xt)
            _, centers, reg, n_iter = self._lloyd(
                Z, self._kmeanspp(Z, self.n_init, rng), "the final plan of fit (OT k-means on the codes)"
            )
        self._finish(*self._joint_graph_phase(X, Xt, Z, centers, reg, n_iter, torch_gen, "train", graph, "fit"))

    def _fit_graph_on_landmarks(self, X, rng, torch_gen):
        """The graph fit (``"neighbours"`` or the graph autoencoder) past ``LANDMARK_ROWS`` rows.

        No copy of X: the network trains on the graph of landmark rows drawn by
        index, every row's code is computed chunk by chunk, the OT k-means start is
        chosen on the landmarks' codes (``n_init`` k-means++ starts, the cheapest
        OT-Lloyd run kept) and OT-Lloyd then runs on all codes from it
        (``docs/notes/representation.md``).
        """
        from ...representation import encode_chunks, landmark_indices, make_encoder

        shift, scale = self._input_affine
        index = landmark_indices(X.shape[0], rng)
        if self.embedding == "neighbours":
            dims = self._hidden_dims()
            self.encoder_ = make_encoder(X.shape[1], dims[-1], dims[:-1], generator=torch_gen).eval()
            phase = "neighbours"
        else:
            ae = self._make_autoencoder(X.shape[1], torch_gen).eval()
            self.autoencoder_ = ae.to(device=self.device_, dtype=self._dtype())
            phase = "pretrain"
        graph, inputs = self._landmark_graph(X, index)
        self._train_neighbours(None, inputs, self.pretrain_epochs, torch_gen, phase, graph=graph)
        if self.encoder_ is not None:
            self.encoder_ = self.encoder_.to(device=self.device_, dtype=self._dtype())

        def codes():
            return encode_chunks(self._encoder(), X, shift, scale).to(self.device_, self._dtype())

        with torch.no_grad():
            Z = codes()
            starts = self._kmeanspp(Z[torch.as_tensor(index, device=Z.device)], self.n_init, rng)
            _, centers, reg, n_iter = self._lloyd_from_landmarks(
                Z, index, starts, "the final plan of fit (OT k-means on the codes)"
            )
        if self.autoencoder_ is not None:
            self._finish(*self._joint_graph_phase(None, inputs, Z, centers, reg, n_iter, torch_gen, "train", graph,
                                                  "fit", codes=codes), chunk_rows=CODE_CHUNK_ROWS)
        else:
            self._finish(Z, centers, reg, n_iter, chunk_rows=CODE_CHUNK_ROWS)

    def _landmark_graph(self, X, index):
        """``(graph, inputs)``: the neighbour graph of the landmark rows ``X[index]`` and those rows normalised.

        The graph of the raw landmark rows (cosine) or of the rows the network reads
        (Euclidean, as :meth:`_neighbour_graph`). For the cosine graph the raw rows are
        dropped once it is built and read again normalised, in float64 before the one
        rounding to float32 as ``_tensor`` does it (normalising the float32 raw rows would
        round a float64 X's large offset first): one float32 copy of the landmarks at a time.
        """
        from ...representation import read_landmarks

        shift, scale = self._input_affine
        euclidean = getattr(self, "_graph_metric", "cosine") == "euclidean"
        rows = read_landmarks(X, index, *((shift, scale) if euclidean else (None, 1.0)))
        graph = self._neighbour_graph(rows, normalised=euclidean)
        if not euclidean:
            del rows
            rows = read_landmarks(X, index, shift, scale)
        return graph, torch.from_numpy(rows)

    def _transfer_graph_on_landmarks(self, X, rng, torch_gen, epochs, n_restarts, graph_ae):
        """``transfer`` of a graph embedding to a target past ``LANDMARK_ROWS`` rows, X never copied.

        As in memory, on the target's landmarks: the refinement (``epochs`` passes)
        and, for the graph autoencoder, the joint phase train on the neighbour graph
        of ``LANDMARK_ROWS`` target rows drawn by index; every row's code is computed
        chunk by chunk; the start is chosen among the source centres and
        ``n_restarts`` k-means++ starts on the landmarks' codes, and OT-Lloyd then
        runs on all codes from it.
        """
        from ...representation import encode_chunks, landmark_indices

        shift, scale = self._input_affine
        index = landmark_indices(X.shape[0], rng)
        graph = inputs = None
        if epochs > 0:
            graph, inputs = self._landmark_graph(X, index)
            self._refine_on_graph(X, inputs, epochs, torch_gen, graph)

        def codes():
            return encode_chunks(self._encoder(), X, shift, scale).to(self.device_, self._dtype())

        with torch.no_grad():
            Z = codes()
            centers, reg, n_iter = self._transfer_lloyd_on_landmarks(Z, self._centers, n_restarts, rng, lambda: index)
        if graph_ae and epochs > 0:
            return self._finish(*self._joint_graph_phase(None, inputs, Z, centers, reg, n_iter, torch_gen, "transfer",
                                                         graph, "transfer", codes=codes), chunk_rows=CODE_CHUNK_ROWS)
        return self._finish(Z, centers, reg, n_iter, chunk_rows=CODE_CHUNK_ROWS)

    def _paper_codes(self, X):
        """The paper autoencoder's codes of every row of ``X``, read and encoded chunk by chunk."""
        from ...representation import encode_chunks

        shift, scale = self._input_affine
        return encode_chunks(self.autoencoder_.encoder, X, shift, scale).to(self.device_, self._dtype())

    def _fit_paper_streamed(self, X, rng, torch_gen):
        """The paper's autoencoder (``neighbour_weight=0``) past ``LANDMARK_ROWS`` rows, X never copied.

        The same phases as in memory: pre-training on reconstruction, OT k-means on
        the codes, the joint phase. Every minibatch is read by index
        (:class:`~.streamed.IndexedRows`: the rows, bits and order the in-memory
        tensor would give), the codes are computed chunk by chunk, the OT k-means
        start is chosen on the landmarks' codes (``n_init`` k-means++ starts, the
        cheapest OT-Lloyd run kept) and OT-Lloyd then runs on all codes from it, and
        the final assignment is chunked.
        """
        from ...representation import landmark_indices

        shift, scale = self._input_affine
        rows = IndexedRows(X, shift, scale, self._dtype(), self.device_)
        ae = self._make_autoencoder(X.shape[1])
        self.autoencoder_ = init_module(ae, torch_gen).to(device=self.device_, dtype=self._dtype())
        self._train_embedding(rows, None, self.pretrain_epochs, torch_gen, "pretrain")
        with torch.no_grad():
            Z = self._paper_codes(X)
            index = landmark_indices(X.shape[0], rng)
            starts = self._kmeanspp(Z[torch.as_tensor(index, device=Z.device)], self.n_init, rng)
            _, centers, _, n_iter = self._lloyd_from_landmarks(
                Z, index, starts, "the final plan of fit (OT k-means on the codes)"
            )
            del Z
        centers, n_epochs = self._train_embedding(rows, centers, self._max_epochs(), torch_gen, "train")
        with torch.no_grad():
            Z = self._paper_codes(X)
            reg = self._chunked_reg(Z, centers)
        self.autoencoder_.eval()
        self._finish(Z, centers, reg, n_iter + n_epochs, chunk_rows=CODE_CHUNK_ROWS)

    def _transfer_paper_streamed(self, X, rng, torch_gen, fine_tune_epochs, n_restarts):
        """``transfer`` of the paper's autoencoder to a target past ``LANDMARK_ROWS`` rows, X never copied.

        As in memory (joint epochs on the target, then OT-Lloyd from the source
        centres) with minibatches read by index and codes chunk by chunk; with
        restarts, the start is chosen among the source centres and the k-means++
        starts on the landmarks' codes, and OT-Lloyd then runs on all codes from it.
        """
        from ...representation import landmark_indices

        centers = self._centers
        if fine_tune_epochs > 0:
            shift, scale = self._input_affine
            rows = IndexedRows(X, shift, scale, self._dtype(), self.device_)
            self.autoencoder_.train()
            centers, _ = self._train_embedding(rows, centers, fine_tune_epochs, torch_gen, "transfer")
            self.autoencoder_.eval()
        with torch.no_grad():
            Z = self._paper_codes(X)
            centers, reg, n_iter = self._transfer_lloyd_on_landmarks(
                Z, centers, n_restarts, rng, lambda: landmark_indices(X.shape[0], rng))
        return self._finish(Z, centers, reg, n_iter, chunk_rows=CODE_CHUNK_ROWS)

    def _transfer_lloyd_on_landmarks(self, Z, centers, n_restarts, rng, landmarks):
        """OT-Lloyd of a streamed ``transfer`` on all codes ``Z``: ``(centers, reg, n_iter)``.

        From ``centers`` alone or, with ``n_restarts``, from the cheapest on the landmark rows
        (``landmarks()``, drawn only then; :meth:`_lloyd_from_landmarks`) of ``centers`` and
        as many k-means++ starts drawn on those rows' codes.
        """
        what = "the final plan of transfer"
        starts = centers.unsqueeze(0).to(Z.dtype)
        if n_restarts > 0 and Z.shape[0] >= self.n_clusters:
            index = landmarks()
            starts = torch.cat([starts, self._kmeanspp(Z[torch.as_tensor(index, device=Z.device)], int(n_restarts), rng)])
            _, centers, reg, n_iter = self._lloyd_from_landmarks(Z, index, starts, what)
        else:
            _, centers, reg, n_iter = self._lloyd(Z, starts, what)
        return centers, reg, n_iter

    def _joint_graph_phase(self, X, Xt, Z, centers, reg, n_iter, torch_gen, phase, graph, what, codes=None):
        """``max_epochs`` passes of graph + reconstruction + OT loss from ``centers``, then OT-Lloyd on the codes.

        Returns ``(Z, centers, reg, n_iter)`` for :meth:`_finish`; unchanged
        when ``max_epochs`` is 0 or an interrupt was kept. ``codes``: a callable
        giving the codes of every row (None: the encoder applied to ``Xt``).
        """
        epochs = self._max_epochs()
        if epochs == 0 or self._training_stopped_now():
            return Z, centers, reg, n_iter
        centers = self._train_neighbours(X, Xt, epochs, torch_gen, phase, centers=centers, graph=graph)
        with torch.no_grad():
            Z = self.autoencoder_.encoder(Xt) if codes is None else codes()
            _, centers, reg, n_lloyd = self._lloyd(
                Z, centers.unsqueeze(0), f"the final plan of {what} (OT k-means on the codes)"
            )
        return Z, centers, reg, n_iter + n_lloyd

    def _refine_on_graph(self, X, Xt, epochs, torch_gen, G):
        """transfer's refinement on the target's graph ``G`` with the fit's loss.

        The graph autoencoder keeps ``_REFINE_KEEP_FIRST_LAYER`` of the source's
        first encoder layer (shrunk towards a fresh one) and starts its later layers
        and decoder fresh; the neighbour encoder (``embedding="neighbours"``, not
        measured with the shrink) starts from the source encoder as it is.
        """
        from ...representation import shrink_towards

        if epochs == 0:
            return
        if self.autoencoder_ is not None:
            fresh = self._make_autoencoder(X.shape[1], torch_gen)
            first = shrink_towards(self.autoencoder_.encoder[0], fresh.encoder[0], _REFINE_KEEP_FIRST_LAYER)
            with torch.no_grad():
                fresh.encoder[0].load_state_dict(first.state_dict())
            shrink_towards(self.autoencoder_, fresh, 0.0)  # the shrunk first layer, every other one fresh
        self._train_neighbours(X, Xt, epochs, torch_gen, "refine", graph=G)

    def _training_stopped_now(self):
        return bool(getattr(self, "_training_stopped", False))

    def fit(self, X, y=None, **fit_params):
        """Fit on the source: OT k-means, or the embedding and OT k-means on its codes.

        Parameters
        ----------
        X : array-like, np.memmap or dask array of shape (n_samples, n_features)
            Source data. A memmap is read in pieces (``algorithm``); a dask array
            is fitted where its chunks live: without an embedding every pass of
            OT-Lloyd is one task per chunk returning a few sums, and only the
            labels come back; with one, past 50,000 rows, the dask array is read
            as a memmap is (landmarks or minibatches by index brought to the
            client, the moments and every row's codes computed on the workers;
            :class:`~sktransfer_cluster.base.streaming.DaskRows`).
        y : None
            Ignored.

        Returns
        -------
        self : object
        """
        if is_dask_array(X) and self.embedding is None:
            return self._fit_dask(X, y)
        return super().fit(X, y, **fit_params)

    def _fit(self, X, y, *, rng, torch_gen):
        self.weights_ = self._proportions()
        self.autoencoder_ = None
        self.encoder_ = None
        self.__dict__.pop("_stream", None)  # partial_fit continues only from plain OT k-means
        if self._streams(X):
            self._fit_minibatch(X, rng)
            return
        if self.embedding is not None:
            from ...representation import auto_metric, uses_landmarks

            if self._uses_graph():
                # Chosen on the source's values and kept for transfer's target graph.
                self._graph_metric = auto_metric(X)
            if uses_landmarks(X.shape[0]):
                if self._uses_graph():
                    self._fit_graph_on_landmarks(X, rng, torch_gen)
                else:
                    self._fit_paper_streamed(X, rng, torch_gen)
                return
        Xt = self._tensor(X)
        if self.embedding == "neighbours":
            self._fit_neighbours(X, Xt, rng, torch_gen)
            return
        if self._uses_graph():
            self._fit_graph_autoencoder(X, Xt, rng, torch_gen)
            return
        if self.embedding is None:
            with torch.no_grad():
                init = self._kmeanspp(Xt, self.n_init, rng)
                _, centers, reg, n_iter = self._lloyd(Xt, init, "the final plan of fit")
            self._finish(Xt, centers, reg, n_iter)
            self._keep_stream(self._new_stream(self._centers, reg, None, X.shape[0]))
            return
        ae = self._make_autoencoder(X.shape[1])
        self.autoencoder_ = init_module(ae, torch_gen).to(device=self.device_, dtype=self._dtype())
        self._train_embedding(Xt, None, self.pretrain_epochs, torch_gen, "pretrain")
        with torch.no_grad():
            Z = self.autoencoder_.encoder(Xt)
            _, centers, _, n_iter = self._lloyd(
                Z, self._kmeanspp(Z, self.n_init, rng), "the final plan of fit (OT k-means on the codes)"
            )
        centers, n_epochs = self._train_embedding(Xt, centers, self._max_epochs(), torch_gen, "train")
        with torch.no_grad():
            Z = self.autoencoder_.encoder(Xt)
            reg = lloyd.relative_reg(squared_distances(Z, centers), self.epsilon).item()
        self.autoencoder_.eval()
        self._finish(Z, centers, reg, n_iter + n_epochs)

    def transfer(self, X, *, fine_tune_epochs=None, n_restarts=None):
        """Cluster an unlabelled target, warm-started from the source centres.

        OT k-means on ``X`` starting from the fitted centres (and through the
        fitted embedding); afterwards ``labels_`` holds the target's labels and
        ``predict`` serves the target. A parameter that shapes the fitted model
        (``n_clusters``, ``embedding`` and, with one, ``hidden_dims``,
        ``image_shape``, ``neighbour_weight`` zero or not) changed by
        ``set_params`` since fit is a ValueError that asks for a new fit;
        ``predict``, ``transform``, ``score`` and ``transport_plan`` serve the
        fitted model whatever the parameters now say.

        Parameters
        ----------
        X : array-like, np.memmap or dask array of shape (n_samples, n_features)
            Target data, same features as the source. A dask array is clustered
            where its chunks live (as in :meth:`fit`). With an embedding, past
            :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` (50,000)
            rows it is never copied: on the graph the refinement and joint phase
            train on the graph of as many target rows drawn by index, the
            paper's autoencoder reads its minibatches by index; the codes are
            computed chunk by chunk and the restarts drawn on the codes of those
            50,000 rows, the cheapest start then run on all codes.
        fine_tune_epochs : int or None, default=None
            On the graph (``embedding="neighbours"`` or the default
            autoencoder): passes over the target's own k-NN graph that refine
            the source network with the fit's loss (None: ``pretrain_epochs``
            for the autoencoder, 20 for ``"neighbours"``; 0 keeps the source
            network). The autoencoder's refinement starts from its source's
            first encoder layer shrunk towards a fresh initialisation
            (:func:`~sktransfer_cluster.representation.shrink_towards`, half
            kept) and fresh later layers and decoder. The paper's autoencoder (``neighbour_weight=0``):
            joint reconstruction + OT epochs on the target before the final
            assignment (None: 0). Ignored without an embedding.
        n_restarts : int or None, default=None
            k-means++ starts drawn on the target (its codes) and run beside the
            warm start from the source centres; the run with the lowest
            regularised transport cost is kept (the warm start on ties). None:
            ``n_init`` on the graph (the refined network, not the source
            centres, carries the source to new classes), else 0.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A dask array for a dask array, chunked as its rows (``labels_`` holds
            them on the client). Without an embedding OT-Lloyd runs where the
            chunks live, each pass one task per chunk, as in a Dask ``fit``.

        Examples
        --------
        >>> from sklearn.datasets import make_blobs
        >>> from sktransfer_cluster import SinkhornKMeans
        >>> X, _ = make_blobs(n_samples=90, centers=3, random_state=0)
        >>> SinkhornKMeans(3, random_state=0).fit(X).transfer(X + 0.5).shape
        (90,)
        """
        if is_dask_array(X) and getattr(self, "encoder_", None) is None and getattr(self, "autoencoder_", None) is None:
            return self._transfer_dask(X, {"fine_tune_epochs": fine_tune_epochs, "n_restarts": n_restarts})
        return super().transfer(X, fine_tune_epochs=fine_tune_epochs, n_restarts=n_restarts)

    def _transfer(self, X, *, rng, torch_gen, fine_tune_epochs=None, n_restarts=None):
        """Warm-start OT k-means on the target from the source centres (and embedding).

        Parameters
        ----------
        X : ndarray
            Validated target data.
        fine_tune_epochs : int or None, default=None
            With an embedding: joint reconstruction + OT epochs (the paper's
            autoencoder, None: 0) or refinement passes over the target's graph
            (None: ``pretrain_epochs`` for the graph autoencoder, 20 for the
            neighbour encoder) before the final OT-Lloyd (ignored without an
            embedding).
        n_restarts : int or None, default=None
            k-means++ starts on the target beside the source centres (None:
            ``n_init`` on the graph, else 0).
        """
        from ...representation import uses_landmarks

        # What was fitted decides, not the current parameters.
        graph_ae = isinstance(self.autoencoder_, GraphAutoEncoder)
        graph = getattr(self, "encoder_", None) is not None or graph_ae
        if self.autoencoder_ is not None and not graph and uses_landmarks(X.shape[0]):
            return self._transfer_paper_streamed(X, rng, torch_gen, 0 if fine_tune_epochs is None else
                                                 int(fine_tune_epochs), 0 if n_restarts is None else int(n_restarts))
        epochs = 0
        if graph:
            if fine_tune_epochs is not None:
                epochs = int(fine_tune_epochs)
            else:
                # The autoencoder refines for as long as a fit trains: MNIST 0-4 -> 5-9 seed 0, 20 passes
                # 0.949, 50 passes 0.959, the same fitted on the target alone 0.958 (section 11 of the notes).
                epochs = int(self.pretrain_epochs) if graph_ae else _NEIGHBOUR_REFINE_EPOCHS
            if uses_landmarks(X.shape[0]):
                return self._transfer_graph_on_landmarks(
                    X, rng, torch_gen, epochs, self.n_init if n_restarts is None else int(n_restarts), graph_ae)
        Xt = self._tensor(X)
        centers = self._centers
        if graph:
            G = self._neighbour_graph(X) if epochs > 0 else None
            self._refine_on_graph(X, Xt, epochs, torch_gen, G)
        fine_tune_epochs = 0 if fine_tune_epochs is None else fine_tune_epochs
        if n_restarts is None:
            n_restarts = self.n_init if graph else 0
        if self.autoencoder_ is not None and not graph and fine_tune_epochs > 0:
            self.autoencoder_.train()
            centers, _ = self._train_embedding(Xt, centers, fine_tune_epochs, torch_gen, "transfer")
            self.autoencoder_.eval()
        with torch.no_grad():
            Z = self._embed(X)
            starts = centers.unsqueeze(0).to(Z.dtype)
            if n_restarts > 0 and Z.shape[0] >= self.n_clusters:
                starts = torch.cat([starts, self._kmeanspp(Z, int(n_restarts), rng)])
            _, centers, reg, n_iter = self._lloyd(Z, starts, "the final plan of transfer")
        if graph_ae and epochs > 0:
            # As in fit: the joint phase on the target's graph from the chosen centres.
            return self._finish(*self._joint_graph_phase(X, Xt, Z, centers, reg, n_iter, torch_gen, "transfer", G,
                                                         "transfer"))
        return self._finish(Z, centers, reg, n_iter)

    def _predict(self, X):
        Z = self._embed(X)
        return nearest_centre(Z, self._centers).cpu().numpy()

    def _linear_predictor(self):
        # Without an embedding the nearest centre maximises 2 x.c - |c|^2: k-means' assignment.
        if self._encoder() is not None:
            return None
        C = self._centers.to("cpu", torch.float64)
        return 2.0 * C.T, -(C * C).sum(1)

    def transform(self, X):
        """Euclidean distances of each sample to each centre (in the embedding space if any).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
            A dask array for a dask array, each chunk's distances computed where it lives.
        """
        if is_dask_array(X):
            return self._map_dask_rows("transform", X, lambda: self._centers.shape[0], np.float64)
        X = self._fitted_input(X)
        return self._chunked(
            lambda xc: squared_distances(self._embed(xc), self._centers).sqrt().cpu().numpy(), X, dtype=np.float64
        )

    def transport_plan(self, X):
        """Entropic OT plan between the samples of ``X`` and the centres.

        Solves ``min_P <P, C> + reg_ KL(P | a w^T)`` with ``C_ik`` the squared
        distance to centre ``k``: rows sum to ``1/n``, columns to ``weights_``.
        ``n * P`` are soft assignments that respect the cluster-size prior. The
        solve (damped Newton on the semi-dual,
        :func:`~sktransfer_cluster.ot.semi_dual_newton`) couples all rows: it
        holds the ``(n, n_clusters)`` costs and the plan, and stops at an L1
        marginal error of 1e-9 or after 200 passes over the costs, with a
        :class:`~sklearn.exceptions.ConvergenceWarning` in the second case. It
        runs in float64 (float32 codes included), except on MPS (no float64),
        where the tolerance is 100 float32 roundings.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        plan : ndarray of shape (n_samples, n_clusters)
            float64 (float32 on MPS).
        """
        X = self._fitted_input(X)
        with torch.no_grad():
            # float32 costs (codes, any accelerator) are solved in float64: their column sums
            # cannot meet _PLAN_TOL in float32 (issue V10 #2: every call ran the cap and warned).
            costs = self._chunked_costs(X)
            M = costs.to(exact_dtype(costs.device)).div_(self.reg_)
            tol = max(_PLAN_TOL, _PLAN_TOL_EPS * torch.finfo(M.dtype).eps)
            log_w = torch.log(torch.as_tensor(self.weights_, dtype=M.dtype, device=M.device))
            res = semi_dual_newton(M, log_w, max_iter=_PLAN_MAX_ITER, tol=tol)
            self._warn_not_converged(res, "transport_plan", tol, _PLAN_MAX_ITER)
            return plan_from_potentials(M, res.f, res.g, 1.0, None, log_w).cpu().numpy()

    def _chunked_costs(self, X):
        """Squared distances (n, n_clusters) of the rows of ``X`` to the centres, chunk by chunk."""
        return chunked(lambda xc: squared_distances(self._embed(xc), self._centers), X)

    @property
    def _n_features_out(self):
        return self.cluster_centers_.shape[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags
