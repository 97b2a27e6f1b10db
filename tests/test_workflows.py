"""How a scikit-learn user drives every estimator: pipelines, searches, pandas,
persistence, scale-out on Dask, and hostile inputs (hypothesis fuzzing)."""

import joblib
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV, RandomizedSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from sktransfer_cluster import SinkhornKMeans, TDCMCluster, pipeline_transfer

from .test_common import ESTIMATORS, _fit, _ids, _requires_y


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    return X, y, X + 0.3


@pytest.fixture(params=ESTIMATORS, ids=_ids)
def estimator(request):
    return clone(request.param)


def _pipe(est):
    return Pipeline([("scale", StandardScaler()), ("cluster", est)])


def test_pipeline_fits_predicts_and_transfers(estimator, data):
    X, y, Xt = data
    pipe = _pipe(estimator)
    pipe.fit(X, y) if _requires_y(estimator) else pipe.fit(X)
    assert pipe.predict(Xt).shape == (Xt.shape[0],)
    labels = pipeline_transfer(pipe, Xt)
    np.testing.assert_array_equal(pipe[-1].labels_, labels)


def test_dataframe_input_keeps_feature_names(estimator, data):
    X, y, Xt = data
    cols = [f"f{i}" for i in range(X.shape[1])]
    est = _fit(estimator, pd.DataFrame(X, columns=cols), y)
    np.testing.assert_array_equal(est.feature_names_in_, cols)
    assert est.predict(pd.DataFrame(Xt, columns=cols)).shape == (Xt.shape[0],)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(pd.DataFrame(Xt, columns=cols[::-1]))


def test_pipeline_set_output_pandas(estimator, data):
    X, y, _ = data
    pipe = _pipe(estimator).set_output(transform="pandas")
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    pipe.fit(df, y) if _requires_y(estimator) else pipe.fit(df)
    if hasattr(pipe[-1], "transform"):
        assert isinstance(pipe.transform(df), pd.DataFrame)
    assert pipe.predict(df).shape == (X.shape[0],)


def test_joblib_round_trip_keeps_transfer_results(estimator, data, tmp_path):
    X, y, Xt = data
    est = _fit(estimator, X, y)
    joblib.dump(est, tmp_path / "m.joblib")
    np.testing.assert_array_equal(joblib.load(tmp_path / "m.joblib").transfer(Xt), est.transfer(Xt))


SEARCHES = [
    (SinkhornKMeans(3, n_init=2, device="cpu", random_state=0), {"epsilon": [0.005, 0.05]}),
    (
        TDCMCluster(3, hidden_dims=(16,), embedding_dim=4, n_blocks=2, max_epochs=3, device="cpu", random_state=0),
        {"tau": [0.5, 1.0]},
    ),
]


@pytest.mark.parametrize("est, grid", SEARCHES, ids=lambda p: type(p).__name__ if hasattr(p, "fit") else "")
@pytest.mark.parametrize("scoring", [None, "adjusted_rand_score"])
def test_grid_search_with_and_without_labels(est, grid, scoring, data):
    X, y, _ = data
    gs = GridSearchCV(est, grid, cv=2, scoring=scoring, n_jobs=2).fit(X, y)
    assert set(gs.best_params_) == set(grid)
    assert np.isfinite(gs.cv_results_["mean_test_score"]).all()


@pytest.mark.parametrize("est, grid", SEARCHES, ids=lambda p: type(p).__name__ if hasattr(p, "fit") else "")
def test_randomized_search_without_a_scorer(est, grid, data):
    X, _, _ = data
    rs = RandomizedSearchCV(est, grid, n_iter=2, cv=2, random_state=0).fit(X)
    assert np.isfinite(rs.best_score_)


def test_grid_search_runs_on_a_dask_cluster(data):
    distributed = pytest.importorskip("distributed", reason="needs the 'distributed' extra (dask[distributed])")
    X, _, _ = data
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False) as cluster:
        with distributed.Client(cluster), joblib.parallel_backend("dask"):
            gs = GridSearchCV(SEARCHES[0][0], SEARCHES[0][1], cv=2).fit(X)
    assert gs.best_params_["epsilon"] in (0.005, 0.05)


def test_batch_prediction_of_a_dask_array_matches_numpy(data):
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    X, _, Xt = data
    est = SEARCHES[0][0].fit(X)
    big = np.concatenate([Xt] * 10)
    labels = da.from_array(big, chunks=(100, -1)).map_blocks(est.predict, drop_axis=1, dtype=np.int64).compute()
    np.testing.assert_array_equal(labels, est.predict(big))


def _finite_matrix(n_min=3):
    return st.integers(n_min, 24).flatmap(
        lambda n: st.tuples(
            arrays(
                np.float64,
                (n, 3),
                elements=st.one_of(st.floats(-1e4, 1e4, allow_nan=False), st.sampled_from([0.0, 1e-7, -1e-7])),
            ),
            st.sampled_from([np.float32, np.float64, np.int64]),
            st.sampled_from(["plain", "constant_column", "duplicates", "huge", "tiny"]),
        )
    )


def _shape(X, dtype, kind):
    X = X.copy()
    if kind == "constant_column":
        X[:, 1] = 3.0
    elif kind == "duplicates":
        X[1:] = X[0]
    elif kind == "huge":
        X = X * 1e6
    elif kind == "tiny":
        X = X * 1e-6
    return np.round(X).astype(dtype) if dtype is np.int64 else X.astype(dtype)


@pytest.mark.parametrize("template", ESTIMATORS, ids=_ids)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(params=_finite_matrix())
def test_fuzzed_inputs_never_crash_or_produce_nan(template, params):
    X = _shape(*params)
    y = np.arange(X.shape[0]) % 3
    est = clone(template)
    try:
        _fit(est, X, y)
    except ValueError as exc:  # a clear refusal is fine; a crash or NaN is not
        assert str(exc)
        return
    for name, value in vars(est).items():
        if name.endswith("_") and isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.isfinite(value).all(), name
    for out in (est.labels_, est.predict(X), est.transfer(X)):
        assert out.shape == (X.shape[0],) and out.min() >= 0
    assert np.isfinite(est.score(X))


# ----------------------------------------------------------------- TransferPipeline


def test_transfer_pipeline_can_keep_the_source_fitted_preprocessing(data):
    from sktransfer_cluster import make_transfer_pipeline

    X, _, Xt = data
    pipe = make_transfer_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=1, random_state=0)).fit(X)
    mean = pipe[0].mean_.copy()
    labels = pipe.transfer(Xt, preprocessing="source")
    np.testing.assert_array_equal(pipe[0].mean_, mean)  # the scaler still holds the source fit
    np.testing.assert_array_equal(labels, pipe[-1].labels_)
    np.testing.assert_array_equal(pipe.predict(Xt), labels)


def test_transfer_pipeline_refits_the_preprocessing_on_the_target_by_default(data):
    from sktransfer_cluster import make_transfer_pipeline

    X, _, _ = data
    Xt = X * 10.0 + 100.0  # the same clusters, another scale and offset
    pipe = make_transfer_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=1, random_state=0)).fit(X)
    source_labels = pipe[-1].labels_.copy()
    labels = pipe.transfer(Xt)
    np.testing.assert_allclose(pipe[0].mean_, Xt.mean(axis=0))  # refitted on the target
    assert adjusted_rand_score(source_labels, labels) == 1.0
    np.testing.assert_array_equal(pipe.predict(Xt), labels)  # predict serves the target


def test_failed_transfer_puts_back_the_source_fitted_preprocessing(data, monkeypatch):
    from sktransfer_cluster import make_transfer_pipeline

    X, _, Xt = data
    pipe = make_transfer_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=1, random_state=0)).fit(X)
    scaler = pipe[0]
    monkeypatch.setattr(SinkhornKMeans, "_transfer", lambda self, X, **kw: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        pipe.transfer(Xt + 5.0)
    assert pipe[0] is scaler


def test_transfer_pipeline_rejects_an_unknown_preprocessing_mode(data):
    from sktransfer_cluster import make_transfer_pipeline

    X, _, Xt = data
    pipe = make_transfer_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=1, random_state=0)).fit(X)
    with pytest.raises(ValueError, match=r"preprocessing must be one of \('source', 'target'\)"):
        pipe.transfer(Xt, preprocessing="refit")


def test_transfer_pipeline_works_in_a_grid_search(data):
    from sktransfer_cluster import make_transfer_pipeline

    X, _, Xt = data
    pipe = make_transfer_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=1, random_state=0))
    search = GridSearchCV(pipe, {"sinkhornkmeans__epsilon": [0.01, 0.1]}, cv=2).fit(X)
    assert search.best_estimator_.transfer(Xt).shape == (Xt.shape[0],)
