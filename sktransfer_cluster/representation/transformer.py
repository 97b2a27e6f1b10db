"""NeighbourEmbedding: the graph + encoder of this package as a scikit-learn transformer."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_array, check_random_state
from sklearn.utils.validation import check_is_fitted

from .encoder import encode, make_encoder, train_neighbour_encoder
from .graph import neighbour_graph

__all__ = ["NeighbourEmbedding"]

# Rows per block of transform's input affine: a few MB of float64 at image widths, so the block
# stays in cache between the affine and the encoder.
_TRANSFORM_ROWS = 4096


class NeighbourEmbedding(TransformerMixin, BaseEstimator):
    """A parametric-UMAP encoder trained on an exact, denoised k-NN graph.

    ``fit`` builds the fuzzy k-NN graph of ``X`` (:func:`~.graph.neighbour_graph`:
    cosine distances, edges weighted by how many neighbours their ends share,
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
    metric : {"cosine", "euclidean"}, default="cosine"
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

    Attributes
    ----------
    encoder_ : torch.nn.Sequential
    shift_, scale_ : ndarray
        Input affine applied before the encoder (column means of the ``fit``
        data and the scalar RMS of the centred data).
    graph_ : scipy.sparse.csr_matrix
        Graph of the last data set trained on.
    loss_curve_ : list of float
        Mean loss per epoch, ``fit`` then each ``refine``.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_blobs
    >>> X, y = make_blobs(200, n_features=5, centers=3, random_state=0)
    >>> emb = NeighbourEmbedding(n_components=2, hidden_dims=(16,), n_epochs=5, random_state=0)
    >>> emb.fit_transform(X).shape
    (200, 2)
    """

    def __init__(
        self,
        n_components=10,
        *,
        n_neighbors=15,
        metric="cosine",
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

    def _graph(self, X):
        image = self.image_shape is not None
        return neighbour_graph(
            X,
            min(int(self.n_neighbors), X.shape[0] - 1),
            metric=self.metric,
            image_shape=self.image_shape,
            max_shift=int(self.max_shift) if image else 0,
            blur=float(self.blur) if image else 0.0,
            shared_neighbours=self.shared_neighbours,
        )

    def _inputs(self, X):
        return ((X - self.shift_) / self.scale_).astype(np.float32)

    def _train(self, X, n_epochs):
        self.graph_ = self._graph(X)
        losses = train_neighbour_encoder(
            self.encoder_,
            self._inputs(X),
            self.graph_,
            n_epochs=n_epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            generator=self._torch_gen,
        )
        self.loss_curve_.extend(losses)

    def fit(self, X, y=None):
        """Build the graph of ``X`` and train a fresh encoder on it (``X`` is not modified)."""
        X = check_array(X, dtype=np.float64, ensure_min_samples=3)
        self.n_features_in_ = X.shape[1]
        seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
        self._torch_gen = torch.Generator().manual_seed(seed)
        self.shift_ = X.mean(0)
        self.scale_ = np.array(max(float(np.sqrt(((X - self.shift_) ** 2).mean())), 1e-12))
        self.encoder_ = make_encoder(X.shape[1], self.n_components, self.hidden_dims, generator=self._torch_gen)
        self.loss_curve_ = []
        self._train(X, self.n_epochs)
        return self

    def refine(self, X, n_epochs=None):
        """Continue training the fitted encoder on the graph of another data set ``X``.

        The input affine of ``fit`` is kept (the encoder was trained on it).

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
        X = check_array(X, dtype=np.float64, ensure_min_samples=3)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the encoder expects {self.n_features_in_}.")
        self._train(X, self.refine_epochs if n_epochs is None else n_epochs)
        return self

    def transform(self, X):
        """Embed ``X`` with the encoder: an ndarray of shape (n_samples, n_components).

        Float32 rows are read as they are, and the input affine runs in float64 over
        ``_TRANSFORM_ROWS`` rows at a time: the same arithmetic as on one float64 copy of
        ``X``, without that copy (1.25 GB for 200,000 rows of 784 pixels).
        """
        check_is_fitted(self, "encoder_")
        X = check_array(X, dtype=[np.float64, np.float32])
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the encoder expects {self.n_features_in_}.")
        out = np.empty((X.shape[0], self.n_components), dtype=np.float64)
        for start in range(0, X.shape[0], _TRANSFORM_ROWS):
            rows = X[start : start + _TRANSFORM_ROWS].astype(np.float64, copy=False)
            out[start : start + rows.shape[0]] = encode(self.encoder_, self._inputs(rows))
        return out
