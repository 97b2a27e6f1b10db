"""Our Sinkhorn solver, cross-checked against POT and by its defining properties."""

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

from sktransfer_cluster.ot import sinkhorn, sinkhorn_potentials


def _problem(seed, n=12, m=5, d=3):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    a, b = rng.random(n) + 0.1, rng.random(m) + 0.1
    return a / a.sum(), b / b.sum(), ot.dist(x, y)


@pytest.mark.parametrize("method", ["auto", "stabilized", "log"])
@pytest.mark.parametrize("reg", [1.0, 0.1, 0.02])
def test_balanced_plan_matches_pot(method, reg):
    a, b, M = _problem(0)
    expected = ot.sinkhorn(a, b, M, reg, method="sinkhorn_log", numItermax=100000, stopThr=1e-13)
    got = sinkhorn(a, b, M, reg, tol=1e-12, max_iter=100000, method=method)
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("method", ["auto", "log"])
@pytest.mark.parametrize("reg_m", [0.5, 5.0])
def test_unbalanced_plan_matches_pot(method, reg_m):
    a, b, M = _problem(1)
    expected = ot.sinkhorn_unbalanced(a, b, M, 0.1, reg_m, numItermax=100000, stopThr=1e-13)
    got = sinkhorn(a, b, M, 0.1, reg_m=reg_m, tol=1e-13, max_iter=100000, method=method)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_uniform_marginals_when_none_or_empty():
    _, _, M = _problem(2)
    n, m = M.shape
    expected = ot.sinkhorn(np.full(n, 1 / n), np.full(m, 1 / m), M, 0.1, stopThr=1e-12, numItermax=10**5)
    for a, b in [(None, None), ([], [])]:
        np.testing.assert_allclose(sinkhorn(a, b, M, 0.1, tol=1e-12), expected, atol=1e-6)


def test_numpy_in_numpy_out_and_torch_in_torch_out():
    a, b, M = _problem(3)
    assert isinstance(sinkhorn(a, b, M, 0.1), np.ndarray)
    out = sinkhorn(torch.tensor(a), torch.tensor(b), torch.tensor(M), 0.1)
    assert torch.is_tensor(out) and out.dtype == torch.float64


def test_float32_input_returns_float32():
    a, b, M = _problem(4)
    assert sinkhorn(a, b, M.astype(np.float32), 0.1).dtype == np.float32


def test_batched_problems_match_one_by_one():
    probs = [_problem(s) for s in range(3)]
    A = np.stack([p[0] for p in probs])
    B = np.stack([p[1] for p in probs])
    M = np.stack([p[2] for p in probs])
    batched = sinkhorn(A, B, M, 0.1, tol=1e-12)
    for i, (a, b, Mi) in enumerate(probs):
        np.testing.assert_allclose(batched[i], sinkhorn(a, b, Mi, 0.1, tol=1e-12), atol=1e-9)


@pytest.mark.parametrize("method", ["auto", "log"])
def test_tiny_relative_reg_on_raw_squared_distances_stays_finite_and_converges(method):
    rng = np.random.default_rng(0)
    X = rng.normal(scale=30.0, size=(500, 10))
    M = ot.dist(X, X[:10] + 1.0)
    plan, log = sinkhorn(None, None, M, 1e-3 * M.mean(), tol=1e-6, max_iter=20000, method=method, log=True)
    assert np.isfinite(plan).all()
    assert log["converged"], log
    np.testing.assert_allclose(plan.sum(1), 1 / 500, atol=1e-6)
    np.testing.assert_allclose(plan.sum(0), 1 / 10, atol=1e-6)


def test_log_reports_iterations_error_and_potentials():
    a, b, M = _problem(5)
    _, log = sinkhorn(a, b, M, 0.1, max_iter=100000, log=True)
    assert log["n_iter"] >= 1 and log["err"] < 1e-9 and log["converged"]
    assert log["f"].shape == a.shape and log["g"].shape == b.shape


def test_warns_when_not_converged():
    a, b, M = _problem(6)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        sinkhorn(a, b, M, 0.001, max_iter=3, tol=1e-15)


def test_warm_start_converges_faster():
    a, b, M = _problem(7)
    Mt = torch.tensor(M)
    la, lb = torch.log(torch.tensor(a)), torch.log(torch.tensor(b))
    cold = sinkhorn_potentials(Mt, 0.05, la, lb, tol=1e-10, eps_scaling=None)
    warm = sinkhorn_potentials(Mt * 1.01, 0.05, la, lb, tol=1e-10, init=(cold.f, cold.g))
    assert warm.n_iter < cold.n_iter


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"reg": 0.0}, "reg must be positive"),
        ({"reg": 0.1, "reg_m": -1.0}, "reg_m must be positive"),
        ({"reg": 0.1, "method": "newton"}, "method must be"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    a, b, M = _problem(8)
    with pytest.raises(ValueError, match=match):
        sinkhorn(a, b, M, **kwargs)


def test_non_finite_cost_is_rejected():
    a, b, M = _problem(9)
    M[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        sinkhorn(a, b, M, 0.1)


# reg >= 0.1 x cost range: near-permutation plans at smaller reg converge
# arbitrarily slowly for any Sinkhorn (POT's too), which is not what these test.
costs = st.integers(2, 8).flatmap(
    lambda n: st.tuples(
        st.integers(0, 2**31 - 1), st.just(n), st.integers(2, 6), st.floats(0.3, 2.0)
    )
)


@pytest.mark.filterwarnings("error::sklearn.exceptions.ConvergenceWarning")
@settings(max_examples=25, deadline=None)
@given(costs)
def test_plan_marginals_match_a_and_b(params):
    seed, n, m, reg = params
    rng = np.random.default_rng(seed)
    M = rng.random((n, m)) * 3
    a, b = rng.random(n) + 0.05, rng.random(m) + 0.05
    a, b = a / a.sum(), b / b.sum()
    P = sinkhorn(a, b, M, reg, tol=1e-9, max_iter=100000)
    np.testing.assert_allclose(P.sum(1), a, atol=1e-8)
    np.testing.assert_allclose(P.sum(0), b, atol=1e-8)
    assert (P >= 0).all()


@pytest.mark.filterwarnings("error::sklearn.exceptions.ConvergenceWarning")
@settings(max_examples=25, deadline=None)
@given(costs, st.floats(-2, 2), st.floats(-2, 2))
def test_plan_invariant_to_constants_added_to_a_row_and_a_column(params, c_row, c_col):
    seed, n, m, reg = params
    rng = np.random.default_rng(seed)
    M = rng.random((n, m)) * 3
    M2 = M.copy()
    M2[0] += c_row
    M2[:, -1] += c_col
    P1 = sinkhorn(None, None, M, reg, tol=1e-9, max_iter=100000)
    P2 = sinkhorn(None, None, M2, reg, tol=1e-9, max_iter=100000)
    np.testing.assert_allclose(P1, P2, atol=1e-7)
