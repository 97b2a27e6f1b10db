"""base.compiled: opt-in torch.compile of a training step and its fallback to eager mode.

The fast tests trace with TorchDynamo and the ``aot_eager`` backend (no C++ compiler
run); the test that compiles C++ with inductor costs tens of CPU seconds on a cold
cache and runs only with ``SKTRANSFER_COMPILE_TESTS=1``.
"""

import os
import warnings

import pytest
import torch

from sktransfer_cluster.base import CompiledStep, compile_step, compiler_unavailable
from sktransfer_cluster.base.compiled import CompileRule


def _step(x):
    return (x * x).sum(1).exp() - x.mean()


def test_compile_step_disabled_returns_the_function_itself():
    assert compile_step(_step, False) is _step


def test_compiler_unavailable_names_a_missing_cxx(no_cxx):
    reason = compiler_unavailable("cpu")
    assert reason is not None and "C++ compiler" in reason


def test_missing_compiler_warns_and_runs_eagerly_with_equal_results(no_cxx):
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="runs eagerly"):
        step = compile_step(_step, True)
    assert isinstance(step, CompiledStep) and not step.compiled
    assert torch.equal(step(x), _step(x))


def test_failed_compilation_warns_once_and_stays_eager(monkeypatch):
    calls = []

    def broken(x):
        calls.append(x)
        raise RuntimeError("simulated inductor failure")

    monkeypatch.setattr(torch, "compile", lambda fn, **options: broken)
    monkeypatch.setattr("sktransfer_cluster.base.compiled.compiler_unavailable", lambda device="cpu": None)
    step = compile_step(_step, True)
    assert step.compiled
    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(1))
    with pytest.warns(UserWarning, match="compilation failed"):
        out = step(x)
    assert torch.equal(out, _step(x))
    assert not step.compiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(step(x), _step(x))
    assert len(calls) == 1


def test_an_error_of_the_function_itself_is_raised_not_swallowed():
    def bad(x):
        raise ValueError("bad input")

    step = CompiledStep(bad, backend="aot_eager")
    with pytest.raises(ValueError, match="bad input"):
        step(torch.zeros(2))


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
def test_traced_step_equals_eager_and_its_gradients_too():
    x = torch.randn(9, 4, generator=torch.Generator().manual_seed(2), requires_grad=True)
    step = compile_step(_step, True, backend="aot_eager")
    out = step(x)
    (g,) = torch.autograd.grad(out.sum(), x)
    x2 = x.detach().clone().requires_grad_(True)
    ref = _step(x2)
    (g2,) = torch.autograd.grad(ref.sum(), x2)
    assert step.compiled
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, g2)


@pytest.mark.skipif(
    not os.environ.get("SKTRANSFER_COMPILE_TESTS") or compiler_unavailable("cpu") is not None,
    reason="compiles C++ with inductor (tens of CPU seconds cold); set SKTRANSFER_COMPILE_TESTS=1",
)
def test_inductor_step_equals_eager_on_batches_of_two_sizes():
    step = compile_step(_step, True)
    for n in (8, 5):
        x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(step(x), _step(x))
    assert step.compiled


def test_a_float_argument_is_a_constant_traced_once(monkeypatch):
    # Floats specialised: TorchDynamo would otherwise trace them as symbols, then restart the
    # whole trace to specialise them (twice the tracing cost of a step like the neighbour loss).
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    def scaled(x, b):
        return ((x * x + 1e-8) ** b).sum()

    step = compile_step(scaled, True, backend="aot_eager")
    x = torch.rand(6, 2, generator=torch.Generator().manual_seed(3), requires_grad=True)
    torch.testing.assert_close(step(x, 0.79), scaled(x, 0.79))
    assert counters["aot_autograd"]["total"] == 1
    torch.testing.assert_close(step(x, 0.5), scaled(x, 0.5))  # another value: a new constant, still right


def test_compile_rule_compiles_only_where_the_expected_saving_exceeds_the_cost():
    rule = CompileRule(total_steps=2000, probe_steps=10, speedup=2.0, cold_cost=4.0, warm_cost=1.0)
    # 1,000 steps left x 10 ms x (1 - 1/2) = 5 s saved against 4 s cold, 1 s warm.
    assert rule.decide(0.01, 1000, warm=False) and rule.decision["expected_saving_s"] == pytest.approx(5.0)
    assert not rule.decide(0.01, 700, warm=False)  # 3.5 s < 4 s
    assert rule.decide(0.01, 700, warm=True) and rule.decision["cache"] == "warm"
    assert not CompileRule(2000, 10, speedup=1.0, cold_cost=0.0).decide(0.01, 1000, warm=False)  # no speed-up


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
@pytest.mark.parametrize("cost, compiled", [(0.0, True), (1e9, False)])
def test_a_ruled_step_runs_eagerly_for_its_probe_then_as_decided(cost, compiled):
    calls = []

    def step(x):
        calls.append(torch.compiler.is_compiling())
        return (x @ x.T).relu().sum()

    rule = CompileRule(total_steps=8, probe_steps=3, speedup=2.0, cold_cost=cost)
    ruled = compile_step(step, rule, backend="aot_eager")
    x = torch.randn(32, 32, generator=torch.Generator().manual_seed(4))
    outs = [ruled(x) for _ in range(8)]
    assert rule.decision["compiled"] is compiled and rule.decision["steps_left"] == 4
    assert calls[:4] == [False] * 4  # the first call (untimed) and the 3 timed ones: eager
    assert calls[4] is compiled  # the decision's call (the 5th) is the first traced one when compiled
    for out in outs:
        torch.testing.assert_close(out, step(x))


def test_a_run_too_short_to_probe_stays_eager_and_says_so():
    rule = CompileRule(total_steps=3, probe_steps=2, speedup=3.0, cold_cost=0.0)
    assert compile_step(_step, rule, backend="aot_eager")(torch.ones(2, 2)).equal(_step(torch.ones(2, 2)))
    assert rule.decision["compiled"] is False and rule.decision["eager_step_s"] is None


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
def test_a_step_that_compiles_no_faster_stays_eager_without_a_probe_or_a_warning(no_cxx, recwarn):
    rule = CompileRule(total_steps=2000, probe_steps=10, speedup=0.9, cold_cost=0.0)
    assert rule.wrap(_step) is _step  # not even wrapped: nothing to time
    assert rule.decision["compiled"] is False and rule.decision["eager_step_s"] is None
    assert not [w for w in recwarn if "compile" in str(w.message)]


def test_a_step_is_warm_only_after_this_process_compiled_the_same_function_and_graph(monkeypatch):
    from sktransfer_cluster.base import compiled

    class Traced:  # compilation without its cost: only the rule's bookkeeping is under test
        compiled = True

        def __init__(self, fn, **kwargs):
            self.fn = fn

        def __call__(self, *args):
            return self.fn(*args)

    monkeypatch.setattr(compiled, "CompiledStep", Traced)
    monkeypatch.setattr(compiled, "_COMPILED_HERE", set())
    x = torch.ones(2, 2)

    def run(graph):
        rule = CompileRule(total_steps=6, probe_steps=1, speedup=2.0, cold_cost=0.0, graph=graph)
        ruled = compile_step(_step, rule)
        for _ in range(6):
            ruled(x)
        return rule.decision["cache"]

    assert [run("codes"), run("codes"), run("raw rows")] == ["cold", "warm", "cold"]


def test_tdcm_compile_given_numpys_false_compiles_nothing_and_probes_nothing():
    import numpy as np
    from sklearn.datasets import make_blobs

    from sktransfer_cluster import TDCMCluster

    X, _ = make_blobs(200, n_features=5, centers=3, random_state=0)
    model = TDCMCluster(3, max_epochs=2, random_state=0, device="cpu", compile=np.False_).fit(X)
    assert model.compile_decisions_ == []


def _neighbour_fit(compile, **kwargs):
    import numpy as np
    from sklearn.datasets import make_blobs

    from sktransfer_cluster.representation import make_encoder, neighbour_graph, train_neighbour_encoder

    X, _ = make_blobs(120, n_features=6, centers=3, random_state=0)
    X = ((X - X.mean(0)) / X.std()).astype(np.float32)
    gen = torch.Generator().manual_seed(0)
    enc = make_encoder(6, 2, (16,), generator=gen)
    losses = train_neighbour_encoder(enc, X, neighbour_graph(X, 8), n_epochs=3, batch_size=256, generator=gen,
                                     compile=compile, **kwargs)
    return losses, [p.detach().clone() for p in enc.parameters()]


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
def test_neighbour_encoder_traced_training_equals_eager(monkeypatch):
    from sktransfer_cluster.representation import encoder

    monkeypatch.setitem(encoder.NEIGHBOUR_COMPILE_OPTIONS, "backend", "aot_eager")
    losses, params = _neighbour_fit(True)
    ref_losses, ref_params = _neighbour_fit(False)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses))
    for p, q in zip(params, ref_params):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_neighbour_encoder_without_a_compiler_warns_and_trains_bit_identically(no_cxx):
    ref_losses, ref_params = _neighbour_fit(False)
    with pytest.warns(UserWarning, match="neighbour encoder's training step runs eagerly"):
        losses, params = _neighbour_fit(True)
    assert losses == ref_losses
    assert all(torch.equal(p, q) for p, q in zip(params, ref_params))


def _gan_fit(compile, **params):
    from sklearn.datasets import make_blobs

    from sktransfer_cluster import PreciseFeatureGAN

    X, _ = make_blobs(150, n_features=4, centers=3, random_state=0)
    return PreciseFeatureGAN(3, n_iter=8, batch_size=32, compile=compile, random_state=0, device="cpu",
                             **params).fit(X)


@pytest.mark.skipif(compiler_unavailable("cpu") is not None, reason="torch.compile is unavailable here")
def test_gan_traced_training_with_its_gradient_penalty_equals_eager(monkeypatch):
    # The critic's penalty differentiates with create_graph=True: traced into the critic's graph
    # (trace_autograd_ops), not a fallback to eager.
    from sktransfer_cluster import PreciseFeatureGAN

    monkeypatch.setattr(PreciseFeatureGAN, "_compile_options", {"backend": "aot_eager"})
    monkeypatch.setattr(PreciseFeatureGAN, "_compile_adversarial", True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly")  # no fallback to eager mode
        traced = _gan_fit("always", representation=None, classifier="network")  # True would probe, then stay eager
    eager = _gan_fit(False, representation=None, classifier="network")
    for key in ("critic_loss", "gradient_penalty", "classifier_loss"):
        torch.testing.assert_close(torch.tensor([h[key] for h in traced.history_]),
                                   torch.tensor([h[key] for h in eager.history_]), rtol=1e-4, atol=1e-5)
    assert (traced.labels_ == eager.labels_).all()


def test_gan_without_a_compiler_warns_and_fits_bit_identically(no_cxx, monkeypatch):
    from sktransfer_cluster import PreciseFeatureGAN

    monkeypatch.setattr(PreciseFeatureGAN, "_compile_adversarial", True)
    eager = _gan_fit(False, representation=None)
    with pytest.warns(UserWarning, match="critic step runs eagerly"):
        fallback = _gan_fit("always", representation=None)  # True keeps these steps eager unasked (speed-up < 1)
    assert (fallback.labels_ == eager.labels_).all()
    assert [h["loss"] for h in fallback.history_] == [h["loss"] for h in eager.history_]
