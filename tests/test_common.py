"""The shared contract, checked over every public estimator.

The estimators are discovered: every class in ``sktransfer_cluster.__all__`` that
subclasses ``TransferClusterMixin`` goes through scikit-learn's checks and every
test below, with no list to edit. ``FAST_PARAMS`` optionally gives a class small
training budgets (an estimator missing from it is tested with its defaults).
Whether an estimator needs ``y``, whether it trains and which parameters are
layer widths are read from the estimator itself (its tags, its ``TrainingRun``
calls, its ``_width_params``).
"""

import math
import pickle
import re

import joblib
import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

import sktransfer_cluster
from sktransfer_cluster import C2MCluster, CCNCluster, PreciseFeatureGAN, SinkhornKMeans, TDCMCluster
from sktransfer_cluster.base import TrainingRun, TransferClusterMixin


def discover_estimators(module=sktransfer_cluster):
    """The estimator classes a module exports: the names in its ``__all__`` that subclass
    ``TransferClusterMixin``."""
    found = (getattr(module, name) for name in module.__all__)
    return [obj for obj in found if isinstance(obj, type) and issubclass(obj, TransferClusterMixin)]


# Small budgets that keep the suite fast: class -> list of configurations (one estimator each).
# Optional: a class missing here is tested once with its defaults.
FAST_PARAMS = {
    SinkhornKMeans: [
        dict(n_clusters=3, n_init=2, max_iter=30),
        dict(
            n_clusters=3, embedding="autoencoder", hidden_dims=(8, 3), pretrain_epochs=2, max_epochs=2,
            batch_size=64, n_init=1,
        ),
    ],
    TDCMCluster: [
        dict(n_clusters=3, hidden_dims=(16,), embedding_dim=4, n_blocks=2, max_epochs=3, batch_size=64),
    ],
    CCNCluster: [
        dict(
            n_clusters=3, hidden_dims=(8,), pair_hidden=8, similarity_epochs=2, clustering_epochs=3,
            batch_size=32,
        ),
    ],
    C2MCluster: [
        dict(
            max_clusters=3, critic_dims=(8,), gae_dims=(8, 4), population=8, cem_iter=2, max_epochs=1,
            sets_per_epoch=2, set_size=32,
        ),
    ],
    PreciseFeatureGAN: [
        dict(
            n_clusters=3, noise_dim=0, hidden_dims=(16,), n_iter=20, batch_size=32, learning_rate=1e-2,
            gp_weight=1.0,
        ),
    ],
}


def make_estimators(classes, fast_params=None):
    """One instance per configuration of each class, on the CPU with ``random_state=0``."""
    fast_params = FAST_PARAMS if fast_params is None else fast_params
    estimators = []
    for cls in classes:
        names = cls._get_param_names()
        pinned = {k: v for k, v in (("device", "cpu"), ("random_state", 0)) if k in names}
        estimators.extend(cls(**{**pinned, **params}) for params in fast_params.get(cls, [{}]))
    return estimators


ESTIMATORS = make_estimators(discover_estimators())


def _ids(est):
    """The class name, plus any string parameter set away from its default (e.g. the embedding)."""
    defaults = type(est)().get_params(deep=False)
    changed = [
        v for k, v in est.get_params(deep=False).items()
        if isinstance(v, str) and k != "device" and v != defaults.get(k)
    ]
    return "-".join([type(est).__name__, *changed])


def _requires_y(est):
    return get_tags(est).target_tags.required


# scikit-learn checks we knowingly fail, with the reason: class -> {check name: reason}.
# Those that follow from a required y are added from the tags for every such estimator.
EXPECTED_FAILED = {}
_NO_Y = "sklearn calls fit(X) without y; this estimator learns from labelled sources and requires y"


_FLOAT32_TRANSFORM = (
    "transform embeds with a float32 network: a row's output changes in its last bits (about 1e-7 "
    "relative, the check's tolerance) with the rows BLAS computes beside it; labels do not "
    "(test_predict_is_the_same_for_a_row_alone_or_in_a_batch)"
)


def _expected_failed_checks(est):
    failed = dict(EXPECTED_FAILED.get(type(est), {}))
    if hasattr(est, "transform") and est._cpu_dtype == torch.float32:
        failed["check_methods_subset_invariance"] = _FLOAT32_TRANSFORM
    if _requires_y(est):
        failed.update({"check_clustering": _NO_Y, "check_clustering(readonly_memmap=True)": _NO_Y})
    return failed


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def _blobs():
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    Xt, yt = make_blobs(n_samples=60, centers=3, n_features=4, random_state=1)
    return X, y, Xt, yt


@pytest.fixture(scope="module")
def data():
    return _blobs()


def _fit(est, X, y):
    return est.fit(X, y) if _requires_y(est) else est.fit(X)


@pytest.fixture(params=ESTIMATORS, ids=_ids)
def estimator(request):
    return clone(request.param)


def test_same_random_state_gives_identical_labels(estimator, data):
    X, y, Xt, _ = data
    a, b = _fit(clone(estimator), X, y), _fit(clone(estimator), X, y)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.predict(Xt), b.predict(Xt))
    np.testing.assert_array_equal(a.transfer(Xt), b.transfer(Xt))


def test_predict_is_the_same_for_a_row_alone_or_in_a_batch(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    batch = est.predict(Xt)
    alone = np.concatenate([est.predict(Xt[i : i + 2]) for i in range(0, Xt.shape[0], 2)])
    np.testing.assert_array_equal(alone, batch)


def test_pickle_and_joblib_round_trips_keep_predictions(estimator, data, tmp_path):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    expected = est.predict(Xt)
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.predict(Xt), expected)
    joblib.dump(est, tmp_path / "model.joblib")
    np.testing.assert_array_equal(joblib.load(tmp_path / "model.joblib").predict(Xt), expected)


def test_clone_is_unfitted_with_same_params(estimator, data):
    X, y, _, _ = data
    est = _fit(estimator, X, y)
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    with pytest.raises(NotFittedError):
        twin.predict(X)


def test_inputs_are_never_modified(estimator, data):
    X, y, Xt, _ = data
    X0, y0, Xt0 = X.copy(), y.copy(), Xt.copy()
    est = _fit(estimator, X, y)
    est.predict(Xt)
    est.score(Xt)
    est.transfer(Xt)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(Xt, Xt0)


def test_transfer_sets_labels_and_predict_serves_the_target(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    labels = est.transfer(Xt)
    assert labels.shape == (Xt.shape[0],)
    np.testing.assert_array_equal(est.labels_, labels)
    assert est.predict(Xt).shape == (Xt.shape[0],)


def test_predict_on_the_rows_fitted_and_transferred_agrees_with_labels(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    tolerance = est._labels_tolerance  # above 0.01 only where labels_ are smoothed by design
    assert np.mean(est.predict(X) != est.labels_) <= tolerance
    est.transfer(Xt)
    assert np.mean(est.predict(Xt) != est.labels_) <= tolerance


def test_transfer_before_fit_raises_not_fitted(estimator, data):
    with pytest.raises(NotFittedError):
        estimator.transfer(data[2])


def test_score_is_a_finite_float(estimator, data):
    X, y, Xt, _ = data
    assert np.isfinite(_fit(estimator, X, y).score(Xt))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_input_is_rejected_at_fit(estimator, data, bad):
    X, y, _, _ = data
    X = X.copy()
    X[3, 1] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        _fit(estimator, X, y)


@pytest.mark.parametrize("method", ["predict", "transfer", "score"])
def test_non_finite_input_is_rejected_after_fit_and_model_stays_usable(estimator, data, method):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    before = est.predict(Xt)
    bad = Xt.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        getattr(est, method)(bad)
    np.testing.assert_array_equal(est.predict(Xt), before)


def test_empty_input_is_rejected(estimator, data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="0 sample"):
        _fit(estimator, X[:0], y[:0])


def test_fewer_samples_than_clusters_is_rejected_with_both_numbers(estimator, data):
    if "n_clusters" not in estimator.get_params():
        pytest.skip("no n_clusters parameter (the number of clusters is found, not given)")
    X, y, _, _ = data
    with pytest.raises(ValueError, match=r"n_samples=2 should be >= n_clusters=3"):
        _fit(estimator, X[:2], y[:2])


def test_one_sample_is_rejected_naming_n_samples(estimator, data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="n_samples=1"):
        _fit(estimator, X[:1], y[:1])


@pytest.mark.parametrize("method", ["predict", "transfer", "score", "transform"])
def test_wrong_feature_count_after_fit_says_what_was_expected(estimator, data, method):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    if not hasattr(est, method):
        pytest.skip(f"{type(est).__name__} has no {method}")
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 4 features"):
        getattr(est, method)(Xt[:, :3])
    assert est.predict(Xt).shape == (Xt.shape[0],)


def test_non_numeric_input_is_rejected(estimator, data):
    X, y, _, _ = data
    X = X.astype(object)
    X[0, 0] = "seven"
    with pytest.raises((ValueError, TypeError), match="string|float|numeric"):
        _fit(estimator, X, y)


def test_missing_required_y_is_a_clear_error(estimator, data):
    if not _requires_y(estimator):
        pytest.skip("y is optional for this estimator")
    with pytest.raises(ValueError, match="requires the source labels y"):
        estimator.fit(data[0])


def test_unavailable_device_is_a_clear_error_and_estimator_stays_usable(estimator, data):
    X, y, _, _ = data
    est = _fit(estimator, X, y)
    before = est.predict(X)
    est.set_params(device="cuda:99")
    with pytest.raises(ValueError, match="not available|device"):
        _fit(est, X, y)
    est.set_params(device="cpu")
    np.testing.assert_array_equal(_fit(est, X, y).predict(X), before)


def test_invalid_device_name_is_a_clear_error(estimator, data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="device"):
        _fit(estimator.set_params(device="tpu"), X, y)


# Parameters named like layer-width tuples: hidden_dims, critic_dims, conv_channels, ...
_WIDTH_NAME = re.compile(r"(_dims|_channels)$")


def _width_named_params(est):
    return sorted(name for name in est.get_params(deep=False) if _WIDTH_NAME.search(name))


def test_every_layer_width_parameter_is_declared_in_width_params(estimator):
    missing = [name for name in _width_named_params(estimator) if name not in type(estimator)._width_params]
    assert not missing, f"{type(estimator).__name__}._width_params does not list {missing}"


@pytest.mark.parametrize("bad", [(0,), (2.5,), (-1,)], ids=["zero", "fraction", "negative"])
def test_bad_layer_widths_name_the_parameter_and_leave_the_model_usable(estimator, data, bad):
    names = sorted(set(_width_named_params(estimator)) | set(type(estimator)._width_params))
    if not names:
        pytest.skip("no layer-width parameters")
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    labels_before, before = est.labels_.copy(), est.predict(Xt)
    for name in names:
        good = est.get_params(deep=False)[name]
        est.set_params(**{name: bad})
        with pytest.raises(ValueError, match=rf"\b{re.escape(name)}\b"):
            _fit(est, X, y)
        est.set_params(**{name: good})
        np.testing.assert_array_equal(est.labels_, labels_before)
        np.testing.assert_array_equal(est.predict(Xt), before)
    np.testing.assert_array_equal(_fit(est, X, y).predict(Xt), before)


def test_int_and_float32_inputs_work(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, np.round(X * 10).astype(np.int64), y)
    assert est.predict(np.round(Xt * 10).astype(np.int64)).shape == (Xt.shape[0],)
    est = _fit(clone(estimator), X.astype(np.float32), y)
    assert est.predict(Xt.astype(np.float32)).shape == (Xt.shape[0],)


def test_verbose_shows_progress_without_failing(estimator, data, capsys):
    X, y, _, _ = data
    _fit(estimator.set_params(verbose=1), X, y)
    assert estimator.labels_.shape == (X.shape[0],)


@pytest.mark.parametrize("method", ["fit", "transfer"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, FloatingPointError])
def test_interrupted_or_diverged_call_leaves_the_previous_model(estimator, data, monkeypatch, method, error):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    before, labels_before = est.predict(Xt), est.labels_.copy()
    hook = "_fit" if method == "fit" else "_transfer"

    def half_done_then_fail(*args, **kwargs):
        est.labels_ = np.full(7, -1)  # a half-written attribute
        raise error("stopped mid-way")

    monkeypatch.setattr(est, hook, half_done_then_fail)
    with pytest.raises(error):
        _fit(est, X, y) if method == "fit" else est.transfer(Xt)
    monkeypatch.undo()
    np.testing.assert_array_equal(est.labels_, labels_before)
    np.testing.assert_array_equal(est.predict(Xt), before)


def test_each_transfer_starts_from_the_source_model(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    first = est.transfer(Xt)
    est.transfer(np.ascontiguousarray(Xt[::-1] * 1.5 + 2.0))  # another target in between
    np.testing.assert_array_equal(est.transfer(Xt), first)


def test_a_refit_after_a_transfer_transfers_from_the_new_source(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    est.transfer(Xt)
    _fit(est, X[::-1].copy(), y[::-1].copy())  # a new source: the model kept for transfers is this one
    np.testing.assert_array_equal(est.transfer(Xt), _fit(clone(estimator), X[::-1].copy(), y[::-1].copy()).transfer(Xt))


def test_a_failed_call_keeps_the_callers_callbacks_and_random_state(estimator, data):
    X, y, Xt, _ = data

    class Recorder:
        epochs = 0

        def on_epoch_end(self, run, values):
            self.epochs += 1

    recorder, random_state = Recorder(), np.random.RandomState(0)
    est = _fit(estimator.set_params(callbacks=[recorder], random_state=random_state), X, y)
    with pytest.raises(ValueError):
        est.transfer(Xt[:1])
    assert est.callbacks[0] is recorder and est.random_state is random_state
    seen = recorder.epochs
    _fit(est, X, y)
    # The refit's epochs reach the caller's object (estimators that train: plain OT k-means has none).
    assert recorder.epochs > seen or seen == 0


def test_set_params_after_fit_changes_nothing_predict_and_score_serve(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    before, score = est.predict(Xt), est.score(Xt)
    changed = {"n_clusters": 2, "max_clusters": 2, "representation": "neighbours", "embedding_dim": 7}
    est.set_params(**{k: v for k, v in changed.items() if k in est.get_params() and est.get_params()[k] != v})
    np.testing.assert_array_equal(est.predict(Xt), before)
    assert est.score(Xt) == score


def test_an_unknown_fit_option_is_refused_before_any_work_naming_it(estimator, data, monkeypatch):
    X, y, _, _ = data
    monkeypatch.setattr(estimator, "_validate_input", lambda *a, **k: pytest.fail("validated X first"))
    with pytest.raises(TypeError, match=r"fit got unexpected keyword argument\(s\) 'sample_weight'.*not supported"):
        estimator.fit(X, y, sample_weight=np.ones(X.shape[0]))


def test_failed_first_fit_leaves_the_estimator_unfitted(estimator, data, monkeypatch):
    X, y, _, _ = data

    def fail(*args, **kwargs):
        estimator.labels_ = np.zeros(3)
        raise FloatingPointError("loss became NaN at epoch 0; lower learning_rate")

    monkeypatch.setattr(estimator, "_fit", fail)
    with pytest.raises(FloatingPointError):
        _fit(estimator, X, y)
    monkeypatch.undo()
    with pytest.raises(NotFittedError):
        estimator.predict(X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="simulates a CUDA-fitted model on a CPU-only machine")
def test_model_fitted_on_gpu_loads_on_cpu_with_a_warning(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    expected = est.predict(Xt)
    state = est.__getstate__()
    state["device_"] = torch.device("cuda")  # what a GPU-fitted model pickles
    restored = type(est).__new__(type(est))
    with pytest.warns(UserWarning, match="not available here; it was loaded on the CPU"):
        restored.__setstate__(state)
    assert restored.device_ == torch.device("cpu")
    np.testing.assert_array_equal(restored.predict(Xt), expected)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fits_and_predicts_on_cuda_and_unpickles(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator.set_params(device="cuda"), X, y)
    assert est.device_.type == "cuda"
    labels = est.predict(Xt)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).predict(Xt), labels)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_every_transfer_on_cuda_starts_from_the_source_model(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator.set_params(device="cuda"), X, y)
    first = est.transfer(Xt)
    est.transfer(np.ascontiguousarray(Xt[::-1] * 1.5 + 2.0))  # another target in between
    np.testing.assert_array_equal(est.transfer(Xt), first)
    assert est.device_.type == "cuda"


def test_negative_stride_views_are_accepted(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X[::-1], y[::-1])
    np.testing.assert_array_equal(est.predict(Xt[::-1]), est.predict(Xt)[::-1])


# ----------------------------------------------------------- training loops

def _explicit(run, loss, extras):
    """``(loss, extras)`` as ``end_epoch`` will record them: the step means when ``loss`` is None."""
    if loss is None:
        means = run.epoch_means()
        loss, extras = means.pop("loss"), {**means, **extras}
    return loss, extras


def _training_phases(est, X, y):
    """The phase of every ``TrainingRun.end_epoch`` call of one fit of a clone of ``est``."""
    phases = []
    original = TrainingRun.end_epoch

    def counting(run, loss=None, **extras):
        phases.append(run.phase)
        return original(run, loss, **extras)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TrainingRun, "end_epoch", counting)
        _fit(clone(est), X, y)
    return phases


_TRAINS = {}


def _trains(est):
    """``est`` when its fit runs training epochs (through TrainingRun), else skip.

    Read from a short fit on the common data, cached per configuration.
    """
    key = (type(est), repr(est.get_params(deep=False)))
    if key not in _TRAINS:
        X, y, _, _ = _blobs()
        _TRAINS[key] = bool(_training_phases(est, X, y))
    if not _TRAINS[key]:
        pytest.skip("fit runs no training epochs")
    return est


def _keeps_best(est):
    if "keep_best" not in est.get_params(deep=False):
        pytest.skip("no keep_best parameter")
    return _trains(est).set_params(keep_best=True)


def _patch_end_epoch(monkeypatch, *, interrupt_at=None, before=False, losses=None, seen=None, keeping_only=False):
    """Make ``TrainingRun.end_epoch`` misbehave like a Ctrl-C or a diverging loss.

    Call ``i`` (counted over the whole fit) raises ``KeyboardInterrupt`` when
    ``i == interrupt_at`` -- before or after the epoch is recorded -- and reports
    ``losses[i]`` instead of the real loss when given. ``seen`` collects
    ``(loss, snapshot of the run's state)`` per recorded epoch. With
    ``keeping_only`` only the phases that can keep a model (``keeps_model``)
    are counted and disturbed.
    """
    original = TrainingRun.end_epoch
    calls = {"n": 0}

    def snapshot(obj):
        if isinstance(obj, torch.nn.Module):
            return {k: v.clone() for k, v in obj.state_dict().items()}
        return obj.detach().clone()

    def end_epoch(run, loss=None, **postfix):
        loss, postfix = _explicit(run, loss, postfix)
        if keeping_only and not run.keeps_model:
            return original(run, loss, **postfix)
        i = calls["n"]
        calls["n"] += 1
        if i == interrupt_at and before:
            raise KeyboardInterrupt
        if losses is not None:
            loss = losses[i]
        original(run, loss, **postfix)
        if seen is not None:
            seen.append((loss, [snapshot(m) for m in run.state]))
        if i == interrupt_at:
            raise KeyboardInterrupt

    monkeypatch.setattr(TrainingRun, "end_epoch", end_epoch)


def _check_records(history):
    assert isinstance(history, list)
    for record in history:
        assert {"phase", "epoch", "loss"} <= set(record), record
        assert isinstance(record["phase"], str) and record["phase"], record
        assert isinstance(record["epoch"], int) and record["epoch"] >= 0, record
        assert isinstance(record["loss"], float) and math.isfinite(record["loss"]), record


def _threads_in_training(est, X, y, monkeypatch, *, fail=False):
    """torch's thread count at each epoch end of a fit started at 2 threads, and after it."""
    seen = []
    original = TrainingRun.end_epoch

    def spy(run, loss=None, **extras):
        seen.append(torch.get_num_threads())
        if fail:
            raise RuntimeError("training failed")
        return original(run, loss, **extras)

    monkeypatch.setattr(TrainingRun, "end_epoch", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        if fail:
            with pytest.raises(RuntimeError, match="training failed"):
                _fit(est, X, y)
        else:
            _fit(est, X, y)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    return seen, after


def test_training_runs_on_one_cpu_thread_and_restores_the_callers_count(estimator, data, monkeypatch):
    X, y, _, _ = data
    seen, after = _threads_in_training(_trains(estimator), X, y, monkeypatch)
    assert seen and set(seen) == {1}
    assert after == 2


def test_the_callers_thread_count_is_restored_when_training_fails(estimator, data, monkeypatch):
    X, y, _, _ = data
    seen, after = _threads_in_training(_trains(estimator), X, y, monkeypatch, fail=True)
    assert seen == [1] and after == 2


def test_history_records_have_phase_epoch_and_loss(estimator, data):
    X, y, Xt, _ = data
    phases = _training_phases(estimator, X, y)
    est = _fit(estimator, X, y)
    _check_records(est.history_)
    if phases:
        assert est.history_, "fit trained but recorded no history"
        assert {r["phase"] for r in est.history_} <= set(phases)
    else:
        assert est.history_ == []
    est.transfer(Xt)
    _check_records(est.history_)


def test_a_refit_starts_a_fresh_history(estimator, data):
    X, y, _, _ = data
    est = _fit(estimator, X, y)
    first = list(est.history_)
    assert _fit(est, X, y).history_ == first


def test_interrupt_with_keep_best_finishes_fit_with_a_usable_model(estimator, data, monkeypatch):
    X, y, Xt, _ = data
    est = _keeps_best(estimator)
    _patch_end_epoch(monkeypatch, interrupt_at=0, keeping_only=True)
    with pytest.warns(UserWarning, match="interrupted during .* kept the"):
        _fit(est, X, y)
    monkeypatch.undo()
    assert est.labels_.shape == (X.shape[0],)
    labels = est.predict(Xt)
    assert labels.shape == (Xt.shape[0],) and labels.min() >= 0
    est.transfer(Xt)  # and it stays usable


def test_interrupt_without_keep_best_restores_the_previous_model(estimator, data, monkeypatch):
    X, y, Xt, _ = data
    est = _fit(_trains(estimator), X, y)
    before = est.predict(Xt)
    _patch_end_epoch(monkeypatch, interrupt_at=0)
    with pytest.raises(KeyboardInterrupt):
        _fit(est, X[::-1], y[::-1])
    monkeypatch.undo()
    np.testing.assert_array_equal(est.predict(Xt), before)


def test_interrupt_before_the_first_epoch_ends_propagates_even_with_keep_best(estimator, data, monkeypatch):
    X, y, _, _ = data
    est = _keeps_best(estimator)
    _patch_end_epoch(monkeypatch, interrupt_at=0, before=True)
    with pytest.raises(KeyboardInterrupt):
        _fit(est, X, y)
    monkeypatch.undo()
    with pytest.raises(NotFittedError):
        est.predict(X)


def test_diverging_loss_names_the_epoch_and_leaves_the_estimator_unfitted(estimator, data, monkeypatch):
    X, y, _, _ = data
    est = _trains(estimator)
    _patch_end_epoch(monkeypatch, losses=[float("nan")] * 10**6)
    message = r"the .+ loss became nan at [\w ]+ 0 of \d+; .+ or standardise X"
    with pytest.raises(FloatingPointError, match=message):
        _fit(est, X, y)
    monkeypatch.undo()
    with pytest.raises(NotFittedError):
        est.predict(X)
    assert _fit(est, X, y).labels_.shape == (X.shape[0],)  # usable afterwards


def test_keep_best_goes_back_to_the_epoch_of_lowest_loss(data, monkeypatch):
    X, _, _, _ = data
    est = SinkhornKMeans(
        3, embedding="autoencoder", hidden_dims=(8, 3), pretrain_epochs=3, max_epochs=2, batch_size=32,
        n_init=1, keep_best=True, device="cpu", random_state=0,
    )
    seen = []
    _patch_end_epoch(monkeypatch, interrupt_at=2, losses=[3.0, 1.0, 2.0], seen=seen)
    with pytest.warns(UserWarning, match=r"epoch 1, loss 1\)"):
        est.fit(X)
    monkeypatch.undo()
    assert len(seen) == 3  # the joint phase ran no epoch after the interrupt
    best = seen[1][1][0]
    for name, value in est.autoencoder_.state_dict().items():
        torch.testing.assert_close(value, best[name], rtol=0, atol=0)


def test_fit_and_transfer_leave_torch_global_rng_unchanged(estimator, data):
    X, y, Xt, _ = data
    torch.manual_seed(123)
    state = torch.get_rng_state()
    est = _fit(estimator, X, y)
    est.transfer(Xt)
    assert torch.equal(torch.get_rng_state(), state) and torch.initial_seed() == 123


def test_labels_of_the_wrong_length_are_refused(estimator, data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="inconsistent numbers of samples|90 rows"):
        estimator.fit(X, y[:-1])
    _fit(estimator, X, y)  # still usable


def test_single_class_source_labels_warn_where_labels_are_required(estimator, data):
    if not _requires_y(estimator):
        pytest.skip("ignores y")
    X, y, _, _ = data
    with pytest.warns(UserWarning, match="single class"):
        estimator.fit(X[y == 0], y[y == 0])


def test_verbose_fit_writes_plain_progress_lines_to_a_log(estimator, data, capsys):
    # capsys: stderr is not a terminal, as when output goes to a file.
    X, y, _, _ = data
    _fit(estimator.set_params(verbose=1), X, y)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith(type(estimator).__name__)]
    assert lines and all("\r" not in line for line in lines)
    assert re.search(r": (\d+)/\1 \(\d+\.\d s\)", lines[-1])  # the last line closes its phase, with the time


def test_n_clusters_is_the_number_of_distinct_labels_after_fit_and_after_transfer(estimator, data):
    X, y, Xt, _ = data
    est = _fit(estimator, X, y)
    assert est.n_clusters_ == np.unique(est.labels_).shape[0]
    labels = est.transfer(Xt)
    assert est.n_clusters_ == np.unique(labels).shape[0]
