"""SinkhornKMeans after fit: which state later calls read, and the checks every input path makes.

Predict-time methods read the fitted model only (a ``set_params`` after fit does not change
what they serve); ``transfer`` and ``partial_fit``, which continue the fitted model, refuse a
structural parameter changed since fit; the Dask paths check what the numpy path checks.
"""

import copy
import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning, NotFittedError

from sktransfer_cluster import SinkhornKMeans

da = pytest.importorskip("dask.array")

FAST = dict(n_init=2, device="cpu", random_state=0)
# The paper's autoencoder, small (no graph: quick to fit).
AE = dict(embedding="autoencoder", neighbour_weight=0.0, hidden_dims=(8, 2), pretrain_epochs=2, max_epochs=1,
          batch_size=40, **FAST)


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    return X, y


def _outputs(km, X):
    return km.predict(X), km.transform(X), km.score(X)


def _assert_same_outputs(before, after):
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]


# ------------------------------------------------------------------ set_params after fit
@pytest.mark.parametrize("fitted, change", [(AE, dict(embedding=None)), (FAST, dict(embedding="autoencoder")),
                                            (FAST, dict(embedding="neighbours"))])
def test_predict_transform_and_score_after_set_params_embedding_serve_the_fitted_model(blobs, fitted, change):
    X, _ = blobs
    km = SinkhornKMeans(3, **fitted).fit(X)
    before = _outputs(km, X)
    km.set_params(**change)
    _assert_same_outputs(before, _outputs(km, X))


def test_transport_plan_after_set_params_embedding_is_the_fitted_models(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **AE).fit(X)
    before = km.transport_plan(X)
    km.set_params(embedding=None)
    np.testing.assert_array_equal(km.transport_plan(X), before)


@pytest.mark.parametrize("fitted, change, name", [
    (FAST, dict(n_clusters=2), "n_clusters"),
    (FAST, dict(n_clusters=5), "n_clusters"),
    (FAST, dict(embedding="autoencoder"), "embedding"),
    (AE, dict(embedding=None), "embedding"),
    (AE, dict(hidden_dims=(8, 3)), "hidden_dims"),
    (AE, dict(image_shape=(2, 2)), "image_shape"),
    (AE, dict(neighbour_weight=1.0), "neighbour_weight"),
])
def test_transfer_after_a_structural_parameter_change_asks_for_a_new_fit(blobs, fitted, change, name):
    X, _ = blobs
    km = SinkhornKMeans(3, **fitted).fit(X)
    labels = km.labels_.copy()
    km.set_params(**change)
    with pytest.raises(ValueError, match=f"{name}.*changed since fit.*call fit again"):
        km.transfer(X + 0.5)
    np.testing.assert_array_equal(km.labels_, labels)  # the fitted model is left as it was


def test_transfer_after_a_parameter_that_shapes_nothing_changed_still_runs(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    km.set_params(hidden_dims=(4, 2), epsilon=0.05)  # no embedding: the widths shape nothing
    assert km.transfer(X + 0.5).shape == (X.shape[0],)


def test_dask_transfer_after_n_clusters_changed_asks_for_a_new_fit(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    km.set_params(n_clusters=2)
    with pytest.raises(ValueError, match="n_clusters.*changed since fit.*call fit again"):
        km.transfer(da.from_array(X, chunks=30))


def test_dask_transfer_refuses_a_parameter_value_set_after_fit_as_the_numpy_transfer_does(blobs):
    from sklearn.utils._param_validation import InvalidParameterError

    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    before = km.predict(X)
    km.set_params(epsilon=-1.0)  # set_params checks nothing; the dask path blamed the data's NaN
    with pytest.raises(InvalidParameterError, match="epsilon"):
        km.transfer(da.from_array(X + 0.1, chunks=30))
    np.testing.assert_array_equal(km.predict(X), before)


def test_partial_fit_after_n_clusters_changed_asks_for_a_new_fit(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).partial_fit(X[:45])
    km.set_params(n_clusters=4)
    with pytest.raises(ValueError, match="n_clusters.*changed since fit.*call fit again"):
        km.partial_fit(X[45:])


def test_a_refit_after_set_params_embedding_fits_the_new_choice(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    km.set_params(**{k: v for k, v in AE.items() if k not in FAST}).fit(X)
    assert km.autoencoder_ is not None
    assert km.transform(X).shape == (X.shape[0], 3)
    km.set_params(embedding=None).fit(X)
    assert km.autoencoder_ is None
    np.testing.assert_array_equal(km.predict(X), km.labels_)


# ------------------------------------------------------------------ partial_fit
def test_partial_fit_accepts_a_later_batch_with_fewer_rows_than_n_clusters():
    X, _ = make_blobs(n_samples=103, centers=5, n_features=3, random_state=0)
    km = SinkhornKMeans(5, n_init=1, random_state=0)
    for start in range(0, 103, 25):  # batches of 25, 25, 25, 25 and 3 rows
        km.partial_fit(X[start:start + 25])
    assert km.n_steps_ == 5
    assert km.labels_.shape == (3,)


def test_partial_fit_refuses_a_first_batch_with_fewer_rows_than_n_clusters():
    X, _ = make_blobs(n_samples=10, centers=5, n_features=3, random_state=0)
    with pytest.raises(ValueError, match="n_samples=3 should be >= n_clusters=5"):
        SinkhornKMeans(5, n_init=1, random_state=0).partial_fit(X[:3])


def test_partial_fit_refuses_a_later_batch_of_another_width(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).partial_fit(X)
    with pytest.raises(ValueError, match="features"):
        km.partial_fit(X[:2, :3])


def test_partial_fit_after_a_fit_with_an_embedding_starts_the_stream_a_fresh_estimator_starts(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **AE).fit(X)
    km.set_params(embedding=None).partial_fit(X)  # the fit left no stream: a new one, without the embedding
    fresh = SinkhornKMeans(3, **{**AE, "embedding": None}).partial_fit(X)
    np.testing.assert_array_equal(km.cluster_centers_, fresh.cluster_centers_)
    np.testing.assert_array_equal(km.predict(X), fresh.predict(X))


def test_partial_fit_after_a_fit_with_an_embedding_takes_later_batches_and_transfers(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **AE).fit(X)
    km.set_params(embedding=None).partial_fit(X[:45])
    km.partial_fit(X[45:])
    assert km.n_steps_ == 2
    assert km.transfer(X + 0.5).shape == (X.shape[0],)


# ------------------------------------------------------------------ models pickled at 5f9d6e7
def _pickled_at_5f9d6e7(km):
    """``km`` through a pickle written before the record was kept: the embedding and structure
    fit used held as ``_fitted_embedding`` and ``_fit_structure``, in the model and in the
    source model a transfer keeps."""
    km = copy.deepcopy(km)
    for state in (km.__dict__, km.__dict__.get("_source_state")):
        if state is not None:
            record = state.pop("_fitted_params")
            fitted = SinkhornKMeans(**{**km.get_params(deep=False), **record})
            state.update(_fitted_embedding=record["embedding"], _fit_structure=fitted._structure())
    return pickle.loads(pickle.dumps(km))


def test_a_model_pickled_at_5f9d6e7_serves_its_embedding_after_set_params(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **AE).fit(X)
    before = _outputs(km, X)
    old = _pickled_at_5f9d6e7(km).set_params(embedding=None)
    _assert_same_outputs(before, _outputs(old, X))


def test_a_model_pickled_at_5f9d6e7_refuses_transfer_after_n_clusters_changed(blobs):
    X, _ = blobs
    old = _pickled_at_5f9d6e7(SinkhornKMeans(3, **FAST).fit(X)).set_params(n_clusters=5)
    with pytest.raises(ValueError, match="n_clusters.*changed since fit.*call fit again"):
        old.transfer(X + 0.5)


def test_a_model_pickled_after_a_transfer_at_5f9d6e7_refuses_another_after_n_clusters_changed(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    km.transfer(X + 0.5)
    old = _pickled_at_5f9d6e7(km).set_params(n_clusters=5)
    with pytest.raises(ValueError, match="n_clusters.*changed since fit.*call fit again"):
        old.transfer(X + 0.5)


def test_a_model_pickled_at_5f9d6e7_holds_its_embedding_as_the_record(blobs):
    X, _ = blobs
    old = _pickled_at_5f9d6e7(SinkhornKMeans(3, **AE).fit(X))
    assert "_fitted_embedding" not in old.__dict__
    assert old._fitted_param("embedding") == "autoencoder"


# ------------------------------------------------------------------ Dask paths check as numpy does
@pytest.mark.parametrize("options", [dict(n_restarts=-1), dict(n_restarts=2.7), dict(n_restarts=True),
                                     dict(fine_tune_epochs=-5)])
def test_dask_transfer_refuses_the_options_the_numpy_transfer_refuses(blobs, options):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    with pytest.raises(ValueError, match=next(iter(options))):
        km.transfer(X, **options)
    with pytest.raises(ValueError, match=next(iter(options))):
        km.transfer(da.from_array(X, chunks=30), **options)


def test_dask_fit_refuses_image_shape_without_an_embedding(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="image_shape.*needs an embedding"):
        SinkhornKMeans(3, image_shape=(2, 2), **FAST).fit(da.from_array(X, chunks=30))


@pytest.mark.parametrize("as_dask", [False, True])
def test_dask_fit_refuses_labels_of_another_length(blobs, as_dask):
    X, y = blobs
    y = da.from_array(y[:5]) if as_dask else y[:5]
    with pytest.raises(ValueError, match="y does not match X"):
        SinkhornKMeans(3, **FAST).fit(da.from_array(X, chunks=30), y)


def test_dask_fit_accepts_labels_of_the_right_length_and_ignores_them(blobs):
    X, y = blobs
    Xd = da.from_array(X, chunks=30)
    with_y = SinkhornKMeans(3, **FAST).fit(Xd, y)
    np.testing.assert_array_equal(with_y.labels_, SinkhornKMeans(3, **FAST).fit(Xd).labels_)


def test_dask_fit_warns_when_fewer_than_n_clusters_clusters_come_out():
    C = np.ones((30, 4))
    with pytest.warns(ConvergenceWarning, match="found 1 distinct clusters, fewer than n_clusters=3.*1 distinct rows"):
        km = SinkhornKMeans(3, **FAST).fit(da.from_array(C, chunks=10))
    assert km.n_clusters_ == 1


def test_dask_transfer_warns_when_fewer_than_n_clusters_clusters_come_out(blobs):
    X, _ = blobs
    km = SinkhornKMeans(3, **FAST).fit(X)
    with pytest.warns(ConvergenceWarning, match="transfer found 1 distinct clusters"):
        km.transfer(da.from_array(np.ones((30, 4)), chunks=10))
    assert km.n_clusters_ == 1


def test_dask_fit_on_separated_blobs_gives_no_warning(blobs):
    X, _ = blobs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        km = SinkhornKMeans(3, **FAST).fit(da.from_array(X, chunks=30))
    assert km.n_clusters_ == 3


# ------------------------------------------------------------------ unfitted
def test_transform_of_a_dask_array_before_fit_is_not_fitted_error():
    Xd = da.from_array(np.random.default_rng(0).normal(size=(20, 3)), chunks=10)
    with pytest.raises(NotFittedError):
        SinkhornKMeans(3).transform(Xd)
