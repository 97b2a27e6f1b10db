"""Every estimator on a dask array (issue 31, item 2): fit and transfer where the chunks live.

Past the landmark count (patched to 400 rows here) an estimator reads a dask array as it reads
a memmap -- landmarks by sorted index, minibatches by index, the moments and every row's codes
on the workers (``base.streaming.DaskRows``); up to it the array is computed to numpy first.
Rows reaching the client are counted with a scheduler that records what every ``compute``
returns (:class:`ClientReads`), on the synchronous scheduler.
"""

import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
dask = pytest.importorskip("dask")

from sktransfer_cluster import (  # noqa: E402
    C2MCluster,
    CCNCluster,
    PreciseFeatureGAN,
    SinkhornKMeans,
    TDCMCluster,
)
from sktransfer_cluster.base import arrays, streaming  # noqa: E402
from sktransfer_cluster.base.streaming import DaskRows, value_signs  # noqa: E402
from sktransfer_cluster.cluster.ccn import streamed as ccn_streamed  # noqa: E402
from sktransfer_cluster.representation import landmarks  # noqa: E402

N, D, LANDMARKS, PIECE, CHUNK = 1536, 30, 400, 256, 512

ESTIMATORS = {
    "skm-paper-autoencoder": (lambda: SinkhornKMeans(3, embedding="autoencoder", neighbour_weight=0, pretrain_epochs=1,
                                                     max_epochs=1, random_state=0, device="cpu"), False),
    "skm-graph-autoencoder": (lambda: SinkhornKMeans(3, embedding="autoencoder", pretrain_epochs=1, random_state=0,
                                                     device="cpu"), False),
    "tdcm": (lambda: TDCMCluster(3, max_epochs=2, random_state=0, device="cpu"), False),
    "ccn": (lambda: CCNCluster(3, embedding_epochs=1, similarity_epochs=1, clustering_epochs=1, n_similarity_nets=1,
                               refine_epochs=1, random_state=0, device="cpu"), True),
    "ccn-input": (lambda: CCNCluster(3, representation="input", similarity_epochs=1, clustering_epochs=1,
                                     n_similarity_nets=1, refine_epochs=1, random_state=0, device="cpu"), True),
    "gan-rows": (lambda: PreciseFeatureGAN(3, hidden_dims=(8,), n_iter=5, n_critic=2, n_classifier=1, batch_size=16,
                                           representation=None, random_state=0, device="cpu"), False),
    "c2m-rows": (lambda: C2MCluster(max_clusters=4, max_epochs=1, sets_per_epoch=2, population=8, cem_iter=2,
                                    set_size=100, max_cem_samples=300, representation=None, random_state=0,
                                    device="cpu"), True),
}
# Loops of the wings over every row that still bring each dask chunk to the client (bounded
# memory, but not on the workers); requested of their owners (issue 31):
ON_THE_CLIENT = {
}


def _params(client_side=False):
    params = []
    for name in ESTIMATORS:
        if client_side and name in ON_THE_CLIENT:
            params.append(pytest.param(name, marks=pytest.mark.xfail(raises=AssertionError, strict=True,
                                                                     reason=ON_THE_CLIENT[name])))
        else:
            params.append(name)
    return params


def _blobs(n=N, d=D, k=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 1, (k, d)) * (rng.random((k, d)) < 0.4)
    y = rng.integers(0, k, n)
    return np.clip(centres[y] + 0.2 * rng.normal(size=(n, d)), 0, None).astype(np.float32), y


class ClientReads:
    """A synchronous scheduler recording, for every ``compute``, the rows of X's width it returns."""

    def __init__(self, width):
        self.width, self.reads = width, []

    def __call__(self, dsk, keys, **kwargs):
        out = dask.get(dsk, keys, **kwargs)
        rows = 0
        stack = [out]
        while stack:
            item = stack.pop()
            if isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, np.ndarray) and item.ndim == 2 and item.shape[1] == self.width:
                rows += item.shape[0]
        self.reads.append(rows)
        return out


@pytest.fixture
def streamed(monkeypatch):
    """Past the landmark count at 400 rows; input_affine reads pieces of 256 rows (dask chunks of 512 align);
    planned minibatches come 256 rows per read."""
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", LANDMARKS)
    monkeypatch.setattr(streaming, "DASK_READ_ROWS", PIECE)
    monkeypatch.setattr(arrays, "CHUNK_BYTES", PIECE * 8 * D)
    assert arrays.chunk_rows(D) == PIECE
    with dask.config.set(scheduler="synchronous"):
        yield


def _fit(name, X, y):
    build, labelled = ESTIMATORS[name]
    return build().fit(X, *((y,) if labelled else ()))


# ------------------------------------------------------------------ past the landmark count
@pytest.mark.parametrize("name", _params())
def test_past_the_landmark_count_fit_and_transfer_of_a_dask_array_equal_them_in_memory(streamed, name):
    X, y = _blobs()
    target = np.ascontiguousarray(X[::-1] + 0.05)
    on_dask = _fit(name, da.from_array(X, chunks=(CHUNK, -1)), y)
    in_memory = _fit(name, X, y)
    np.testing.assert_array_equal(on_dask.labels_, in_memory.labels_)
    labels = on_dask.transfer(da.from_array(target, chunks=(CHUNK, -1)))
    expected = in_memory.transfer(target)
    assert isinstance(labels, da.Array) and labels.chunks == ((CHUNK,) * 3,)
    np.testing.assert_array_equal(labels.compute(), expected)
    np.testing.assert_array_equal(on_dask.labels_, expected)


@pytest.mark.parametrize("name", _params(client_side=True))
def test_past_the_landmark_count_rows_reach_the_client_only_as_landmarks_or_minibatches(monkeypatch, name):
    X, y = _blobs()
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", LANDMARKS)
    monkeypatch.setattr(streaming, "DASK_READ_ROWS", PIECE)
    # CCN's reference rows and threshold sample: bounded draws, read as landmarks are.
    monkeypatch.setattr(ccn_streamed, "RADIUS_ROWS", LANDMARKS)
    monkeypatch.setattr(ccn_streamed, "_THRESHOLD_ROWS", LANDMARKS)
    reads = ClientReads(D)
    with dask.config.set(scheduler=reads):
        model = _fit(name, da.from_array(X, chunks=(CHUNK, -1)), y)
        model.transfer(da.from_array(X, chunks=(CHUNK, -1)))
    assert reads.reads, "nothing was computed through the scheduler"
    # Never the array, nor one of its chunks: at most the landmarks (or a group of minibatches) per compute.
    assert max(reads.reads) <= max(LANDMARKS, PIECE)


@pytest.mark.parametrize("name", ["skm-paper-autoencoder", "gan-rows"])
def test_the_dask_array_is_never_written(streamed, name):
    X, y = _blobs()
    before = X.copy()
    model = _fit(name, da.from_array(X, chunks=(CHUNK, -1)), y)  # the chunks are views of X
    model.transfer(da.from_array(X, chunks=(CHUNK, -1)))
    np.testing.assert_array_equal(X, before)


# ------------------------------------------------------------------ up to the landmark count
@pytest.mark.parametrize("name", ["tdcm", "ccn"])
def test_up_to_the_landmark_count_a_dask_array_is_fitted_as_its_numpy_array(name):
    X, y = _blobs(600)
    with dask.config.set(scheduler="synchronous"):
        on_dask = _fit(name, da.from_array(X, chunks=(250, -1)), y)
        labels = on_dask.transfer(da.from_array(X[::-1], chunks=(250, -1)))
    in_memory = _fit(name, X, y)
    np.testing.assert_array_equal(on_dask.labels_, in_memory.transfer(X[::-1]))
    assert isinstance(labels, da.Array) and labels.chunks == ((250, 250, 100),)
    np.testing.assert_array_equal(labels.compute(), on_dask.labels_)


@pytest.mark.parametrize("embedding", [None, "autoencoder"])
def test_fit_predict_of_a_dask_array_gives_labels_as_a_dask_array_chunked_as_its_rows(embedding):
    X, _ = _blobs(300)
    params = dict(embedding=embedding, neighbour_weight=0, pretrain_epochs=1, max_epochs=1, random_state=0, device="cpu")
    with dask.config.set(scheduler="synchronous"):
        model = SinkhornKMeans(3, **params)
        labels = model.fit_predict(da.from_array(X, chunks=(100, -1)))
    assert isinstance(labels, da.Array) and labels.chunks == ((100, 100, 100),)
    np.testing.assert_array_equal(labels.compute(), model.labels_)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad, message", [
    (lambda X: X[:, 0], "2-D"),
    (lambda X: X[:, :, None], "2-D"),
    (lambda X: X.astype(np.complex64), "complex"),
    (lambda X: X.astype(str), "real numbers"),
    (lambda X: X[X[:, 0] > 0.5], "unknown"),
])
def test_a_dask_array_of_the_wrong_shape_or_type_is_refused_by_fit_and_transfer(bad, message):
    X, _ = _blobs(300)
    model = SinkhornKMeans(3, embedding="autoencoder", neighbour_weight=0, pretrain_epochs=1, max_epochs=1,
                           random_state=0, device="cpu").fit(X)
    Xd = bad(da.from_array(X, chunks=(100, -1)))
    with pytest.raises(ValueError, match=message):
        SinkhornKMeans(3, embedding="autoencoder", neighbour_weight=0, random_state=0, device="cpu").fit(Xd)
    with pytest.raises(ValueError, match=message):
        model.transfer(Xd)
    np.testing.assert_array_equal(model.predict(X), model.labels_)  # the model is as it was


def test_a_dask_array_holding_nan_is_refused_on_the_workers_and_the_model_stays_usable(streamed):
    X, y = _blobs()
    model = _fit("skm-paper-autoencoder", X, y)
    before = model.labels_.copy()
    X[1000, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        _fit("skm-paper-autoencoder", da.from_array(X, chunks=(CHUNK, -1)), y)
    with pytest.raises(ValueError, match="NaN"):
        model.transfer(da.from_array(X, chunks=(CHUNK, -1)))
    np.testing.assert_array_equal(model.labels_, before)


def test_a_dask_array_of_other_width_is_refused_by_transfer(streamed):
    X, y = _blobs()
    model = _fit("skm-paper-autoencoder", X, y)
    with pytest.raises(ValueError, match="features"):
        model.transfer(da.from_array(X[:, :5], chunks=(CHUNK, -1)))


# ------------------------------------------------------------------ the adapter
def test_dask_rows_refuse_to_become_one_numpy_array():
    rows = DaskRows(da.from_array(np.ones((10, 3)), chunks=(4, -1)))
    with pytest.raises(TypeError, match="computed whole"):
        np.asarray(rows)
    np.testing.assert_array_equal(rows[np.array([1, 7])], np.ones((2, 3)))  # rows by index come to the client


def test_dask_rows_read_integers_as_float64_and_keep_float32():
    ints = DaskRows(da.from_array(np.arange(12).reshape(6, 2), chunks=(4, -1)))
    assert ints.dtype == np.float64 and ints[1:3].dtype == np.float64
    assert DaskRows(da.from_array(np.ones((4, 2), np.float32), chunks=(2, -1))).dtype == np.float32


def test_a_map_of_streamed_rows_with_their_start_sees_each_rows_index_on_dask_as_in_memory():
    import torch

    X, _ = _blobs(n=700)
    shift = X.mean(0).astype(np.float64)

    def first_index_and_sum(start, rows):  # each row's own index beside a value of it
        return torch.stack([start + torch.arange(rows.shape[0], dtype=rows.dtype), rows.sum(1)], 1)

    with dask.config.set(scheduler="synchronous"):
        on_dask = landmarks.StreamedRows(DaskRows(da.from_array(X, chunks=(300, -1))), shift, 2.0, "cpu",
                                         torch.float64).map_chunks(first_index_and_sum, 128, with_start=True)
    in_memory = landmarks.StreamedRows(X, shift, 2.0, "cpu", torch.float64).map_chunks(first_index_and_sum, 128,
                                                                                        with_start=True)
    np.testing.assert_array_equal(on_dask[:, 0].numpy(), np.arange(700))
    torch.testing.assert_close(on_dask, in_memory)


def test_codes_of_a_dask_array_are_computed_on_its_chunks_equal_to_the_codes_in_memory(monkeypatch):
    import torch

    monkeypatch.setattr(arrays, "CHUNK_BYTES", PIECE * 8 * D)
    X, _ = _blobs()
    encoder = torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    shift, scale = X.mean(0).astype(np.float64), 0.7
    with dask.config.set(scheduler="synchronous"):
        aligned = landmarks.encode_chunks(encoder, DaskRows(da.from_array(X, chunks=(CHUNK, -1))), shift, scale)
        other = landmarks.encode_chunks(encoder, DaskRows(da.from_array(X, chunks=(300, -1))), shift, scale)
    expected = landmarks.encode_chunks(encoder, X, shift, scale)
    torch.testing.assert_close(aligned, expected, rtol=0, atol=0)  # the same pieces: the same bits
    torch.testing.assert_close(other, expected)
    assert encoder.training  # its mode is given back


def test_planned_minibatches_are_read_a_group_per_call_and_give_the_same_rows():
    from sktransfer_cluster.base.streaming import PlannedReads

    X = np.arange(200.0).reshape(100, 2)
    order = np.random.default_rng(0).permutation(100)
    batches = [order[s : s + 16] for s in range(0, 100, 16)]
    calls = []
    plan = PlannedReads(lambda index: calls.append(len(index)) or X[index], batches, group_rows=40)
    for batch in batches:
        np.testing.assert_array_equal(plan.take(batch), X[batch])  # in the batch's own order
    assert calls == [32, 32, 36]  # as many whole batches as fit in 40 rows per read
    assert plan.take(batches[0]) is None  # an unplanned index is left to the caller


def test_the_paper_autoencoder_reads_a_dask_arrays_minibatches_in_groups(streamed):
    X, y = _blobs()
    reads = ClientReads(D)
    with dask.config.set(scheduler=reads):
        _fit("skm-paper-autoencoder", da.from_array(X, chunks=(CHUNK, -1)), y)
    model = _fit("skm-paper-autoencoder", X, y)
    batches = -(-N // model.batch_size)
    row_reads = [r for r in reads.reads if r]
    # Two epochs over every row, each a few round trips instead of one per minibatch.
    assert sum(row_reads) >= 2 * N and len(row_reads) < batches


def test_value_signs_of_a_dask_array_are_read_on_its_workers():
    X = np.abs(np.random.default_rng(0).normal(size=(50, 3)))
    with dask.config.set(scheduler="synchronous"):
        assert DaskRows(da.from_array(X, chunks=(20, -1))).signs() == value_signs(X) == (False, False)
        X[30, 1] = 0.0
        assert value_signs(DaskRows(da.from_array(X, chunks=(20, -1)))) == (False, True)
        X[5, 2] = -1.0
        assert value_signs(DaskRows(da.from_array(X, chunks=(20, -1)))) == value_signs(X) == (True, True)
