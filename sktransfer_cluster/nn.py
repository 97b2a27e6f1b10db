"""Small torch building blocks shared by the estimators.

Modules are initialised from an explicit :class:`torch.Generator` through
:func:`init_module`, so that seeding never touches torch's global RNG.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["mlp", "AutoEncoder", "init_module"]


def mlp(dims, activation=nn.ReLU, batch_norm=False, final_activation=False):
    """A fully connected network ``dims[0] -> dims[1] -> ... -> dims[-1]``.

    Parameters
    ----------
    dims : sequence of int
        Layer widths, input first.
    activation : callable returning an nn.Module, default=nn.ReLU
    batch_norm : bool, default=False
        Batch normalisation after each hidden linear layer.
    final_activation : bool, default=False
        Also apply the activation (and batch norm) after the last layer.
    """
    layers = []
    n = len(dims) - 1
    for i in range(n):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < n - 1 or final_activation:
            if batch_norm:
                layers.append(nn.BatchNorm1d(dims[i + 1]))
            layers.append(activation())
    return nn.Sequential(*layers)


class AutoEncoder(nn.Module):
    """Symmetric MLP autoencoder ``d -> hidden_dims -> d`` (the code is ``hidden_dims[-1]``).

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int
        Encoder widths; the decoder mirrors them.
    """

    def __init__(self, n_features, hidden_dims):
        super().__init__()
        dims = [n_features, *hidden_dims]
        self.encoder = mlp(dims)
        self.decoder = mlp(dims[::-1])

    def forward(self, x):
        z = self.encoder(x)
        return z, self.decoder(z)


@torch.no_grad()
def init_module(module, generator):
    """Re-initialise every Linear/Conv layer of ``module`` from ``generator``.

    Uses PyTorch's default scheme (Kaiming-uniform weights with ``a = sqrt(5)``,
    uniform biases in ``+-1/sqrt(fan_in)``) but draws from the given generator,
    leaving the global RNG untouched. Returns ``module``.
    """
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=generator)
            if m.bias is not None:
                fan_in = nn.init._calculate_fan_in_and_fan_out(m.weight)[0]
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(m.bias, -bound, bound, generator=generator)
    return module
