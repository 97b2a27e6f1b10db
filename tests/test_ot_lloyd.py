"""ot.lloyd's kernels on rows far from the origin (V15 #7)."""

import numpy as np
import torch

from sktransfer_cluster.ot.lloyd import _offset_mean, ot_lloyd, ot_lloyd_best, pair_with_weights


def _three_blobs():
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(300, 5)), rng.normal(size=(200, 5)) + 4, rng.normal(size=(100, 5)) - 4]
    c0 = X[rng.choice(600, (1, 3), replace=False)]
    return X, c0, torch.log(torch.tensor([0.5, 1 / 3, 1 / 6]))


def _run(X, c0, log_w, dtype, offset):
    args = (torch.tensor(X + offset, dtype=dtype), torch.tensor(c0 + offset, dtype=dtype), 0.1, log_w, 100, 1e-10)
    centres = ot_lloyd(*args)[0][0].double().numpy() - offset
    cost, best = ot_lloyd_best(*args)[:2]
    return centres, cost, best.double().numpy() - offset


def test_float32_ot_lloyd_at_an_offset_of_1e4_finds_the_float64_centres():
    """The |x|^2 - 2 x.c + |c|^2 costs cancelled in float32: centres 0.35 off."""
    X, c0, log_w = _three_blobs()
    f64, _, _ = _run(X, c0, log_w, torch.float64, 0.0)
    f32, _, _ = _run(X, c0, log_w, torch.float32, 1e4)
    assert np.abs(f32 - f64).max() < 1e-2  # float32's resolution at 1e4 is 1e-3


def test_float32_ot_lloyd_best_at_an_offset_of_1e4_reports_the_float64_cost():
    """The cost cancelled to 0.0 in float32."""
    X, c0, log_w = _three_blobs()
    _, cost64, _ = _run(X, c0, log_w, torch.float64, 0.0)
    _, cost32, best32 = _run(X, c0, log_w, torch.float32, 1e4)
    assert abs(cost32 - cost64) < 1e-3 * cost64
    assert np.abs(best32 - _run(X, c0, log_w, torch.float64, 0.0)[2]).max() < 1e-2


def test_rows_near_the_origin_are_not_centred():
    """Normalised rows (what the estimators pass) run as given, so their results keep their bits."""
    X, _, _ = _three_blobs()
    assert _offset_mean(torch.tensor(X)) is None
    assert _offset_mean(torch.tensor(X + 1e3)) is None  # float64 resolves the costs at 1e3
    assert _offset_mean(torch.tensor(X + 1e3, dtype=torch.float32)) is not None


def test_pair_with_weights_gives_the_largest_weight_to_the_largest_cell():
    X = torch.tensor([[0.0], [0.1], [0.2], [0.3], [5.0], [5.1], [9.0]], dtype=torch.float64)
    starts = torch.tensor([[[9.0], [0.1], [5.0]], [[5.0], [9.0], [0.1]]], dtype=torch.float64)
    paired = pair_with_weights(X, starts, [0.2, 0.1, 0.7])
    # Cells: 4 rows nearest 0.1, 2 nearest 5.0, 1 nearest 9.0; weights ranked 0.7 > 0.2 > 0.1.
    expected = torch.tensor([[5.0], [9.0], [0.1]], dtype=torch.float64)
    assert torch.equal(paired[0], expected)
    assert torch.equal(paired[1], expected)


def test_pair_with_uniform_weights_returns_the_starts_as_given():
    X = torch.randn(20, 2, dtype=torch.float64)
    starts = torch.randn(2, 3, 2, dtype=torch.float64)
    assert pair_with_weights(X, starts, [1.0, 1.0, 1.0]) is starts
