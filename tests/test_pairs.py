"""pairs.dominant_outputs: the labels of CCNCluster under an upper bound on the number of clusters."""

import numpy as np

from sktransfer_cluster.metrics import n_dominant_clusters
from sktransfer_cluster.cluster.ccn.pairs import dominant_outputs


def test_rows_of_minor_outputs_move_to_their_most_probable_dominant_output():
    rng = np.random.default_rng(0)
    n, k = 200, 10
    scores = rng.normal(size=(n, k))
    scores[:90, 2] += 5.0  # outputs 2 and 7 dominate, the others win a few rows each
    scores[90:180, 7] += 5.0
    outputs = scores.argmax(1)
    result = dominant_outputs(scores, outputs, k)
    dominant = np.flatnonzero(np.bincount(outputs, minlength=k) >= n / k)
    assert set(np.unique(result)) == set(dominant)
    assert np.unique(result).shape[0] == n_dominant_clusters(outputs, n_clusters=k)
    keep = np.isin(outputs, dominant)
    np.testing.assert_array_equal(result[keep], outputs[keep])
    np.testing.assert_array_equal(result[~keep], dominant[scores[~keep][:, dominant].argmax(1)])


def test_without_minor_outputs_nothing_moves():
    scores = np.eye(4)[[0, 1, 2, 3] * 5]
    outputs = scores.argmax(1)
    np.testing.assert_array_equal(dominant_outputs(scores, outputs, 4), outputs)
