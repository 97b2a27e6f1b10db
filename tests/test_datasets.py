"""Data helpers: the dihedral augmentation of labelled images."""

import numpy as np
import pytest

from sktransfer_cluster.datasets import dihedral_classes


def _images(n=3, side=4, channels=None, seed=0):
    shape = (side, side) if channels is None else (channels, side, side)
    X = np.random.default_rng(seed).normal(size=(n, int(np.prod(shape))))
    return X, shape


def test_dihedral_classes_gives_eight_transforms_each_a_new_class():
    X, shape = _images()
    y = np.array(["b", "a", "b"])
    X_aug, y_aug = dihedral_classes(X, y, shape)
    assert X_aug.shape == (24, 16)
    np.testing.assert_array_equal(X_aug[:3], X)
    np.testing.assert_array_equal(y_aug[:3], [1, 0, 1])  # codes of np.unique(y)
    # Transform t of class code c is class t * n_classes + c.
    np.testing.assert_array_equal(y_aug, np.concatenate([np.array([1, 0, 1]) + 2 * t for t in range(8)]))


def test_dihedral_transforms_are_the_rotations_and_mirrored_rotations():
    X, shape = _images(n=1)
    img = X[0].reshape(shape)
    X_aug, _ = dihedral_classes(X, [0], shape)
    expected = [np.rot90(img, r) for r in range(4)] + [np.rot90(img, r)[:, ::-1] for r in range(4)]
    for row, want in zip(X_aug, expected):
        np.testing.assert_array_equal(row.reshape(shape), want)
    # All 8 differ for a generic image (the dihedral group of the square has 8 elements).
    assert np.unique(X_aug.round(12), axis=0).shape[0] == 8


def test_dihedral_classes_turns_every_channel_alike():
    X, shape = _images(n=2, channels=3)
    X_aug, _ = dihedral_classes(X, [0, 1], shape)
    turned = X_aug[2:4].reshape(2, *shape)  # transform 1: one quarter turn
    np.testing.assert_array_equal(turned, np.rot90(X.reshape(2, *shape), 1, axes=(2, 3)))


def test_dihedral_classes_leaves_its_inputs_unchanged():
    X, shape = _images()
    y = np.array([0, 1, 0])
    X0, y0 = X.copy(), y.copy()
    dihedral_classes(X, y, shape)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


@pytest.mark.parametrize(
    "shape, match",
    [((4, 5), "square"), ((2, 4, 4, 1), r"\(h, w\) or \(c, h, w\)"), ((3, 3), "columns")],
)
def test_dihedral_classes_rejects_a_shape_that_does_not_fit(shape, match):
    X, _ = _images(side=4)
    with pytest.raises(ValueError, match=match):
        dihedral_classes(X, [0, 1, 2], shape)


def test_dihedral_classes_needs_one_label_per_row():
    X, shape = _images()
    with pytest.raises(ValueError, match="one label per row"):
        dihedral_classes(X, [0, 1], shape)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_dihedral_classes_rejects_non_finite_images(bad):
    X, shape = _images()
    X[1, 2] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        dihedral_classes(X, [0, 1, 2], shape)
