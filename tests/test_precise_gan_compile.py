"""PreciseFeatureGAN's ``compile`` parameter (issue 31 item 5): ``True`` compiles a step only where
its CompileRule expects the compilation to be repaid, ``"always"`` compiles the neighbour encoder's
step from its first call, and without a compiler both warn and train eagerly.

None of these tests runs inductor: where a step would be compiled, ``base.compiled.CompiledStep`` is
replaced by a stub that records its calls (only the estimator's choices are under test here;
tests/test_compile.py traces the GAN's steps with ``aot_eager``).
"""

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.utils._param_validation import InvalidParameterError

from sktransfer_cluster import PreciseFeatureGAN
from sktransfer_cluster.base import compiled

_ADVERSARIAL = ("critic", "classifier", "generator")


def _fit(compile, **params):
    # 30 features: the neighbour representation ("auto"), so the encoder's step is trained too.
    X, _ = make_blobs(150, n_features=30, centers=3, random_state=0)
    params = dict(dict(n_iter=30, batch_size=32, representation_epochs=3, random_state=0, device="cpu"), **params)
    return PreciseFeatureGAN(3, compile=compile, **params).fit(X)


@pytest.fixture
def compiler_present(monkeypatch):
    """A compiler as far as the estimator can tell, without depending on this machine's."""
    monkeypatch.setattr(compiled, "compiler_unavailable", lambda device="cpu": None)


@pytest.fixture
def stub_compiler(monkeypatch, compiler_present):
    """``CompiledStep`` replaced by a stub that records what it wraps and each call (no compilation)."""
    calls = {}

    class Stub:
        compiled = True

        def __init__(self, fn, *, what="the training step", **kwargs):
            self.fn, self.what = fn, what
            calls.setdefault(what, 0)

        def __call__(self, *args, **kwargs):
            calls[self.what] += 1
            return self.fn(*args, **kwargs)

    monkeypatch.setattr(compiled, "CompiledStep", Stub)
    monkeypatch.setattr(compiled, "_COMPILED_HERE", set())
    return calls


def test_compile_true_keeps_every_step_eager_and_the_fit_bit_identical_where_no_phase_can_repay(compiler_present):
    ruled, eager = _fit(True), _fit(False)
    decisions = [(d["phase"], d["step"], d["compiled"]) for d in ruled.compile_decisions_]
    assert decisions == [("representation", "neighbours", False)] + [("fit", s, False) for s in _ADVERSARIAL]
    np.testing.assert_array_equal(ruled.labels_, eager.labels_)
    np.testing.assert_array_equal(ruled.cluster_centers_, eager.cluster_centers_)
    assert ruled.history_ == eager.history_
    assert eager.compile_decisions_ == []


def test_compile_true_never_compiles_the_adversarial_steps_even_when_compilation_is_free(stub_compiler, monkeypatch):
    # Measured slower compiled (speed-up < 1): no phase is long enough to repay them. The encoder's
    # step, given a free compilation and a speed-up, compiles after its probe epoch.
    free = {k: dict(v, cold_cost=0.0, warm_cost=0.0) for k, v in PreciseFeatureGAN._compile_expectations.items()}
    free["neighbours"]["speedup"] = 2.0
    monkeypatch.setattr(PreciseFeatureGAN, "_compile_expectations", free)
    model = _fit(True, representation_epochs=4)
    compiled_steps = {d["step"]: d["compiled"] for d in model.compile_decisions_}
    assert compiled_steps == {"neighbours": True, "critic": False, "classifier": False, "generator": False}
    assert list(stub_compiler) == ["the neighbour encoder's training step"]


def test_compile_true_decides_again_in_each_transfer_phase(compiler_present):
    model = _fit(True)
    X, _ = make_blobs(150, n_features=30, centers=3, random_state=1)
    model.transfer(X, transfer_iter=10)
    assert [(d["phase"], d["step"]) for d in model.compile_decisions_] == (
        [("refine", "neighbours")] + [("transfer", s) for s in _ADVERSARIAL])


def test_compile_always_compiles_the_neighbour_step_from_its_first_call_and_keeps_the_adversarial_steps_eager(
        stub_compiler):
    model = _fit("always")
    # One graph edge batch per epoch on 150 rows: every one of the 3 epochs' steps went through the compiled step.
    assert stub_compiler == {"the neighbour encoder's training step": 3}
    assert model.compile_decisions_ == []


def test_compile_rejects_an_unknown_string():
    with pytest.raises(InvalidParameterError, match="compile"):
        _fit("sometimes")


@pytest.mark.parametrize("compile", [True, "always"])
def test_compile_without_a_compiler_warns_and_fits_bit_identically(no_cxx, compile):
    eager = _fit(False)
    with pytest.warns(UserWarning, match="neighbour encoder's training step runs eagerly"):
        fallback = _fit(compile)
    np.testing.assert_array_equal(fallback.labels_, eager.labels_)
    assert fallback.history_ == eager.history_
