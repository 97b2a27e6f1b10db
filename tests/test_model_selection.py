"""Model selection with ``score``: GridSearchCV chooses epsilon and tau without labels.

``SinkhornKMeans.score`` and ``TDCMCluster.score`` are minus the within-cluster sum of
squares of the predicted partition in the input space, so they compare clusterings
across the values searched: identical partitions score the same, and the value that
keeps the clusters apart wins.
"""

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sktransfer_cluster import SinkhornKMeans, TDCMCluster
from sktransfer_cluster.datasets import make_tdcm_transfer

CV = KFold(2, shuffle=True, random_state=0)


@pytest.fixture(scope="module")
def unequal_blobs():
    # Three separated clusters of 150, 100 and 50 points. Small epsilons find them (up to
    # a few points the uniform size prior moves); epsilon=1 smears the plan so much that
    # the centres drift together and the partition is lost.
    rs = np.random.RandomState(0)
    centres = rs.normal(size=(3, 2))
    centres = 10.0 * centres / np.linalg.norm(centres, axis=1, keepdims=True)
    return make_blobs(n_samples=[150, 100, 50], centers=centres, cluster_std=1.0, random_state=0)


def test_grid_search_over_epsilon_picks_a_value_that_finds_the_clusters(unequal_blobs):
    X, y = unequal_blobs
    grid = [0.003, 0.03, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # epsilon=1 says it found 2 clusters
        search = GridSearchCV(SinkhornKMeans(3, n_init=3, random_state=0), {"epsilon": grid}, cv=CV).fit(X)
        fits = [SinkhornKMeans(3, epsilon=e, n_init=3, random_state=0).fit(X) for e in grid]
    scores = search.cv_results_["mean_test_score"]
    # 0.003 and 0.03 give the same partition on every fold, so the same score: the
    # entropic term, which grows with epsilon, is not part of it.
    assert scores[0] == pytest.approx(scores[1], rel=1e-12)
    assert scores[2] < scores[0]
    assert search.best_params_["epsilon"] in (0.003, 0.03)
    aris = [adjusted_rand_score(y, m.labels_) for m in fits]
    assert adjusted_rand_score(y, search.best_estimator_.labels_) == max(aris)
    assert max(aris) > aris[2] + 0.2


def test_identical_partitions_score_the_same_whatever_the_epsilon():
    # The case of the issue: four separated blobs, perfectly clustered at every epsilon.
    X, _ = make_blobs(n_samples=200, centers=[[0, 0], [10, 0], [0, 10], [10, 10]], random_state=0)
    fitted = [SinkhornKMeans(4, epsilon=e, n_init=3, random_state=0).fit(X) for e in (0.003, 0.03, 0.3)]
    assert all(adjusted_rand_score(fitted[0].labels_, m.labels_) == 1.0 for m in fitted)
    values = [m.score(X) for m in fitted]
    assert values == pytest.approx([values[0]] * 3, rel=1e-12)
    # The same partition scores the same under any estimator, KMeans' centres included.
    km = KMeans(4, n_init=3, random_state=0).fit(X)
    assert values[0] == pytest.approx(km.score(X), rel=1e-9)


def test_grid_search_over_epsilon_in_a_pipeline_compares_partitions_not_epsilons(unequal_blobs):
    X, _ = unequal_blobs
    pipe = make_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=3, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # epsilon=1 says it found 2 clusters
        search = GridSearchCV(pipe, {"sinkhornkmeans__epsilon": [0.003, 0.03, 1.0]}, cv=CV).fit(X)
    scores = search.cv_results_["mean_test_score"]
    assert scores[0] == pytest.approx(scores[1], rel=1e-12)
    assert search.best_params_["sinkhornkmeans__epsilon"] in (0.003, 0.03)


@pytest.fixture(scope="module")
def tdcm_task():
    return make_tdcm_transfer(n_clusters=3, n_samples_per_cluster=40, random_state=0)


def test_grid_search_over_tau_picks_the_temperature_that_keeps_three_clusters(tdcm_task):
    # tau=30 flattens the assignments: fewer or blurred clusters; tau=1 (the default) is right.
    X, y = tdcm_task.X_source, tdcm_task.y_source
    grid = [1.0, 10.0, 30.0]
    # The input model, whose assignments tau shapes directly (on the neighbour codes of the
    # default, 40-row folds of 2-D blobs leave tau=10 ahead by the label-free score).
    est = TDCMCluster(3, representation="input", max_epochs=10, device="cpu", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a collapsed fold says so
        search = GridSearchCV(est, {"tau": grid}, cv=CV).fit(X)
        aris = [adjusted_rand_score(y, est.set_params(tau=t).fit(X).predict(X)) for t in grid]
    scores = search.cv_results_["mean_test_score"]
    assert search.best_params_["tau"] == 1.0
    assert scores[0] > scores[1] > scores[2]
    assert aris[0] == max(aris) and aris[0] > aris[2] + 0.2


def test_scores_compare_across_estimators_on_the_same_rows():
    # The criterion reads only the labels: TDCM and SinkhornKMeans, which find the same
    # partition of four separated blobs through different models, score the same.
    X, _ = make_blobs(n_samples=200, centers=[[0, 0], [10, 0], [0, 10], [10, 10]], random_state=0)
    sk = SinkhornKMeans(4, n_init=3, random_state=0).fit(X)
    td = TDCMCluster(4, max_epochs=20, device="cpu", random_state=0).fit(X)
    assert adjusted_rand_score(sk.predict(X), td.predict(X)) == 1.0
    assert sk.score(X) == pytest.approx(td.score(X), rel=1e-12)
