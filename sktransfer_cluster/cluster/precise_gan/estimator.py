"""PreciseFeatureGAN: clustering by a cluster-conditioned WGAN-GP with an entropy term.

Gan, Dong, Zhou, Gao & Dong, *Learning the Precise Feature for Cluster Assignment*.
A generator ``G(y, z)`` turns a one-hot cluster id ``y`` (drawn from a prior) and
noise ``z ~ N(0, I)`` into a sample; a WGAN-GP critic ``D`` keeps the generated
samples close to the real ones; a classifier ``C`` is trained with cross-entropy
on generated samples labelled by the ids fed to ``G``. ``G`` minimises
``-E[D(G(y, z))] + eta * CE(C(G(y, z)), y)``, an upper bound of the expected
entropy of the cluster assignment, so each id must generate a part of the data
that ``C`` can tell apart from the others. Clustering a point is ``argmax C(x)``.

Reading of the paper used here:

* ``eta`` follows the staircase ``eta_t = eta * gamma^floor(t / tau)`` of the
  text ("multiply it by 1.2 every 30,000 iterations"), not the compounding
  update printed in Algorithm 1 line 29 (:func:`~sktransfer_cluster.cluster.precise_gan.networks.eta_schedule`).
* ``eta_step=None`` keeps the paper's ratio ``tau / N = 30,000 / 900,000``.
* Each critic, classifier and generator step draws its own minibatch of ids,
  noise and (for the critic) real rows and interpolation weights, as in Alg. 1.
* Inputs are standardised by default (per-feature centring, one global scale),
  so the unit-gradient penalty means the same whatever the units of ``X``.

The networks and the update of each live in :mod:`sktransfer_cluster.cluster.precise_gan.networks`;
what was measured, with which command, is in ``docs/notes/precise_gan.md``.
"""

from __future__ import annotations

import copy
import functools
from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClusterMixin, clone
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_random_state

from ...base import (COMMON_PARAMETER_CONSTRAINTS, TransferClusterMixin, check_image_shape, chunk_rows, chunked,
                    compact_labels, compile_step, compute_threads, make_generators)
from ...base.compiled import CompileRule
from ...base.streaming import is_dask_array
from ...representation import StreamedRows, landmark_graph_inputs, landmark_graph_rows
from .networks import (build_networks, classifier_objective, classifier_step, critic_objective, critic_step,
                       default_eta_step, draw_ids, eta_schedule, generator_objective, generator_step, latent,
                       mean_entropy, set_requires_grad)

__all__ = ["PreciseFeatureGAN", "PAPER_PARAMS", "eta_schedule", "neighbour_agreement"]


def neighbour_agreement(labels, neighbours):
    """Mean over rows of the fraction of their neighbours (``neighbours[i]``: indices) that share
    their label: how well a partition respects a data set's neighbourhoods, no classes needed.

    Examples
    --------
    >>> import numpy as np
    >>> neighbour_agreement(np.array([0, 0, 1, 1]), np.array([[1, 2], [0, 3], [3, 0], [2, 1]]))
    0.5
    """
    labels = np.asarray(labels)
    return float((labels[np.asarray(neighbours)] == labels[:, None]).mean())

#: The paper's settings of the parameters whose defaults depart from it
#: (``PreciseFeatureGAN(K, **PAPER_PARAMS)``): its synthetic-data networks
#: (three 512-512-512 MLPs, the classifier one of them), Adam lr 1e-4, gradient
#: penalty 100 and its MNIST budget of 900,000 generator steps (the staircase
#: keeps its 30,000-step stairs through ``eta_step=None``). For images add
#: ``architecture="conv"`` and ``image_shape``; the paper's conv widths are not
#: reproduced.
PAPER_PARAMS = {
    "representation": None,
    "hidden_dims": (512, 512, 512),
    "classifier": "network",
    "n_iter": 900_000,
    "learning_rate": 1e-4,
    "gp_weight": 100.0,
}

# representation="neighbours" (sktransfer_cluster.representation, the house's shared encoder):
# code width, encoder MLP widths, neighbours per row, edges per Adam step, encoder learning rate,
# and the graph's image settings with image_shape (distances between images blurred by 1 pixel,
# minimised over shifts of up to 1 pixel) -- the representation's own defaults.
_CODE_DIM = 10
_ENCODER_HIDDEN = (256, 256)
_NEIGHBOURS = 15
_EDGES_PER_STEP = 4096
_ENCODER_LR = 1e-3
_BLUR = 1.0
_MAX_SHIFT = 1
# The encoder trains beside a decoder (the mirror MLP) on the graph's loss plus this weight times the
# mean squared reconstruction error of at most _RECONSTRUCTION_ROWS of each step's end points
# (SinkhornKMeans' graph autoencoder), and transfer's refinement starts from the source encoder and
# decoder shrunk towards fresh ones, keeping _REFINE_KEEP_SOURCE of their weights
# (representation.shrink_towards). With the neighbour loss alone the source encoder put a group of 21
# target 9s of digits 0-4 -> 5-9 beside the 8s on every seed, shrunk or not; with the decoder and the
# shrink the codes hold the partition that places them with the 9s (docs/notes/precise_gan.md,
# 2026-11-28, ninth session).
_RECONSTRUCTION_WEIGHT = 1.0
_RECONSTRUCTION_ROWS = 1024
_REFINE_KEEP_SOURCE = 0.2
# representation="auto" uses the encoder on more than 2 * _CODE_DIM features: below that there
# is little to reduce, and on wine (13 features, 178 rows) the GAN on the codes scored 0.927
# against 0.961 on the standardised features (docs/notes/precise_gan.md, 2026-11-27).
_AUTO_MIN_FEATURES = 2 * _CODE_DIM + 1
# classifier="nearest": at most this many Lloyd steps re-estimate the generated points as the
# means of their cells before C is set (they stop when no label changes), and the generator is
# fitted to the re-estimated points by this many Adam steps of least squares at this rate.
_LLOYD_STEPS = 100
# On the neighbour representation's codes the Lloyd steps start with OT-Lloyd's (ot.lloyd):
# each assignment the entropic transport plan whose cluster masses are the prior weights_, at this
# regularisation relative to the mean cost (SinkhornKMeans' default epsilon). The GAN's generator
# draws its clusters with those weights. A fit follows them with a tied-covariance mixture's EM steps
# (see _nearest_point_classifier; measurements in docs/notes/precise_gan.md, ninth and tenth sessions).
_OT_EPSILON = 0.01
# The tied mixture's shared covariance is shrunk by this fraction towards its mean eigenvalue: the
# neighbour loss alone leaves codes with dead directions (6 of 10 within-class eigenvalues below 3e-5
# on MNIST-5k), whose unshrunk inverse whitens noise (ACC 0.82-0.84 against 0.86-0.91 shrunk; tenth session).
_TIED_SHRINK = 0.01
# Below this share of the codes' total variance, the mixture's within-cell spread is taken as none
# (cells of one row, or of duplicates; the expansion Z^T Z - sum n mu mu^T leaves rounding error):
# the plain nearest-point steps run instead.
_TIED_MIN_SPREAD = 1e-8
_PLACE_STEPS = 300
_PLACE_LR = 1e-2
# Rows (standardised) beyond this magnitude are scored in float64: float32 overflows within a
# few layers of such inputs (issue 30 R3: score(X * 1e150) was NaN).
_FLOAT32_SAFE = 1e15

# Per-step quantities averaged into each history record, besides the generator loss.
#: Generator steps each adversarial step runs eagerly under compile=True before its CompileRule decides
#: (at most a tenth of the phase).
_COMPILE_PROBE = 20
_MONITORED = ("critic_loss", "wasserstein", "gradient_penalty", "classifier_loss", "fake_accuracy")


def _peak(a):
    """``max |a|`` (0 for an empty array) without the temporary copy ``np.abs(a)`` makes: one
    pass for the maximum and one for the minimum (predict calls it on every input)."""
    return max(float(a.max(initial=0)), -float(a.min(initial=0)))  # float first: -int8(-128) wraps


def _fresh_autoencoder(n_features, generator):
    """A fresh neighbour encoder (``n_features`` -> ``_CODE_DIM``) and its mirror decoder, drawn
    from ``generator`` in that order: fit's starting networks, and what a transfer shrinks towards."""
    from ...representation import make_encoder

    encoder = make_encoder(n_features, _CODE_DIM, _ENCODER_HIDDEN, generator=generator)
    return encoder, make_encoder(_CODE_DIM, n_features, _ENCODER_HIDDEN[::-1], generator=generator)


class PreciseFeatureGAN(TransferClusterMixin, ClusterMixin, BaseEstimator):
    """Deep clustering by a cluster-conditioned WGAN-GP and a classifier of its samples.

    Three networks are trained on the (unlabelled) source as in Algorithm 1 of
    Gan et al. -- on the rows themselves or, with ``representation``, on their
    codes under a neighbour-graph encoder trained on the same rows: per generator
    step, ``n_critic`` critic steps on the WGAN-GP loss
    ``E[D(G(y, z))] - E[D(x)] + gp_weight * E[(||grad D(x_hat)|| - 1)^2]``,
    ``n_classifier`` classifier steps on ``CE(C(G(y, z)), y)`` (the ids fed to
    ``G`` are the labels), then one generator step on
    ``-E[D(G(y, z))] + eta_t * CE(C(G(y, z)), y)`` with the staircase
    ``eta_t = eta * eta_gamma ** floor(t / eta_step)``. Ids ``y`` are drawn from
    the cluster prior (uniform by default). A point's cluster is ``argmax C(x)``.
    :meth:`transfer` fine-tunes the three networks from their source weights on
    the target, then trains a linear ``C`` afresh on the final generator's samples.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters ``k`` (width of the one-hot id fed to ``G``).
    representation : {"auto", "neighbours"} or None, default="auto"
        Where the GAN works. ``"neighbours"``: an MLP encoder
        ``n_features -> 256 -> 256 -> 10`` is first trained on the fit rows'
        k-NN graph (15 neighbours, edges weighted by shared neighbours; the
        cosine of the raw rows when they are non-negative and reach zero, as
        pixels and counts do, else the Euclidean distance between the
        standardised rows, so an offset or a change of units leaves the
        neighbours as they were; :func:`~sktransfer_cluster.representation.auto_metric`
        of the source, kept for the target; with ``image_shape``, distances between images blurred by
        one pixel and minimised over one-pixel shifts) with a parametric-UMAP
        loss (:mod:`sktransfer_cluster.representation`) plus the reconstruction
        error of a mirror decoder (as SinkhornKMeans' graph autoencoder), and
        ``G``, ``D`` and ``C`` then work on the 10 codes (standardised);
        ``predict`` encodes new rows, ``transfer`` first refines the encoder on
        the target's graph, from the source encoder and decoder shrunk towards
        fresh ones (a fifth of their weights kept). On the codes the
        nearest-point classifier's Lloyd steps start with OT-Lloyd's under the
        prior (each cluster's mass in the plan its ``cluster_weights``); a fit
        then runs the EM steps of a Gaussian mixture with one shared covariance
        and fitted proportions, whose posterior becomes ``C`` (the clusters take
        the data's sizes), and a transfer keeps the plan's points.
        None: the paper's GAN on the (standardised) rows. ``"auto"`` is
        ``"neighbours"`` when ``X`` has more than 20 features (and more than
        15 rows) and ``architecture="mlp"``, None otherwise: on MNIST-5k the
        codes took the GAN from 0.39 to 0.86, on the 8x8 digits from 0.70
        to 0.93, while on wine's 13 features they lost 0.04 (0.927 against
        0.966, seeds 0-2; the ring reached 1.000 either way), so the codes are
        not the default below twice their width (``docs/notes/precise_gan.md``).
        The width is the only thing read from a flat array: it is never taken
        for an image, the graph compares images only when ``image_shape`` is
        given.
    representation_epochs : int, default=40
        Passes over the graph's edges that train the encoder in ``fit``;
        ``transfer`` refines it on the target for as many, from the source's
        weights shrunk towards a fresh start (half as many left MNIST 0-4 -> 5-9 at 0.950 against 0.958
        for the GAN fitted on the target alone; as many gave 0.959, seeds
        0-2; ``docs/notes/precise_gan.md``).
    noise_dim : int, default=0
        Number of noise variables fed to ``G`` beside the id; 0 makes each
        cluster a single generated point. The paper finds few (0-2) work on its
        synthetic data and too many (8) fail; at CPU budgets 0 is the one that
        also keeps the generated points near real rows of image data.
    architecture : {"mlp", "conv"}, default="mlp"
        Fully connected networks (vectors), or 5x5 stride-2 (transposed)
        convolutions for images (the paper's Fig. 2, scaled down); ``"conv"``
        needs ``image_shape``.
    hidden_dims : tuple of int, default=(64, 64)
        Hidden widths of the MLPs of ``G`` and ``D`` (and of ``C`` with
        ``classifier="network"``; ReLU). Narrower than the paper's
        ``(512, 512, 512)`` (:data:`PAPER_PARAMS`): a generator step is
        latency-bound on a CPU and these train within a few thousand steps.
    image_shape : tuple of int, default=None
        ``(h, w)`` or ``(c, h, w)`` of the images, rows of ``X`` being the
        flattened images (channel-major): needed by ``architecture="conv"``;
        with the neighbour representation, the graph compares blurred,
        shifted images (MNIST-5k: ACC about 0.95 instead of 0.8).
    conv_channels : tuple of int, default=(16, 32)
        Channels of the convolutions of ``D`` (and of ``C`` with
        ``classifier="network"``; each halves the resolution, rounding up),
        mirrored by ``G``'s transposed convolutions. The critic's gradient
        penalty (a double backward through the convolutions) dominates a
        step, and its cost grows with the square of the widths: on 28x28
        images at one CPU thread a generator step costs about 0.2 s with
        ``(16, 32)`` and 0.8 s with ``(32, 64)``.
    classifier : {"auto", "linear", "network", "nearest"}, default="auto"
        The classifier ``C``: ``"linear"`` is one linear layer on the
        (standardised) input, i.e. softmax regression; ``"network"`` has the
        critic's architecture (``hidden_dims`` or the convolutions) with
        ``n_clusters`` outputs, as in the paper. ``"nearest"`` trains ``C``
        as ``"auto"`` would without it, then, at the end of ``fit`` and of
        ``transfer``, first moves the generated points ``G(y, z=0)`` to the
        means of their cells by Lloyd steps on the rows (``G`` refitted to
        them), then sets ``C`` to the linear classifier of the nearest
        generated point: the posterior of equal isotropic Gaussians at
        those points (their variance the fit rows' mean squared distance to
        the nearest point, per dimension), times the prior. ``"auto"`` is
        ``"nearest"`` with the neighbour representation, else ``"linear"``
        when ``n_features >= n_clusters - 1`` and ``"network"`` otherwise. On
        the codes the nearest point scored above the trained linear ``C`` on
        MNIST-5k (0.873 against 0.805, seed 0) and the digits (0.950 against
        0.930); the Lloyd steps took MNIST 0-4 -> 5-9 transfer from 0.874 to
        0.950 (medians, seeds 0-2): the adversarial phase leaves the points
        off their clusters' means.
        ``C`` learns only from generated samples, and with ``noise_dim=0``
        those are one point per cluster. When there are enough features for
        those ``k`` points to be affinely independent, every split of them is
        linear, and a linear ``C`` converges towards their max-margin split,
        close to the nearest-point (Voronoi) cells; a deep ``C``'s boundaries
        between the points are arbitrary, and real rows far from every
        generated point are assigned by how it extrapolates. With fewer
        features (8 clusters in the plane) a linear ``C`` can only split
        points in convex position, and the entropy term then pushes the
        generated points off the data.
    n_iter : int, default=2000
        Generator steps ``N`` (the paper: 900,000 on MNIST on a GPU).
    n_critic : int, default=5
        Critic steps per generator step.
    n_classifier : int, default=4
        Classifier steps per generator step.
    batch_size : int, default=64
        Rows of every minibatch (real rows are drawn with replacement).
    learning_rate : float, default=1e-3
        Adam learning rate of the three networks (the paper: 1e-4 over 900,000
        steps, which leaves the critic far from converged in a few thousand).
    betas : tuple of float, default=(0.5, 0.9)
        Adam ``(beta1, beta2)``.
    gp_weight : float, default=1.0
        Gradient-penalty coefficient ``lambda`` (the paper: 100, which with
        ``learning_rate=1e-3`` and a few thousand steps did not fit the ring).
    eta : float, default=10.0
        Initial weight of the entropy (cross-entropy) term of ``G``'s loss.
    eta_gamma : float, default=1.2
        Factor applied to ``eta`` every ``eta_step`` generator steps.
    eta_step : int, default=None
        Stair length ``tau``; None is ``ceil(n_iter / 30)`` (the paper's
        30,000 of 900,000: ``eta`` reaches ``eta * eta_gamma**29`` at most).
        In :meth:`transfer` None means ``ceil(transfer_iter / 30)``.
    cluster_weights : array-like of shape (n_clusters,), default=None
        Known prior proportions of the clusters (normalised to sum to one); ids
        fed to ``G`` are drawn from it. None is the paper's uniform prior.
    standardize : bool, default=True
        Centre each feature and divide all by one scale (the root mean square
        of the centred entries) before training; samples are mapped back. One
        scale keeps the geometry, and the unit-gradient penalty then means the
        same whatever the units of ``X``.
    transfer_iter : int, default=None
        Generator steps of :meth:`transfer`; None is ``max(1, n_iter // 4)``.
    log_every : int, default=None
        Generator steps per entry of ``history_``; None gives about 100 entries.
    compile : bool or "always", default=False
        Compile the training steps (a minibatch's forward pass and loss, and so
        its backward) with ``torch.compile``
        (:func:`~sktransfer_cluster.base.compile_step`) where that repays the
        compilation. Each step (the neighbour encoder's in the ``representation``
        and ``refine`` phases; the critic's, classifier's and generator's in the
        adversarial phases) that can speed up runs eagerly for a probe (one epoch
        of the encoder, 20 generator steps); from the CPU time of the probed steps and the steps
        left, it is compiled for the rest of the phase only if the expected
        saving, ``steps left x eager step x (1 - 1 / speed-up)``, exceeds the
        step's expected compilation cost
        (:class:`~sktransfer_cluster.base.compiled.CompileRule`; the speed-ups and
        costs in ``_compile_expectations``, measured on this package's benchmark
        machine: the neighbour encoder's step about 1.06x per epoch for about
        10 CPU s on an empty inductor cache, so its phase must run about 180
        eager CPU s to repay it; each adversarial step compiled made the
        generator iteration slower, 0.82-0.94x, so they stay eager, unprobed). The decisions are in
        ``compile_decisions_``. At the defaults on 5,000 rows every step therefore
        stays eager and the fit equals ``compile=False``; the encoder's step
        compiles on about four times as many graph edges
        (``docs/notes/precise_gan.md``).
        ``"always"`` compiles the neighbour encoder's step from its first call
        (the adversarial steps stay eager), as ``compile=True`` did before the
        rule. Needs a C++ compiler on the CPU (Triton on CUDA); without one, or if
        compilation fails, it warns and trains eagerly. Compiled results equal
        the eager ones within floating-point rounding.
    keep_best : bool, default=False
        What a ``KeyboardInterrupt`` during training leaves. False: the
        estimator as it was before the call. True: training stops, the three
        networks of the last finished generator step are kept (adversarial
        losses do not rank models) and the call completes with a warning.
    callbacks : list of objects, default=None
        Observers of training (:class:`~sktransfer_cluster.base.TrainingCallback`):
        each method they define (``on_phase_begin``, ``on_epoch_end``,
        ``on_record``, ``on_phase_end``) is called during every training
        phase. They change no result.
    device : str or torch.device, default="auto"
        ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"mps"``.
    random_state : int, RandomState instance or None, default=None
        Seeds local generators only (initialisation, ids, noise, real
        minibatches, interpolation weights); equal values give identical
        results on CPU.
    verbose : int, default=0
        ``>= 1`` shows a progress bar with the losses of the last step.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Labels of the last data set seen by ``fit`` (the source) or ``transfer``
        (the target): ``predict`` of that data set.
    cluster_ids_ : ndarray of shape (n_clusters_,)
        Generator/classifier id of each label, increasing: label ``j`` is id
        ``cluster_ids_[j]``. Ids that ``C`` assigns no row of that data set to
        are dropped, so labels are consecutive from 0; when every id is used
        (the usual case) this is ``arange(n_clusters)`` and labels equal ids.
    n_clusters_ : int
        Number of used ids (``len(cluster_ids_)``).
    cluster_centers_ : ndarray of shape (n_clusters_, n_features) or (n_clusters_, 10)
        ``G(y, z=0)`` for each label's id, in the input space (in the code
        space of ``encoder_`` with the neighbour representation): the
        cluster's generated "centre" (its single point when ``noise_dim=0``).
    transfer_start_ : str
        After :meth:`transfer`: ``"source"`` when the fine-tuned GAN was kept,
        ``"restart r"`` when the r-th fresh one was, ``"refit"`` when the
        model fitted on the target alone was (``refit=True``).
    transfer_agreement_ : dict or None
        After :meth:`transfer` with ``refit=True``: the neighbour agreement
        (:func:`neighbour_agreement`) of the fine-tuned model's target labels
        (``"source"``) and of the refit's (``"refit"``); None otherwise.
    encoder_ : torch.nn.Module or None
        The neighbour-graph encoder (its input the standardised rows, its
        output the 10 codes the GAN works on), or None without a
        representation.
    weights_ : ndarray of shape (n_clusters,)
        Normalised prior of the ids.
    n_iter_ : int
        Generator steps of the last training run (``fit`` or ``transfer``).
    history_ : list of dict
        One record per ``log_every`` generator steps (the curves of the paper's
        Fig. 3), means over the interval: ``phase`` (``"fit"``/``"transfer"``),
        ``epoch`` (generator steps done in that phase), ``loss`` (the
        generator's), ``eta``, ``critic_loss`` (with penalty), ``wasserstein``
        (``E[D(x)] - E[D(G)]``, the EMD estimate), ``gradient_penalty``,
        ``classifier_loss``, ``fake_accuracy`` (``C`` on generated samples vs
        the ids) and ``real_entropy`` (mean entropy of ``C`` on the last real
        minibatch). The critic's entries are NaN when ``n_critic=0``.
    compile_decisions_ : list of dict
        With ``compile=True``: per training phase of the last ``fit`` or
        ``transfer`` (``"representation"``, ``"refine"``, ``"fit"``,
        ``"transfer"``, ``"transfer restart r"``) and step (``"neighbours"``,
        ``"critic"``, ``"classifier"``, ``"generator"``), ``phase``, ``step``
        and what decided compilation
        (:attr:`CompileRule.decision <sktransfer_cluster.base.compiled.CompileRule>`:
        ``eager_step_s``, ``steps_left``, ``expected_saving_s``,
        ``expected_cost_s``, ``cache``, ``compiled``; only ``compiled`` for a
        step that was never called, e.g. the critic with ``n_critic=0``). An
        adversarial step's ``eager_step_s`` is the CPU time between two of its
        calls, so it holds the other steps' share of the iteration. Empty
        otherwise.
    generator_ : torch.nn.Module
    critic_ : torch.nn.Module
    classifier_ : torch.nn.Module
    device_ : torch.device
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string feature names.

    See Also
    --------
    CCNCluster : transfers a learned pairwise similarity instead of a generator.

    Notes
    -----
    A generator step costs ``n_critic + n_classifier + 1`` network updates, so
    the paper's budgets (100,000 steps on its synthetic ring, 900,000 on MNIST)
    are out of reach on a CPU; ``docs/notes/precise_gan.md`` records what the
    defaults and cheaper settings reach in a few thousand steps.

    On the CPU, training (``fit`` and ``transfer``) runs torch on one intra-op
    thread and restores the caller's thread count afterwards: a generator step
    is ten small sequential updates, bound by per-operation latency, and extra
    threads only cost synchronisation (much more on a loaded machine). Within a
    generator step the critic's (and the classifier's) minibatches are drawn
    from one forward pass of ``G``, which does not change during those steps;
    the critic sees the real, generated and interpolated rows in one pass.

    The networks run in float32 on every device (float64 doubles the CPU
    time); the trained weights are bit-identical for equal ``random_state`` on
    the same CPU, whatever the caller's thread count.

    Labels are the classifier's ids, with ids that no row of the fitted (or
    transferred) data set is assigned to dropped and the rest renumbered in
    increasing order (``cluster_ids_``), so labels are consecutive from 0;
    ``predict``/``predict_proba`` then choose among the used ids only.

    Inputs too large to copy (an ``np.memmap``): past
    :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows (50,000)
    ``fit`` and ``transfer`` hold no float copy of ``X``. The input statistics
    come from one streamed pass; the neighbour encoder trains on the graph of
    as many landmark rows drawn by index, and every row's code is computed
    chunk by chunk, so ``G``, ``D`` and ``C`` train on the ``n x 10`` codes;
    without an encoder the critic's real minibatches are read from ``X`` by
    index and every pass over the rows reads them in chunks
    (:mod:`~sktransfer_cluster.representation.landmarks`); ``refit=True``
    measures the neighbour agreement on the landmarks. Fits on up to that many
    rows are those of every row in memory.

    Rows far beyond the fit data (standardised magnitude above 1e15, e.g.
    ``X * 1e150``) are scored by float64 copies of the networks, where
    float32 would overflow.

    ``predict`` never adapts: it applies the current ``C``, so a row's label
    does not depend on the other rows. ``transfer`` fine-tunes ``D``, ``C`` and
    ``G`` from their current weights on the target (fresh Adam states, the same
    staircase restarted, the source's standardisation kept), then trains a
    linear ``C`` afresh from zero weights (``n_classifier`` steps per transfer
    step, on the final ``G``'s samples), and recomputes ``cluster_ids_`` on the
    target. The fine-tuned ``C`` itself classifies the moving generated
    samples without error long before its boundaries have left the source's,
    so labels from it lag the generator.

    Examples
    --------
    >>> from sktransfer_cluster.cluster.precise_gan import PreciseFeatureGAN
    >>> from sktransfer_cluster.datasets import make_gaussian_ring
    >>> X, y = make_gaussian_ring(n_samples=400, random_state=0)
    >>> gan = PreciseFeatureGAN(n_clusters=8, noise_dim=0, hidden_dims=(32, 32), n_iter=20,
    ...                         learning_rate=1e-3, device="cpu", random_state=0).fit(X)
    >>> gan.labels_.shape
    (400,)
    >>> gan.predict_proba(X[:3]).sum(axis=1).round(6).tolist()
    [1.0, 1.0, 1.0]
    >>> X_new, ids = gan.sample(5, cluster=2)
    >>> X_new.shape, ids.tolist()
    ((5, 2), [2, 2, 2, 2, 2])
    >>> gan.transfer(X + 0.1, transfer_iter=5).shape
    (400,)
    """

    _width_params = ("hidden_dims", "conv_channels")
    #: What shapes the fitted networks and latent code: transfer and sample refuse a change since fit.
    _STRUCTURE = ("n_clusters", "representation", "noise_dim", "architecture", "hidden_dims", "image_shape",
                  "conv_channels", "classifier", "standardize")
    _cpu_dtype = torch.float32  # compute-bound training: float64 doubles the CPU time
    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "representation": [StrOptions({"auto", "neighbours"}), None],
        "representation_epochs": [Interval(Integral, 0, None, closed="left")],
        "noise_dim": [Interval(Integral, 0, None, closed="left")],
        "architecture": [StrOptions({"mlp", "conv"})],
        "hidden_dims": [tuple, list],
        "image_shape": [tuple, list, None],
        "conv_channels": [tuple, list],
        "classifier": [StrOptions({"auto", "linear", "network", "nearest"})],
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "n_critic": [Interval(Integral, 0, None, closed="left")],
        "n_classifier": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "betas": [tuple, list],
        "gp_weight": [Interval(Real, 0, None, closed="left")],
        "eta": [Interval(Real, 0, None, closed="left")],
        "eta_gamma": [Interval(Real, 0, None, closed="neither")],
        "eta_step": [Interval(Integral, 1, None, closed="left"), None],
        "cluster_weights": ["array-like", None],
        "standardize": ["boolean"],
        "transfer_iter": [Interval(Integral, 1, None, closed="left"), None],
        "log_every": [Interval(Integral, 1, None, closed="left"), None],
        "compile": ["boolean", StrOptions({"always"})],
        **COMMON_PARAMETER_CONSTRAINTS,
    }

    _transfer_parameter_constraints = {
        "transfer_iter": [Interval(Integral, 1, None, closed="left"), None],
        "n_restarts": [Interval(Integral, 0, None, closed="left")],
        "refit": ["boolean"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        representation="auto",
        representation_epochs=40,
        noise_dim=0,
        architecture="mlp",
        hidden_dims=(64, 64),
        image_shape=None,
        conv_channels=(16, 32),
        classifier="auto",
        n_iter=2000,
        n_critic=5,
        n_classifier=4,
        batch_size=64,
        learning_rate=1e-3,
        betas=(0.5, 0.9),
        gp_weight=1.0,
        eta=10.0,
        eta_gamma=1.2,
        eta_step=None,
        cluster_weights=None,
        standardize=True,
        transfer_iter=None,
        log_every=None,
        compile=False,
        keep_best=False,
        callbacks=None,
        device="auto",
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.representation = representation
        self.representation_epochs = representation_epochs
        self.noise_dim = noise_dim
        self.architecture = architecture
        self.hidden_dims = hidden_dims
        self.image_shape = image_shape
        self.conv_channels = conv_channels
        self.classifier = classifier
        self.n_iter = n_iter
        self.n_critic = n_critic
        self.n_classifier = n_classifier
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.betas = betas
        self.gp_weight = gp_weight
        self.eta = eta
        self.eta_gamma = eta_gamma
        self.eta_step = eta_step
        self.cluster_weights = cluster_weights
        self.standardize = standardize
        self.transfer_iter = transfer_iter
        self.log_every = log_every
        self.compile = compile
        self.keep_best = keep_best
        self.callbacks = callbacks
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------- validation
    def _check_params_vs_input(self, X, *, reset):
        super()._check_params_vs_input(X, reset=reset)
        if not reset:
            return
        k = self.n_clusters
        if self.cluster_weights is not None:
            w = np.asarray(self.cluster_weights, dtype=np.float64).ravel()
            if w.shape[0] != k or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ValueError(
                    f"cluster_weights must hold {k} non-negative finite proportions (one per "
                    f"cluster, not all zero), got {self.cluster_weights!r}."
                )
        if len(self.betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}.")
        if self.representation == "neighbours":
            if self.architecture == "conv":
                raise ValueError("representation='neighbours' feeds the GAN 10 codes, not images: use "
                                 "architecture='mlp' with it, or representation=None with 'conv'.")
            if X.shape[0] < 3:
                raise ValueError(f"representation='neighbours' builds a k-NN graph and needs at least 3 "
                                 f"samples, got {X.shape[0]}.")
        if self.image_shape is not None and self._represents(X):
            check_image_shape(self.image_shape, X.shape[1])
        if self.architecture == "conv":
            if len(self.conv_channels) == 0:
                raise ValueError(f"conv_channels must hold at least one width, got {self.conv_channels!r}.")
            if self.image_shape is None:
                raise ValueError("architecture='conv' needs image_shape=(h, w) or (c, h, w).")
            check_image_shape(self.image_shape, X.shape[1])

    # ----------------------------------------------------------------- helpers
    @property
    def _input_normalization(self):
        # The house's one normalisation (base.input_affine, applied by _tensor in float64).
        return "affine" if self.standardize else None

    def _structure_values(self, params):
        """The contract's normalised :data:`_STRUCTURE` values, with the ``"auto"`` of
        ``representation`` and ``classifier`` as the fitted model resolved it (a transfer runs that
        model, so naming its resolution is no change), and ``conv_channels`` only where the
        networks are convolutional."""
        structure = super()._structure_values(params)
        if structure["representation"] == "auto":
            structure["representation"] = "neighbours" if getattr(self, "encoder_", None) is not None else None
        if structure["classifier"] == "auto":
            structure["classifier"] = getattr(self, "_kind", "auto")
        if params["architecture"] != "conv":
            structure["conv_channels"] = None
        return structure

    def _represents(self, X):
        """Whether the GAN works on neighbour-encoder codes of rows like ``X`` (``representation``
        with ``"auto"`` resolved: more than 20 features, more than 15 rows, MLP networks)."""
        if self.representation != "auto":
            return self.representation == "neighbours"
        return self.architecture == "mlp" and X.shape[1] >= _AUTO_MIN_FEATURES and X.shape[0] > _NEIGHBOURS

    def _exact(self, X):
        """Whether rows ``X`` (validated ndarray) lie so far beyond the fit data that float32 would
        overflow in the networks: their standardised magnitude exceeds ``_FLOAT32_SAFE``."""
        affine = self._input_affine
        if affine is None:
            return bool(_peak(X) > _FLOAT32_SAFE)
        shift, scale = affine
        # Both bounds in float64: |x - shift| <= |x| + |shift|; the exact test only when it may be close.
        if (_peak(X) + _peak(shift)) / scale <= _FLOAT32_SAFE:
            return False
        return bool(np.abs((np.asarray(X, dtype=np.float64) - shift) / scale).max(initial=0.0) > _FLOAT32_SAFE)

    def _prep(self, X, exact=False):
        """The rows ``X`` (validated ndarray) as the GAN sees them, a tensor.

        The input standardisation (:meth:`_tensor`), then, with the neighbour
        representation, the encoder and the codes' standardisation. ``exact``:
        all in float64, with float64 copies of the networks (:meth:`_networks`).
        """
        if exact:
            Xt = torch.as_tensor(np.asarray(X, dtype=np.float64), device=self.device_)
            if self._input_affine is not None:
                Xt = (Xt - torch.as_tensor(self._input_affine[0], device=self.device_)) / self._input_affine[1]
        else:
            Xt = self._tensor(X)
        return self._codes(Xt, self._networks(exact)[0])

    def _codes(self, Xt, encoder):
        """Standardised codes of the standardised rows ``Xt`` (``Xt`` itself without an encoder)."""
        if encoder is None:
            return Xt
        with torch.no_grad():
            # A predict chunk fits one of chunked's: one call and no copy of the codes (the same
            # rows through the same layers as chunked's one call).
            Z = encoder(Xt) if Xt.shape[0] <= chunk_rows(Xt.shape[1]) else chunked(encoder, Xt)
            return self._standard_codes(Z)

    def _standard_codes(self, Z):
        """The codes ``Z`` standardised by the source's code statistics (``_code_affine``)."""
        shift, scale = self._code_affine
        with torch.no_grad():
            return (Z - torch.as_tensor(shift, dtype=Z.dtype, device=Z.device)) / scale

    def _raw_codes(self, X, Xt):
        """``encoder_`` of every row: of the standardised rows ``Xt``, or (``Xt`` None, past the
        landmark count) of ``X`` read and standardised chunk by chunk."""
        if Xt is not None:
            return chunked(self.encoder_, Xt)
        from ...representation import encode_chunks

        shift, scale = self._input_affine or (None, 1.0)
        return encode_chunks(self.encoder_, X, shift, scale).to(self.device_, self._dtype())

    @staticmethod
    def _landmarks(X, rng):
        """Sorted landmark rows of ``X`` past :data:`~sktransfer_cluster.representation.LANDMARK_ROWS`
        rows, else None (every row, in memory, as before landmarks existed).

        Past the count no step holds a float copy of ``X``: the encoder trains on the
        landmarks' graph, codes are computed chunk by chunk, and without an encoder the
        GAN reads its real minibatches by index (:class:`~sktransfer_cluster.representation.StreamedRows`).
        """
        from ...representation import landmark_indices, uses_landmarks

        return landmark_indices(X.shape[0], rng) if uses_landmarks(X.shape[0]) else None

    def _streamed_rows(self, X):
        """The standardised rows of ``X`` read on demand (:class:`~sktransfer_cluster.representation.StreamedRows`)."""
        shift, scale = self._input_affine or (None, 1.0)
        return StreamedRows(X, shift, scale, self.device_, self._dtype())

    def _networks(self, exact=False):
        """``(encoder_, classifier_)``, or float64 copies of both (``exact``)."""
        encoder, classifier = getattr(self, "encoder_", None), self.classifier_
        if not exact:
            return encoder, classifier
        return tuple(None if m is None else copy.deepcopy(m).to(torch.float64) for m in (encoder, classifier))

    def _unprep(self, Xt):
        """Rows of the GAN's standardised space mapped back to the input's units (the codes' units
        with the neighbour representation), in float64."""
        X = Xt.cpu().numpy().astype(np.float64)
        affine = self._code_affine if getattr(self, "encoder_", None) is not None else self._input_affine
        if affine is None:
            return X
        shift, scale = affine
        return X * scale + shift

    def _latent(self, ids, torch_gen, zero_noise=False):
        return latent(ids, self.n_clusters, self.noise_dim, torch_gen, dtype=self._dtype(),
                      zero_noise=zero_noise)

    def _fake(self, n, torch_gen):
        """``n`` generated rows and their ids, drawn from the prior.

        With ``noise_dim=0``, ``G`` has only ``n_clusters`` distinct inputs: it is
        applied to those and its rows indexed by the ids (the same values and
        gradients as ``G`` over all ``n`` rows, at a fraction of the cost).
        """
        prior = None if self._uniform else self.weights_
        ids = draw_ids(n, self.n_clusters, prior, torch_gen, self.device_)
        if self.noise_dim == 0:
            every = torch.arange(self.n_clusters, device=self.device_)
            return self.generator_(self._latent(every, None))[ids], ids
        return self.generator_(self._latent(ids, torch_gen)), ids

    def _classifier_kind(self, n_features, represented):
        """``classifier`` with ``"auto"`` resolved: the nearest generated point on the codes of the
        neighbour representation; else linear when the ``k`` generated points can be affinely
        independent (``n_features >= n_clusters - 1``)."""
        if self.classifier == "auto" and represented:
            return "nearest"
        return self.classifier if self.classifier != "auto" else self._trained_kind(n_features)

    def _trained_kind(self, n_features):
        """The kind of ``C`` trained beside ``G`` for ``"auto"`` and ``"nearest"``."""
        return "linear" if n_features >= self.n_clusters - 1 else "network"

    # ---------------------------------------------------------- representation
    def _train_representation(self, X, Xt, n_epochs, torch_gen, phase, index=None):
        """Train ``encoder_`` in place on the k-NN graph of the rows ``X``, its inputs the
        standardised rows ``Xt``: ``n_epochs`` passes over the graph's edges, on the CPU.
        ``index`` (with ``Xt`` None): the landmark rows, whose graph it is instead, read
        from ``X`` by index (:func:`~sktransfer_cluster.representation.landmark_graph_inputs`).

        The graph's distance is ``_graph_metric`` (:func:`~sktransfer_cluster.representation.auto_metric`
        of the source's values): the cosine of the raw rows for non-negative rows that reach
        zero (pixels, counts), else the Euclidean distance between the standardised rows
        ``Xt``, whose neighbours do not depend on the data's offset or units (the cosine of
        rows at an offset of 1e8 sees every row point the same way).

        The encoder trains with its decoder (``_decoder``, the mirror MLP; absent from models
        pickled before it, which train without) on the graph's loss plus the reconstruction
        error. In ``"refine"`` (transfer) both first shrink towards fresh networks drawn from
        ``torch_gen``, keeping ``_REFINE_KEEP_SOURCE`` of their weights.
        """
        from ...representation import shrink_towards, steps_per_epoch, train_neighbour_encoder

        if n_epochs == 0 or X.shape[0] < 3:
            return
        metric = getattr(self, "_graph_metric", "cosine")  # models pickled before the rule: cosine
        if index is not None:
            shift, scale = self._input_affine or (None, 1.0)
            graph, inputs = landmark_graph_inputs(X, index, metric, shift, scale, self._graph_of)
        else:
            graph = self._graph_of(X if metric == "cosine" else Xt.detach().to("cpu", torch.float32).numpy())
            inputs = Xt.detach().to("cpu", torch.float32).numpy()
        n_edges = int((graph.data > 0).sum())
        steps = steps_per_epoch(n_edges, _EDGES_PER_STEP)
        encoder = self.encoder_.to(device="cpu", dtype=torch.float32)
        set_requires_grad(encoder, True)
        decoder = getattr(self, "_decoder", None)
        if decoder is not None:
            decoder = decoder.to(device="cpu", dtype=torch.float32)
            set_requires_grad(decoder, True)
            if phase == "refine":
                fresh_encoder, fresh_decoder = _fresh_autoencoder(X.shape[1], torch_gen)
                shrink_towards(encoder, fresh_encoder, _REFINE_KEEP_SOURCE)
                shrink_towards(decoder, fresh_decoder, _REFINE_KEEP_SOURCE)
        # The encoder trains in float32 on the CPU whatever the GAN's device and dtype.
        compile = self._compile_rule("neighbours", phase, n_epochs * steps, steps, graph=(X.shape[1], "float32", "cpu"))
        state = [encoder] if decoder is None else [encoder, decoder]
        with self._training(phase, n_epochs, state=state, unit="epoch", keeps_model=False) as run:
            step = run.step_callback(steps)

            train_neighbour_encoder(encoder, inputs, graph, n_epochs=n_epochs, batch_size=_EDGES_PER_STEP,
                                    learning_rate=_ENCODER_LR, generator=torch_gen, callback=step,
                                    decoder=decoder, reconstruction_weight=_RECONSTRUCTION_WEIGHT,
                                    reconstruction_rows=_RECONSTRUCTION_ROWS, compile=compile)
        self._say_compile_decisions(phase)
        if decoder is not None:
            set_requires_grad(decoder, False)
            self._decoder = decoder.eval()
        self.encoder_ = encoder.eval().to(device=self.device_, dtype=self._dtype())
        set_requires_grad(self.encoder_, False)

    def _graph_of(self, rows):
        """The representation's k-NN graph of ``rows`` (raw rows for the cosine, else standardised):
        ``_graph_metric``, 15 neighbours, shared-neighbour weights, image blur and shifts with ``image_shape``."""
        from ...representation import neighbour_graph

        image = self.image_shape is not None
        return neighbour_graph(
            rows, min(_NEIGHBOURS, rows.shape[0] - 1), metric=getattr(self, "_graph_metric", "cosine"),
            image_shape=tuple(self.image_shape) if image else None,
            max_shift=_MAX_SHIFT if image else 0, blur=_BLUR if image else 0.0, shared_neighbours=True,
        )

    # ----------------------------------------------------------------- training
    def _train(self, Xt, n_steps, torch_gen, phase):
        """Algorithm 1 for ``n_steps`` generator steps on the standardised rows ``Xt`` (a tensor, or
        :class:`~sktransfer_cluster.representation.StreamedRows`: each generator step reads its critic's real rows by index)."""
        G, D, C = self.generator_, self.critic_, self.classifier_
        # foreach: one multi-tensor kernel per Adam update instead of one per parameter.
        opt_g, opt_d, opt_c = (torch.optim.Adam(m.parameters(), lr=self.learning_rate, betas=self._betas,
                                                foreach=True) for m in (G, D, C))
        eta_step = self.eta_step if self.eta_step is not None else default_eta_step(n_steps)
        log_every = self.log_every if self.log_every is not None else max(1, n_steps // 100)
        n, bs = Xt.shape[0], int(self.batch_size)
        nc, ncl = max(self.n_critic, 1), self.n_classifier
        sums, count, real = np.zeros(len(_MONITORED) + 1), 0, None
        with self._training(
            phase, n_steps, state=[G, D, C], select="last", unit="generator step",
            hint="lower learning_rate (or eta / gp_weight)",
        ) as run:
            # Each update is the run's step; the losses are checked once per generator step below.
            update = functools.partial(run.step, check=False, weight=None)
            objective = self._objectives(phase, n_steps, Xt.shape[1])
            for t in run.epochs():
                eta_t = float(eta_schedule(t, self.eta, self.eta_gamma, eta_step))
                zero = torch.zeros((), dtype=Xt.dtype, device=Xt.device)
                # G does not change during the critic and classifier steps: each phase's
                # minibatches (their own ids, noise, real rows and weights) come from one
                # forward pass of G and one draw of each random quantity.
                with torch.no_grad():
                    fake_d, _ = self._fake(self.n_critic * bs, torch_gen)
                    fake_c, ids_c = self._fake(ncl * bs, torch_gen)
                rows = torch.randint(n, (self.n_critic * bs,), generator=torch_gen).to(Xt.device)
                eps = torch.rand(self.n_critic * bs, generator=torch_gen, dtype=Xt.dtype).to(Xt.device)
                # The real rows of all critic steps in one read (one call of a streamed reader).
                reals = Xt[rows] if self.n_critic else None
                set_requires_grad(D, True)
                s_d, s_w, s_gp = zero, zero, zero
                for i in range(self.n_critic):
                    sl = slice(i * bs, (i + 1) * bs)
                    real = reals[sl]
                    loss_d, w_est, gp = critic_step(D, opt_d, real, fake_d[sl], self.gp_weight, eps=eps[sl], update=update,
                                                     objective=objective["critic"])
                    s_d, s_w, s_gp = s_d + loss_d, s_w + w_est, s_gp + gp
                set_requires_grad(C, True)
                s_c, s_acc = zero, zero
                for i in range(ncl):
                    sl = slice(i * bs, (i + 1) * bs)
                    loss_c, acc = classifier_step(C, opt_c, fake_c[sl], ids_c[sl], update=update,
                                                objective=objective["classifier"])
                    s_c, s_acc = s_c + loss_c, s_acc + acc
                set_requires_grad(D, False)
                set_requires_grad(C, False)
                loss_g = generator_step(D, C, opt_g, *self._fake(bs, torch_gen), eta_t, update=update,
                                        objective=objective["generator"])
                # One transfer to the host per generator step: these means and the generator loss.
                vals = torch.stack([s_d / nc, s_w / nc, s_gp / nc, s_c / ncl, s_acc / ncl, loss_g])
                vals = vals.cpu().numpy()
                run.end_epoch(vals[-1], log=False, **dict(zip(_MONITORED, vals[:-1])))
                sums += vals
                count += 1
                if count == log_every or t == n_steps - 1:
                    means = dict(zip(_MONITORED, sums[:-1] / count))
                    if self.n_critic == 0:
                        means.update(critic_loss=np.nan, wasserstein=np.nan, gradient_penalty=np.nan)
                    real_entropy = mean_entropy(C, real if real is not None else Xt[:bs])
                    run.record(epoch=t + 1, loss=sums[-1] / count, eta=eta_t, **means,
                               real_entropy=real_entropy)
                    sums[:], count = 0.0, 0
        set_requires_grad(D, True)
        set_requires_grad(C, True)
        self.n_iter_ = run.completed
        self._say_compile_decisions(phase)

    def _objectives(self, phase, n_steps, width):
        """The steps' losses for ``n_steps`` generator steps of ``phase``, through
        :func:`~sktransfer_cluster.base.compile_step` as ``compile`` says (:meth:`_compile_rule`);
        ``width``: the features the networks see."""
        probe = min(_COMPILE_PROBE, max(1, n_steps // 10))  # generator steps
        calls = {"critic": self.n_critic, "classifier": self.n_classifier, "generator": 1}

        def step(fn, what, **dynamo_config):
            enabled = self._compile_rule(what, phase, n_steps * calls[what], probe * calls[what],
                                         graph=(width, getattr(self, "_kind", None), str(self._dtype()), str(self.device_)))
            return compile_step(fn, enabled, device=self.device_, what=f"the GAN's {what} step",
                                dynamo_config=dynamo_config, **self._compile_options)

        return {
            # The penalty's torch.autograd.grad traced into the graph (else a graph break, and the
            # compiled backward of the pieces refuses create_graph=True).
            "critic": step(critic_objective, "critic", trace_autograd_ops=True),
            "classifier": step(classifier_objective, "classifier"),
            # eta changes along its staircase: a symbol, not a constant recompiled at every stair.
            "generator": step(generator_objective, "generator", specialize_float=False),
        }

    #: torch.compile's options for the adversarial steps (over base.COMPILE_OPTIONS).
    _compile_options = {}
    #: compile="always" compiles the adversarial steps too. Off: on MNIST-5k (seed 0, one CPU
    #: thread) a compiled generator step took 11.5-11.9 ms against 9.3 ms eager; the critic's
    #: graphs (the penalty's double backward traced in) cost 0.55-0.83 ms a call, and Adam and
    #: the guards stay per-operation (benchmarks/results/compile/gan_seed0.md).
    _compile_adversarial = False

    #: Each step's expected speed-up (eager over compiled CPU time) and compilation CPU seconds on an
    #: empty / a warm inductor cache (CompileRule), measured with benchmarks/compile_speed.py on
    #: MNIST-5k at the defaults (1 thread): the neighbour encoder's step (784 -> 256 -> 256 -> 10)
    #: 1.05x per epoch with a cold cache, 1.08x warm, for 10.3 s / 2.6 s of compilation (seed 0,
    #: benchmarks/results/compile/gan_neighbours_screen_seed0.md; TDCM's encoder: 1.07x, 10.5 s / 2.7 s), so
    #: its phase must run about 10.3 / (1 - 1/1.06) = 180 eager CPU s after its probe to repay a cold
    #: compilation (MNIST-5k's 40 epochs: 47 s). Each adversarial step compiled alone made the
    #: generator iteration slower (its speed-up is of the iteration, as the rule's eager time of a
    #: step is the time between two of its calls): critic 0.82x, classifier 0.87x, generator 0.94x,
    #: for 15.0 / 14.7 / 13.5 s cold (seed 0, benchmarks/results/compile/gan_steps_seed0.md; the warm
    #: cost, not measured per step, is that of the three together, 3.1 s, gan_seed0.md). A speed-up
    #: below 1 never repays: those steps stay eager under compile=True whatever the phase's length.
    _compile_expectations = {
        "neighbours": {"speedup": 1.06, "cold_cost": 10.3, "warm_cost": 2.6},
        "critic": {"speedup": 0.82, "cold_cost": 15.0, "warm_cost": 3.1},
        "classifier": {"speedup": 0.87, "cold_cost": 14.7, "warm_cost": 3.1},
        "generator": {"speedup": 0.94, "cold_cost": 13.5, "warm_cost": 3.1},
    }

    def _compile_rule(self, step, phase, total_steps, probe_steps, graph=()):
        """What ``compile_step`` gets for ``step`` in ``phase``: False, True (``"always"``) or a CompileRule."""
        if isinstance(self.compile, str):  # "always": today's neighbour encoder compiled from its first call
            return step == "neighbours" or bool(self._compile_adversarial)
        if not self.compile:  # False, or numpy's False_ (the "boolean" constraint accepts it)
            return False
        # The graph: what tells this step's code from another's of the same function (TDCM trains a
        # neighbour encoder through the same function, with another network).
        graph = ("PreciseFeatureGAN", step, *graph)
        rule = CompileRule(total_steps, probe_steps, name=step, graph=graph, **self._compile_expectations[step])
        self._compile_rules.append((phase, rule))
        return rule

    def _say_compile_decisions(self, phase):
        """With ``verbose >= 1``, print why each step of ``phase`` was (not) compiled."""
        if not self.verbose:
            return
        for p, rule in getattr(self, "_compile_rules", []):
            d = rule.decision
            if p != phase or d is None:
                continue
            if d["eager_step_s"] is None:
                why = "no faster compiled" if rule.speedup <= 1.0 else "too few steps to probe"
            else:
                why = (f"{d['steps_left']} steps left x {d['eager_step_s'] * 1e3:.1f} ms eager: expected saving "
                       f"{d['expected_saving_s']:.1f} CPU s against {d['expected_cost_s']:.1f} s of compilation "
                       f"({d['cache']} cache)")
            print(f"PreciseFeatureGAN: the {rule.name} step {'compiled' if d['compiled'] else 'kept eager'} in "
                  f"{phase}: {why}", flush=True)

    @property
    def compile_decisions_(self):
        check_is_fitted(self)
        return [{"phase": phase, "step": rule.name,
                 **{k: v for k, v in (rule.decision or {"compiled": False}).items() if k != "name"}}
                for phase, rule in getattr(self, "_compile_rules", [])]

    @torch.no_grad()
    def _assign(self, Xt):
        """Labels of a data set (standardised tensor); sets ``cluster_ids_`` and the centres."""
        def ids_of(part):
            return self.classifier_(part).argmax(1)

        # Past the landmark count Xt stands for the rows (StreamedRows): a dask array's chunks are
        # then labelled on their workers.
        ids = (Xt.map_chunks(ids_of) if isinstance(Xt, StreamedRows) else chunked(ids_of, Xt)).cpu().numpy()
        labels, self.cluster_ids_ = compact_labels(ids, self.n_clusters)
        self.n_clusters_ = int(self.cluster_ids_.shape[0])
        self._used = torch.as_tensor(self.cluster_ids_, device=self.device_)
        centres = self.generator_(self._latent(self._used, None, zero_noise=True))
        self.cluster_centers_ = self._unprep(centres)
        return labels

    # -------------------------------------------------------------- protocol
    def _build(self, n_features, represented, torch_gen):
        """Fresh ``generator_``, ``critic_`` and ``classifier_`` for ``n_features`` inputs."""
        nets = build_networks(
            n_features, self.n_clusters, self.noise_dim, architecture="mlp" if represented else self.architecture,
            hidden_dims=self.hidden_dims, image_shape=self.image_shape, conv_channels=self.conv_channels,
            classifier=self._trained_kind(n_features) if self._kind == "nearest" else self._kind,
            generator=torch_gen,
        )
        self.generator_, self.critic_, self.classifier_ = (
            m.to(device=self.device_, dtype=self._dtype()) for m in nets
        )

    def _fit(self, X, y, *, rng, torch_gen):
        self._compile_rules = []
        k = self.n_clusters
        self._uniform = self.cluster_weights is None
        if self._uniform:
            self.weights_ = np.full(k, 1.0 / k)
        else:
            w = np.asarray(self.cluster_weights, dtype=np.float64).ravel()
            self.weights_ = w / w.sum()
        self._betas = tuple(float(b) for b in self.betas)
        index = self._landmarks(X, rng)
        # Past the landmark count no step holds a float copy of X (representation.landmarks).
        Xt = self._tensor(X) if index is None else None
        self.encoder_, self._code_affine, self._decoder = None, None, None
        represented = self._represents(X)
        if represented:
            from ...representation import auto_metric

            # Chosen on the source's values and kept for transfer's target graph.
            self._graph_metric = auto_metric(X)
            # The decoder trains with the encoder (reconstruction), only there: codes and predict never use it.
            self.encoder_, self._decoder = _fresh_autoencoder(X.shape[1], torch_gen)
            self._train_representation(X, Xt, int(self.representation_epochs), torch_gen, "representation",
                                       index=index)
            self.encoder_ = self.encoder_.eval().to(device=self.device_, dtype=self._dtype())
            set_requires_grad(self.encoder_, False)
            Z = self._raw_codes(X, Xt)
            # The codes' own standardisation (centre, one RMS scale), as for the rows.
            with torch.no_grad():
                Zd = Z.double()
                shift = Zd.mean(0)
                scale = max(float((Zd - shift).pow(2).mean().sqrt()), 1e-12)
            del Zd
            self._code_affine = (shift.cpu().numpy(), scale)
            Xt = self._standard_codes(Z)
        elif index is not None:
            Xt = self._streamed_rows(X)
        self._kind = self._classifier_kind(Xt.shape[1], represented)
        self._build(Xt.shape[1], represented, torch_gen)
        self._train(Xt, int(self.n_iter), torch_gen, "fit")
        if self._kind == "nearest":
            self._nearest_point_classifier(Xt)
        self.labels_ = self._assign(Xt)

    def transfer(self, X, *, transfer_iter=None, n_restarts=0, refit=False):
        """Cluster an unlabelled target by fine-tuning the GAN from its source weights.

        With the neighbour representation the encoder is first refined on
        the target's k-NN graph (``representation_epochs`` passes, from
        its source weights and its decoder's, both shrunk towards fresh
        networks keeping a fifth of them). Critic, classifier and generator continue
        training on ``X`` (its codes), then the classifier is set afresh from
        the final generator (a linear one trained from zero, or the nearest
        generated point); afterwards ``labels_`` holds the target's labels and
        ``predict`` serves the target. With restarts, fresh networks are also
        trained on the target's codes (``n_iter`` steps each) and the GAN whose
        generated points ``G(y, z=0)`` leave the target rows the smallest mean
        squared distance to their nearest point is kept (the fine-tuned one on
        ties); ``transfer_start_`` says which.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Target data, same features as the source.
        transfer_iter : int, default=None
            Generator steps on the target; None is the ``transfer_iter``
            parameter (whose None is ``max(1, n_iter // 4)``).
        n_restarts : int, default=0
            Fresh GANs (``n_iter`` steps each) trained on the target beside
            the fine-tuned one. Off by default: on MNIST 0-4 -> 5-9 (seed 0)
            the fresh GAN on the refined codes scored 0.714 against 0.812 for
            the fine-tuned one, and the criterion kept the fine-tuned one
            (``docs/notes/precise_gan.md``, 2026-11-27).
        refit : bool, default=False
            Also fit a copy of the estimator (same parameters and
            ``random_state``) on the target alone, and keep whichever model's
            labels agree more with the target's own neighbours: the fraction
            of each row's 15 nearest neighbours (the distance of the
            representation's graph, on the rows) that share its label, the
            fine-tuned model on ties. ``transfer_start_`` is ``"refit"`` when
            the copy was kept (the estimator then is that model: its
            standardisation, encoder and networks), and
            ``transfer_agreement_`` holds both agreements. Costs a fit. Off by
            default: the agreement ranked the two partitions as their accuracy
            did on MNIST 0-4 -> 5-9 and mfeat-pix, but not on the digits
            (0.954 kept against the refit's 0.978 on seed 0;
            ``docs/notes/precise_gan.md``, 2026-11-27, fourth session).

        Returns
        -------
        labels : ndarray of shape (n_samples,)

        Examples
        --------
        >>> from sklearn.datasets import make_blobs
        >>> from sktransfer_cluster import PreciseFeatureGAN
        >>> X, _ = make_blobs(n_samples=60, centers=3, random_state=0)
        >>> model = PreciseFeatureGAN(3, n_iter=5, random_state=0).fit(X)
        >>> model.transfer(X + 0.5, transfer_iter=2).shape
        (60,)
        """
        return super().transfer(X, transfer_iter=transfer_iter, n_restarts=n_restarts, refit=refit)

    def _transfer(self, X, *, rng, torch_gen, transfer_iter=None, n_restarts=0, refit=False):
        """Fine-tune ``D``, ``C`` and ``G`` from their current weights on the target ``X``, then re-fit ``C``.

        ``transfer_iter`` generator steps; None is the ``transfer_iter``
        parameter (None there is ``max(1, n_iter // 4)``). ``n_restarts`` fresh
        GANs beside it, the one of lowest quantisation error kept.
        """
        self._compile_rules = []
        if transfer_iter is None:
            transfer_iter = self.transfer_iter if self.transfer_iter is not None else max(1, self.n_iter // 4)
        index = self._landmarks(X, rng)
        Xt = self._tensor(X) if index is None else None
        if getattr(self, "encoder_", None) is not None:
            self._train_representation(X, Xt, int(self.representation_epochs), torch_gen, "refine", index=index)
            Xt = self._standard_codes(self._raw_codes(X, Xt))
        elif index is not None:
            Xt = self._streamed_rows(X)
        self._train(Xt, int(transfer_iter), torch_gen, "transfer")
        if getattr(self, "_kind", None) == "nearest":
            self._nearest_point_classifier(Xt, balanced=True)
        else:
            self._refit_classifier(self.n_classifier * int(transfer_iter), torch_gen)
        self.transfer_start_ = "source"
        if n_restarts > 0:
            best = (self._quantisation_error(Xt), (self.generator_, self.critic_, self.classifier_), "source")
            kind = getattr(self, "_kind", self._classifier_kind(Xt.shape[1], False))
            self._kind = kind
            for r in range(int(n_restarts)):
                self._build(Xt.shape[1], getattr(self, "encoder_", None) is not None, torch_gen)
                self._train(Xt, int(self.n_iter), torch_gen, f"transfer restart {r + 1}")
                if kind == "nearest":
                    # A restart is a fresh GAN on the target alone, as a fit: no source partition
                    # for the plan's masses to hold against, so a fit's steps (plan's, then plain).
                    self._nearest_point_classifier(Xt)
                error = self._quantisation_error(Xt)
                if error < best[0]:
                    best = (error, (self.generator_, self.critic_, self.classifier_), f"restart {r + 1}")
            (self.generator_, self.critic_, self.classifier_), self.transfer_start_ = best[1], best[2]
        labels = self._assign(Xt)
        self.transfer_agreement_ = None
        if refit:
            fresh = clone(self)
            fresh.callbacks = self.callbacks  # the same observers, not copies
            fresh.fit(X)
            rows, neighbours = self._neighbour_indices(X)
            agree = {"source": neighbour_agreement(labels[rows], neighbours),
                     "refit": neighbour_agreement(fresh.labels_[rows], neighbours)}
            if agree["refit"] > agree["source"]:
                kept = {"n_features_in_", "feature_names_in_"}
                self.__dict__.update({k: v for k, v in vars(fresh).items() if k not in kept})
                labels, self.transfer_start_ = fresh.labels_, "refit"
            self.transfer_agreement_ = agree
        return labels

    def _neighbour_indices(self, X):
        """``(rows, idx)``: rows of ``X`` and the ``_NEIGHBOURS`` nearest neighbours of each among them
        (indices into ``rows``), by the distance of the representation's graph
        (:meth:`_train_representation`; image blur and shifts with ``image_shape``),
        ``auto_metric`` of ``X`` where the model has no encoder.

        ``rows`` is every row (a slice), or past
        :data:`~sktransfer_cluster.representation.LANDMARK_ROWS` rows as many landmarks
        drawn by a generator of their own and read by index: the agreement of a partition
        with the neighbourhoods is then measured on a uniform sample of the rows.
        """
        from ...representation import auto_metric, knn, prepare_rows

        metric = getattr(self, "_graph_metric", None) or auto_metric(X)
        index = self._landmarks(X, np.random.default_rng(0))
        if index is not None:
            shift, scale = self._input_affine or (None, 1.0)
            rows = X = landmark_graph_rows(X, index, metric, shift, scale)
        else:
            rows = X if metric == "cosine" else self._tensor(X).detach().to("cpu", torch.float32).numpy()
        image = self.image_shape is not None and self._represents(X)
        shape = tuple(self.image_shape) if image else None
        with compute_threads(blas=True):
            rows = prepare_rows(rows, metric=metric, image_shape=shape, blur=_BLUR if image else 0.0)
            idx, _ = knn(rows, min(_NEIGHBOURS, X.shape[0] - 1), image_shape=shape, max_shift=_MAX_SHIFT if image else 0)
        return (slice(None) if index is None else index), idx

    @torch.no_grad()
    def _quantisation_error(self, Xt):
        """Mean squared distance of the rows ``Xt`` (the GAN's space) to their nearest generated
        point ``G(y, z=0)``: how well the generator's points cover the data, no labels needed."""
        every = torch.arange(self.n_clusters, device=self.device_)
        P = self.generator_(self._latent(every, None, zero_noise=True)).reshape(self.n_clusters, -1)
        nearest = chunked(lambda part: torch.cdist(part.reshape(part.shape[0], -1), P).pow(2).min(1).values, Xt)
        return float(nearest.double().mean())

    def _nearest_point_classifier(self, Xt, balanced=False):
        """Re-estimate the generated points by Lloyd steps on ``Xt``, then set ``C`` to their nearest-point classifier.

        Each Lloyd step labels the rows ``Xt`` (the GAN's space) by the
        classifier below and moves every point ``G(y, z=0)`` with rows to their
        mean; at most ``_LLOYD_STEPS`` steps, until no label changes. ``G`` is
        then fitted to the new points by least squares (``_PLACE_STEPS`` Adam
        steps), so that ``cluster_centers_`` and :meth:`sample` stay the
        generator's. Why: after the adversarial phase the points sit off their
        clusters' means (the entropy term, whose weight grows 1.2-fold per
        stair, pushes them apart); on MNIST 0-4 -> 5-9 they lay 0.3-1.0 from
        the target digits' mean codes (the digits' RMS radius 0.9), and their
        nearest-point cells scored 0.812 against 0.950 after the Lloyd steps
        (``docs/notes/precise_gan.md``, 2026-11-27, third session).

        On the codes of the neighbour representation the steps start with OT-Lloyd's
        (:meth:`_ot_lloyd_points`), each assigning the rows by the entropic transport
        plan whose cluster masses are the prior ``weights_``, the distribution the
        generator draws its clusters from: no cell can take the rows of two groups from a
        poor start. ``balanced`` (a transfer from the source model) keeps the plan's
        points: the source's partition biases the target's codes (its classes split a
        target class), and the prior's masses hold against it. A fit then runs the EM
        steps of a Gaussian mixture with one shared (tied) covariance and fitted
        proportions from the plan's cells (:meth:`_tied_mixture`), and ``C`` is that
        mixture's posterior, still linear in the codes. Its proportions let the cells take
        the sizes of the data's groups (the plan's alone pull imbalanced clusters towards
        equal sizes); its covariance weighs the codes' directions by the spread within the
        cells, where the plain nearest-point steps weigh every direction alike (on MNIST-5k
        it separates the 4s from the 9s, which the plan's and the plain steps' cells mix).
        The measurements: ``docs/notes/precise_gan.md``, ninth and tenth sessions.

        The classifier: logits ``(p_y . x - |p_y|^2 / 2) / s2 + log w_y``, the
        posterior of equal isotropic Gaussians of variance ``s2`` at the
        points ``p_y``, times the prior ``w``, whose argmax is the nearest
        point (uniform prior). ``s2`` is the mean squared distance of the rows
        ``Xt`` to their nearest point, per dimension. After a fit's mixture steps it is
        the tied mixture's posterior at the placed points instead (:meth:`_tied_linear`).
        """
        with torch.no_grad():
            every = torch.arange(self.n_clusters, device=self.device_)
            latent = self._latent(every, None, zero_noise=True)
            start = self.generator_(latent).reshape(self.n_clusters, -1)
            # On the neighbour representation's codes OT-Lloyd's steps under the prior first; then,
            # but in a transfer from the source, the tied mixture's EM steps, which let the cells take
            # the sizes of the data's groups. Without codes, the plain steps.
            codes = getattr(self, "encoder_", None) is not None
            P, labels, tied = (self._ot_lloyd_points(start, Xt) if codes else start.clone()), None, None
            if codes and not balanced:
                P, tied = self._tied_mixture(P, Xt)
            # The plain steps without codes, and where the mixture's covariance was degenerate (tied None).
            plain = not codes or (not balanced and tied is None)
            for _ in range(_LLOYD_STEPS if plain else 0):
                C = self._nearest_point_linear(P, Xt)
                new = chunked(lambda part: C(part.reshape(part.shape[0], -1)).argmax(1), Xt)
                if labels is not None and torch.equal(new, labels):
                    break
                labels = new
                counts = torch.bincount(labels, minlength=self.n_clusters).to(P.dtype)
                sums = self._cell_sums(Xt, labels, P)
                used = counts > 0
                P[used] = sums[used] / counts[used, None]
        if _LLOYD_STEPS > 0 and not torch.equal(P, start):
            self._place_points(latent, P.reshape(start.shape))
        with torch.no_grad():
            P = self.generator_(latent).reshape(self.n_clusters, -1)
            self.classifier_ = self._nearest_point_linear(P, Xt) if tied is None else self._tied_linear(P, *tied)

    def _tied_mixture(self, start, Z):
        """EM of a Gaussian mixture with one shared covariance and fitted proportions on the codes ``Z``.

        Starts from the nearest-point cells of ``start`` (K, d); each step re-estimates the
        means, the pooled within-cell covariance (shrunk by ``_TIED_SHRINK`` towards its mean
        eigenvalue) and the proportions from the responsibilities, then recomputes them; at
        most ``_LLOYD_STEPS`` steps, until the hard labels stop changing. In float64 on the
        CPU. Returns the means (``start``'s dtype and device) and ``(inverse covariance,
        log proportions)`` of the last E-step, for :meth:`_tied_linear`; or ``(start, None)``
        where the pooled covariance is degenerate (cells of one row, or of duplicate rows:
        no spread within the cells next to the codes' own, or not positive definite), for the
        plain nearest-point steps instead.
        """
        Zd = Z.reshape(Z.shape[0], -1).to("cpu", torch.float64)
        n, d = Zd.shape
        # The codes' total variance: the scale against which the within-cell spread is rounding error.
        total = float(((Zd - Zd.mean(0)) ** 2).sum() / n)
        mu = start.to("cpu", torch.float64)
        R = F.one_hot(torch.cdist(Zd, mu).argmin(1), self.n_clusters).to(torch.float64)
        labels = None
        for _ in range(_LLOYD_STEPS):
            nk = R.sum(0)
            used = nk > 1e-12
            mu = torch.where(used[:, None], R.T @ Zd / nk.clamp_min(1e-300)[:, None], mu)
            # The pooled within-cell scatter sum_ik r_ik (z_i - mu_k)(z_i - mu_k)^T, as Z^T Z - sum_k n_k mu_k mu_k^T
            # (every row's responsibilities sum to one): no (n, K, d) temporary.
            S = (Zd.T @ Zd - (mu * nk[:, None]).T @ mu) / n
            if not float(S.trace()) > _TIED_MIN_SPREAD * total:
                return start, None
            S = (1 - _TIED_SHRINK) * S + _TIED_SHRINK * (S.trace() / d) * torch.eye(d, dtype=S.dtype)
            if torch.linalg.cholesky_ex(S).info != 0:  # the expansion above left rounding error only
                return start, None
            S_inv = torch.linalg.inv(S + torch.finfo(S.dtype).eps * S.trace() * torch.eye(d, dtype=S.dtype))
            log_pi = torch.log((nk / n).clamp_min(1e-300))
            logits = Zd @ S_inv @ mu.T - 0.5 * ((mu @ S_inv) * mu).sum(1) + log_pi
            new = logits.argmax(1)
            R = torch.softmax(logits, dim=1)
            if labels is not None and torch.equal(new, labels):
                break
            labels = new
        return mu.to(device=start.device, dtype=start.dtype), (S_inv, log_pi)

    @torch.no_grad()
    def _tied_linear(self, P, S_inv, log_pi):
        """The linear layer of the tied mixture's posterior: logits ``p_y S^-1 x - p_y S^-1 p_y / 2 + log pi_y``."""
        W = P.to("cpu", torch.float64) @ S_inv
        C = torch.nn.Linear(P.shape[1], self.n_clusters).to(device=self.device_, dtype=P.dtype)
        C.weight.copy_(W.to(C.weight))
        C.bias.copy_((-0.5 * (W * P.to("cpu", torch.float64)).sum(1) + log_pi).to(C.bias))
        return C

    def _ot_lloyd_points(self, start, Z):
        """The points ``start`` (K, d) moved by OT-Lloyd on the codes ``Z`` under the prior ``weights_``.

        :func:`~sktransfer_cluster.ot.lloyd.ot_lloyd` in float64 from
        ``start``: each step assigns the rows by the entropic plan whose cluster masses are
        ``weights_`` (regularisation ``_OT_EPSILON`` times the mean cost) and moves every point
        to its plan-weighted mean; at most ``_LLOYD_STEPS`` steps, until the plan's hard labels
        stop changing. Returned in ``start``'s dtype and device.
        """
        from ...ot import lloyd

        log_w = torch.log(torch.as_tensor(np.maximum(self.weights_, 1e-300), dtype=torch.float64))
        Zd = Z.reshape(Z.shape[0], -1).to("cpu", torch.float64)
        centers, _, _, _ = lloyd.ot_lloyd(Zd, start.to("cpu", torch.float64)[None], _OT_EPSILON, log_w, _LLOYD_STEPS, 0.0)
        return centers[0].to(device=start.device, dtype=start.dtype)

    @staticmethod
    def _cell_sums(Xt, labels, P):
        """Per-label sums of the rows ``Xt`` (a tensor, or streamed rows read in chunks) in ``P``'s dtype."""
        if torch.is_tensor(Xt):
            return torch.zeros_like(P).index_add_(0, labels, Xt.reshape(Xt.shape[0], -1).to(P.dtype))
        sums, step = torch.zeros_like(P), chunk_rows(P.shape[1])
        for start in range(0, Xt.shape[0], step):
            part = Xt[start : start + step]
            sums.index_add_(0, labels[start : start + step], part.reshape(part.shape[0], -1).to(P.dtype))
        return sums

    def _place_points(self, latent, P):
        """Fit ``G`` by least squares so that ``G(latent) = P`` (``_PLACE_STEPS`` Adam steps)."""
        G = self.generator_
        set_requires_grad(G, True)
        opt = torch.optim.Adam(G.parameters(), lr=_PLACE_LR)
        with torch.enable_grad(), self._training(
            "generator placement", _PLACE_STEPS, state=[G], select="last", unit="step", keeps_model=False
        ) as run:
            for step in run.epochs():
                loss = run.step(opt, (G(latent).reshape(P.shape) - P).pow(2).sum(1).mean(), weight=None)
                run.end_epoch(loss, log=step == _PLACE_STEPS - 1)

    @torch.no_grad()
    def _nearest_point_linear(self, P, Xt):
        """The linear layer of the nearest point of ``P`` (rows: points), ``s2`` from the rows ``Xt``."""
        d = P.shape[1]
        nearest = chunked(lambda part: torch.cdist(part.reshape(part.shape[0], -1), P).pow(2).min(1).values, Xt)
        s2 = max(float(nearest.double().mean()) / d, 1e-12)
        C = torch.nn.Linear(d, self.n_clusters).to(device=self.device_, dtype=P.dtype)
        C.weight.copy_(P / s2)
        prior = torch.as_tensor(np.log(np.maximum(self.weights_, 1e-300)), dtype=P.dtype, device=self.device_)
        C.bias.copy_(-P.pow(2).sum(1) / (2 * s2) + prior)
        return C

    def _refit_classifier(self, n_steps, torch_gen):
        """Train a linear ``C`` afresh for ``n_steps`` cross-entropy steps on the final generator's samples.

        At the end of :meth:`transfer`, the fine-tuned ``C`` still carries its
        source weights: while it classifies the moving generated samples
        without error its loss is near zero, so its boundaries stay where the
        source put them and the generator's points move within them instead.
        The linear ``C`` restarts from zero weights with plain gradient descent
        (step ``1 / (1 + mean squared norm)`` of the first minibatch), which
        keeps its weights in the span of the generated samples. A network
        ``C`` (``classifier="network"``) keeps its fine-tuned weights: from a
        fresh initialisation a few hundred Adam steps did not always separate
        the generated points again.
        """
        C, bs = self.classifier_, int(self.batch_size)
        if not isinstance(C, torch.nn.Linear):
            return
        with torch.no_grad():
            fake, ids = self._fake(bs, torch_gen)
            C.weight.zero_()
            C.bias.zero_()
        lr = 1.0 / (1.0 + float(fake.reshape(bs, -1).pow(2).sum(1).mean()))
        opt = torch.optim.SGD(C.parameters(), lr=lr)
        with self._training("classifier re-fit", n_steps, state=[C], select="last", unit="step") as run:
            for step in run.epochs():
                if step:
                    with torch.no_grad():
                        fake, ids = self._fake(bs, torch_gen)
                loss, _ = classifier_step(C, opt, fake, ids, update=functools.partial(run.step, check=False, weight=None))
                run.end_epoch(loss, log=step == n_steps - 1)

    def _logits(self, X):
        """``C``'s logits over the used ids (the labels) for validated rows ``X``, in float64
        copies of the networks where the rows would overflow float32 (:meth:`_exact`)."""
        exact = self._exact(X)
        classifier = self._networks(exact)[1]
        return classifier(self._prep(X, exact=exact)).index_select(1, self._used)

    def _log_proba(self, X):
        """Log-posterior over the used ids (the labels), rows ``X`` (validated ndarray)."""
        return F.log_softmax(self._logits(X), dim=1)

    def _predict(self, X):
        return self._logits(X).argmax(1).cpu().numpy()

    def _linear_predictor(self):
        # A linear C (softmax regression) on the standardised rows labels by the argmax of its
        # logits; with an encoder, C reads codes, not rows.
        if not isinstance(self.classifier_, torch.nn.Linear) or getattr(self, "encoder_", None) is not None:
            return None
        return self.classifier_.weight.detach().T[:, self._used], self.classifier_.bias.detach()[self._used]

    def predict_proba(self, X):
        """Posterior ``q(label | x)`` of the classifier ``C``, over the labels.

        The softmax of ``C``'s logits restricted to ``cluster_ids_`` (all ids
        in the usual case), so rows sum to one and ``argmax`` equals
        :meth:`predict`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_clusters_)
            A dask array for a dask array, each chunk's computed where it lives.
        """
        if is_dask_array(X):
            return self._map_dask_rows("predict_proba", X, lambda: self.n_clusters_, np.float64)
        X = self._fitted_input(X)
        return self._chunked(lambda xc: self._log_proba(xc).double().exp().cpu().numpy(), X)

    def score(self, X, y=None):
        """Mean log of the largest posterior, ``mean_i log max_j q(j | x_i)``.

        At most 0 (every point confidently assigned) and at least
        ``-log(n_clusters_)``; higher is better and no labels are needed. It
        rates how confidently ``C`` separates ``X`` -- the entropy the method
        minimises -- not how well the generator fits ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        score : float
        """
        X = self._fitted_input(X)
        best = self._chunked(lambda xc: self._log_proba(xc).double().max(1).values.cpu().numpy(), X)
        return float(best.mean())

    def sample(self, n_samples=1, cluster=None, random_state=None):
        """Draw samples from the generator.

        Parameters
        ----------
        n_samples : int, default=1
        cluster : int, default=None
            Generator id ``0 .. n_clusters - 1`` to condition on; None draws
            the ids from the prior ``weights_``. Ids equal labels when every id
            is used (see ``cluster_ids_``).
        random_state : int, RandomState instance or None, default=None
            Seeds the ids and the noise; None uses the estimator's
            ``random_state``.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            Generated points, in the input space (codes of ``encoder_``,
            10 columns, with the neighbour representation).
        ids : ndarray of shape (n_samples,)
            The generator id each point was generated from.
        """
        check_is_fitted(self)
        self._check_unchanged_since_fit("sample")
        if isinstance(n_samples, bool) or not isinstance(n_samples, Integral) or n_samples < 1:
            raise ValueError(f"n_samples must be an int >= 1, got {n_samples!r}.")
        k = self.n_clusters
        if cluster is not None and (
            isinstance(cluster, bool) or not isinstance(cluster, Integral) or not 0 <= cluster < k
        ):
            raise ValueError(f"cluster must be None or an int in [0, {k - 1}], got {cluster!r}.")
        seed = self.random_state if random_state is None else random_state
        _, torch_gen = make_generators(check_random_state(seed), "cpu")
        if cluster is None:
            ids = draw_ids(n_samples, k, None if self._uniform else self.weights_, torch_gen, self.device_)
        else:
            ids = torch.full((n_samples,), int(cluster), dtype=torch.int64, device=self.device_)
        X = chunked(self.generator_, self._latent(ids, torch_gen))
        return self._unprep(X), ids.cpu().numpy()
