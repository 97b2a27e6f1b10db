"""The explicit contract of ``TransferClusterMixin``, on a sixth estimator that is not part
of the package.

``CentroidCluster`` is the complete example of ``docs/adding_an_estimator.md``: this file
executes that code block (so the page and the test cannot drift) and shows that subclassing
the mixins and implementing the hooks is all it takes to pass scikit-learn's checks and the
package's own common tests. The rest states what the base enforces: the abstract hooks, the
order of the bases, ``_fit``'s duties, ``_width_params``, ``_requires_y`` through the tags and
the discovery of exported estimators.
"""

import copy
import inspect
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError
import torch
from sklearn.base import BaseEstimator, ClusterMixin, clone
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

import sktransfer_cluster
from sktransfer_cluster.base import COMMON_PARAMETER_CONSTRAINTS, TransferClusterMixin
from sktransfer_cluster.base.arrays import FoldedRows, chunk_rows, inference_rows
from sktransfer_cluster.base.contract import inplace_activations
from sktransfer_cluster.nn import init_module

from . import test_common as common

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding_an_estimator.md"
_MARKER = "# sktransfer_cluster/cluster/centroid/estimator.py"


def _example_source():
    """The complete example of the guide: its python block that starts with ``_MARKER``."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    found = [block for block in blocks if block.startswith(_MARKER)]
    assert len(found) == 1, f"{DOC.name} must hold one python block starting with {_MARKER!r}"
    return found[0]


def _load_example():
    # Executed as if defined here, so that its classes pickle (module = this one).
    namespace = {"__name__": __name__}
    exec(compile(_example_source(), str(DOC), "exec"), namespace)
    return namespace["CentroidCluster"]


CentroidCluster = _load_example()

EXAMPLES = [
    CentroidCluster(
        n_clusters=3, max_epochs=3, transfer_epochs=2, batch_size=32, device="cpu", random_state=0
    ),
]


# ------------------------------------------------- the example passes the common suite
@parametrize_with_checks(EXAMPLES, expected_failed_checks=common._expected_failed_checks)
def test_example_passes_sklearn_checks(estimator, check):
    check(estimator)


@pytest.fixture(params=EXAMPLES, ids=common._ids)
def estimator(request):
    return clone(request.param)


data = common.data

# Every common test that takes an estimator runs here on the example too (same names, this
# module's ``estimator`` fixture). test_sklearn_compatible_estimator is parametrized over the
# package's estimators; the example's sklearn checks are the test above.
for _name, _test in vars(common).items():
    if (
        _name.startswith("test_")
        and _name != "test_sklearn_compatible_estimator"
        and "estimator" in inspect.signature(_test).parameters
    ):
        globals()[_name] = _test
del _name, _test

# The example's docstring (Examples section) runs as a doctest of this module under
# --doctest-modules (pyproject's addopts): it is defined here.


def test_the_example_trains_through_training_run_and_records_its_epochs():
    X, _ = make_blobs(n_samples=60, centers=3, random_state=0)
    est = clone(EXAMPLES[0]).fit(X)
    assert [(r["phase"], r["epoch"]) for r in est.history_] == [("fit", e) for e in range(3)]
    est.transfer(X + 1.0)
    assert [r["phase"] for r in est.history_[3:]] == ["transfer", "transfer"]


# ------------------------------------------------------------------ abstract hooks
HOOKS = ("_fit", "_transfer", "_predict", "score")


def _class_without(hook):
    body = {name: CentroidCluster.__dict__[name] for name in ("__init__", *HOOKS) if name != hook}
    return type(f"No{hook.strip('_').title()}", (TransferClusterMixin, ClusterMixin, BaseEstimator), body)


@pytest.mark.parametrize("hook", HOOKS)
def test_a_class_missing_a_hook_cannot_be_instantiated(hook):
    cls = _class_without(hook)
    with pytest.raises(TypeError, match=rf"abstract.*\b{hook}\b"):
        cls()


def test_implementing_the_four_hooks_is_enough_to_instantiate():
    body = {name: CentroidCluster.__dict__[name] for name in ("__init__", *HOOKS)}
    cls = type("OnlyHooks", (TransferClusterMixin, ClusterMixin, BaseEstimator), body)
    assert cls(n_clusters=2).get_params()["n_clusters"] == 2


# -------------------------------------------------------------------- order of bases
@pytest.mark.parametrize(
    "bases",
    [
        (ClusterMixin, BaseEstimator, TransferClusterMixin),
        (BaseEstimator, TransferClusterMixin, ClusterMixin),
        (ClusterMixin, TransferClusterMixin, BaseEstimator),
    ],
    ids=lambda bases: "-".join(b.__name__ for b in bases),
)
def test_listing_the_mixins_in_the_wrong_order_fails_at_definition(bases):
    # ClusterMixin before TransferClusterMixin would shadow the base's fit_predict, which
    # passes y on (sklearn's drops it), and its tags.
    with pytest.raises(TypeError, match="TransferClusterMixin before"):
        type("WrongOrder", bases, {})


def test_the_documented_order_is_accepted():
    assert issubclass(CentroidCluster, TransferClusterMixin)
    assert CentroidCluster.__mro__.index(TransferClusterMixin) < CentroidCluster.__mro__.index(ClusterMixin)


# ------------------------------------------------------------------- _fit's duties
@pytest.mark.parametrize("forgets", [("labels_",), ("n_iter_",), ("labels_", "n_iter_")], ids="+".join)
def test_fit_that_forgets_labels_or_n_iter_is_a_clear_error(forgets):
    class Forgetful(CentroidCluster):
        def _fit(self, X, y, *, rng, torch_gen):
            super()._fit(X, y, rng=rng, torch_gen=torch_gen)
            for name in forgets:
                delattr(self, name)

    X, _ = make_blobs(n_samples=30, centers=3, random_state=0)
    est = Forgetful(n_clusters=3, max_epochs=1, device="cpu", random_state=0)
    with pytest.raises(NotImplementedError, match=r"_fit must set " + r" and ".join(forgets)):
        est.fit(X)
    with pytest.raises(NotFittedError):  # nothing half-fitted is left behind
        est.predict(X)


# ---------------------------------------------------------------- layer widths
class _WideCentroidCluster(CentroidCluster):
    """The example with a (here unused) layer-width parameter declared in ``_width_params``."""

    _width_params = ("hidden_dims",)

    def __init__(self, n_clusters=3, *, hidden_dims=(4,), max_epochs=1, device="cpu", random_state=0):
        super().__init__(n_clusters, max_epochs=max_epochs, device=device, random_state=random_state)
        self.hidden_dims = hidden_dims


@pytest.mark.parametrize(
    "bad",
    [(0,), (2.5,), (-1,), (True,), "64", 64],
    ids=["zero", "fraction", "negative", "bool", "str", "int"],
)
def test_declaring_width_params_is_all_it_takes_to_validate_widths(bad):
    X, _ = make_blobs(n_samples=30, centers=3, random_state=0)
    with pytest.raises(ValueError, match=r"\bhidden_dims must be a tuple of positive ints"):
        _WideCentroidCluster(hidden_dims=bad).fit(X)
    assert _WideCentroidCluster(hidden_dims=(8, 4)).fit(X).labels_.shape == (30,)
    assert _WideCentroidCluster(hidden_dims=None).fit(X).labels_.shape == (30,)  # None is skipped


# --------------------------------------------------------------- required y, via tags
class _LabelledCentroidCluster(CentroidCluster):
    """The example declaring that fit needs source labels."""

    _requires_y = True


def test_requires_y_is_declared_once_and_read_through_the_tags():
    assert get_tags(CentroidCluster()).target_tags.required is False
    assert get_tags(_LabelledCentroidCluster()).target_tags.required is True


def test_a_class_requiring_y_refuses_fit_without_it():
    X, y = make_blobs(n_samples=30, centers=3, random_state=0)
    est = _LabelledCentroidCluster(n_clusters=3, max_epochs=1, device="cpu", random_state=0)
    with pytest.raises(ValueError, match="requires the source labels y"):
        est.fit(X)
    assert est.fit(X, y).labels_.shape == (30,)


def test_every_package_estimator_declares_y_through_its_tags():
    for cls in common.discover_estimators():
        assert get_tags(cls()).target_tags.required is bool(cls._requires_y), cls.__name__


# ------------------------------------------------------------------------ discovery
def test_the_common_suite_covers_every_exported_estimator():
    exported = {
        obj for obj in (getattr(sktransfer_cluster, name) for name in sktransfer_cluster.__all__)
        if isinstance(obj, type) and issubclass(obj, TransferClusterMixin)
    }
    assert exported and exported == {type(est) for est in common.ESTIMATORS}


def test_a_newly_exported_estimator_is_discovered_without_editing_a_list(monkeypatch):
    monkeypatch.setattr(sktransfer_cluster, "CentroidCluster", CentroidCluster, raising=False)
    monkeypatch.setattr(sktransfer_cluster, "__all__", [*sktransfer_cluster.__all__, "CentroidCluster"])
    assert CentroidCluster in common.discover_estimators()
    [est] = common.make_estimators([CentroidCluster], fast_params={})  # not in FAST_PARAMS: defaults
    assert est.get_params() == CentroidCluster(device="cpu", random_state=0).get_params()


def test_discovery_ignores_exported_functions_and_other_classes():
    found = common.discover_estimators()
    assert all(issubclass(cls, TransferClusterMixin) for cls in found)
    assert sktransfer_cluster.clustering_accuracy not in found


def test_estimators_of_a_class_are_fitted_on_the_cpu_with_a_fixed_seed():
    for est in common.ESTIMATORS:
        params = est.get_params(deep=False)
        assert params.get("device", "cpu") == "cpu" and params.get("random_state", 0) == 0, est


def test_labels_of_the_example_are_consecutive_from_zero_when_a_centroid_goes_unused():
    # Two far-apart groups and four centroids: whatever goes unused is dropped, so labels,
    # predict and cluster_centers_ agree.
    X = np.concatenate([np.zeros((10, 2)), np.full((10, 2), 100.0)])
    est = CentroidCluster(n_clusters=4, max_epochs=2, device="cpu", random_state=0).fit(X)
    m = est.cluster_centers_.shape[0]
    assert sorted(set(est.labels_.tolist())) == list(range(m))
    np.testing.assert_array_equal(est.predict(X), est.labels_)


# ------------------------------------------------------------------------ discoverable transfer
def test_every_public_transfer_documents_each_of_its_options():
    import inspect

    for cls in common.discover_estimators():
        # rng and torch_gen come from the base, not from the user.
        hidden = set(inspect.signature(cls._transfer).parameters) - {"self", "X", "rng", "torch_gen"}
        public = set(inspect.signature(cls.transfer).parameters) - {"self", "X"}
        assert public == hidden, cls.__name__  # every option of _transfer is a named parameter
        doc = cls.transfer.__doc__
        assert "``_transfer``" not in doc and "Examples" in doc, cls.__name__
        for name in hidden | {"X"}:
            assert re.search(rf"^\s+{name} : ", doc, flags=re.M), (cls.__name__, name)


# ------------------------------------------------------------ fewer clusters than asked for
def test_fit_on_fewer_distinct_rows_than_n_clusters_warns_naming_the_duplicates():
    X = np.repeat([[0.0, 0.0], [5.0, 5.0]], 10, axis=0)
    message = r"found 2 distinct clusters, fewer than n_clusters=4: X has only 2 distinct rows"
    with pytest.warns(ConvergenceWarning, match=message):
        CentroidCluster(n_clusters=4, max_epochs=2, device="cpu", random_state=0).fit(X)


def test_fit_that_leaves_clusters_empty_warns_like_kmeans():
    X, _ = make_blobs(n_samples=40, centers=[[0, 0], [100, 100]], cluster_std=0.001, random_state=0)
    est = CentroidCluster(n_clusters=4, max_epochs=2, device="cpu", random_state=0)
    with pytest.warns(ConvergenceWarning, match="fewer than n_clusters=4: the data may hold fewer"):
        est.fit(X)
    assert np.unique(est.labels_).shape[0] < 4


def test_transfer_that_leaves_clusters_empty_warns_too():
    X, _ = make_blobs(n_samples=60, centers=3, cluster_std=0.3, random_state=0)
    est = CentroidCluster(n_clusters=3, max_epochs=2, device="cpu", random_state=0).fit(X)
    with pytest.warns(ConvergenceWarning, match=r"transfer found 1 distinct clusters.*1 distinct rows"):
        est.transfer(np.zeros((30, 2)))


def test_an_upper_bound_on_the_number_of_clusters_gives_no_warning():
    from sktransfer_cluster import CCNCluster

    X, y = make_blobs(n_samples=60, centers=2, cluster_std=0.3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = CCNCluster(6, estimate_n_clusters=True, similarity_epochs=2, clustering_epochs=2,
                         device="cpu", random_state=0).fit(X, y)
    assert np.unique(est.labels_).shape[0] < 6


# ------------------------------------------- labels_ and predict tell the same story
class _StaleLabelsCluster(CentroidCluster):
    """The example whose ``labels_`` are drawn before a last training step moved the centres."""

    def _fit(self, X, y, **kwargs):
        super()._fit(X, y, **kwargs)
        self.labels_ = (self.labels_ + 1) % self.n_clusters  # as if the centres moved after


class _SmoothedLabelsCluster(_StaleLabelsCluster):
    """The same, declaring that its labels_ are by design more than a row-wise rule."""

    _labels_tolerance = 1.0


def _stale_blobs():
    return make_blobs(n_samples=60, centers=3, cluster_std=0.3, random_state=0)[0]


def test_fit_whose_labels_disagree_with_predict_warns_naming_the_share_and_causes():
    est = _StaleLabelsCluster(n_clusters=3, max_epochs=2, device="cpu", random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"fit: predict\(X\) on the rows just fitted disagrees "
                      r"with labels_ on 100\.0% of them.*training stopped.*float precision"):
        est.fit(_stale_blobs())
    assert est.labels_.shape == (60,)  # a warning, not an error: the fit stands


def test_transfer_whose_labels_disagree_with_predict_warns_too():
    X = _stale_blobs()
    est = CentroidCluster(n_clusters=3, max_epochs=2, device="cpu", random_state=0).fit(X)
    est._transfer = lambda X, **kw: (CentroidCluster._transfer(est, X, **kw) + 1) % 3
    with pytest.warns(ConvergenceWarning, match=r"transfer: predict\(X\) on the rows just transferred to"):
        est.transfer(X)


def test_a_declared_labels_tolerance_silences_the_consistency_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        _SmoothedLabelsCluster(n_clusters=3, max_epochs=2, device="cpu", random_state=0).fit(_stale_blobs())


def test_a_consistent_fit_and_transfer_give_no_consistency_warning():
    X = _stale_blobs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = CentroidCluster(n_clusters=3, max_epochs=2, device="cpu", random_state=0).fit(X)
        est.transfer(X + 1.0)
    np.testing.assert_array_equal(est.predict(X + 1.0), est.labels_)


class _CollapsedCluster(CentroidCluster):
    """Two rows repeated, three clusters: two centres coincide, and ``labels_`` takes the later
    of the tied pair where ``predict`` (the nearest centre) takes the earlier, as an OT plan may."""

    def _fit(self, X, y, **kwargs):
        super()._fit(X, y, **kwargs)
        self.cluster_centers_ = np.stack([X[0], X[-1], X[-1]])
        self.labels_ = np.where(np.all(X == X[0], axis=1), 0, 2)


def test_labels_numbered_otherwise_on_collapsed_centres_warn_naming_the_collapse():
    # Issue 30, item 2: this warning said "training stopped ... float precision" here, which
    # sent the user to the wrong fix (the fewer-clusters warning beside it names duplicates).
    X = np.repeat([[0.0, 0.0], [4.0, 4.0]], [20, 40], axis=0)
    est = _CollapsedCluster(n_clusters=3, max_epochs=2, device="cpu", random_state=0)
    with pytest.warns(ConvergenceWarning) as record:
        est.fit(X)
    consistency = [str(w.message) for w in record if "predict(X)" in str(w.message)]
    assert len(consistency) == 1 and "disagrees with labels_ on 66.7% of them" in consistency[0]
    assert "same 2 groups" in consistency[0] and "only 2 of the n_clusters=3 clusters are distinct" in consistency[0]
    assert "training stopped" not in consistency[0]


# ---------------------------------------------- a sixth estimator through the registry
def test_the_example_registered_as_a_sixth_method_runs_through_compare(only_methods):
    from sktransfer_cluster import compare
    from sktransfer_cluster.registry import REGISTRY, Method

    only_methods(*REGISTRY.values(), Method("CentroidCluster", CentroidCluster, smallest_budget=dict(max_epochs=2)))
    rows, tasks = compare.compare(["digits"], ["CentroidCluster"], progress=False, log=False, mode="quick")
    [row] = [r for r in rows if r.method == "CentroidCluster"]
    assert row.task == "digits" and row.k == "given 5"
    # Fitted on digits 0-4, transferred to 5-9: well above the 0.2 of chance on five classes.
    assert row.acc > 0.5
    assert len(row.labels) == tasks[0].X_target.shape[0]


# ------------------------------------------- predict through a network: the folded input
class _NetCluster(TransferClusterMixin, ClusterMixin, BaseEstimator):
    """A fixed random network ``d -> 256 -> 3`` on the affine-normalised rows (no training)."""

    _input_normalization = "affine"
    _cpu_dtype = torch.float32
    _parameter_constraints = dict(COMMON_PARAMETER_CONSTRAINTS)

    def __init__(self, device="cpu", random_state=0, keep_best=False, callbacks=None, verbose=0):
        self.device = device
        self.random_state = random_state
        self.keep_best = keep_best
        self.callbacks = callbacks
        self.verbose = verbose

    def _fit(self, X, y, *, rng, torch_gen):
        self.net_ = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 256), torch.nn.ReLU(), torch.nn.Linear(256, 3))
        init_module(self.net_, torch_gen).to(self._dtype())
        self.n_iter_ = 0
        self.labels_ = self._labels(X)

    def _transfer(self, X, *, rng, torch_gen):
        return self._labels(X)

    def _scores(self, X):
        return self.net_(self._tensor(X))

    def _predict(self, X):
        return self._scores(X).argmax(1).cpu().numpy()

    def score(self, X, y=None):
        return 0.0


def _net_data(offset=0.0, n=3000):
    X, _ = make_blobs(n_samples=n, centers=3, n_features=8, cluster_std=0.5, random_state=0)
    return (X * 3.0 + offset).astype(np.float32)


def _normalised_scores(est, X):
    """The network on rows normalised in float64 (the path outside predict), float64 scores."""
    shift, scale = est._input_affine
    with torch.no_grad():
        return est.net_(torch.as_tensor(((X.astype(np.float64) - shift) / scale).astype(np.float32))).double().numpy()


def _predict_scores(est, X):
    """The network's scores as predict computes them (inside its input fold)."""
    with est._input_fold(X), torch.no_grad():
        return est._scores(X).double().numpy()


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_predict_scores_through_the_folded_first_layer_match_the_normalised_rows(offset):
    # offset 1e4 (1,000 spreads): each chunk is first centred at the float32 shift.
    X = _net_data(offset)
    est = _NetCluster().fit(X)
    want, got = _normalised_scores(est, X), _predict_scores(est, X)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4 * np.abs(want).max()  # ties may flip in rounding
    assert clear.mean() > 0.99
    np.testing.assert_array_equal(est.predict(X)[clear], want.argmax(1)[clear])


def test_predict_makes_no_float64_normalised_copy_of_float32_rows(monkeypatch):
    from sktransfer_cluster.base import arrays, contract

    X = _net_data()
    est = _NetCluster().fit(X)
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return arrays.normalise_rows.__wrapped__(*args, **kwargs)

    spy.__wrapped__ = arrays.normalise_rows
    monkeypatch.setattr(contract, "normalise_rows", spy)
    monkeypatch.setattr(arrays, "normalise_rows", spy)
    est.predict(X)
    assert calls == []
    est._tensor(X)  # outside predict: the exact float64 normalisation, as before
    assert calls == [X.shape]


def test_float64_rows_keep_the_exact_normalisation_in_predict():
    X = _net_data().astype(np.float64)
    est = _NetCluster().fit(X)
    with est._input_fold(X):
        rows = est._tensor(X)
    assert type(rows) is torch.Tensor
    shift, scale = est._input_affine
    np.testing.assert_array_equal(rows.numpy(), ((X - shift) / scale).astype(np.float32))


def test_every_operation_but_a_linear_layer_sees_the_normalised_rows_exactly():
    X = _net_data(offset=50.0)
    est = _NetCluster().fit(X)
    want = est._tensor(X)
    with est._input_fold(X):
        rows = est._tensor(X)
    assert isinstance(rows, FoldedRows) and isinstance(rows[10:20], FoldedRows)
    assert rows.shape == want.shape and rows.dtype == want.dtype
    torch.testing.assert_close(rows * 1.0, want, rtol=0, atol=0)
    torch.testing.assert_close(rows[10:20, 2], want[10:20, 2], rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([rows[:5], rows[5:9]]), want[:9], rtol=0, atol=0)
    torch.testing.assert_close(rows.numpy(), want.numpy(), rtol=0, atol=0)


def test_a_linear_layer_after_an_in_place_change_of_the_rows_sees_the_change():
    X = _net_data()
    est = _NetCluster().fit(X)
    with est._input_fold(X):
        rows = est._tensor(X[:50])
    rows.mul_(0.0)  # on the normalised rows, as outside predict
    with torch.no_grad():
        torch.testing.assert_close(est.net_[0](rows), est.net_[0].bias.expand(50, -1), rtol=0, atol=0)


def test_a_linear_layer_with_autograd_gets_the_normalised_rows_and_its_gradient():
    X = _net_data()
    est = _NetCluster().fit(X)
    with est._input_fold(X):
        rows = est._tensor(X[:50])
    layer = est.net_[0]
    out = layer(rows)  # gradients enabled: no folded weights, which would detach it
    torch.testing.assert_close(out, layer(est._tensor(X[:50])), rtol=0, atol=0)
    out.sum().backward()
    assert layer.weight.grad is not None


def test_predicts_in_several_threads_each_get_their_own_fold():
    from concurrent.futures import ThreadPoolExecutor

    X = _net_data(n=6000)
    est, other = _NetCluster().fit(X), _NetCluster(random_state=1).fit(X + 1)
    want = est.predict(X), other.predict(X + 1)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: (est, other)[i % 2].predict(X + i % 2), range(8)))
    for i, labels in enumerate(got):
        np.testing.assert_array_equal(labels, want[i % 2])


def test_predict_chunks_keep_a_block_through_the_widest_layer_in_cache(monkeypatch):
    X = _net_data(n=5000)
    est = _NetCluster().fit(X)
    sizes = []
    predict = est._predict
    monkeypatch.setattr(est, "_predict", lambda rows: sizes.append(rows.shape[0]) or predict(rows))
    est.predict(X)
    # 256 float32 values per row in the widest layer: 1,024 rows make 1 MiB.
    assert max(sizes) == inference_rows(X.shape[1], 256) == 1024 and sum(sizes) == X.shape[0]


def test_an_estimator_working_in_float64_keeps_the_usual_chunks(monkeypatch):
    class _Float64Net(_NetCluster):
        _cpu_dtype = torch.float64

    X = np.tile(_net_data(n=1000), (70, 1))  # more rows than one usual chunk (65,536 at 8 features)
    est = _Float64Net().fit(X[:1000])
    sizes = []
    predict = est._predict
    monkeypatch.setattr(est, "_predict", lambda rows: sizes.append(rows.shape[0]) or predict(rows))
    est.predict(X)
    assert max(sizes) == chunk_rows(X.shape[1])


# ------------------------------------------------------------ in-place activations
def _activation_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.ReLU(), torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.BatchNorm1d(8), torch.nn.LeakyReLU(0.1),
        torch.nn.Linear(8, 8), torch.nn.LeakyReLU(0.0), torch.nn.Linear(8, 3),
    )


def test_inplace_activations_change_only_activations_after_a_fresh_output():
    net = _activation_net()
    assert inplace_activations(net) == 2
    # The first reads the caller's tensor; a LeakyReLU of slope 0 would break its backward pass.
    assert [m.inplace for m in net if hasattr(m, "inplace")] == [False, True, True, False]


def test_inplace_activations_keep_outputs_and_gradients():
    x = torch.randn(32, 4)
    nets = [_activation_net(), _activation_net()]
    inplace_activations(nets[1])
    outs = []
    for net in nets:
        out = net(x)
        out.square().sum().backward()
        outs.append((out.detach(), [p.grad for p in net.parameters()]))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=0, atol=0)
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_fit_leaves_the_networks_activations_in_place():
    est = _NetCluster().fit(_net_data(n=300))
    assert est.net_[1].inplace


# ------------------------------------------------ the parameters the model was fitted with
# Another value for each parameter a wing reads from the fitted record (_fitted_param) or that
# shapes every model (n_clusters); string options flipped to another the estimator takes.
_CHANGES = {"n_clusters": 2, "max_clusters": 3, "cem_hidden": 5, "embedding_dim": 7}
_FLIPPED = ("representation", "embedding")


def _registry_estimator(name):
    from sktransfer_cluster.registry import REGISTRY

    method = REGISTRY[name]
    return method.build(3, smallest=True, random_state=0, device="cpu")


def _another_value(est, name):
    """A value of the string-or-None parameter ``name`` other than the estimator's, from its constraints."""
    options = []
    for constraint in est._parameter_constraints[name]:
        options += sorted(getattr(constraint, "options", ())) if constraint is not None else [None]
    return next(option for option in options if option != getattr(est, name))


def _changes(est):
    params = est.get_params(deep=False)
    changes = {k: v for k, v in _CHANGES.items() if k in params and params[k] != v}
    changes.update({k: _another_value(est, k) for k in _FLIPPED if k in params})
    return changes


def _registry_names():
    from sktransfer_cluster.registry import REGISTRY

    return list(REGISTRY)


def test_fit_records_every_parameter_but_the_runs_as_the_values_it_was_fitted_with(data):
    X, y, _, _ = data
    est = clone(EXAMPLES[0]).fit(X)
    params = est.get_params(deep=False)
    assert est._fitted_params == {k: v for k, v in params.items() if k not in COMMON_PARAMETER_CONSTRAINTS}
    est.set_params(n_clusters=2, transfer_epochs=5)
    assert (est._fitted_param("n_clusters"), est._fitted_param("transfer_epochs")) == (3, 2)
    assert est._fitted_param("random_state") is est.random_state  # a run parameter: the current value


def test_the_record_is_a_copy_a_parameter_changed_in_place_does_not_change(data):
    X, y, _, _ = data
    weights = [1.0, 1.0, 2.0]
    est = common._fit(_registry_estimator("SinkhornKMeans").set_params(cluster_weights=weights), X, y)
    weights[0] = 5.0
    assert est._fitted_param("cluster_weights") == [1.0, 1.0, 2.0]


@pytest.mark.parametrize("name", _registry_names())
def test_set_params_after_fit_changes_no_label_predict_gives_for_any_method(name, data):
    X, y, Xt, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    before, changes = est.predict(Xt), _changes(est)
    fitted = {k: est._fitted_param(k) for k in changes}
    est.set_params(**changes)
    np.testing.assert_array_equal(est.predict(Xt), before)
    assert {k: est._fitted_param(k) for k in changes} == fitted


@pytest.mark.parametrize("name", _registry_names())
def test_transfer_refuses_a_parameter_value_set_after_fit_as_fit_would_and_the_model_stays_usable(name, data):
    X, y, Xt, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    before = est.predict(Xt)
    est.set_params(verbose=-1)  # set_params checks nothing; every estimator's verbose is a count >= 0
    with pytest.raises(InvalidParameterError, match="verbose"):
        est.transfer(Xt)
    np.testing.assert_array_equal(est.predict(Xt), before)
    est.set_params(verbose=0).transfer(Xt)


@pytest.mark.parametrize("name", _registry_names())
def test_a_refit_records_the_parameters_set_since(name, data):
    X, y, _, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    changes = _changes(est)
    common._fit(est.set_params(**changes), X, y)
    assert {k: est._fitted_param(k) for k in changes} == changes


@pytest.mark.parametrize("name", _registry_names())
def test_a_failed_refit_keeps_the_record_of_the_model_before(name, data, monkeypatch):
    X, y, Xt, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    before, record = est.predict(Xt), dict(est._fitted_params)
    est.set_params(**_changes(est))

    def fail(*args, **kwargs):
        raise FloatingPointError("loss became NaN at epoch 0; lower learning_rate")

    monkeypatch.setattr(est, "_fit", fail)
    with pytest.raises(FloatingPointError):
        common._fit(est, X, y)
    monkeypatch.undo()
    assert est._fitted_params.keys() == record.keys()
    assert all(est._fitted_params[k] is v or est._fitted_params[k] == v for k, v in record.items())
    np.testing.assert_array_equal(est.predict(Xt), before)


def test_transfer_and_partial_fit_keep_the_record_and_a_first_partial_fit_makes_one(data):
    X, y, Xt, _ = data
    est = common._fit(_registry_estimator("SinkhornKMeans"), X, y)
    est.set_params(epsilon=0.05)
    est.transfer(Xt)
    est.partial_fit(X[:50])
    assert est._fitted_param("epsilon") == 0.01
    fresh = _registry_estimator("SinkhornKMeans").set_params(epsilon=0.05).partial_fit(X[:50])
    assert fresh._fitted_param("epsilon") == 0.05


def test_a_model_pickled_before_the_record_reads_the_current_parameters(data):
    X, y, _, _ = data
    est = clone(EXAMPLES[0]).fit(X)
    del est.__dict__["_fitted_params"]
    est.set_params(transfer_epochs=4)
    assert est._fitted_param("transfer_epochs") == 4


# What a model pickled at 5f9d6e7 held instead of the record: the values fit used, under these names.
_LEGACY = {"CCNCluster": lambda record: {"_representation": record["representation"]},
           "C2MCluster": lambda record: {"_mlp_shape": (record["cem_hidden"], record["max_clusters"])}}
# The parameters each legacy attribute stood for: what a set_params after fit may change.
_LEGACY_PARAMS = {"CCNCluster": ("representation",), "C2MCluster": ("cem_hidden", "max_clusters")}


def _pickled_at_5f9d6e7(est, legacy):
    """``est`` through a pickle written before the record was kept: the record replaced by the
    attributes ``legacy`` gives, in the model, in the source model a transfer keeps and in C2M's
    gap model."""
    est = copy.deepcopy(est)
    models = [est] + ([est.gap_model_] if getattr(est, "gap_model_", None) is not None else [])
    for state in [m.__dict__ for m in models] + [est.__dict__.get("_source_state")]:
        if state is not None:
            state.update(legacy(state.pop("_fitted_params")))
    return pickle.loads(pickle.dumps(est))


@pytest.mark.parametrize("name", list(_LEGACY))
def test_a_model_pickled_at_5f9d6e7_keeps_predicting_with_its_fitted_parameters_after_set_params(name, data):
    X, y, Xt, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    before = est.predict(Xt)
    old = _pickled_at_5f9d6e7(est, _LEGACY[name])
    old.set_params(**_changes(old))
    np.testing.assert_array_equal(old.predict(Xt), before)


@pytest.mark.parametrize("name", list(_LEGACY))
def test_a_model_pickled_at_5f9d6e7_holds_its_legacy_attribute_as_the_record(name, data):
    X, y, _, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    old = _pickled_at_5f9d6e7(est, _LEGACY[name])
    legacy = _LEGACY[name](est._fitted_params)
    assert not set(legacy) & set(old.__dict__)
    assert {k: old._fitted_params[k] for k in _LEGACY_PARAMS[name]} == {
        k: est._fitted_params[k] for k in _LEGACY_PARAMS[name]}


@pytest.mark.parametrize("name", list(_LEGACY))
def test_a_model_pickled_after_a_transfer_at_5f9d6e7_transfers_again_from_its_fitted_parameters(name, data):
    X, y, Xt, _ = data
    est = common._fit(_registry_estimator(name), X, y)
    est.transfer(Xt)
    old = _pickled_at_5f9d6e7(est, _LEGACY[name])
    changes = {k: v for k, v in _changes(est).items() if k in _LEGACY_PARAMS[name]}
    for model in (est, old):
        model.set_params(**changes)
    np.testing.assert_array_equal(old.transfer(Xt), est.transfer(Xt))


# ------------------------------------------------ predict's finite check, chunk by chunk
def _sklearn_error(est, X):
    """The error scikit-learn's validation (``validate_data``) gives ``X`` for ``est``."""
    from sklearn.utils.validation import validate_data

    with pytest.raises(ValueError) as error:
        validate_data(est, X, reset=False, dtype=[np.float64, np.float32])
    return str(error.value)


@pytest.fixture(params=["linear", "network"])
def in_chunks(request, data, monkeypatch):
    """A fitted estimator whose predict works in chunks of 10 rows: plain SinkhornKMeans (a linear
    predictor: each chunk's values checked just before it) or the example (validation's scan)."""
    from sktransfer_cluster.base import contract

    X, y, _, _ = data
    if request.param == "linear":
        est = common._fit(_registry_estimator("SinkhornKMeans"), X, y)
        monkeypatch.setattr(contract, "chunk_rows", lambda n_features: 10)
    else:
        est = clone(EXAMPLES[0]).fit(X)
        monkeypatch.setattr(est, "_inference_rows", lambda X: 10)
    return est


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("row", [0, 47, -1])
def test_predict_refuses_a_non_finite_value_in_any_chunk_with_sklearns_error(bad, row, data, in_chunks):
    X, y, _, _ = data
    rows = np.array(X[:90])
    rows[row, 1] = bad
    with pytest.raises(ValueError) as error:
        in_chunks.predict(rows)
    assert type(error.value) is ValueError and str(error.value) == _sklearn_error(in_chunks, rows)


def test_predict_names_nan_for_rows_with_an_infinity_before_a_nan_as_sklearn_does(data, in_chunks):
    X, y, _, _ = data
    rows = np.array(X[:90])
    rows[3, 0], rows[88, 1] = np.inf, np.nan
    with pytest.raises(ValueError, match="Input X contains NaN") as error:
        in_chunks.predict(rows)
    assert str(error.value) == _sklearn_error(in_chunks, rows)


def test_no_chunk_holding_a_non_finite_value_reaches_the_linear_predictor(data, monkeypatch):
    from sktransfer_cluster.base import contract

    X, y, _, _ = data
    est = common._fit(_registry_estimator("SinkhornKMeans"), X, y)
    monkeypatch.setattr(contract, "chunk_rows", lambda n_features: 10)
    seen, addmm = [], torch.addmm

    def spy(bias, rows, weights):
        seen.append(rows.clone())
        return addmm(bias, rows, weights)

    monkeypatch.setattr(contract.torch, "addmm", spy)
    rows = np.array(X[:90])
    rows[64, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.predict(rows)
    assert seen and all(bool(torch.isfinite(chunk).all()) for chunk in seen)


def test_predict_of_rows_of_another_width_holding_nan_names_the_nan_first_as_sklearn_does(data, in_chunks):
    X, y, _, _ = data
    rows = np.hstack([X[:20], X[:20, :1]])
    rows[5, 0] = np.nan
    with pytest.raises(ValueError) as error:
        in_chunks.predict(rows)
    assert str(error.value) == _sklearn_error(in_chunks, rows) and "NaN" in str(error.value)
    d, name = X.shape[1], type(in_chunks).__name__
    with pytest.raises(ValueError, match=rf"X has {d + 1} features, but {name} is expecting {d} features"):
        in_chunks.predict(np.hstack([X[:20], X[:20, :1]]))


def test_predict_takes_finite_values_whose_chunk_sum_overflows(data, in_chunks):
    X, y, _, _ = data
    big = np.full((50, X.shape[1]), 3e38, dtype=np.float32)  # the sum of a chunk is inf, every value finite
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the model's own arithmetic on such rows
        assert in_chunks.predict(big).shape == (50,)


def test_predict_under_assume_finite_checks_no_value_as_sklearn_does(data, in_chunks):
    import sklearn

    X, y, _, _ = data
    rows = np.array(X[:30])
    rows[4, 0] = np.nan
    with sklearn.config_context(assume_finite=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert in_chunks.predict(rows).shape == (30,)


# ----------------------------------------------------------------- source labels that cannot be ordered


def _labelled(name):
    from sktransfer_cluster import C2MCluster, CCNCluster

    return {"CCNCluster": CCNCluster(3, device="cpu", random_state=0),
            "C2MCluster": C2MCluster(3, device="cpu", random_state=0)}[name]


@pytest.mark.parametrize("name", ["CCNCluster", "C2MCluster"])
def test_source_labels_with_a_missing_value_are_refused_with_the_rows_to_drop(name):
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    labels = y.astype(object)
    labels[7] = None
    kept = labels.copy()
    est = _labelled(name)
    with pytest.raises(ValueError, match=r"y has 1 missing label\(s\) .* out of 90; every source row needs a label: "
                                         r"drop the rows without one from X and y"):
        est.fit(X, labels)
    np.testing.assert_array_equal(labels, kept)
    with pytest.raises(NotFittedError):  # nothing half-fitted
        est.predict(X)


@pytest.mark.parametrize("name", ["CCNCluster", "C2MCluster"])
def test_source_labels_of_mixed_types_are_refused_with_one_type_asked_for(name):
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    labels = np.array([str(v) if v == 1 else int(v) for v in y], dtype=object)
    with pytest.raises(ValueError, match=r"y mixes label types \(int, str\).*pass labels of one type"):
        _labelled(name).fit(X, labels)
