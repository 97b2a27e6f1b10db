"""Dask inputs a user can give: empty chunks, bad shapes and types, and the methods that hold every row."""

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

from sktransfer_cluster import CCNCluster, SinkhornKMeans  # noqa: E402
from sktransfer_cluster.representation import landmarks  # noqa: E402

LANDMARKS = 300


@pytest.fixture
def past_the_landmarks(monkeypatch):
    """Dask arrays of more than 300 rows are streamed (DaskRows), computed synchronously."""
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", LANDMARKS)
    with dask.config.set(scheduler="synchronous"):
        yield


def _blobs(n=900, d=6, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centres = rng.normal(0, 4, (3, d))
    return (centres[y] + rng.normal(size=(n, d))).astype(np.float32), y


def _paper_autoencoder():
    return SinkhornKMeans(3, embedding="autoencoder", neighbour_weight=0, pretrain_epochs=1, max_epochs=1,
                          random_state=0, device="cpu")


def _with_an_empty_chunk(X):
    """X as a dask array whose first chunk has no rows (what filtering with a mask leaves)."""
    Xd = da.from_array(X, chunks=(X.shape[0] // 2, -1))
    keep = da.from_array(np.arange(X.shape[0]) >= X.shape[0] // 2, chunks=X.shape[0] // 2)
    Xd = da.concatenate([Xd[keep], Xd])  # chunks (0, n/2, n/2, n/2): the first is empty once sized
    Xd.compute_chunk_sizes()
    assert 0 in Xd.chunks[0]
    return Xd


def test_predict_of_a_dask_array_with_an_empty_chunk_labels_the_other_chunks(past_the_landmarks):
    X, _ = _blobs()
    model = SinkhornKMeans(3, random_state=0).fit(X)
    Xd = _with_an_empty_chunk(X)
    np.testing.assert_array_equal(model.predict(Xd).compute(), model.predict(Xd.compute()))


def test_fit_of_a_streamed_dask_array_with_an_empty_chunk_ends_fitted(past_the_landmarks):
    X, _ = _blobs()
    Xd = _with_an_empty_chunk(X)
    model = _paper_autoencoder().fit(Xd)
    assert model.labels_.shape == (Xd.shape[0],)
    np.testing.assert_array_equal(model.predict(Xd).compute(), model.labels_)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda X: da.from_array(X[:, 0], chunks=300), "2-D"),
        (lambda X: da.from_array(X.astype(object), chunks=(300, -1)), "real numbers"),
        (lambda X: da.from_array(X[:, :0], chunks=(300, -1)), "0 feature"),
        (lambda X: da.from_array(X[:, :3], chunks=(300, -1)), "features"),
    ],
    ids=["one-dimensional", "object", "no-columns", "other-width"],
)
def test_predict_refuses_a_bad_dask_array_at_once_and_stays_usable(bad, message):
    X, _ = _blobs()
    model = SinkhornKMeans(3, random_state=0).fit(X)
    with pytest.raises(ValueError, match=message):
        model.predict(bad(X))
    np.testing.assert_array_equal(model.predict(X), model.labels_)


def test_fit_refuses_a_dask_array_of_sparse_chunks_with_what_to_do():
    sparse = pytest.importorskip("scipy.sparse")
    X, _ = _blobs(n=200)
    Xd = da.from_array(X, chunks=(100, -1)).map_blocks(sparse.csr_matrix, dtype=X.dtype)
    with pytest.raises(ValueError, match="dense"):
        SinkhornKMeans(3, embedding="autoencoder").fit(Xd)


def test_fit_refuses_a_dask_array_without_columns():
    X, _ = _blobs(n=200)
    with pytest.raises(ValueError, match="0 feature"):
        SinkhornKMeans(3, embedding="autoencoder").fit(da.from_array(X[:, :0], chunks=(100, -1)))


def test_ccn_pair_scores_of_a_streamed_dask_array_equal_those_in_memory(past_the_landmarks):
    X, y = _blobs(n=400)
    model = CCNCluster(3, embedding_epochs=1, similarity_epochs=1, clustering_epochs=1, n_similarity_nets=1,
                       refine_epochs=1, random_state=0, device="cpu").fit(X[:200], y[:200])
    Xd = da.from_array(X, chunks=(200, -1))
    assert model.score(Xd) == model.score(X)
    np.testing.assert_array_equal(model.pairwise_similarity(Xd[:350]), model.pairwise_similarity(X[:350]))


def test_partial_fit_takes_a_dask_batch_past_the_landmark_count(past_the_landmarks):
    X, _ = _blobs()
    on_dask = SinkhornKMeans(3, random_state=0).partial_fit(da.from_array(X, chunks=(300, -1)))
    in_memory = SinkhornKMeans(3, random_state=0).partial_fit(X)
    np.testing.assert_array_equal(on_dask.cluster_centers_, in_memory.cluster_centers_)


def test_c2m_score_of_a_streamed_dask_array_equals_it_in_memory(past_the_landmarks):
    from sktransfer_cluster import C2MCluster

    X, y = _blobs(n=400)
    model = C2MCluster(max_clusters=4, max_epochs=1, sets_per_epoch=2, population=8, cem_iter=2, set_size=100,
                       max_cem_samples=300, representation=None, random_state=0, device="cpu").fit(X[:200], y[:200])
    assert model.score(da.from_array(X, chunks=(200, -1)), y) == model.score(X, y)


def test_tdcm_on_its_input_representation_fits_and_transfers_a_streamed_dask_array(past_the_landmarks):
    from sktransfer_cluster import TDCMCluster

    X, _ = _blobs()

    def build():
        return TDCMCluster(3, representation="input", max_epochs=2, random_state=0, device="cpu")

    on_dask, in_memory = build().fit(da.from_array(X, chunks=(300, -1))), build().fit(X)
    np.testing.assert_array_equal(on_dask.labels_, in_memory.labels_)
    labels = on_dask.transfer(da.from_array(X[::-1], chunks=(300, -1)))
    np.testing.assert_array_equal(labels.compute(), in_memory.transfer(X[::-1]))


def test_labels_of_a_dask_predict_are_those_of_the_model_when_predict_was_called():
    X, _ = _blobs()
    model = SinkhornKMeans(3, random_state=0).fit(X)
    expected = model.predict(X)
    lazy = model.predict(da.from_array(X, chunks=(300, -1)))
    model.fit(X[:, ::-1] * 3.0)  # the same estimator refitted before the labels are computed
    np.testing.assert_array_equal(lazy.compute(scheduler="synchronous"), expected)


@pytest.mark.parametrize("method", ["transform-skm", "transform-tdcm", "predict_proba-gan"])
def test_per_row_methods_of_a_dask_array_return_a_lazy_dask_array_of_the_numpy_result(method):
    from sktransfer_cluster import PreciseFeatureGAN, TDCMCluster

    X, _ = _blobs(n=400)
    name, which = method.split("-")
    build = {
        "skm": lambda: SinkhornKMeans(3, random_state=0),
        "tdcm": lambda: TDCMCluster(3, max_epochs=2, random_state=0, device="cpu"),
        "gan": lambda: PreciseFeatureGAN(3, hidden_dims=(8,), n_iter=5, n_critic=2, n_classifier=1, batch_size=16,
                                         representation=None, random_state=0, device="cpu"),
    }[which]
    model = build().fit(X)
    expected = getattr(model, name)(X)
    Xd = _with_an_empty_chunk(X)
    lazy = getattr(model, name)(Xd)
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == Xd.chunks[0]
    model.fit(X[::-1])  # refitted before the result is computed: the result is the earlier model's
    out = lazy.compute(scheduler="synchronous")
    np.testing.assert_array_equal(out, getattr(build().fit(X), name)(Xd.compute()))
    np.testing.assert_array_equal(out[-expected.shape[0]:], expected)


@pytest.mark.parametrize("method", ["predict-tdcm", "transform-tdcm", "transform-skm", "predict_proba-gan"])
def test_per_row_methods_of_a_dask_array_before_fit_raise_not_fitted(method):
    from sklearn.exceptions import NotFittedError

    from sktransfer_cluster import PreciseFeatureGAN, TDCMCluster

    X, _ = _blobs(n=40)
    name, which = method.split("-")
    model = {"tdcm": TDCMCluster, "skm": SinkhornKMeans, "gan": PreciseFeatureGAN}[which](3, device="cpu")
    with pytest.raises(NotFittedError):
        getattr(model, name)(da.from_array(X, chunks=(20, -1)))
