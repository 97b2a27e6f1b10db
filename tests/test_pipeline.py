"""pipeline_transfer's input checks: the target is checked as predict checks it, before anything is
refitted, and a step that cannot be refitted without labels is named (V14's findings, 2026-11-28)."""

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_blobs
from sklearn.decomposition import PCA
from sklearn.feature_selection import SelectKBest, f_classif
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sktransfer_cluster import SinkhornKMeans, pipeline_transfer


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    return X, y


def _steps(pipe):
    return [(name, step) for name, step in pipe.steps]


def test_a_target_of_another_width_is_refused_as_predict_refuses_it(data):
    X, _ = data
    pipe = make_pipeline(StandardScaler(), PCA(2), SinkhornKMeans(3, n_init=1, random_state=0)).fit(X)
    before = _steps(pipe)
    X7 = np.random.default_rng(0).normal(size=(90, 7))
    with pytest.raises(ValueError) as predicted:
        pipe.predict(X7)
    with pytest.raises(ValueError) as transferred:
        pipeline_transfer(pipe, X7)
    assert str(transferred.value) == str(predicted.value)
    assert _steps(pipe) == before and pipe[0].n_features_in_ == 4
    np.testing.assert_array_equal(pipe.predict(X), pipe[-1].labels_)  # still the source model


def test_a_target_with_reordered_columns_is_refused_as_predict_refuses_it(data):
    X, _ = data
    df = pd.DataFrame(X, columns=list("abcd"))
    pipe = make_pipeline(StandardScaler(), SinkhornKMeans(3, n_init=1, random_state=0)).fit(df)
    before = _steps(pipe)
    reordered = df[list("dcba")]
    kept = reordered.copy()
    with pytest.raises(ValueError, match="Feature names must be in the same order"):
        pipeline_transfer(pipe, reordered)
    pd.testing.assert_frame_equal(reordered, kept)
    assert _steps(pipe) == before
    assert pipe.predict(df).shape == (90,)  # the source's own column order is still served


def test_a_step_that_needs_labels_is_named_with_preprocessing_source_as_the_way_out(data):
    X, y = data
    pipe = make_pipeline(SelectKBest(f_classif, k=2), SinkhornKMeans(3, n_init=1, random_state=0)).fit(X, y)
    selector = pipe[0]
    with pytest.raises(ValueError, match=r"step 'selectkbest' \(SelectKBest\) cannot be refitted on the target: "
                                         r"it needs labels.*preprocessing='source'"):
        pipeline_transfer(pipe, X + 0.3)
    assert pipe[0] is selector
    assert pipeline_transfer(pipe, X + 0.3, preprocessing="source").shape == (90,)
