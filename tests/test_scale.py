"""Scale (issue 31): the thread policy, streamed statistics and minibatch OT k-means."""

import importlib

import numpy as np
import pytest
import torch

from sktransfer_cluster.base.arrays import input_affine
from sktransfer_cluster.base.runtime import COMPUTE_THREADS, compute_threads
from sktransfer_cluster.base.streaming import (
    iter_row_chunks,
    mapped_pages,
    read_rows,
    release_pages,
    streamed_affine,
)
from sktransfer_cluster.cluster.sinkhorn_kmeans import minibatch
from sktransfer_cluster.ot import lloyd
from sktransfer_cluster.ot import semi_dual, sinkhorn

# The package exports the function sinkhorn under the module's name.
sinkhorn_module = importlib.import_module("sktransfer_cluster.ot.sinkhorn")


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_compute_threads_runs_one_thread_and_restores_the_callers_count_on_error(two_threads):
    with pytest.raises(RuntimeError), compute_threads():
        assert torch.get_num_threads() == COMPUTE_THREADS == 1
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2


def test_compute_threads_with_blas_limits_the_blas_pools_too():
    from threadpoolctl import threadpool_info

    np.ones((2, 2)) @ np.ones((2, 2))  # load numpy's BLAS
    with compute_threads(blas=True):
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())


def _recording(monkeypatch, module, name, seen):
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


def test_the_public_solvers_and_ot_lloyd_compute_on_one_thread_whatever_the_caller_runs(two_threads, monkeypatch):
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.normal(size=(200, 3)))
    M = torch.cdist(X, X[:4]) ** 2
    seen = []
    _recording(monkeypatch, sinkhorn_module, "_matvec", seen)
    _recording(monkeypatch, semi_dual, "semi_dual_pass", seen)
    _recording(monkeypatch, lloyd, "newton_solve", seen)
    sinkhorn(None, None, M, 0.5)
    semi_dual.semi_dual_newton(M, torch.full((4,), -np.log(4.0), dtype=M.dtype))
    lloyd.ot_lloyd_best(X, X[None, :4].clone(), 0.05, torch.full((4,), -np.log(4.0)), 20, 1e-8)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2


def test_the_solver_gives_the_same_plan_whatever_the_callers_thread_count(two_threads):
    rng = np.random.default_rng(1)
    M = rng.random((3000, 7))
    P2 = sinkhorn(None, None, M, 0.05)
    torch.set_num_threads(1)
    P1 = sinkhorn(None, None, M, 0.05)
    np.testing.assert_array_equal(P1, P2)


# ------------------------------------------------------------------ streamed statistics (base/streaming.py)


class CountingRows:
    """An array-like that records how many rows each read asks for (no memmap behind it)."""

    def __init__(self, X):
        self.X, self.reads = X, []
        self.shape, self.dtype, self.strides = X.shape, X.dtype, X.strides

    def __getitem__(self, index):
        rows = self.X[index]
        self.reads.append(rows.shape[0])
        return rows


@pytest.mark.parametrize("offset, spread", [(0.0, 1.0), (1e8, 1.0), (0.0, 1e-200), (3.0, 1e150)])
def test_streamed_affine_equals_input_affine_in_one_pass_of_bounded_chunks(offset, spread):
    X = offset + spread * np.random.default_rng(0).normal(size=(2500, 7))
    counted = CountingRows(X)
    shift, scale = streamed_affine(counted, chunk_size=300)
    ref_shift, ref_scale = input_affine(X, chunk_size=300)
    np.testing.assert_array_equal(shift, ref_shift)
    # Both are exact to the rounding of the rows at their offset, eps * offset / spread.
    assert scale == pytest.approx(ref_scale, rel=1e-12 + 10 * np.finfo(float).eps * offset / spread)
    assert sum(counted.reads) == 2500 and max(counted.reads) == 300  # one pass, chunk by chunk


def test_streamed_affine_refuses_non_finite_values():
    X = np.ones((50, 2))
    X[37, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        streamed_affine(X, chunk_size=10)


@pytest.fixture
def memmap_file(tmp_path):
    path = tmp_path / "rows.npy"
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(3000, 4))
    X[:] = np.random.default_rng(0).normal(size=X.shape)
    X.flush()
    del X
    return path


def test_the_pages_of_a_read_only_or_shared_memmap_are_found_and_released_without_changing_it(memmap_file):
    X = np.load(memmap_file, mmap_mode="r")
    before = np.array(X)
    pages = mapped_pages(np.asarray(X))  # validation hands on a plain view of the memmap
    assert pages is not None and pages[2] - pages[1] == X.nbytes
    release_pages(X)
    np.testing.assert_array_equal(X, before)
    np.testing.assert_array_equal(read_rows(X, np.array([2, 5, 2999])), before[[2, 5, 2999]])
    assert [stop for _, stop, _ in iter_row_chunks(X, chunk_size=1000)] == [1000, 2000, 3000]


def test_a_row_reader_hands_pages_back_after_every_release_rows_rows_of_one_call(memmap_file, monkeypatch):
    from sktransfer_cluster.base import streaming
    # A fault can map a whole large folio (up to 2 MiB) per row read, so the pages held at once
    # are bounded by how many rows are read between two releases, not by the size of the call.
    X = np.load(memmap_file, mmap_mode="r")
    reader = streaming.RowReader(X)
    released = []
    monkeypatch.setattr(reader, "_release", lambda rows: released.append(rows.shape[0]))
    index = np.arange(0, 3000, 3)
    rows = reader(index)
    np.testing.assert_array_equal(rows, np.asarray(X)[index])
    assert sum(released) == index.shape[0] and max(released) <= streaming.RELEASE_ROWS


def test_chunked_writes_one_row_per_row_into_one_output_and_concatenates_per_chunk_reductions():
    from sktransfer_cluster.base import chunked

    X = torch.arange(10.0).reshape(5, 2)
    torch.testing.assert_close(chunked(lambda x: x.sum(1), X, chunk_size=2), X.sum(1))
    sums = chunked(lambda x: x.sum(0, keepdim=True), X, chunk_size=2)  # one row per chunk
    torch.testing.assert_close(sums, torch.tensor([[2.0, 4.0], [10.0, 12.0], [8.0, 9.0]]))
    assert chunked(lambda x: x[:, 0], np.zeros((0, 3))).shape == (0,)


def test_copy_on_write_memmaps_and_arrays_in_memory_are_never_released(memmap_file):
    assert mapped_pages(np.load(memmap_file, mmap_mode="c")) is None
    assert mapped_pages(np.ones((3, 2))) is None


# ------------------------------------------------------------------ minibatch OT k-means (minibatch.py)
def _blobs(n, sizes=(1 / 3, 1 / 3, 1 / 3), seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [20.0, 0.0], [0.0, 20.0]])
    labels = rng.choice(3, size=n, p=sizes)
    return centres[labels] + rng.normal(size=(n, 2)), labels, centres


def _state(centres, reg=0.5, seen=300):
    state = minibatch.MinibatchState(torch.as_tensor(centres, dtype=torch.float64), reg)
    state.counts += seen / 3
    return state


def test_minibatch_passes_read_every_batch_by_index_and_recover_the_clusters():
    X, labels, centres = _blobs(3000)
    counted = CountingRows(X)
    log_w = torch.full((3,), -np.log(3.0), dtype=torch.float64)
    state = _state(centres + 3.0)

    def read(index):
        assert np.all(np.diff(index) > 0)  # sorted, no duplicates
        return torch.as_tensor(counted[index])

    passes = minibatch.minibatch_passes(state, read, 3000, log_w, batch_size=500, max_passes=4, tol=0.0,
                                        rng=np.random.default_rng(0))
    assert passes == 4 and state.n_steps == 4 * 6
    assert max(counted.reads) <= 500 and len(counted.reads) == 24
    found = ((X[:, None, :] - state.centers.numpy()[None]) ** 2).sum(-1).argmin(1)
    assert np.array_equal(found, labels)  # each row with its own blob's centre
    np.testing.assert_allclose(state.counts.numpy() / state.counts.sum().item(), 1 / 3, atol=0.02)


def test_a_batch_of_one_cluster_keeps_its_rows_instead_of_pushing_them_to_the_other_centres():
    X, labels, centres = _blobs(3000)
    log_w = torch.full((3,), -np.log(3.0), dtype=torch.float64)
    state = _state(centres)
    for _ in range(20):  # settle the potentials on ordinary batches
        minibatch.minibatch_step(state, torch.as_tensor(X[:600]), log_w)
    others = state.centers[1:].clone()
    minibatch.minibatch_step(state, torch.as_tensor(X[labels == 0][:300]), log_w)
    # A balanced solve of this batch alone would send two thirds of it to centres 1 and 2.
    assert float((state.centers[1:] - others).abs().max()) < 1e-6


def test_minibatch_counts_follow_an_unequal_size_prior():
    sizes = (0.5, 0.25, 0.25)
    X, _, centres = _blobs(4000, sizes)
    log_w = torch.log(torch.tensor(sizes, dtype=torch.float64))
    state = _state(centres)
    minibatch.minibatch_passes(state, lambda i: torch.as_tensor(X[i]), 4000, log_w, batch_size=800,
                               max_passes=3, tol=0.0, rng=np.random.default_rng(1))
    np.testing.assert_allclose(state.counts.numpy() / state.counts.sum().item(), sizes, atol=0.02)


# ------------------------------------------------------------------ fit and predict on memmaps, predict's threads
def test_a_fit_on_a_memmap_equals_the_fit_on_its_copy_in_memory(memmap_file):
    from sktransfer_cluster import SinkhornKMeans

    X = np.load(memmap_file, mmap_mode="r")
    on_disk = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    in_memory = SinkhornKMeans(3, random_state=0, device="cpu").fit(np.array(X))
    np.testing.assert_array_equal(on_disk.cluster_centers_, in_memory.cluster_centers_)
    np.testing.assert_array_equal(on_disk.predict(X), in_memory.labels_)


def test_a_memmap_holding_nan_is_refused_by_fit(tmp_path):
    from sktransfer_cluster import SinkhornKMeans

    X = np.random.default_rng(0).normal(size=(200, 3))
    X[150, 1] = np.nan
    np.save(tmp_path / "nan.npy", X)
    with pytest.raises(ValueError, match="NaN or infinity"):
        SinkhornKMeans(2, device="cpu").fit(np.load(tmp_path / "nan.npy", mmap_mode="r"))


def test_a_memmap_holding_nan_is_refused_by_predict_and_transfer_and_the_model_stays_usable(tmp_path):
    from sktransfer_cluster import SinkhornKMeans

    X = np.random.default_rng(0).normal(size=(200, 3))
    km = SinkhornKMeans(2, random_state=0, device="cpu").fit(X)
    expected = km.predict(X)
    bad = X.copy()
    bad[150, 1] = np.inf
    np.save(tmp_path / "inf.npy", bad)
    on_disk = np.load(tmp_path / "inf.npy", mmap_mode="r")
    for call in (km.predict, km.transfer):
        with pytest.raises(ValueError, match="NaN or infinity"):
            call(on_disk)
    np.testing.assert_array_equal(km.predict(X), expected)


def test_predict_checks_a_memmaps_values_chunk_by_chunk_handing_its_pages_back(memmap_file, monkeypatch):
    from sktransfer_cluster import SinkhornKMeans
    from sktransfer_cluster.base import streaming

    X = np.load(memmap_file, mmap_mode="r")
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(np.array(X))
    released = []
    original = streaming.release_pages

    def recording(rows, pages=None):
        released.append(pages[2] - pages[1] if pages is not None else rows.nbytes)
        return original(rows, pages)

    monkeypatch.setattr(streaming, "release_pages", recording)
    streaming.check_finite(X, chunk_size=1000)
    assert released == [1000 * X.strides[0]] * 3  # three chunks, each released once read
    np.testing.assert_array_equal(km.predict(X), km.labels_)


def test_a_collapsed_fit_counts_distinct_rows_only_up_to_the_number_of_clusters():
    from sktransfer_cluster.base import contract

    X = np.repeat(np.eye(3), 50, axis=0)
    signed = X.copy()
    signed[signed == 0] = -0.0
    assert contract._distinct_rows_below(X, 4) == 3
    assert contract._distinct_rows_below(np.vstack([X, signed]), 4) == 3  # -0.0 is 0.0
    counted = CountingRows(np.random.default_rng(0).normal(size=(10**5, 2)))
    assert contract._distinct_rows_below(counted, 4) is None
    assert len(counted.reads) == 1  # stopped within the first chunk


def test_predict_runs_on_one_thread_and_gives_the_callers_threads_back(two_threads, monkeypatch):
    from threadpoolctl import threadpool_info

    from sktransfer_cluster import SinkhornKMeans
    from sktransfer_cluster.base import contract

    X = np.random.default_rng(0).normal(size=(300, 4))
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    seen = []
    original = contract.chunked

    def recording(fn, rows, chunk_size=None):
        seen.append((torch.get_num_threads(), {pool["num_threads"] for pool in threadpool_info()}))
        return original(fn, rows, chunk_size)

    monkeypatch.setattr(contract, "chunked", recording)
    km.predict(X)
    km.transform(X)
    assert seen and all(t == 1 and pools <= {1} for t, pools in seen)
    assert torch.get_num_threads() == 2


# ------------------------------------------------------------------ Dask: OT-Lloyd on the workers, predict
def _sk_blobs(n=3000, seed=0):
    from sklearn.datasets import make_blobs

    return make_blobs(n_samples=n, centers=[[0, 0, 0], [12, 0, 0], [0, 12, 0]], random_state=seed)


def test_ot_lloyd_on_dask_chunks_equals_ot_lloyd_in_memory():
    distributed = pytest.importorskip("distributed", reason="needs the 'distributed' extra (dask[distributed])")
    import dask.array as da

    from sktransfer_cluster.cluster.sinkhorn_kmeans import distributed as dd

    X, _ = _sk_blobs(3000)
    shift = X.mean(0)
    Z = torch.as_tensor(X - shift)
    start = Z[[0, 1, 2]].clone()
    log_w = torch.full((3,), -np.log(3.0), dtype=torch.float64)
    centers, regs, n_iter, _ = lloyd.ot_lloyd(Z, start[None], 0.01, log_w, 100, 1e-8)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False) as cluster, \
            distributed.Client(cluster):
        got, got_iter, _, _ = dd.dask_ot_lloyd(da.from_array(X, chunks=(700, -1)), start, float(regs[0]), log_w, None,
                                               shift=shift, scale=1.0, max_iter=100, tol=1e-8)
    assert got_iter == n_iter
    np.testing.assert_allclose(got.numpy(), centers[0].numpy(), rtol=0, atol=1e-10)  # only the sums' order differs


def test_predict_of_a_dask_array_is_a_dask_array_of_the_same_labels():
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs(1000)
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    labels = km.predict(da.from_array(X, chunks=(300, 2)))
    assert isinstance(labels, da.Array)
    np.testing.assert_array_equal(labels.compute(), km.predict(X))


# ------------------------------------------------------------------ SinkhornKMeans: partial_fit, minibatch fit, Dask
def test_partial_fit_starts_on_its_first_batch_and_then_takes_one_step_per_batch():
    from sktransfer_cluster import SinkhornKMeans

    X, y = _sk_blobs()
    km = SinkhornKMeans(3, random_state=0, device="cpu")
    for start in range(0, 3000, 500):
        km.partial_fit(X[start : start + 500])
        assert km.labels_.shape == (500,)  # the labels of the batch, as MiniBatchKMeans gives
    assert km.n_steps_ == 6
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(y, km.predict(X)) == 1.0
    again = SinkhornKMeans(3, random_state=0, device="cpu")
    for start in range(0, 3000, 500):
        again.partial_fit(X[start : start + 500])
    np.testing.assert_array_equal(again.cluster_centers_, km.cluster_centers_)  # reproducible


def test_partial_fit_after_fit_continues_from_the_fitted_centres():
    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs()
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    before = km.cluster_centers_.copy()
    km.partial_fit(X[:300])
    assert km.n_steps_ == 1
    assert np.abs(km.cluster_centers_ - before).max() < 0.5  # a small step from the fit, not a restart


def test_a_transfer_after_partial_fit_starts_from_the_updated_source_model():
    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs()
    target = np.random.default_rng(0).uniform(X.min(0), X.max(0), X.shape)  # no clusters: the start decides
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    km.transfer(np.ascontiguousarray(X[:, ::-1]))
    km.partial_fit(X[:300])  # the source model moves on; the next transfer starts from it
    again = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    again.partial_fit(X[:300])
    np.testing.assert_array_equal(km.transfer(target), again.transfer(target))


def test_each_dask_transfer_starts_from_the_source_model():
    da = pytest.importorskip("dask.array")
    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs()
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(da.from_array(X, chunks=(1000, -1)))
    # No clusters in the target: where OT-Lloyd starts decides its partition.
    target = da.from_array(np.random.default_rng(0).uniform(X.min(0), X.max(0), X.shape), chunks=(1000, -1))
    first = km.transfer(target).compute()
    km.transfer(da.from_array(np.ascontiguousarray(X[:, ::-1]), chunks=(1000, -1)))
    np.testing.assert_array_equal(km.transfer(target).compute(), first)


def test_partial_fit_refuses_an_embedding_and_a_new_width():
    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs(300)
    with_embedding = SinkhornKMeans(3, embedding="autoencoder", device="cpu")
    assert not hasattr(with_embedding, "partial_fit")  # scikit-learn's checks look for it
    with pytest.raises(AttributeError, match="partial_fit"):
        with_embedding.partial_fit(X)
    km = SinkhornKMeans(3, random_state=0, device="cpu").partial_fit(X)
    with pytest.raises(ValueError):
        km.partial_fit(X[:, :2])


def test_the_minibatch_fit_on_a_memmap_equals_it_in_memory_and_reads_bounded_pieces(tmp_path, monkeypatch):
    from sktransfer_cluster import SinkhornKMeans
    from sktransfer_cluster.base import streaming
    from sktransfer_cluster.cluster.sinkhorn_kmeans import streamed

    X, _ = _sk_blobs(40000)
    np.save(tmp_path / "X.npy", X.astype(np.float32))
    on_disk = np.load(tmp_path / "X.npy", mmap_mode="r")
    reads = []
    original = streaming.RowReader.__call__

    def counting(self, index):
        reads.append(len(index))
        return original(self, index)

    monkeypatch.setattr(streaming.RowReader, "__call__", counting)
    a = SinkhornKMeans(3, algorithm="minibatch", random_state=0, device="cpu").fit(on_disk)
    n_reads = len(reads)
    b = SinkhornKMeans(3, algorithm="minibatch", random_state=0, device="cpu").fit(np.array(on_disk))
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    # One start of STREAM_INIT_ROWS rows, then batches of at most STREAM_BATCH_ROWS: never the whole array.
    assert reads[0] == streamed.STREAM_INIT_ROWS and max(reads[1:n_reads]) <= streamed.STREAM_BATCH_ROWS
    steps = -(-40000 // streamed.STREAM_BATCH_ROWS)
    assert n_reads == 1 + a.n_iter_ * steps


def test_the_minibatch_fit_finds_the_partition_of_the_full_fit():
    from sklearn.metrics import adjusted_rand_score

    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs(40000)
    full = SinkhornKMeans(3, algorithm="full", random_state=0, device="cpu").fit(X)
    mini = SinkhornKMeans(3, algorithm="minibatch", random_state=0, device="cpu").fit(X)
    assert adjusted_rand_score(full.labels_, mini.labels_) == 1.0
    np.testing.assert_array_equal(mini.predict(X), mini.labels_)


def test_a_dask_fit_runs_on_the_workers_and_matches_the_fit_in_memory():
    distributed = pytest.importorskip("distributed", reason="needs the 'distributed' extra (dask[distributed])")
    import dask.array as da

    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs(2000)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False) as cluster, \
            distributed.Client(cluster):
        Xd = da.from_array(X, chunks=(500, -1))
        km = SinkhornKMeans(3, random_state=0, device="cpu").fit(Xd)
        labels = km.predict(Xd)
        assert isinstance(labels, da.Array)
        np.testing.assert_array_equal(labels.compute(), km.predict(X))
    ref = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    np.testing.assert_array_equal(km.labels_, ref.labels_)
    # The same start; the Dask fit's OT-Lloyd may take one more step below tol.
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, atol=0.05)




def test_a_dask_transfer_runs_ot_lloyd_by_chunk_and_matches_the_transfer_in_memory():
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    import dask

    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs(1500)
    target = X[::-1] + 0.4
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    ref = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    expected = ref.transfer(target)
    with dask.config.set(scheduler="synchronous"):
        labels = km.transfer(da.from_array(target, chunks=(400, -1)))
        assert isinstance(labels, da.Array)
        np.testing.assert_array_equal(labels.compute(), expected)
    np.testing.assert_array_equal(km.labels_, expected)
    # The same start (the source centres); the Dask OT-Lloyd may take one more step below tol.
    np.testing.assert_allclose(km.cluster_centers_, ref.cluster_centers_, atol=0.05)


def test_a_dask_transfer_refuses_other_widths_and_the_model_stays_usable():
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    from sktransfer_cluster import SinkhornKMeans

    X, _ = _sk_blobs(300)
    km = SinkhornKMeans(3, random_state=0, device="cpu").fit(X)
    with pytest.raises(ValueError, match="features"):
        km.transfer(da.from_array(X[:, :1], chunks=(100, -1)))
    np.testing.assert_array_equal(km.predict(X), km.labels_)


def test_the_input_affine_of_a_dask_array_is_the_in_memory_one_from_one_task_per_chunk_and_pass(monkeypatch):
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    import dask

    from sktransfer_cluster.base import arrays
    from sktransfer_cluster.base.arrays import input_affine
    from sktransfer_cluster.base.streaming import DaskRows

    monkeypatch.setattr(arrays, "CHUNK_BYTES", 256 * 8 * 4)  # pieces of 256 rows
    X = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 4))
    before = X.copy()
    with dask.config.set(scheduler="synchronous"):
        ref_shift, ref_scale = input_affine(X)
        # Chunks at multiples of the pieces input_affine reads: its result to the bit.
        shift, scale = DaskRows(da.from_array(X, chunks=(512, -1))).affine()
        np.testing.assert_array_equal(shift, ref_shift)
        assert scale == ref_scale
        # Other chunks: a piece cut by a chunk boundary is summed in two parts.
        shift, scale = DaskRows(da.from_array(X, chunks=(300, -1))).affine()
        np.testing.assert_array_equal(X, before)  # the chunks are views of X: read, never written
        np.testing.assert_allclose(shift, ref_shift, rtol=1e-12)
        assert scale == pytest.approx(ref_scale, rel=1e-12)
        X[500, 2] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            DaskRows(da.from_array(X, chunks=(300, -1))).affine()


def test_the_input_affine_of_a_dask_array_neither_overflows_nor_underflows():
    da = pytest.importorskip("dask.array", reason="needs the 'distributed' extra (dask[distributed])")
    import dask

    from sktransfer_cluster.base.arrays import input_affine
    from sktransfer_cluster.base.streaming import DaskRows

    X = np.random.default_rng(1).normal(size=(600, 3))
    with dask.config.set(scheduler="synchronous"):
        for factor in (1e200, 1e-200):
            shift, scale = DaskRows(da.from_array(X * factor, chunks=(250, -1))).affine()
            ref_shift, ref_scale = input_affine(X * factor)
            assert np.isfinite(scale) and scale > 0
            assert scale == pytest.approx(ref_scale, rel=1e-12)
            np.testing.assert_allclose(shift, ref_shift, rtol=1e-9)


# ------------------------------------------------------------------ graph fits past the landmark count (issue 31)
def _nonnegative_blobs(n, d, k=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 1, (k, d)) * (rng.random((k, d)) < 0.4)
    y = rng.integers(0, k, n)
    return np.clip(centres[y] + 0.2 * rng.normal(size=(n, d)), 0, None).astype(np.float32), y


class RowsTouched(np.ndarray):
    """A view of an array that records the rows every indexing of it asks for.

    A slice that is only cut into smaller slices (a view handed on in pieces, as the
    consistency check's blocks of 2^20 rows are) reads nothing: its entry is zeroed
    when it is indexed in turn.
    """

    log = []

    def __getitem__(self, index):
        entry = getattr(self, "_entry", None)
        if entry is not None:
            RowsTouched.log[entry] = 0
        out = super().__getitem__(index)
        first = index[0] if isinstance(index, tuple) else index
        if isinstance(first, slice) or np.ndim(first) > 0:
            RowsTouched.log.append(out.shape[0])
            if isinstance(out, RowsTouched):
                out._entry = len(RowsTouched.log) - 1
        return out


def landmark_memmap_reads(cls, build, tmp_path, monkeypatch, labelled=False):
    """Fit ``build()`` (an instance of ``cls``) on a 6,000 x 200 memmap past 500 landmarks.

    Returns the fitted model, the largest read of the memmap (through :class:`RowsTouched`) or
    of ``cls._tensor``, and the chunk size: a streamed fit reads at most the landmarks or one chunk.
    ``labelled``: fit with the blobs' labels (estimators that learn from a labelled source).
    """
    from sktransfer_cluster.base.arrays import chunk_rows
    from sktransfer_cluster.representation import landmarks

    X, y = _nonnegative_blobs(6000, 200)
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 500)
    tensors = []
    validate, tensor = cls._validate_input, cls._tensor

    def counted_input(self, X, **kwargs):
        out = validate(self, X, **kwargs)
        return (out[0].view(RowsTouched), out[1]) if isinstance(out, tuple) else out.view(RowsTouched)

    def counted_tensor(self, X):
        tensors.append(X.shape[0])
        return tensor(self, X)

    monkeypatch.setattr(cls, "_validate_input", counted_input)
    monkeypatch.setattr(cls, "_tensor", counted_tensor)
    RowsTouched.log = []
    model = build().fit(np.load(tmp_path / "X.npy", mmap_mode="r"), *((y,) if labelled else ()))
    assert RowsTouched.log, "the memmap was never read through the view"
    return model, max(RowsTouched.log + tensors), chunk_rows(200)


def test_a_graph_fit_past_the_landmark_count_reads_landmarks_and_chunks_never_the_whole_array(tmp_path, monkeypatch):
    from sktransfer_cluster import SinkhornKMeans

    km, largest, chunk = landmark_memmap_reads(
        SinkhornKMeans, lambda: SinkhornKMeans(3, embedding="autoencoder", pretrain_epochs=1, random_state=0,
                                               device="cpu"), tmp_path, monkeypatch)
    assert chunk < 6000
    # Landmarks are read in pieces, every pass in chunks: at most one chunk (or the landmarks) at a time.
    assert largest <= max(500, chunk)
    assert km.labels_.shape == (6000,)


def landmark_fits_on_memmap_and_array(build, tmp_path, monkeypatch, labelled=False):
    """``build()`` fitted past 400 landmarks on a 1,500 x 30 memmap, then on the same rows in memory
    (``labelled``: with the blobs' labels)."""
    from sktransfer_cluster.representation import landmarks

    X, y = _nonnegative_blobs(1500, 30)
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    return [build().fit(data, *((y,) if labelled else ())) for data in (np.load(tmp_path / "X.npy", mmap_mode="r"), X)]


def test_the_landmark_fit_on_a_memmap_equals_it_on_the_array_in_memory(tmp_path, monkeypatch):
    from sktransfer_cluster import SinkhornKMeans

    mapped, in_memory = landmark_fits_on_memmap_and_array(
        lambda: SinkhornKMeans(3, embedding="autoencoder", pretrain_epochs=2, random_state=0, device="cpu"),
        tmp_path, monkeypatch)
    np.testing.assert_array_equal(mapped.cluster_centers_, in_memory.cluster_centers_)
    np.testing.assert_array_equal(mapped.labels_, in_memory.labels_)


@pytest.mark.parametrize("embedding", ["autoencoder", "neighbours"])
def test_the_landmark_path_starts_only_past_the_landmark_count(monkeypatch, embedding):
    import sktransfer_cluster.representation as representation
    from sktransfer_cluster import SinkhornKMeans
    from sktransfer_cluster.representation import landmarks

    X, y = _nonnegative_blobs(600, 30)
    reads = []
    original = representation.read_landmarks
    monkeypatch.setattr(representation, "read_landmarks", lambda X, index, *a: reads.append(len(index)) or
                        original(X, index, *a))
    params = dict(embedding=embedding, pretrain_epochs=2, random_state=0, device="cpu")
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 600)
    SinkhornKMeans(3, **params).fit(X)
    assert reads == []  # every row, in memory, as before landmarks existed
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 599)
    km = SinkhornKMeans(3, **params).fit(X)
    assert reads == [599, 599]  # the landmarks only: raw for the cosine graph, then normalised
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(y, km.labels_) == 1.0  # separated blobs, every row labelled by its code


# ------------------------------------------------------------------ CCN past the landmark count (issue 31)
def _small_ccn(**params):
    from sktransfer_cluster import CCNCluster

    settings = dict(embedding_epochs=2, similarity_epochs=1, clustering_epochs=2, n_similarity_nets=1, refine_epochs=1,
                    random_state=0, device="cpu")
    return CCNCluster(3, **{**settings, **params})


@pytest.mark.parametrize("representation", ["neighbours", "input"])
def test_the_ccn_landmark_fit_on_a_memmap_equals_it_on_the_array_in_memory(tmp_path, monkeypatch, representation):
    from sktransfer_cluster.cluster.ccn import streamed

    monkeypatch.setattr(streamed, "RADIUS_ROWS", 300)
    mapped, in_memory = landmark_fits_on_memmap_and_array(lambda: _small_ccn(representation=representation),
                                                          tmp_path, monkeypatch, labelled=True)
    np.testing.assert_array_equal(mapped.labels_, in_memory.labels_)
    assert mapped.similarity_threshold_ == in_memory.similarity_threshold_


@pytest.mark.parametrize("representation", ["neighbours", "input"])
def test_a_ccn_fit_past_the_landmark_count_reads_landmarks_batches_and_chunks_never_the_whole_array(
        tmp_path, monkeypatch, representation):
    from sktransfer_cluster import CCNCluster
    from sktransfer_cluster.cluster.ccn import streamed

    monkeypatch.setattr(streamed, "RADIUS_ROWS", 300)
    model, largest, chunk = landmark_memmap_reads(
        CCNCluster, lambda: _small_ccn(representation=representation, embedding_epochs=1, clustering_epochs=1),
        tmp_path, monkeypatch, labelled=True)
    assert chunk < 6000
    # Landmarks and reference rows in pieces, minibatches by index, every pass in chunks.
    assert largest <= max(500, chunk)
    assert model.labels_.shape == (6000,)


def test_a_ccn_transfer_past_the_landmark_count_equals_it_on_the_array_in_memory(tmp_path, monkeypatch):
    from sktransfer_cluster.cluster.ccn import streamed
    from sktransfer_cluster.representation import landmarks

    X, y = _nonnegative_blobs(1600, 30, k=4)
    np.save(tmp_path / "target.npy", X[y >= 2])
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    monkeypatch.setattr(streamed, "RADIUS_ROWS", 300)
    model = _small_ccn().set_params(n_clusters=2).fit(X[y < 2], y[y < 2])
    labels = [clone_of(model).transfer(data) for data in (np.load(tmp_path / "target.npy", mmap_mode="r"), X[y >= 2])]
    np.testing.assert_array_equal(*labels)


def clone_of(model):
    import copy

    return copy.deepcopy(model)


def test_the_ccn_landmark_path_starts_only_past_the_landmark_count(monkeypatch):
    from sktransfer_cluster.representation import landmarks

    X, y = _nonnegative_blobs(600, 30)
    reads = []
    original = landmarks.read_landmarks
    monkeypatch.setattr(landmarks, "read_landmarks", lambda X, index, *a: reads.append(len(index)) or
                        original(X, index, *a))
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 600)
    _small_ccn().fit(X, y)
    assert reads == []  # every row, in memory, as before landmarks existed
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 599)
    _small_ccn().fit(X, y)
    assert reads and set(reads) == {599}
