"""Differentiable losses that two or more estimators share."""

from __future__ import annotations

import torch


__all__ = ["negative_size_entropy", "gradient_penalty"]


def negative_size_entropy(delta):
    """``sum_j pi_j log pi_j`` with ``pi_j = mean_i delta_ij`` (cluster sizes).

    This is minus the entropy of the cluster sizes: it is smallest (``-log K``)
    for balanced clusters and largest (0) when every sample is in one cluster,
    so *adding* it to a loss that is minimised pushes towards balanced clusters.

    Parameters
    ----------
    delta : torch.Tensor of shape (n, K)
        Soft assignments (rows sum to one).

    Returns
    -------
    torch.Tensor (scalar)
    """
    pi = delta.mean(0)
    return (pi * torch.log(pi.clamp_min(torch.finfo(pi.dtype).tiny))).sum()


# --------------------------------------------------------------------------- WGAN-GP
# Gulrajani et al.; used by the precise-feature GAN (Gan et al., Eq. 5).


def gradient_penalty(critic, real, fake, *, weight=1.0, generator=None, eps=None):
    """WGAN-GP penalty ``weight * mean_i (||grad D(x_hat_i)||_2 - 1)^2``.

    ``x_hat_i = eps_i real_i + (1 - eps_i) fake_i`` with ``eps_i ~ U[0, 1]``, one
    per row, drawn from ``generator`` (a CPU :class:`torch.Generator`; global RNG
    untouched). The gradient is taken with ``create_graph=True`` so the penalty
    can be back-propagated into the critic's parameters. The norm is over all
    non-batch dimensions.

    Parameters
    ----------
    critic : callable
        Maps a batch shaped like ``real`` to one value per row.
    real, fake : torch.Tensor of shape (n, ...)
        Real and generated samples (``fake`` is treated as a constant).
    weight : float, default=1.0
        The coefficient ``lambda`` (the paper uses 100).
    generator : torch.Generator, default=None
        Source of ``eps``.
    eps : torch.Tensor of shape (n,), default=None
        Interpolation weights to use instead of drawing them.

    Returns
    -------
    torch.Tensor (scalar)
    """
    n = real.shape[0]
    if eps is None:
        eps = torch.rand(n, generator=generator, dtype=real.dtype, device="cpu").to(real.device)
    eps = eps.to(dtype=real.dtype, device=real.device).reshape(n, *([1] * (real.dim() - 1)))
    x_hat = (eps * real.detach() + (1.0 - eps) * fake.detach()).requires_grad_(True)
    out = critic(x_hat)
    (grad,) = torch.autograd.grad(out.sum(), x_hat, create_graph=True)
    norm = grad.reshape(n, -1).norm(2, dim=1)
    return weight * ((norm - 1.0) ** 2).mean()
