"""The training loop's mechanics (:mod:`sktransfer_cluster.base.training`): what ``callbacks`` accept."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError

from sktransfer_cluster import SinkhornKMeans, TDCMCluster
from sktransfer_cluster.base import TrainingCallback


def _on_epoch_end(run, values):  # a function: it has no on_epoch_end of its own
    pass


@pytest.fixture(scope="module")
def X():
    return make_blobs(n_samples=60, centers=3, n_features=4, random_state=0)[0]


def test_a_callback_that_defines_no_hook_is_refused_before_fit_starts(X):
    callbacks = [_on_epoch_end]
    est = SinkhornKMeans(3, callbacks=callbacks, random_state=0)
    with pytest.raises(TypeError, match=r"callbacks\[0\] \(function\) defines none of on_phase_begin, on_epoch_end, "
                                        r"on_record, on_phase_end, so it would never be called; pass objects"):
        est.fit(X)
    assert est.callbacks is callbacks and callbacks == [_on_epoch_end]
    with pytest.raises(NotFittedError):
        est.predict(X)


def test_a_callback_that_defines_no_hook_set_after_fit_is_refused_when_training_starts(X):
    est = TDCMCluster(3, max_epochs=1, random_state=0, device="cpu").fit(X)
    labels = est.labels_.copy()
    est.set_params(callbacks=[_on_epoch_end])
    with pytest.raises(TypeError, match=r"callbacks\[0\] \(function\) defines none of"):
        est.transfer(X + 0.5, fine_tune_epochs=1)
    np.testing.assert_array_equal(est.labels_, labels)  # the source model, as before the call
    np.testing.assert_array_equal(est.predict(X), labels)


def test_a_training_callback_subclass_with_no_method_of_its_own_is_accepted(X):
    class Silent(TrainingCallback):
        pass

    assert SinkhornKMeans(3, callbacks=[Silent()], n_init=1, random_state=0).fit(X).labels_.shape == (60,)
