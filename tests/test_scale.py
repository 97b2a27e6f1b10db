"""Scale (issue 31): the thread policy, streamed statistics and minibatch OT k-means."""

import importlib

import numpy as np
import pytest
import torch

from sktransfer_cluster.base.runtime import COMPUTE_THREADS, compute_threads
from sktransfer_cluster.cluster.sinkhorn_kmeans import lloyd
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
