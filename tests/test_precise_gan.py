"""PreciseFeatureGAN: the behaviours specific to the cluster-conditioned WGAN-GP."""

import copy
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, make_blobs

from sktransfer_cluster import base
from sktransfer_cluster.cluster.precise_gan import estimator as precise_gan
from sktransfer_cluster.cluster.precise_gan import PreciseFeatureGAN
from sktransfer_cluster.cluster.precise_gan.estimator import PAPER_PARAMS
from sktransfer_cluster.cluster.precise_gan.networks import eta_schedule
from sktransfer_cluster.cluster.precise_gan.networks import build_networks, critic_step
from sktransfer_cluster.datasets import make_gaussian_ring
from sktransfer_cluster.losses import gradient_penalty
from sktransfer_cluster.metrics import clustering_accuracy

TINY = dict(hidden_dims=(8,), n_iter=3, n_critic=2, n_classifier=1, batch_size=16, device="cpu")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # The networks here are tiny: on a shared CPU, syncing torch's threads costs more
    # than they save (the ring test ran 3x slower with 2 threads). Restored afterwards.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=0)
    return X, y


@pytest.fixture(scope="module")
def tiny_model(blobs):
    return PreciseFeatureGAN(n_clusters=3, random_state=0, **TINY).fit(blobs[0])


def _linear_critic(weight):
    critic = torch.nn.Linear(len(weight), 1).double()
    with torch.no_grad():
        critic.weight.copy_(torch.tensor([weight], dtype=torch.float64))
        critic.bias.fill_(0.3)
    return critic


# ------------------------------------------------------------------ the loss pieces


def test_gradient_penalty_of_a_linear_critic_is_weight_times_squared_norm_excess():
    # D(x) = w.x + b has gradient w everywhere: penalty = weight * (||w|| - 1)^2 whatever eps is.
    critic = _linear_critic([1.2, -1.6, 0.0])  # ||w|| = 2
    g = torch.Generator().manual_seed(0)
    real = torch.randn(50, 3, generator=g, dtype=torch.float64)
    fake = torch.randn(50, 3, generator=g, dtype=torch.float64) + 4.0
    gp = gradient_penalty(critic, real, fake, weight=100.0, generator=g)
    torch.testing.assert_close(gp, torch.tensor(100.0, dtype=torch.float64))


def test_gradient_penalty_is_differentiable_in_the_critic_parameters():
    # d/dw [lambda (||w|| - 1)^2] = 2 lambda (||w|| - 1) w / ||w|| = lambda * w for ||w|| = 2.
    critic = _linear_critic([0.0, 2.0])
    real, fake = torch.zeros(4, 2, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64)
    gradient_penalty(critic, real, fake, weight=3.0, eps=torch.full((4,), 0.5)).backward()
    torch.testing.assert_close(critic.weight.grad, torch.tensor([[0.0, 6.0]], dtype=torch.float64))


def test_gradient_penalty_vanishes_for_a_unit_gradient_critic():
    critic = _linear_critic([0.6, 0.8])
    x = torch.randn(10, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert gradient_penalty(critic, x, -x, weight=100.0, generator=torch.Generator()).item() < 1e-20


def test_critic_step_in_one_forward_pass_equals_the_wgan_gp_loss_of_separate_passes():
    # The critic sees real, generated and interpolated rows in one batch; the loss must be
    # the textbook E[D(fake)] - E[D(real)] + penalty computed with separate passes.
    g = torch.Generator().manual_seed(0)
    _, critic, _ = build_networks(3, 2, 0, hidden_dims=(16, 16), generator=g)
    critic = critic.double()
    real = torch.randn(20, 3, generator=g, dtype=torch.float64)
    fake = torch.randn(20, 3, generator=g, dtype=torch.float64) + 2.0
    eps = torch.rand(20, generator=g, dtype=torch.float64)
    expected_w = critic(real).mean() - critic(fake).mean()
    expected_gp = gradient_penalty(critic, real, fake, weight=7.0, eps=eps)
    opt = torch.optim.SGD(critic.parameters(), lr=0.0)
    loss, w, gp = critic_step(critic, opt, real, fake, 7.0, eps=eps)
    torch.testing.assert_close(w, expected_w.detach())
    torch.testing.assert_close(gp, expected_gp.detach())
    torch.testing.assert_close(loss, (expected_gp - expected_w).detach())


def test_eta_follows_the_staircase_schedule():
    t = np.arange(9)
    stairs = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    np.testing.assert_allclose(eta_schedule(t, 10.0, 1.2, 3), 10.0 * 1.2**stairs)
    # The paper's setting: x1.2 every 30,000 of 900,000 steps, 30 stairs.
    assert eta_schedule(899_999, 10.0, 1.2, 30_000) == pytest.approx(10.0 * 1.2**29)


def test_training_uses_the_staircase_eta_at_every_generator_step(blobs):
    model = PreciseFeatureGAN(
        n_clusters=3, random_state=0, eta=10.0, eta_gamma=1.2, eta_step=2, log_every=1,
        **{**TINY, "n_iter": 6},
    ).fit(blobs[0])
    np.testing.assert_allclose([h["eta"] for h in model.history_], [10.0, 10.0, 12.0, 12.0, 14.4, 14.4])


def test_default_stair_length_gives_thirty_stairs_over_the_run(blobs):
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, log_every=1, **{**TINY, "n_iter": 60})
    model.fit(blobs[0])
    assert model.history_[-1]["eta"] == pytest.approx(10.0 * 1.2**29)


# ------------------------------------------------------------------ validation


def _fitted_state(model):
    return model.labels_.copy(), copy.deepcopy(model.classifier_.state_dict()), list(model.history_)


def _assert_unchanged(model, state, X):
    labels, classifier, history = state
    np.testing.assert_array_equal(model.labels_, labels)
    for key, value in classifier.items():
        assert torch.equal(model.classifier_.state_dict()[key], value)
    assert model.history_ == history
    np.testing.assert_array_equal(model.predict(X), labels)


@pytest.mark.parametrize("name", ["hidden_dims", "conv_channels"])
@pytest.mark.parametrize("bad", [(0,), (2.5,), (-3,), "64", (8, True)])
def test_bad_layer_widths_raise_a_clear_error_and_leave_the_estimator_usable(tiny_model, blobs, name, bad):
    model = copy.deepcopy(tiny_model)
    state = _fitted_state(model)
    # A string is refused by the parameter constraints, the rest by the width check.
    with pytest.raises(ValueError, match=rf"{name}.* must be .*tuple.*[gG]ot {re.escape(repr(bad))}"):
        model.set_params(**{name: bad}).fit(blobs[0])
    _assert_unchanged(model, state, blobs[0])
    model.set_params(hidden_dims=(8,), conv_channels=(4,)).fit(blobs[0])
    assert model.labels_.shape == (blobs[0].shape[0],)


def test_conv_architecture_needs_at_least_one_channel(blobs):
    X = load_digits().data[:40] / 16.0
    with pytest.raises(ValueError, match="conv_channels must hold at least one width"):
        PreciseFeatureGAN(n_clusters=2, architecture="conv", image_shape=(8, 8), conv_channels=(),
                          **{k: v for k, v in TINY.items() if k != "hidden_dims"}).fit(X)


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(cluster_weights=[0.5, 0.5]), "cluster_weights"),
        (dict(betas=(0.5, 1.0)), "betas"),
        (dict(architecture="conv", image_shape=(3, 3)), "image_shape"),
        (dict(n_clusters=91), "n_samples=90 should be >= n_clusters=91"),
    ],
)
def test_data_dependent_checks_run_before_training_and_leave_a_fitted_model_unchanged(
    tiny_model, blobs, params, match
):
    model = copy.deepcopy(tiny_model)
    state = _fitted_state(model)
    trained = []
    model._train = lambda *args: trained.append(args)
    with pytest.raises(ValueError, match=match):
        model.set_params(**params).fit(blobs[0])
    assert trained == []
    _assert_unchanged(model, state, blobs[0])


def test_transfer_rejects_fewer_rows_than_clusters(tiny_model, blobs):
    model = copy.deepcopy(tiny_model)
    with pytest.raises(ValueError, match="n_samples=2 should be >= n_clusters=3"):
        model.transfer(blobs[0][:2])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_transfer_iter_must_be_a_positive_int(tiny_model, blobs, bad):
    model = copy.deepcopy(tiny_model)
    state = _fitted_state(model)
    with pytest.raises(ValueError, match=r"transfer_iter' parameter of PreciseFeatureGAN.transfer must"):
        model.transfer(blobs[0], transfer_iter=bad)
    _assert_unchanged(model, state, blobs[0])


def test_equal_random_state_gives_bit_identical_fits_in_one_process(blobs):
    fits = [PreciseFeatureGAN(n_clusters=3, random_state=5, log_every=1, **TINY).fit(blobs[0])
            for _ in range(2)]
    np.testing.assert_array_equal(fits[0].labels_, fits[1].labels_)
    assert fits[0].history_ == fits[1].history_
    for a, b in zip(fits[0].generator_.parameters(), fits[1].generator_.parameters()):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ prior and sampling


def test_cluster_weights_set_the_frequencies_of_the_generated_ids(blobs):
    weights = np.array([0.7, 0.2, 0.1])
    model = PreciseFeatureGAN(n_clusters=3, cluster_weights=weights, random_state=0, **TINY).fit(blobs[0])
    _, ids = model.sample(20000, random_state=1)
    np.testing.assert_allclose(np.bincount(ids, minlength=3) / ids.size, weights, atol=0.015)
    np.testing.assert_allclose(model.weights_, weights)


def test_default_prior_is_uniform(tiny_model):
    _, ids = tiny_model.sample(30000, random_state=2)
    np.testing.assert_allclose(np.bincount(ids, minlength=3) / ids.size, [1 / 3] * 3, atol=0.015)


def test_invalid_cluster_weights_are_rejected(blobs):
    for bad in ([0.5, 0.5], [1.0, -0.1, 0.1], [0.0, 0.0, 0.0]):
        with pytest.raises(ValueError, match="cluster_weights"):
            PreciseFeatureGAN(n_clusters=3, cluster_weights=bad, **TINY).fit(blobs[0])


def test_sample_returns_points_in_input_space_and_their_ids(tiny_model):
    X_new, ids = tiny_model.sample(7, cluster=2)
    assert X_new.shape == (7, 4) and X_new.dtype == np.float64
    np.testing.assert_array_equal(ids, [2] * 7)
    X_all, ids_all = tiny_model.sample(11)
    assert X_all.shape == (11, 4) and set(ids_all) <= {0, 1, 2}
    again = tiny_model.sample(5, random_state=3)[0]
    np.testing.assert_array_equal(tiny_model.sample(5, random_state=3)[0], again)


@pytest.mark.parametrize("bad", [dict(cluster=3), dict(cluster=-1), dict(n_samples=0)])
def test_sample_rejects_unknown_clusters_and_empty_requests(tiny_model, bad):
    with pytest.raises(ValueError, match="cluster|n_samples"):
        tiny_model.sample(**{"n_samples": 3, **bad})


def test_noise_free_generator_makes_one_point_per_cluster(blobs):
    model = PreciseFeatureGAN(n_clusters=3, noise_dim=0, random_state=0, **TINY).fit(blobs[0])
    X_new, _ = model.sample(5, cluster=1)
    np.testing.assert_allclose(X_new, np.repeat(X_new[:1], 5, axis=0))
    # ... which is the cluster's centre (labels equal ids when every id is used).
    if model.n_clusters_ == 3:
        np.testing.assert_allclose(model.cluster_centers_[1], X_new[0], rtol=1e-6)


# ------------------------------------------------------------------ inference


def test_predict_proba_rows_sum_to_one_and_argmax_is_predict(tiny_model, blobs):
    proba = tiny_model.predict_proba(blobs[0])
    assert proba.shape == (blobs[0].shape[0], tiny_model.n_clusters_)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(proba.argmax(axis=1), tiny_model.predict(blobs[0]))


def test_predict_with_a_linear_classifier_is_one_matmul_on_raw_rows(tiny_model, blobs):
    X = blobs[0] * 100.0 + 5e3  # far from the standardised scale the classifier was fitted on
    assert tiny_model._linear_predictor() is not None
    unfolded = tiny_model._chunked(tiny_model._predict, X, dtype=np.int64)
    np.testing.assert_array_equal(tiny_model.predict(X), unfolded)
    np.testing.assert_array_equal(tiny_model.predict(blobs[0]), tiny_model.labels_)


def test_labels_map_to_the_classifier_ids_in_increasing_order(tiny_model, blobs):
    X = blobs[0]
    ids = tiny_model.classifier_(tiny_model._prep(X)).argmax(1).numpy()
    assert list(tiny_model.cluster_ids_) == sorted(set(ids))
    np.testing.assert_array_equal(tiny_model.cluster_ids_[tiny_model.labels_], ids)


def test_labels_and_samples_do_not_depend_on_the_chunk_size(tiny_model, blobs, monkeypatch):
    model = copy.deepcopy(tiny_model)
    labels, (X_new, ids) = model._assign(model._prep(blobs[0])), model.sample(50, random_state=4)
    monkeypatch.setattr(precise_gan, "chunked", lambda fn, X: base.chunked(fn, X, chunk_size=7))
    np.testing.assert_array_equal(model._assign(model._prep(blobs[0])), labels)
    X_chunked, ids_chunked = model.sample(50, random_state=4)
    # G runs in float32: a matrix product over 7 rows may round its last bit unlike one over
    # 50 (the kernel depends on the row count), which float64 un-standardising shows.
    np.testing.assert_allclose(X_chunked, X_new, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ids_chunked, ids)


def test_labels_are_consecutive_when_some_ids_are_never_predicted(tiny_model, blobs):
    model = copy.deepcopy(tiny_model)
    X = blobs[0]
    # A classifier that never picks id 1: id 0 where x0 > mean, id 2 below (inputs are centred).
    clf = torch.nn.Linear(4, 3)
    with torch.no_grad():
        clf.weight.zero_()
        clf.weight[0, 0], clf.weight[2, 0] = 1.0, -1.0
        clf.bias.copy_(torch.tensor([0.0, -100.0, 0.0]))
    model.classifier_ = clf
    labels = model._assign(model._prep(X))
    np.testing.assert_array_equal(model.cluster_ids_, [0, 2])
    assert model.n_clusters_ == 2 and set(labels) == {0, 1}
    np.testing.assert_array_equal(model.predict(X), labels)
    assert model.predict_proba(X).shape == (X.shape[0], 2)
    assert model.cluster_centers_.shape == (2, 4)


def test_score_is_the_mean_log_max_posterior(tiny_model, blobs):
    score = tiny_model.score(blobs[0])
    expected = np.log(tiny_model.predict_proba(blobs[0]).max(axis=1)).mean()
    assert np.isfinite(score) and -np.log(3) - 1e-9 <= score <= 0.0
    assert score == pytest.approx(expected, rel=1e-5)


def test_history_holds_the_training_curves(blobs):
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, log_every=2, **{**TINY, "n_iter": 5})
    model.fit(blobs[0])
    assert [h["epoch"] for h in model.history_] == [2, 4, 5]
    keys = {"wasserstein", "critic_loss", "gradient_penalty", "classifier_loss", "fake_accuracy",
            "loss", "eta", "real_entropy"}
    for h in model.history_:
        assert keys <= set(h) and h["phase"] == "fit"
        assert 0.0 <= h["fake_accuracy"] <= 1.0
    assert model.n_iter_ == 5


def test_every_history_record_has_phase_epoch_and_loss(blobs):
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, log_every=2, **{**TINY, "n_iter": 5})
    model.fit(blobs[0]).transfer(blobs[0] + 1.0, transfer_iter=3)
    # The linear classifier's re-fit after transfer is a phase of its own, logged once at its end.
    assert [h["phase"] for h in model.history_] == ["fit"] * 3 + ["transfer"] * 2 + ["classifier re-fit"]
    for h in model.history_:
        assert {"phase", "epoch", "loss"} <= set(h)
        assert isinstance(h["epoch"], int) and isinstance(h["loss"], float)


def test_history_epoch_counts_generator_steps_and_loss_is_their_mean_generator_loss(blobs):
    # log_every changes only the logging, not the training: the same steps are averaged.
    per_step = PreciseFeatureGAN(n_clusters=3, random_state=0, log_every=1, **{**TINY, "n_iter": 7})
    grouped = PreciseFeatureGAN(n_clusters=3, random_state=0, log_every=3, **{**TINY, "n_iter": 7})
    steps, groups = per_step.fit(blobs[0]).history_, grouped.fit(blobs[0]).history_
    assert [h["epoch"] for h in steps] == list(range(1, 8))
    assert [h["epoch"] for h in groups] == [3, 6, 7]
    for h, (lo, hi) in zip(groups, [(0, 3), (3, 6), (6, 7)]):
        for key in ("loss", "critic_loss", "wasserstein", "classifier_loss", "fake_accuracy"):
            assert h[key] == pytest.approx(np.mean([s[key] for s in steps[lo:hi]]), rel=1e-6)
        assert h["eta"] == steps[hi - 1]["eta"]


def test_history_marks_the_critic_curves_missing_without_critic_steps(blobs):
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, log_every=2, **{**TINY, "n_critic": 0})
    for h in model.fit(blobs[0]).history_:
        assert np.isnan([h["critic_loss"], h["wasserstein"], h["gradient_penalty"]]).all()
        assert np.isfinite([h["loss"], h["classifier_loss"], h["real_entropy"]]).all()


def test_diverging_training_raises_floating_point_error_naming_the_step(blobs):
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, learning_rate=1e30, **{**TINY, "n_iter": 50})
    with pytest.raises(FloatingPointError, match=r"generator step \d+ of 50.*lower learning_rate"):
        model.fit(blobs[0] * 1e3)


def test_float32_data_times_1e20_gives_the_same_labels_as_the_unscaled_data(blobs):
    # Issue 19.2: the standardisation squared float32 entries and overflowed to inf
    # (one label, infinite centres). Shift and scale are now computed in float64.
    X = blobs[0].astype(np.float32)
    plain = PreciseFeatureGAN(n_clusters=3, random_state=0, **TINY).fit(X)
    for factor in (np.float32(1e20), np.float32(1e-20)):
        scaled = PreciseFeatureGAN(n_clusters=3, random_state=0, **TINY).fit(X * factor)
        np.testing.assert_array_equal(scaled.labels_, plain.labels_)
        assert np.all(np.isfinite(scaled.cluster_centers_))
        np.testing.assert_allclose(scaled.cluster_centers_ / float(factor), plain.cluster_centers_,
                                   rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ learning


def test_default_settings_cluster_the_eight_gaussian_ring_with_a_short_budget(seed=0):
    # The paper's synthetic check (sigma = 0.014) at the defaults, only n_iter shortened
    # from 2,000 to 400 generator steps to keep the test in seconds: all 8 modes found.
    X, y = make_gaussian_ring(n_samples=800, random_state=seed)
    model = PreciseFeatureGAN(n_clusters=8, n_iter=400, device="cpu", random_state=seed).fit(X)
    assert model.n_clusters_ == 8
    assert clustering_accuracy(y, model.labels_) >= 0.99


def test_training_runs_on_one_thread_and_restores_the_thread_count(blobs, monkeypatch):
    seen = []
    step = precise_gan.critic_step

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return step(*args, **kwargs)

    monkeypatch.setattr(precise_gan, "critic_step", spy)
    torch.set_num_threads(2)
    try:
        model = PreciseFeatureGAN(n_clusters=3, random_state=0, **TINY).fit(blobs[0])
        assert torch.get_num_threads() == 2
        model.transfer(blobs[0], transfer_iter=1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert seen and set(seen) == {1}


def test_auto_classifier_is_linear_when_the_generated_points_can_be_affinely_independent(blobs):
    # 4 features, 3 clusters: any 3 points in general position split linearly -> one linear layer.
    X = blobs[0]
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, **TINY).fit(X)
    assert isinstance(model.classifier_, torch.nn.Linear)
    assert (model.classifier_.in_features, model.classifier_.out_features) == (4, 3)
    # 8 clusters in the plane (the ring): the critic's MLP body.
    ring = make_gaussian_ring(n_samples=80, random_state=0)[0]
    model = PreciseFeatureGAN(n_clusters=8, random_state=0, **TINY).fit(ring)
    assert [type(m) for m in model.classifier_.modules()][1:] == [type(m) for m in model.critic_.modules()][1:]
    # Explicit choices override the rule.
    deep = PreciseFeatureGAN(n_clusters=3, classifier="network", random_state=0, **TINY).fit(X)
    assert not isinstance(deep.classifier_, torch.nn.Linear) and deep.classifier_(torch.zeros(1, 4)).shape == (1, 3)
    flat = PreciseFeatureGAN(n_clusters=8, classifier="linear", random_state=0, **TINY).fit(ring)
    assert isinstance(flat.classifier_, torch.nn.Linear)
    with pytest.raises(ValueError, match="classifier"):
        PreciseFeatureGAN(n_clusters=3, classifier="deep", **TINY).fit(X)


def test_paper_params_construct_and_fit_on_tiny_data(blobs):
    defaults = PreciseFeatureGAN().get_params()
    assert all(defaults[name] != value for name, value in PAPER_PARAMS.items())
    model = PreciseFeatureGAN(3, **{**PAPER_PARAMS, "n_iter": 2, "device": "cpu", "random_state": 0})
    model.fit(blobs[0][:30])
    assert model.hidden_dims == (512, 512, 512) and model.n_iter_ == 2
    assert not isinstance(model.classifier_, torch.nn.Linear)  # the paper's C is an MLP
    assert model.labels_.shape == (30,)


def test_conv_architecture_runs_on_8x8_images():
    X = load_digits().data[:120] / 16.0
    model = PreciseFeatureGAN(
        n_clusters=3, architecture="conv", image_shape=(8, 8), conv_channels=(4, 8), random_state=0,
        **{k: v for k, v in TINY.items() if k != "hidden_dims"},
    ).fit(X)
    assert model.predict(X).shape == (120,)
    assert model.sample(4)[0].shape == (4, 64)
    assert isinstance(model.critic_.features[0], torch.nn.Conv2d)
    # (c, h, w) works too; a shape that does not hold the features is a clear error.
    PreciseFeatureGAN(n_clusters=2, architecture="conv", image_shape=(1, 8, 8), conv_channels=(4,),
                      **{k: v for k, v in TINY.items() if k != "hidden_dims"}).fit(X)
    with pytest.raises(ValueError, match="image_shape"):
        PreciseFeatureGAN(n_clusters=2, architecture="conv", image_shape=(7, 7), **TINY).fit(X)
    with pytest.raises(ValueError, match="image_shape"):
        PreciseFeatureGAN(n_clusters=2, architecture="conv", **TINY).fit(X)


# ------------------------------------------------------------------ transfer


def test_transfer_fine_tunes_all_three_networks_from_the_source_weights(tiny_model, blobs):
    model = copy.deepcopy(tiny_model)
    source = {name: copy.deepcopy(getattr(model, name).state_dict())
              for name in ("generator_", "critic_", "classifier_")}
    seen = {}
    train = model._train

    def spy(Xt, n_steps, torch_gen, phase):
        seen.update({name: copy.deepcopy(getattr(model, name).state_dict()) for name in source})
        return train(Xt, n_steps, torch_gen, phase)

    model._train = spy
    labels = model.transfer(blobs[0] + 2.0, transfer_iter=2)
    for name, state in source.items():
        for key, value in state.items():
            torch.testing.assert_close(seen[name][key], value)  # starts from the source's weights
        changed = any(not torch.equal(getattr(model, name).state_dict()[k], v) for k, v in state.items())
        assert changed, f"{name} was not fine-tuned"
    assert model.n_iter_ == 2 and [h["phase"] for h in model.history_[-2:]] == ["transfer", "classifier re-fit"]
    np.testing.assert_array_equal(model.labels_, labels)


def test_transfer_iter_defaults_to_the_parameter(blobs):
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, transfer_iter=4, **TINY).fit(blobs[0])
    model.transfer(blobs[0])
    assert model.n_iter_ == 4
    model.set_params(transfer_iter=None, n_iter=8)
    model.transfer(blobs[0])
    assert model.n_iter_ == 2  # n_iter // 4


def test_transfer_trains_a_fresh_linear_classifier_in_the_span_of_the_generated_points(blobs):
    # After transfer the linear C restarts from zero weights and follows plain gradient descent
    # on G's final samples, so its weights hold no direction the generated points do not span
    # (none left from the source), and it tells G's points apart.
    X, _ = blobs
    X_source = np.hstack([X, np.zeros((X.shape[0], 6))])
    X_target = X_source.copy()
    X_target[:, 4:] += np.random.default_rng(0).normal(size=(1, 6)) * 3.0  # directions the source never had
    model = PreciseFeatureGAN(n_clusters=3, random_state=0, **TINY).fit(X_source)
    assert isinstance(model.classifier_, torch.nn.Linear)
    model.transfer(X_target, transfer_iter=60)
    with torch.no_grad():
        points = model.generator_(model._latent(torch.arange(3), None))
        assert (model.classifier_(points).argmax(1) == torch.arange(3)).all()
    basis = torch.linalg.qr(points.T.double())[0]  # orthonormal basis of span{G(y)}
    W = model.classifier_.weight.detach().double()
    outside = W - (W @ basis) @ basis.T
    assert float(outside.norm()) < 1e-4 * float(W.norm())


def test_transfer_keeps_the_fine_tuned_network_classifier():
    # Only a linear C is re-fitted after transfer; a network C (2 features < 8 - 1) keeps the
    # weights transfer's own classifier steps left.
    X, _ = make_gaussian_ring(n_samples=200, random_state=0)
    model = PreciseFeatureGAN(n_clusters=8, random_state=0, **TINY).fit(X)
    assert not isinstance(model.classifier_, torch.nn.Linear)
    seen, refit = {}, model._refit_classifier

    def spy(n_steps, torch_gen):
        seen.update(copy.deepcopy(model.classifier_.state_dict()))
        return refit(n_steps, torch_gen)

    model._refit_classifier = spy
    model.transfer(X + 0.05, transfer_iter=3)
    assert seen
    for key, value in seen.items():
        assert torch.equal(model.classifier_.state_dict()[key], value)


def test_noise_free_generator_is_run_on_the_distinct_ids_only(tiny_model):
    # noise_dim=0: G sees n_clusters distinct inputs; _fake indexes their rows by the drawn ids,
    # which must equal G applied to every row.
    model = copy.deepcopy(tiny_model)
    calls = []
    model.generator_.register_forward_hook(lambda m, inp, out: calls.append(inp[0].shape[0]))
    fake, ids = model._fake(50, torch.Generator().manual_seed(0))
    assert calls == [3]
    with torch.no_grad():
        full = model.generator_(model._latent(ids, None))
    torch.testing.assert_close(fake.detach(), full)


def test_default_conv_channels_are_16_and_32():
    model = PreciseFeatureGAN(n_clusters=2, architecture="conv", image_shape=(28, 28), n_iter=1,
                              n_critic=1, batch_size=4, device="cpu", random_state=0)
    model.fit(np.random.default_rng(0).random((8, 784)))
    widths = [m.out_channels for m in model.critic_.modules() if isinstance(m, torch.nn.Conv2d)]
    assert widths == [16, 32]


# ------------------------------------------------------------ the neighbour representation (issue 28)

@pytest.fixture(scope="module")
def wide_blobs():
    # 30 features: above the 20 of representation="auto"; three well-separated clusters.
    X, y = make_blobs(n_samples=150, centers=3, n_features=30, cluster_std=1.0, random_state=0)
    return X, y


WIDE = dict(TINY, representation_epochs=3, random_state=0)


def test_auto_representation_encodes_more_than_20_features_only(blobs, wide_blobs):
    narrow = PreciseFeatureGAN(3, **WIDE).fit(blobs[0])
    wide = PreciseFeatureGAN(3, **WIDE).fit(wide_blobs[0])
    assert narrow.encoder_ is None and narrow.cluster_centers_.shape == (3, 4)
    assert wide.encoder_ is not None
    # The GAN works on the 10 codes: its generated points, and its linear C, live there.
    assert wide.cluster_centers_.shape == (wide.n_clusters_, 10)
    assert wide.classifier_.in_features == 10
    assert PreciseFeatureGAN(3, **{**WIDE, "representation": None}).fit(wide_blobs[0]).encoder_ is None


def test_paper_params_keep_the_gan_on_the_rows(wide_blobs):
    model = PreciseFeatureGAN(3, **{**PAPER_PARAMS, "n_iter": 2, "device": "cpu", "random_state": 0})
    assert model.fit(wide_blobs[0]).encoder_ is None


def test_a_flat_array_is_never_compared_as_images(wide_blobs, monkeypatch):
    # Whatever its width, a flat array's graph uses plain distances: no blur, no shifts;
    # image_shape alone turns them on.
    from sktransfer_cluster import representation

    seen = []
    original = representation.neighbour_graph

    def spy(X, k, **kwargs):
        seen.append(kwargs)
        return original(X, k, **kwargs)

    monkeypatch.setattr(representation, "neighbour_graph", spy)
    X = np.abs(wide_blobs[0][:, :25])
    PreciseFeatureGAN(3, **WIDE).fit(X)
    PreciseFeatureGAN(3, image_shape=(5, 5), **WIDE).fit(X)
    assert seen[0]["image_shape"] is None and seen[0]["blur"] == 0.0 and seen[0]["max_shift"] == 0
    assert seen[1]["image_shape"] == (5, 5) and seen[1]["blur"] > 0 and seen[1]["max_shift"] > 0


def test_encoder_maps_a_held_out_row_of_a_training_cluster_into_that_cluster(wide_blobs):
    X, y = wide_blobs
    held = np.arange(X.shape[0]) % 10 == 0
    # 300 generator steps: at 100 the GAN left one of the three (well separated) code clusters
    # without a point on seed 0 once the graph of these signed rows became Euclidean (1 seed of 5).
    model = PreciseFeatureGAN(3, representation_epochs=20, hidden_dims=(32, 32), n_iter=300, device="cpu",
                              random_state=0).fit(X[~held])
    train_labels = model.labels_
    # Each true cluster is one label on the training rows ...
    majority = {c: np.bincount(train_labels[y[~held] == c]).argmax() for c in range(3)}
    assert len(set(majority.values())) == 3
    # ... and its held-out rows, never seen by the encoder, are mapped into it.
    assert all(model.predict(X[held][y[held] == c]).tolist() == [majority[c]] * int((y[held] == c).sum())
               for c in range(3))


def test_the_nearest_classifier_labels_each_row_by_its_nearest_generated_point(wide_blobs):
    model = PreciseFeatureGAN(3, **WIDE).fit(wide_blobs[0])
    assert model._kind == "nearest"
    codes = model._unprep(model._prep(wide_blobs[0]))
    nearest = ((codes[:, None, :] - model.cluster_centers_[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(model.labels_, nearest)
    np.testing.assert_array_equal(model.predict(wide_blobs[0]), model.labels_)


def test_the_nearest_classifier_moves_each_generated_point_to_the_mean_of_its_rows(wide_blobs):
    # Lloyd steps after the adversarial phase: each point G(y, 0) is the mean of the codes of the
    # rows labelled y (the adversarial phase alone leaves it off that mean).
    model = PreciseFeatureGAN(3, **WIDE).fit(wide_blobs[0])
    codes = model._unprep(model._prep(wide_blobs[0]))
    means = np.stack([codes[model.labels_ == j].mean(0) for j in range(model.n_clusters_)])
    np.testing.assert_allclose(model.cluster_centers_, means, atol=1e-3 * np.abs(codes).max())


def test_transfer_puts_one_generated_point_at_the_mean_of_each_target_cluster(wide_blobs):
    # A target whose three clusters lie elsewhere than the source's: after transfer each
    # generated point is the mean code of one target cluster, a different one for each point.
    # A real (small) budget: at WIDE's 3 generator steps and 3 encoder epochs the transfer kept
    # all three clusters on 1 seed of 4 with either graph; at these, on 4 of 4 (seeds 0-3).
    X_target, y_target = make_blobs(n_samples=150, centers=3, n_features=30, cluster_std=1.0, random_state=1)
    model = PreciseFeatureGAN(3, representation_epochs=20, hidden_dims=(32, 32), n_iter=300, device="cpu",
                              random_state=0).fit(wide_blobs[0])
    labels = model.transfer(X_target)
    codes = model._unprep(model._prep(X_target))
    true_means = np.stack([codes[y_target == c].mean(0) for c in range(3)])
    nearest_cluster = ((model.cluster_centers_[:, None] - true_means[None]) ** 2).sum(-1).argmin(1)
    assert sorted(nearest_cluster.tolist()) == [0, 1, 2]
    np.testing.assert_allclose(model.cluster_centers_, true_means[nearest_cluster], atol=1e-3 * np.abs(codes).max())
    assert clustering_accuracy(y_target, labels) == 1.0


def test_transfer_refines_the_source_encoder_on_the_target(wide_blobs):
    X = wide_blobs[0]
    model = PreciseFeatureGAN(3, **WIDE).fit(X)
    before = [p.detach().clone() for p in model.encoder_.parameters()]
    model.transfer(X + 0.5)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.encoder_.parameters()))
    frozen = PreciseFeatureGAN(3, **{**WIDE, "representation": "neighbours", "representation_epochs": 0}).fit(X)
    before = [p.detach().clone() for p in frozen.encoder_.parameters()]
    frozen.transfer(X + 0.5)
    assert all(torch.equal(a, b) for a, b in zip(before, frozen.encoder_.parameters()))


def test_transfer_refines_the_encoder_as_many_epochs_as_fit_trains_it(wide_blobs, monkeypatch):
    # The target gets as many passes as a fit on the target alone would give it, from the
    # source's weights (half as many left the MNIST transfer below the target-alone fit).
    seen = []
    original = PreciseFeatureGAN._train_representation

    def record(self, X, Xt, n_epochs, torch_gen, phase, **kwargs):
        seen.append((phase, n_epochs))
        return original(self, X, Xt, n_epochs, torch_gen, phase, **kwargs)

    monkeypatch.setattr(PreciseFeatureGAN, "_train_representation", record)
    model = PreciseFeatureGAN(3, **{**WIDE, "representation_epochs": 3}).fit(wide_blobs[0])
    model.transfer(wide_blobs[0] + 0.5)
    assert seen == [("representation", 3), ("refine", 3)]


def test_the_encoder_trains_beside_a_decoder_that_reconstructs_the_rows(wide_blobs, monkeypatch):
    # Fit and transfer's refinement add the reconstruction error of a mirror decoder to the graph's
    # loss (SinkhornKMeans' graph autoencoder); the decoder refined is the one fit trained.
    from sktransfer_cluster import representation

    seen = []
    original = representation.train_neighbour_encoder

    def spy(encoder, X, graph, **kwargs):
        seen.append((kwargs["decoder"], kwargs["reconstruction_weight"]))
        return original(encoder, X, graph, **kwargs)

    monkeypatch.setattr(representation, "train_neighbour_encoder", spy)
    model = PreciseFeatureGAN(3, **WIDE).fit(wide_blobs[0])
    model.transfer(wide_blobs[0] + 0.5)
    (fit_decoder, fit_weight), (refine_decoder, refine_weight) = seen
    assert fit_weight > 0 and refine_weight > 0
    assert isinstance(fit_decoder, torch.nn.Module) and refine_decoder is model._decoder
    assert fit_decoder[0].in_features == 10 and fit_decoder[-1].out_features == wide_blobs[0].shape[1]


def test_transfer_refines_from_the_source_encoder_and_decoder_shrunk_towards_fresh_networks(wide_blobs, monkeypatch):
    # keep * source + (1 - keep) * fresh, for both networks, before the refinement only (never in fit).
    from sktransfer_cluster import representation

    calls = []
    original = representation.shrink_towards

    def spy(module, fresh, keep):
        calls.append(([p.detach().clone() for p in module.parameters()], [p.detach().clone() for p in fresh.parameters()], keep))
        return original(module, fresh, keep)

    monkeypatch.setattr(representation, "shrink_towards", spy)
    model = PreciseFeatureGAN(3, **WIDE).fit(wide_blobs[0])
    assert calls == []
    source_encoder = [p.detach().clone() for p in model.encoder_.parameters()]
    source_decoder = [p.detach().clone() for p in model._decoder.parameters()]
    seen_start = []
    train = representation.train_neighbour_encoder

    def at_start(encoder, X, graph, **kwargs):
        seen_start.append([p.detach().clone() for p in encoder.parameters()])
        return train(encoder, X, graph, **kwargs)

    monkeypatch.setattr(representation, "train_neighbour_encoder", at_start)
    model.transfer(wide_blobs[0] + 0.5)
    (enc_before, enc_fresh, keep_e), (dec_before, dec_fresh, keep_d) = calls
    assert keep_e == keep_d == 0.2
    assert all(torch.equal(a, b) for a, b in zip(enc_before, source_encoder))
    assert all(torch.equal(a, b) for a, b in zip(dec_before, source_decoder))
    for start, w, w0 in zip(seen_start[0], source_encoder, enc_fresh):
        torch.testing.assert_close(start, 0.2 * w + 0.8 * w0)


def test_on_codes_a_fit_runs_ot_lloyd_under_the_prior_then_the_tied_mixture_and_a_transfer_the_plan_only(wide_blobs,
                                                                                                           monkeypatch):
    # On the codes, the Lloyd steps start with OT-Lloyd's from the generated points, each
    # cluster's mass in the plan the prior weight the generator draws it with. A fit then runs
    # the tied-covariance mixture's EM from the plan's points (cells take the data's sizes) and
    # no plain step; a transfer from the source keeps the plan's points (the prior's masses hold
    # against the source's partition).
    from sktransfer_cluster.cluster.precise_gan.estimator import PreciseFeatureGAN as GAN
    from sktransfer_cluster.ot import lloyd

    seen, plain, tied = [], [], []
    original, cell_sums, mixture = lloyd.ot_lloyd, GAN._cell_sums, GAN._tied_mixture

    def spy(X, centers, reg_rel, log_w, max_iter, tol):
        seen.append((X.shape, centers.shape, log_w.exp().tolist()))
        out = original(X, centers, reg_rel, log_w, max_iter, tol)
        seen[-1] += (out[0][0].clone(),)
        return out

    def tied_spy(self, start, Z):
        tied.append(start.detach().clone())
        return mixture(self, start, Z)

    monkeypatch.setattr(lloyd, "ot_lloyd", spy)
    monkeypatch.setattr(GAN, "_cell_sums", staticmethod(lambda *a: plain.append(1) or cell_sums(*a)))
    monkeypatch.setattr(GAN, "_tied_mixture", tied_spy)
    weights = [0.5, 0.3, 0.2]
    model = PreciseFeatureGAN(3, cluster_weights=weights, **WIDE).fit(wide_blobs[0])
    assert len(seen) == 1 and len(tied) == 1 and not plain
    shape, centers_shape, w, plan_points = seen[0]
    assert shape == (wide_blobs[0].shape[0], 10) and centers_shape == (1, 3, 10)
    np.testing.assert_allclose(w, weights)
    torch.testing.assert_close(tied[0].double(), plan_points.to(tied[0].device))  # the EM starts from the plan's points
    model.transfer(wide_blobs[0] + 0.5)
    assert len(seen) == 2 and len(tied) == 1 and not plain
    # Without the representation only the plain steps run (no plan, no mixture).
    PreciseFeatureGAN(3, classifier="nearest", **{**WIDE, "representation": None}).fit(wide_blobs[0])
    assert len(seen) == 2 and len(tied) == 1 and plain


def _elongated_pair(n_a=600, n_b=200, seed=0):
    # Two groups sharing one covariance, long along the first axis (sd 2) and thin along the
    # second (sd 0.1); their means differ by (1, 1). The bisector of the means cuts across the
    # groups; the shared covariance's boundary runs between them.
    rng = np.random.default_rng(seed)
    sd = np.array([2.0, 0.1])
    Z = np.vstack([rng.normal(size=(n_a, 2)) * sd, rng.normal(size=(n_b, 2)) * sd + [1.0, 1.0]])
    return torch.as_tensor(Z), np.repeat([0, 1], [n_a, n_b]), torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


def test_the_tied_mixture_separates_groups_along_their_shared_covariance_where_the_nearest_point_cells_cut_across():
    Z, y, means = _elongated_pair()
    model = PreciseFeatureGAN(2)
    model.device_ = torch.device("cpu")
    nearest = torch.cdist(Z, means).argmin(1).numpy()
    assert (nearest == y).mean() < 0.8
    P, (S_inv, log_pi) = model._tied_mixture(means, Z)
    labels = model._tied_linear(P, S_inv, log_pi)(Z).argmax(1).numpy()
    assert (labels == y).mean() > 0.99


def test_the_tied_mixture_fits_the_proportions_of_imbalanced_groups():
    Z, y, means = _elongated_pair(n_a=600, n_b=200)
    model = PreciseFeatureGAN(2)
    model.device_ = torch.device("cpu")
    _, (_, log_pi) = model._tied_mixture(means, Z)
    np.testing.assert_allclose(log_pi.exp().numpy(), [0.75, 0.25], atol=0.01)


def test_the_neighbour_graph_of_rows_at_a_per_feature_offset_is_that_of_the_unshifted_rows(wide_blobs, monkeypatch):
    # Rows at an offset (or with negative values) have no meaningful origin: the graph is the
    # Euclidean one of the standardised rows, so an offset of 1e8 leaves the neighbours, the
    # codes and the labels as they were (the cosine of the raw rows saw every row alike).
    # Non-negative rows that reach zero (pixels) keep the cosine of the raw rows.
    from sktransfer_cluster import representation

    seen = []
    original = representation.neighbour_graph

    def spy(X, k, **kwargs):
        seen.append((kwargs["metric"], np.array(X)))
        return original(X, k, **kwargs)

    monkeypatch.setattr(representation, "neighbour_graph", spy)
    X, y = wide_blobs
    offset = np.where(np.arange(X.shape[1]) % 2 == 0, 1e8, -3e5)
    plain = PreciseFeatureGAN(3, **WIDE).fit(X)
    shifted = PreciseFeatureGAN(3, **WIDE).fit(X + offset)
    (m_plain, rows_plain), (m_shifted, rows_shifted) = seen
    assert m_plain == m_shifted == "euclidean"
    np.testing.assert_allclose(rows_shifted, rows_plain, atol=1e-4)  # the standardised rows
    np.testing.assert_array_equal(shifted.labels_, plain.labels_)
    np.testing.assert_array_equal(shifted.predict(X + offset), plain.labels_)
    shifted.transfer(X[::-1] + offset)
    assert seen[-1][0] == "euclidean"  # chosen on the source, kept for the target
    seen.clear()
    PreciseFeatureGAN(3, **WIDE).fit(np.maximum(X - np.median(X), 0.0))
    assert seen[0][0] == "cosine" and seen[0][1].min() == 0.0  # the raw rows


def test_neighbour_representation_refuses_the_conv_architecture(wide_blobs):
    with pytest.raises(ValueError, match="representation='neighbours'"):
        PreciseFeatureGAN(3, representation="neighbours", architecture="conv", image_shape=(5, 6),
                          **TINY).fit(wide_blobs[0])


# ------------------------------------------------------------ extreme scales (issue 30 R3)

def _float64_log_posterior(model, X):
    """The model's log-posterior computed by hand in float64 (networks copied to float64)."""
    shift, scale = model._input_affine
    Xt = torch.as_tensor((X - shift) / scale, dtype=torch.float64)
    encoder, classifier = (None if m is None else copy.deepcopy(m).double()
                           for m in (model.encoder_, model.classifier_))
    if encoder is not None:
        Xt = (encoder(Xt) - torch.as_tensor(model._code_affine[0])) / model._code_affine[1]
    with torch.no_grad():
        return torch.log_softmax(classifier(Xt)[:, model._used], dim=1).numpy()


@pytest.mark.parametrize("data", ["blobs", "wide_blobs"])
def test_score_and_predict_of_rows_1e150_beyond_the_fit_data_are_finite_and_exact(data, request):
    # Rows x1e150 overflowed float32 inside the networks: score and predict_proba were NaN.
    X = request.getfixturevalue(data)[0]
    model = PreciseFeatureGAN(3, **WIDE).fit(X)
    far = X * 1e150
    expected = _float64_log_posterior(model, far)
    assert np.isfinite(model.score(far))
    assert model.score(far) == pytest.approx(expected.max(1).mean(), abs=1e-9)
    proba = model.predict_proba(far)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(1), 1.0)
    np.testing.assert_array_equal(model.predict(far), expected.argmax(1))


def test_transfer_keeps_the_gan_whose_points_cover_the_target_best(wide_blobs):
    X = wide_blobs[0]
    source = PreciseFeatureGAN(3, **WIDE).fit(X)
    warm, restarted = copy.deepcopy(source), copy.deepcopy(source)
    warm.transfer(X[::-1] + 0.5, n_restarts=0)
    restarted.transfer(X[::-1] + 0.5, n_restarts=1)

    def error(model):
        return model._quantisation_error(model._prep(X[::-1] + 0.5))

    assert warm.transfer_start_ == "source"
    assert error(restarted) <= error(warm)
    assert restarted.transfer_start_ == ("source" if error(restarted) == error(warm) else "restart 1")
    # No restart unless asked for.
    default = copy.deepcopy(source)
    default.transfer(X[::-1] + 0.5)
    assert default.transfer_start_ == "source"


@pytest.mark.parametrize("winner", ["source", "refit"])
def test_transfer_with_refit_keeps_the_model_whose_labels_agree_more_with_the_target_neighbours(
        wide_blobs, monkeypatch, winner):
    # refit=True also fits a copy on the target alone; the fine-tuned model's agreement is
    # computed first, the copy's second. The kept model is the whole of that model.
    X = wide_blobs[0]
    target = X[::-1] + 0.5
    source = PreciseFeatureGAN(3, **WIDE).fit(X)
    plain = copy.deepcopy(source)
    plain.transfer(target)
    alone = PreciseFeatureGAN(3, **WIDE).fit(target)
    scores = iter([0.5, 0.9] if winner == "refit" else [0.9, 0.5])
    monkeypatch.setattr(precise_gan, "neighbour_agreement", lambda labels, neighbours: next(scores))
    model = copy.deepcopy(source)
    labels = model.transfer(target, refit=True)
    assert model.transfer_start_ == winner
    assert model.transfer_agreement_ == ({"source": 0.5, "refit": 0.9} if winner == "refit" else
                                         {"source": 0.9, "refit": 0.5})
    kept = alone if winner == "refit" else plain
    np.testing.assert_array_equal(labels, kept.labels_)
    np.testing.assert_array_equal(model.predict(target), kept.predict(target))
    np.testing.assert_allclose(model.cluster_centers_, kept.cluster_centers_)


def test_neighbour_agreement_is_the_share_of_each_rows_neighbours_with_its_label():
    labels = np.array([0, 0, 0, 1, 1])
    neighbours = np.array([[1, 2], [0, 3], [4, 1], [4, 0], [3, 2]])
    assert precise_gan.neighbour_agreement(labels, neighbours) == pytest.approx((1 + 0.5 + 0.5 + 0.5 + 0.5) / 5)
    assert precise_gan.neighbour_agreement(labels[::-1] * 0, neighbours) == 1.0


def test_a_pickled_model_with_an_encoder_predicts_the_same(wide_blobs):
    import pickle

    model = PreciseFeatureGAN(3, **WIDE).fit(wide_blobs[0])
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(wide_blobs[0]), model.predict(wide_blobs[0]))
    np.testing.assert_allclose(again.predict_proba(wide_blobs[0]), model.predict_proba(wide_blobs[0]))


# ------------------------------------------------------------- streamed fits past LANDMARK_ROWS (issue 31)
STREAM = dict(TINY, n_iter=5, representation_epochs=1, random_state=0)
# The encoder's codes (more than 20 features), the rows themselves, and the rows with the
# nearest-point classifier (its Lloyd steps pass over every row).
ROUTES = {"codes": {}, "rows": {"representation": None}, "rows-nearest": {"representation": None, "classifier": "nearest"}}


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_fit_past_the_landmark_count_reads_landmarks_batches_and_chunks_never_the_whole_array(
        tmp_path, monkeypatch, route):
    from tests.test_scale import landmark_memmap_reads

    model, largest, chunk = landmark_memmap_reads(
        PreciseFeatureGAN, lambda: PreciseFeatureGAN(3, **STREAM, **ROUTES[route]), tmp_path, monkeypatch)
    assert chunk < 6000
    # Landmarks in pieces, the critic's real rows by index, every pass in chunks.
    assert largest <= max(500, chunk)
    assert model.labels_.shape == (6000,)


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_landmark_fit_on_a_memmap_equals_it_on_the_array_in_memory(tmp_path, monkeypatch, route):
    from tests.test_scale import landmark_fits_on_memmap_and_array

    mapped, in_memory = landmark_fits_on_memmap_and_array(
        lambda: PreciseFeatureGAN(3, **STREAM, **ROUTES[route]), tmp_path, monkeypatch)
    np.testing.assert_array_equal(mapped.labels_, in_memory.labels_)
    np.testing.assert_array_equal(mapped.cluster_centers_, in_memory.cluster_centers_)


@pytest.mark.parametrize("route", ["rows", "rows-nearest"])
def test_the_gan_on_rows_read_by_index_equals_it_on_the_rows_in_memory(tmp_path, monkeypatch, route):
    # Without an encoder the landmark count changes only where the rows are read from: the same
    # minibatches, bitwise the same standardised rows. The Lloyd steps' per-cell sums are added
    # chunk by chunk when streamed (other rounding, the same cells).
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, _ = _nonnegative_blobs(1500, 30)
    np.save(tmp_path / "X.npy", X)
    streamed = PreciseFeatureGAN(3, **STREAM, **ROUTES[route])
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    streamed.fit(np.load(tmp_path / "X.npy", mmap_mode="r"))
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 1500)
    in_memory = PreciseFeatureGAN(3, **STREAM, **ROUTES[route]).fit(X)
    np.testing.assert_array_equal(streamed.labels_, in_memory.labels_)
    np.testing.assert_allclose(streamed.cluster_centers_, in_memory.cluster_centers_, rtol=1e-5, atol=1e-6)


def test_the_landmark_path_starts_only_past_the_landmark_count(monkeypatch):
    from sklearn.metrics import adjusted_rand_score

    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, y = _nonnegative_blobs(600, 30)
    reads = []
    original = landmarks.read_landmarks
    monkeypatch.setattr(landmarks, "read_landmarks", lambda X, index, *a: reads.append(len(index)) or
                        original(X, index, *a))
    params = {**STREAM, "representation_epochs": 3, "n_iter": 20}
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 600)
    PreciseFeatureGAN(3, **params).fit(X)
    assert reads == []  # every row, in memory, as before landmarks existed
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 599)
    model = PreciseFeatureGAN(3, **params).fit(X)
    assert reads and set(reads) == {599}  # the landmarks only (read again normalised for the cosine graph)
    assert adjusted_rand_score(y, model.labels_) == 1.0  # separated blobs, every row labelled by its code


@pytest.mark.parametrize("refit", [False, True])
def test_a_transfer_past_the_landmark_count_equals_it_on_the_array_in_memory(tmp_path, monkeypatch, refit):
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import _nonnegative_blobs

    X, y = _nonnegative_blobs(1600, 30, k=4)
    np.save(tmp_path / "target.npy", X[y >= 2])
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 400)
    model = PreciseFeatureGAN(2, **STREAM).fit(X[y < 2])
    fitted = [copy.deepcopy(model) for _ in range(2)]
    labels = [m.transfer(data, refit=refit) for m, data in zip(fitted, (np.load(tmp_path / "target.npy", mmap_mode="r"),
                                                                      X[y >= 2]))]
    np.testing.assert_array_equal(*labels)
    assert fitted[0].transfer_agreement_ == fitted[1].transfer_agreement_
    assert (fitted[0].transfer_agreement_ is not None) == refit


@pytest.mark.filterwarnings("ignore:.*fewer than n_clusters")
def test_a_transfer_past_the_landmark_count_reads_landmarks_and_chunks_never_the_whole_target(tmp_path, monkeypatch):
    from sktransfer_cluster.base.arrays import chunk_rows
    from sktransfer_cluster.representation import landmarks
    from tests.test_scale import RowsTouched, _nonnegative_blobs

    X, _ = _nonnegative_blobs(6000, 200)
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(landmarks, "LANDMARK_ROWS", 500)
    model = PreciseFeatureGAN(3, **STREAM).fit(X[:400])
    tensors, tensor, validate = [], PreciseFeatureGAN._tensor, PreciseFeatureGAN._validate_input
    monkeypatch.setattr(PreciseFeatureGAN, "_tensor", lambda self, X: tensors.append(X.shape[0]) or tensor(self, X))
    # Validation hands on a plain view of the memmap: every later read goes through the counting view.
    monkeypatch.setattr(PreciseFeatureGAN, "_validate_input", lambda self, X, **kw: validate(self, X, **kw).view(RowsTouched))
    RowsTouched.log = []
    labels = model.transfer(np.load(tmp_path / "X.npy", mmap_mode="r"), refit=True)
    assert RowsTouched.log and labels.shape == (6000,)
    assert max(RowsTouched.log + tensors) <= max(500, chunk_rows(200)) < 6000


def test_streamed_rows_are_read_in_the_order_asked_handing_pages_back_every_release_rows_rows(monkeypatch):
    # A page fault maps a whole page-cache folio (2 MiB for a random row on this kernel): the
    # reader hands the pages back after every RELEASE_ROWS rows of a scattered read.
    from sktransfer_cluster.base import streaming
    from sktransfer_cluster.representation import StreamedRows
    from tests.test_scale import RowsTouched

    X = np.random.default_rng(0).normal(size=(1000, 3)).astype(np.float32)
    index = torch.as_tensor(np.random.default_rng(1).integers(0, 1000, 300))
    released = []
    monkeypatch.setattr(streaming, "mapped_pages", lambda X: (None, 0, 0))  # a memmap's pages, as far as the reader knows
    monkeypatch.setattr(streaming.RowReader, "_release", lambda self, part: released.append(part.shape[0]))
    rows = StreamedRows(X.view(RowsTouched), None, 1.0, "cpu", torch.float32)
    RowsTouched.log = []
    np.testing.assert_array_equal(rows[index].numpy(), X[index.numpy()])
    assert max(RowsTouched.log) <= streaming.RELEASE_ROWS < 300 and sum(released) == np.unique(index.numpy()).shape[0]
    RowsTouched.log = []
    np.testing.assert_array_equal(rows[100:400].numpy(), X[100:400])
    assert sum(RowsTouched.log) == 300


@pytest.mark.parametrize("change", [{"n_clusters": 4}, {"noise_dim": 2}, {"hidden_dims": (16,)}])
def test_transfer_and_sample_refuse_a_structure_changed_since_fit_naming_it(tiny_model, blobs, change):
    X, _ = blobs
    model = copy.deepcopy(tiny_model)
    before = model.predict(X)
    model.set_params(**change)
    (name,) = change
    for call in (lambda: model.transfer(X), lambda: model.sample(2)):
        with pytest.raises(ValueError, match=f"{name} changed since fit.*fit again"):
            call()
    np.testing.assert_array_equal(model.predict(X), before)


@pytest.mark.filterwarnings("ignore:.*distinct clusters:sklearn.exceptions.ConvergenceWarning")  # 3 steps of training
def test_a_width_given_as_a_list_of_the_fitted_values_is_no_change(tiny_model, blobs):
    X, _ = blobs
    model = copy.deepcopy(tiny_model).set_params(hidden_dims=[8])  # fitted with (8,)
    assert model.transfer(X).shape == (X.shape[0],)
    assert model.sample(2)[0].shape[0] == 2


@pytest.mark.parametrize("change", [{"representation": "neighbours"}, {"classifier": "nearest"}, {"conv_channels": (8, 8)}])
def test_naming_what_auto_resolved_to_or_an_unused_setting_is_no_change_of_structure(change):
    X, _ = make_blobs(n_samples=60, n_features=25, centers=3, random_state=0)
    model = PreciseFeatureGAN(3, representation_epochs=2, random_state=0, **TINY).fit(X)  # auto: neighbours, nearest; mlp
    model.set_params(**change)
    assert model.transfer(X).shape == (X.shape[0],)
    assert model.sample(2)[0].shape[0] == 2


def test_cells_of_one_row_each_fall_back_to_the_plain_steps_instead_of_a_singular_covariance():
    X, _ = make_blobs(n_samples=60, n_features=25, centers=3, random_state=0)
    model = PreciseFeatureGAN(6, n_iter=10, representation="neighbours", representation_epochs=3, random_state=0,
                              device="cpu").fit(X[:6])  # K = n: each cell one row, no spread within
    assert sorted(model.labels_.tolist()) == list(range(6))


def test_exact_duplicate_groups_each_get_their_own_cluster():
    P = np.random.default_rng(0).normal(size=(3, 30)) * 5
    X = np.repeat(P, 20, axis=0)  # 3 distinct rows, 20 copies each: the mixture's spread is rounding error
    labels = PreciseFeatureGAN(3, n_iter=20, representation="neighbours", random_state=0, device="cpu").fit(X).labels_
    np.testing.assert_array_equal(np.bincount(labels), [20, 20, 20])
    assert all(len(set(labels[i * 20:(i + 1) * 20])) == 1 for i in range(3))
