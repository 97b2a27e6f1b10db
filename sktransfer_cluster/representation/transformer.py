"""NeighbourEmbedding: the graph + encoder of this package as a scikit-learn transformer."""

from __future__ import annotations

import copy
import weakref
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base.arrays import check_image_shape, check_widths
from ..base.runtime import exact_dtype, loaded_device, resolve_device
from .encoder import encode, make_encoder, train_neighbour_encoder
from .graph import auto_metric, neighbour_graph

__all__ = ["NeighbourEmbedding"]

# Rows per block of transform's input affine: a few MB of float64 at image widths, so the block
# stays in cache between the affine and the encoder.
_TRANSFORM_ROWS = 4096
# On an accelerator, bytes of float64 input per block (at least _TRANSFORM_ROWS rows): large blocks
# keep its kernels busy and the transfers few, and the device holds at most a few such blocks.
_DEVICE_BLOCK_BYTES = 2**27
# transform's copy of the encoder on an accelerator, per embedding: (encoder_ it was copied from,
# its parameters' versions, device, copy). Kept off the embedding: not pickled or deep-copied.
_DEVICE_ENCODERS = weakref.WeakKeyDictionary()
_CPU = torch.device("cpu")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_in_float32(inputs, normalised):
    """ValueError when the encoder's float32 ``inputs`` (a tensor) hold a value the cast overflowed.

    One ``aminmax`` of the block (no ``|inputs|`` copy; the values were validated finite, so an
    infinite one overflowed). ``normalised()``: the block's float64 values, for the message only.
    """
    lo, hi = torch.aminmax(inputs)
    if bool(torch.isfinite(torch.stack([lo, hi])).all()):
        return
    peak = float(torch.as_tensor(normalised()).abs().max())
    raise ValueError(
        f"NeighbourEmbedding.transform: the encoder's inputs reach {peak:.3g} after normalisation (the fit data's "
        f"shift_ and scale_), beyond float32's largest value {_FLOAT32_MAX:.3g}, in which the encoder runs: the "
        "rows are far outside the scale of the data fit saw. Rescale them to its units."
    )


class NeighbourEmbedding(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """A parametric-UMAP encoder trained on an exact, denoised k-NN graph.

    ``fit`` builds the fuzzy k-NN graph of ``X`` (:func:`~.graph.neighbour_graph`:
    the package's metric rule by default, :func:`~.graph.auto_metric`; edges weighted by how many neighbours their ends share,
    and, when ``image_shape`` is given, distances taken between lightly
    blurred images and minimised over translations of up to ``max_shift``
    pixels), then trains an MLP with UMAP's cross-entropy on it
    (:func:`~.encoder.train_neighbour_encoder`). ``transform`` applies the
    encoder, so rows never seen in ``fit`` are embedded without refitting, and
    :meth:`refine` continues the training on another data set's graph (the
    transfer step: start from the source's encoder, adapt to the target).

    Parameters
    ----------
    n_components : int, default=10
    n_neighbors : int, default=15
    metric : {"auto", "cosine", "euclidean"}, default="auto"
        "auto": :func:`~.graph.auto_metric` of the ``fit`` data (cosine for non-negative
        rows that reach zero, such as images and counts; else Euclidean), recorded as
        ``metric_``.
    shared_neighbours : bool, default=True
    image_shape : tuple or None, default=None
        ``(h, w)`` or ``(c, h, w)`` of each row. Never inferred from the number
        of columns: a flat array is treated as a flat array.
    max_shift : int, default=1
        Translations (pixels) the graph's distance ignores; only with ``image_shape``.
    blur : float, default=1.0
        Gaussian blur (pixels) before distances; only with ``image_shape``.
    hidden_dims : tuple of int, default=(256, 256)
    n_epochs : int, default=40
        Passes over the graph's edges in ``fit``.
    refine_epochs : int, default=20
        Passes in :meth:`refine` (when its ``n_epochs`` is None).
    batch_size : int, default=4096
        Edges per Adam step.
    learning_rate : float, default=1e-3
    random_state : int, RandomState instance or None, default=None
        Seeds local numpy/torch generators; global seeds are never touched.
    device : str or torch.device, default="auto"
        Where ``transform`` runs the encoder: ``"auto"`` (CUDA, else MPS, else
        the CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"`` or a
        :class:`torch.device`, resolved at ``fit`` (``device_``). Training
        (``fit``, :meth:`refine`) runs on the CPU whatever the device: its
        steps are small and launch-bound, and so the fitted encoder is the
        same on every machine. On the CPU ``transform`` is exact as before;
        on an accelerator the input affine runs in float64 (float32 on MPS)
        and the encoder in float32, so codes agree with the CPU's within
        float32 rounding.

    Attributes
    ----------
    metric_ : {"cosine", "euclidean"}
        The graph's metric (``metric``, resolved at ``fit``).
    device_ : torch.device
        Where ``transform`` runs (``device``, resolved at ``fit``). An
        embedding unpickled where that device is missing warns and runs on
        the CPU; one pickled before ``device`` existed runs on the CPU.
    encoder_ : torch.nn.Sequential
        On the CPU, float32 (``transform`` copies it to ``device_``).
    shift_, scale_ : ndarray
        Input affine applied before the encoder (column means of the ``fit``
        data and the scalar RMS of the centred data).
    graph_ : scipy.sparse.csr_matrix
        Graph of the last data set trained on.
    loss_curve_ : list of float
        Mean loss per epoch, ``fit`` then each ``refine``.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``fit`` was given column names.

    A failed ``fit`` or :meth:`refine` leaves the fitted state as it was.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_blobs
    >>> X, y = make_blobs(200, n_features=5, centers=3, random_state=0)
    >>> emb = NeighbourEmbedding(n_components=2, hidden_dims=(16,), n_epochs=5, random_state=0)
    >>> emb.fit_transform(X).shape
    (200, 2)
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "metric": [StrOptions({"auto", "cosine", "euclidean"})],
        "shared_neighbours": ["boolean"],
        "image_shape": [None, tuple, list],
        "max_shift": [Interval(Integral, 0, None, closed="left")],
        "blur": [Interval(Real, 0, None, closed="left")],
        "hidden_dims": [tuple, list],  # and check_widths: positive ints
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "refine_epochs": [Interval(Integral, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "device": [str, torch.device, None],
    }

    def __init__(
        self,
        n_components=10,
        *,
        n_neighbors=15,
        metric="auto",
        shared_neighbours=True,
        image_shape=None,
        max_shift=1,
        blur=1.0,
        hidden_dims=(256, 256),
        n_epochs=40,
        refine_epochs=20,
        batch_size=4096,
        learning_rate=1e-3,
        random_state=None,
        device="auto",
    ):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.shared_neighbours = shared_neighbours
        self.image_shape = image_shape
        self.max_shift = max_shift
        self.blur = blur
        self.hidden_dims = hidden_dims
        self.n_epochs = n_epochs
        self.refine_epochs = refine_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.device = device

    def __setstate__(self, state):
        state = dict(state)
        # Embeddings pickled before the device parameter ran transform on the CPU, and keep doing so.
        state.setdefault("device", "cpu")
        if "encoder_" in state:
            state.setdefault("device_", torch.device("cpu"))
        if state.get("device_") is not None:
            state["device_"] = loaded_device(state["device_"])  # the CPU, with a warning, where it is missing
        super().__setstate__(state)

    @property
    def _n_features_out(self):
        """Columns of ``transform`` (get_feature_names_out); an AttributeError before ``fit``."""
        return self.encoder_[-1].out_features

    def _graph(self, X, metric=None):
        """The k-NN graph of ``X`` (float64 rows) under ``metric`` (default: the fitted ``metric_``).

        The raw rows: :func:`~.graph.neighbour_graph` centres Euclidean rows that lie far from
        the origin against their spread and scales rows whose float32 squares would over- or
        underflow (a scalar standardisation would leave the neighbours as they are, but move
        every ordinary data set's float32 distances, and so the graphs the wings have).
        """
        image = self.image_shape is not None
        # A shape of positive ints holding the row (the graph would truncate (2.9, 2.9) to (2, 2)).
        image_shape = check_image_shape(self.image_shape, X.shape[1]) if image else None
        # Embeddings pickled before metric_ existed were fitted with an explicit metric.
        metric = getattr(self, "metric_", self.metric) if metric is None else metric
        return neighbour_graph(
            X,
            min(int(self.n_neighbors), X.shape[0] - 1),
            metric=metric,
            image_shape=image_shape,
            max_shift=int(self.max_shift) if image else 0,
            blur=float(self.blur) if image else 0.0,
            shared_neighbours=self.shared_neighbours,
        )

    @staticmethod
    def _inputs_of(X, shift, scale):
        return ((X - shift) / scale).astype(np.float32)

    def _inputs(self, X):
        return self._inputs_of(X, self.shift_, self.scale_)

    def _trained(self, encoder, X, graph, shift, scale, n_epochs, generator):
        """The losses of ``n_epochs`` of training ``encoder`` in place on ``graph`` over the rows ``X``."""
        return train_neighbour_encoder(
            encoder,
            self._inputs_of(X, shift, scale),
            graph,
            n_epochs=n_epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            generator=generator,
        )

    @staticmethod
    def _scale_of(X, shift):
        """The RMS of ``X - shift`` (at least 1e-12); past float64's squares, computed in units of its peak."""
        with np.errstate(over="ignore", under="ignore"):
            scale = float(np.sqrt(((X - shift) ** 2).mean()))
        if not np.isfinite(scale) or scale == 0.0:
            centred = X - shift
            peak = float(np.abs(centred).max())
            if 0.0 < peak < np.inf:
                scale = peak * float(np.sqrt(((centred / peak) ** 2).mean()))
        return np.array(max(scale, 1e-12))

    def fit(self, X, y=None):
        """Build the graph of ``X`` and train a fresh encoder on it (``X`` is not modified).

        A failure leaves a fitted embedding as it was.
        """
        self._validate_params()
        hidden_dims = check_widths("hidden_dims", self.hidden_dims)
        device = resolve_device(self.device)
        names = ("n_features_in_", "feature_names_in_")
        before = {name: self.__dict__[name] for name in names if name in self.__dict__}
        try:
            X = validate_data(self, X, dtype=np.float64, ensure_min_samples=3)
            metric = auto_metric(X) if self.metric == "auto" else self.metric
            seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
            torch_gen = torch.Generator().manual_seed(seed)
            shift = X.mean(0)
            scale = self._scale_of(X, shift)
            encoder = make_encoder(X.shape[1], self.n_components, hidden_dims, generator=torch_gen)
            graph = self._graph(X, metric)
            losses = self._trained(encoder, X, graph, shift, scale, self.n_epochs, torch_gen)
        except BaseException:
            for name in names:
                self.__dict__.pop(name, None)
            self.__dict__.update(before)
            raise
        self.metric_, self._torch_gen, self.shift_, self.scale_ = metric, torch_gen, shift, scale
        self.device_ = device
        self.encoder_, self.graph_, self.loss_curve_ = encoder, graph, list(losses)
        return self

    def refine(self, X, n_epochs=None):
        """Continue training the fitted encoder on the graph of another data set ``X``.

        The input affine of ``fit`` is kept (the encoder was trained on it). A failure
        leaves the embedding as it was (the training runs on a copy of the encoder).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)
        n_epochs : int, optional
            Default ``refine_epochs``.

        Returns
        -------
        self
        """
        check_is_fitted(self, "encoder_")
        if n_epochs is not None and (isinstance(n_epochs, bool) or not isinstance(n_epochs, Integral) or n_epochs < 0):
            raise ValueError(f"n_epochs must be a non-negative int or None, got {n_epochs!r}.")
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=3, reset=False)
        encoder = copy.deepcopy(self.encoder_)
        torch_gen = torch.Generator()
        torch_gen.set_state(self._torch_gen.get_state())
        graph = self._graph(X)
        epochs = self.refine_epochs if n_epochs is None else n_epochs
        losses = self._trained(encoder, X, graph, self.shift_, self.scale_, epochs, torch_gen)
        self.encoder_, self._torch_gen, self.graph_ = encoder, torch_gen, graph
        self.loss_curve_ = [*self.loss_curve_, *losses]
        return self

    def transform(self, X):
        """Embed ``X`` with the encoder on ``device_``: an ndarray of shape (n_samples, n_components).

        On the CPU, float32 rows are read as they are, and the input affine runs in float64
        over ``_TRANSFORM_ROWS`` rows at a time: the same arithmetic as on one float64 copy
        of ``X``, without that copy (1.25 GB for 200,000 rows of 784 pixels). On an
        accelerator, blocks of rows go to the device in their own dtype, the affine runs
        there in float64 (the same float32 inputs as on the CPU; float32 on MPS), and only
        the codes come back.

        Raises
        ------
        ValueError
            For rows whose normalised values overflow float32, the encoder's type: rows
            about 1e38 times beyond the scale of the fit data (checked by one ``aminmax``
            per block).
        """
        check_is_fitted(self, "encoder_")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        device = getattr(self, "device_", _CPU)  # an embedding restored without __setstate__: the CPU, as before
        if device.type != "cpu":
            return self._transform_on(X, device)
        out = np.empty((X.shape[0], self._n_features_out), dtype=np.float64)  # the fitted width
        for start in range(0, X.shape[0], _TRANSFORM_ROWS):
            rows = X[start : start + _TRANSFORM_ROWS].astype(np.float64, copy=False)
            with np.errstate(over="ignore"):  # an overflow is refused below, with what to do
                inputs = self._inputs(rows)
            _check_in_float32(torch.from_numpy(inputs), lambda: (rows - self.shift_) / self.scale_)
            out[start : start + rows.shape[0]] = encode(self.encoder_, inputs)
        return out

    def _encoder_on(self, device):
        """An eval-mode copy of ``encoder_`` on ``device``, made once per fitted encoder and device."""
        # The parameters' versions: an in-place change of encoder_'s weights makes a new copy.
        versions = tuple(p._version for p in self.encoder_.parameters())
        cached = _DEVICE_ENCODERS.get(self)
        if cached is not None and cached[0] is self.encoder_ and cached[1] == versions and cached[2] == device:
            return cached[3]
        moved = copy.deepcopy(self.encoder_).to(device=device, dtype=torch.float32).eval()
        moved.requires_grad_(False)
        _DEVICE_ENCODERS[self] = (self.encoder_, versions, device, moved)
        return moved

    @torch.no_grad()
    def _transform_on(self, X, device):
        """:meth:`transform`'s codes of the validated rows ``X``, computed on the accelerator ``device``."""
        encoder = self._encoder_on(device)
        dtype = exact_dtype(device)
        shift = torch.as_tensor(self.shift_, dtype=dtype, device=device)
        scale = torch.as_tensor(self.scale_, dtype=dtype, device=device)
        out = np.empty((X.shape[0], self._n_features_out), dtype=np.float64)
        step = max(_TRANSFORM_ROWS, _DEVICE_BLOCK_BYTES // (8 * max(1, X.shape[1])))
        for start in range(0, X.shape[0], step):
            # A writable, contiguous block (a copy only for views and read-only memory) in its own dtype.
            block = torch.from_numpy(np.require(np.asarray(X[start : start + step]), requirements="CW"))
            normalised = (block.to(device).to(dtype) - shift) / scale
            inputs = normalised.to(torch.float32)
            _check_in_float32(inputs, lambda: normalised.cpu())
            out[start : start + block.shape[0]] = encoder(inputs).cpu().double().numpy()
        return out
