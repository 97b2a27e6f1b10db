"""The plain pieces of the cluster-conditioned WGAN-GP of Gan et al.

*Learning the Precise Feature for Cluster Assignment*: the staircase trade-off
``eta_t``, the three networks (generator ``G``, critic ``D``, classifier ``C``),
the generator's input ``[one_hot(y), z]`` and one update of each network as in
Algorithm 1. Functions of tensors and modules only; the estimator
:class:`~sktransfer_cluster.cluster.precise_gan.PreciseFeatureGAN` drives them.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ...nn import ConvGenerator, ConvNet, init_module, mlp

__all__ = [
    "eta_schedule",
    "default_eta_step",
    "build_networks",
    "draw_ids",
    "latent",
    "critic_objective",
    "critic_step",
    "classifier_objective",
    "classifier_step",
    "generator_objective",
    "generator_step",
    "mean_entropy",
    "set_requires_grad",
]


def eta_schedule(t, eta=10.0, gamma=1.2, step=30000):
    """The staircase trade-off ``eta_t = eta * gamma ** floor(t / step)``.

    Parameters
    ----------
    t : int or ndarray of int
        Generator step, counted from 0.
    eta : float, default=10.0
        Initial value.
    gamma : float, default=1.2
        Factor applied every ``step`` steps.
    step : int, default=30000
        Length of a stair.

    Returns
    -------
    float or ndarray

    Examples
    --------
    >>> from sktransfer_cluster.cluster.precise_gan.networks import eta_schedule
    >>> [round(eta_schedule(t, 10.0, 1.2, 3), 2) for t in range(7)]
    [10.0, 10.0, 10.0, 12.0, 12.0, 12.0, 14.4]
    """
    out = eta * gamma ** (np.asarray(t) // int(step))
    return float(out) if out.ndim == 0 else out


def default_eta_step(n_steps):
    """The paper's ratio ``tau / N = 30,000 / 900,000``: at most 30 stairs over a run.

    Examples
    --------
    >>> default_eta_step(900_000), default_eta_step(1000), default_eta_step(5)
    (30000, 34, 1)
    """
    return max(1, -(-int(n_steps) // 30))


def build_networks(n_features, n_clusters, noise_dim, *, architecture="mlp", hidden_dims=(),
                   image_shape=None, conv_channels=(), classifier="network", generator=None):
    """Initialised ``(G, D, C)``: generator, critic and classifier.

    ``G`` maps ``n_clusters + noise_dim`` inputs to a sample, ``D`` a sample to
    one value and ``C`` a sample to ``n_clusters`` logits. ``"mlp"``: ReLU
    MLPs with ``hidden_dims``; ``"conv"``: 5x5 stride-2 convolutions with
    ``conv_channels`` on images of ``image_shape`` (the paper's Fig. 2, scaled
    down), mirrored by ``G``'s transposed convolutions. ``classifier="linear"``
    makes ``C`` one linear layer (softmax regression) whatever the
    architecture; ``"network"`` gives it ``D``'s body. Weights are drawn from
    ``generator`` in the order G, D, C.
    """
    d_in = n_clusters + noise_dim
    if architecture == "mlp":
        hidden = list(hidden_dims)
        nets = [mlp([d_in, *hidden, n_features]), mlp([n_features, *hidden, 1]),
                mlp([n_features, *hidden, n_clusters])]
    else:
        ch = list(conv_channels)
        nets = [ConvGenerator(d_in, image_shape, ch), ConvNet(image_shape, ch, 1),
                ConvNet(image_shape, ch, n_clusters)]
    if classifier == "linear":
        nets[2] = torch.nn.Linear(n_features, n_clusters)
    return tuple(init_module(m, generator) for m in nets)


def draw_ids(n, n_clusters, prior=None, generator=None, device=None):
    """``n`` cluster ids from ``prior`` (uniform when None), drawn on the CPU ``generator``."""
    if prior is None:
        ids = torch.randint(n_clusters, (n,), generator=generator)
    else:
        ids = torch.multinomial(torch.as_tensor(prior, dtype=torch.float64), n, replacement=True,
                                generator=generator)
    return ids.to(device)


def latent(ids, n_clusters, noise_dim, generator=None, *, dtype, zero_noise=False):
    """``G``'s input ``[one_hot(ids), z]``, ``z ~ N(0, I)`` (or 0) of width ``noise_dim``.

    The noise is drawn on the CPU ``generator`` and moved to the device of ``ids``.
    """
    onehot = F.one_hot(ids, n_clusters).to(dtype)
    if noise_dim == 0:
        return onehot
    shape = (ids.shape[0], noise_dim)
    if zero_noise:
        z = torch.zeros(shape, dtype=dtype, device=ids.device)
    else:
        z = torch.randn(shape, generator=generator, dtype=dtype).to(ids.device)
    return torch.cat([onehot, z], dim=1)


def plain_update(optimizer, loss):
    """zero_grad, backward, step: the update of a step function called outside a training run."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def critic_objective(critic, real, fake, x_hat, gp_weight):
    """The WGAN-GP loss of the critic and its terms: what ``compile=True`` compiles of :func:`critic_step`.

    The critic sees the real, the generated and the interpolated rows ``x_hat``
    (a leaf that requires its gradient) in one forward pass. Returns
    ``(loss, wasserstein, penalty)``, not detached.
    """
    n = real.shape[0]
    out = critic(torch.cat([real, fake, x_hat])).reshape(-1)
    wasserstein = out[:n].mean() - out[n:2 * n].mean()
    (grad,) = torch.autograd.grad(out[2 * n:].sum(), x_hat, create_graph=True)
    penalty = gp_weight * ((grad.reshape(n, -1).norm(2, dim=1) - 1.0) ** 2).mean()
    return penalty - wasserstein, wasserstein, penalty


def critic_step(critic, optimizer, real, fake, gp_weight, generator=None, eps=None, update=plain_update,
                objective=critic_objective):
    """One WGAN-GP update of the critic (Alg. 1, lines 2-11).

    Minimises ``E[D(fake)] - E[D(real)] + gp_weight * E[(||grad D(x_hat)|| - 1)^2]``
    with ``x_hat = eps * real + (1 - eps) * fake``, ``eps ~ U[0, 1]`` per row
    (drawn from ``generator`` unless given). The critic sees the real, the
    generated and the interpolated rows in one forward pass (it has no
    cross-row layers), which saves two passes of a latency-bound step.

    ``update(optimizer, loss)`` applies the step (in a fit: the phase's
    :meth:`~sktransfer_cluster.base.TrainingRun.step`); likewise below.
    ``objective``: :func:`critic_objective` or a compiled form of it
    (:func:`~sktransfer_cluster.base.compile_step`).

    Returns
    -------
    loss, wasserstein, penalty : torch.Tensor (detached scalars)
        The loss, the estimate ``E[D(real)] - E[D(fake)]`` of the Wasserstein
        distance and the penalty, before the update.
    """
    n = real.shape[0]
    if eps is None:
        eps = torch.rand(n, generator=generator, dtype=real.dtype, device="cpu").to(real.device)
    eps = eps.to(dtype=real.dtype, device=real.device).reshape(n, *([1] * (real.dim() - 1)))
    real, fake = real.detach(), fake.detach()
    x_hat = (eps * real + (1.0 - eps) * fake).requires_grad_(True)
    loss, wasserstein, penalty = objective(critic, real, fake, x_hat, gp_weight)
    update(optimizer, loss)
    return loss.detach(), wasserstein.detach(), penalty.detach()


def classifier_objective(classifier, fake, ids):
    """Cross-entropy of ``C`` on generated rows labelled by their ids, and its accuracy (detached).

    What ``compile=True`` compiles of :func:`classifier_step`.
    """
    logits = classifier(fake)
    return F.cross_entropy(logits, ids), (logits.detach().argmax(1) == ids).to(fake.dtype).mean()


def classifier_step(classifier, optimizer, fake, ids, update=plain_update, objective=classifier_objective):
    """One cross-entropy update of ``C`` on generated samples labelled by their ids (lines 12-20).

    Returns the detached loss and the accuracy of ``C`` on ``fake``, before the update.
    ``objective``: :func:`classifier_objective` or a compiled form of it.
    """
    loss, acc = objective(classifier, fake, ids)
    update(optimizer, loss)
    return loss.detach(), acc


def generator_objective(critic, classifier, fake, ids, eta):
    """``-E[D(fake)] + eta * CE(C(fake), ids)``: what ``compile=True`` compiles of :func:`generator_step`."""
    return -critic(fake).mean() + eta * F.cross_entropy(classifier(fake), ids)


def generator_step(critic, classifier, optimizer, fake, ids, eta, update=plain_update, objective=generator_objective):
    """One update of ``G`` on ``-E[D(G(y, z))] + eta * CE(C(G(y, z)), y)`` (lines 21-29).

    ``fake = G(y, z)`` must carry the generator's graph; ``D`` and ``C`` should
    not require gradients. Returns the detached loss, before the update.
    ``objective``: :func:`generator_objective` or a compiled form of it.
    """
    loss = objective(critic, classifier, fake, ids, eta)
    update(optimizer, loss)
    return loss.detach()


@torch.no_grad()
def mean_entropy(classifier, X):
    """Mean entropy of the posterior ``softmax(C(x))`` over the rows of ``X``."""
    log_p = F.log_softmax(classifier(X), dim=1)
    return float(-(log_p.exp() * log_p).sum(1).mean())


def set_requires_grad(module, flag):
    """Switch gradients of every parameter of ``module`` on or off."""
    for p in module.parameters():
        p.requires_grad_(flag)
