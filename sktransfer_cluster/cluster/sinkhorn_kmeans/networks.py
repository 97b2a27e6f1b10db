"""The autoencoders of SinkhornKMeans' deep embedding: an MLP for flat rows, a
convolutional one when ``image_shape`` is known. ``forward(x)`` returns ``(code, reconstruction)``.
"""

from __future__ import annotations

import math

from torch import nn

from ...nn import ConvGenerator, ConvNet, image_channels_shape, mlp

__all__ = ["AutoEncoder", "ConvAutoEncoder", "GraphAutoEncoder"]


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


class ConvAutoEncoder(nn.Module):
    """Convolutional autoencoder for flat image rows: :class:`ConvNet` in, :class:`ConvGenerator` out.

    The encoder maps a row of ``c * h * w`` pixels through 5x5 stride-2
    convolutions (``channels``) and a linear layer to a code of ``code_dim``;
    the decoder mirrors it back to a flat row. Same interface as
    :class:`AutoEncoder`: ``forward(x)`` returns ``(code, reconstruction)``.

    Parameters
    ----------
    n_features : int
        Row width; must equal ``c * h * w``.
    image_shape : tuple of int
        ``(h, w)`` or ``(c, h, w)``; rows are read channel-major.
    channels : sequence of int, default=(16, 32)
        Channels of each convolution, image side first.
    code_dim : int, default=10

    Raises
    ------
    ValueError
        If ``image_shape`` is malformed or does not hold ``n_features`` pixels,
        or ``channels`` is empty.
    """

    def __init__(self, n_features, image_shape, channels=(16, 32), code_dim=10):
        super().__init__()
        shape = image_channels_shape(image_shape)
        if math.prod(shape) != int(n_features):
            raise ValueError(
                f"image_shape {tuple(image_shape)!r} holds {math.prod(shape)} pixels but X has "
                f"{int(n_features)} features; pass the shape of one image, e.g. (28, 28) for 784 features."
            )
        channels = [int(ch) for ch in channels]
        if not channels:
            raise ValueError("channels must name at least one convolution.")
        self.image_shape = shape
        self.encoder = ConvNet(shape, channels, int(code_dim))
        self.decoder = ConvGenerator(int(code_dim), shape, channels)

    def forward(self, x):
        z = self.encoder(x)
        return z, self.decoder(z)


class GraphAutoEncoder(nn.Module):
    """MLP autoencoder of the default ``embedding="autoencoder"``, trained on the k-NN graph.

    The encoder is :func:`~sktransfer_cluster.representation.make_encoder`'s MLP
    (the neighbour encoder's initialisation, drawn from ``generator``), the
    decoder mirrors it. Same interface as :class:`AutoEncoder`.

    Parameters
    ----------
    n_features : int
    hidden_dims : sequence of int
        Encoder widths, the last one the code.
    generator : torch.Generator, optional
    """

    def __init__(self, n_features, hidden_dims, generator=None):
        super().__init__()
        from ...representation import make_encoder

        dims = [int(h) for h in hidden_dims]
        self.encoder = make_encoder(int(n_features), dims[-1], dims[:-1], generator=generator)
        self.decoder = make_encoder(dims[-1], int(n_features), dims[-2::-1], generator=generator)

    def forward(self, x):
        z = self.encoder(x)
        return z, self.decoder(z)
