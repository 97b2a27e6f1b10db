"""Training curves of PreciseFeatureGAN on the 8-Gaussian ring (the paper's Figs. 2-3).

Fits the cluster-conditioned WGAN-GP on eight Gaussians (sigma = 0.014) and
plots, per logging interval of ``history_``: the critic's Wasserstein (EMD)
estimate, the classifier's accuracy on generated samples, the mean entropy of
its posterior on real samples and the staircase trade-off eta; beside them the
real points, the generated ones and the clustering ACC.

    python examples/precise_gan_diagnostics.py [--noise-dim 2] [--n-iter 2000] [--seed 0] [--out curves.png]

matplotlib is optional (``pip install matplotlib``); without it the curves are
printed as a table.
"""

import argparse
import time

from sktransfer_cluster.cluster.precise_gan import PreciseFeatureGAN
from sktransfer_cluster.datasets import make_gaussian_ring
from sktransfer_cluster.metrics import clustering_accuracy

CURVES = [
    ("wasserstein", "Wasserstein estimate E[D(x)] - E[D(G)]"),
    ("fake_accuracy", "classifier accuracy on generated samples"),
    ("real_entropy", "mean entropy of C on real samples"),
    ("eta", "trade-off eta (staircase)"),
]


def print_table(history):
    keys = ["epoch", *[k for k, _ in CURVES]]
    print(" ".join(f"{k:>14}" for k in keys))
    step = max(1, len(history) // 20)
    for h in history[::step] + ([history[-1]] if (len(history) - 1) % step else []):
        print(" ".join(f"{h[k]:>14.4g}" for k in keys))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--noise-dim", type=int, default=2)
    parser.add_argument("--n-iter", type=int, default=2000, help="generator steps (paper: 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="save the figure here instead of showing it")
    args = parser.parse_args()

    X, y = make_gaussian_ring(n_samples=2000, random_state=args.seed)
    # CPU budget settings (see benchmarks/precise_gan_quality.py): lr 1e-3 and gp_weight 1
    # instead of the paper's 1e-4 / 100, which need far more steps than a CPU affords.
    model = PreciseFeatureGAN(
        n_clusters=8, noise_dim=args.noise_dim, hidden_dims=(64, 64), n_iter=args.n_iter,
        learning_rate=1e-3, gp_weight=1.0, random_state=args.seed, verbose=1,
    )
    t0 = time.perf_counter()
    model.fit(X)
    acc = clustering_accuracy(y, model.labels_)
    print(f"noise_dim={args.noise_dim}: ACC={acc:.3f} after {model.n_iter_} generator steps "
          f"({time.perf_counter() - t0:.0f} s)")

    try:
        import matplotlib

        if args.out:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib); the curves as a table:")
        print_table(model.history_)
        return

    it = [h["epoch"] for h in model.history_]  # generator steps done
    fig, axes = plt.subplots(1, len(CURVES) + 1, figsize=(4 * (len(CURVES) + 1), 3.6))
    for ax, (key, title) in zip(axes, CURVES):
        ax.plot(it, [h[key] for h in model.history_])
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("generator step")
        if key == "eta":
            ax.set_yscale("log")
    X_gen, _ = model.sample(1000, random_state=args.seed)
    ax = axes[-1]
    ax.scatter(X[:, 0], X[:, 1], c=model.labels_, s=4, cmap="tab10", label="real (colour = cluster)")
    ax.scatter(X_gen[:, 0], X_gen[:, 1], marker="+", s=12, c="k", alpha=0.4, label="generated")
    ax.set_title(f"real vs generated, ACC={acc:.3f}", fontsize=9)
    ax.set_aspect("equal")
    ax.legend(fontsize=7, loc="center")
    fig.tight_layout()
    if args.out:
        fig.savefig(args.out, dpi=120)
        print(f"saved {args.out}")
    else:
        plt.show()


if __name__ == "__main__":
    main()
