"""TDCMCluster on the paper's synthetic transfer protocol and the digits cross-task split.

    python benchmarks/tdcm_quality.py [--datasets 10] [--epochs 100] [--shift 3.0] [--quick | --smoke]
                                      [--throughput-n 1000000] [--skip-throughput] [--name NAME]

Canonical run: ``python benchmarks/tdcm_quality.py``.

Synthetic (Zhang & Zhao, Sec. 5.1): for K in {2, 3, 5, 10}, several data sets from
``make_tdcm_transfer`` (K equal-sized Gaussians with random centres and
covariances; the target moves every centre by N(0, shift^2) per coordinate).
Every model is trained on the source only and scored (NMI/ARI/ACC) on the target:

* TDCM transfer        -- ``fit(source)`` then ``transfer(target)`` (defaults: the neighbour
                            encoder, ``adapt_n_init=8``; no fine-tuning)
* TDCM input model      -- ``representation="input"``: linear encoder, ``embedding_norm="scalar"``
                            (the default before 2026-11-27); the rows below it vary this model
* TDCM source centroids -- same model, ``predict(target)`` with the source-adapted centroids
* TDCM + fine-tuning     -- ``transfer(target, fine_tune_epochs=30)`` (unsupervised, on the target)
* TDCM paper start       -- ``adapt_n_init=1``: the paper's single forward pass from ``c^(0)``
* TDCM batch norm        -- ``embedding_norm="batch"`` (per-dimension standardisation, the
                            previous default), transfer
* TDCM previous default  -- ``embedding_norm="batch", adapt_n_init=1, n_init=5``, transfer
* TDCM + extra steps     -- ``extra_adapt_steps=16`` (last block repeated 16 more times), transfer
* TDCM no smoothing      -- ``smoothing_steps=0`` (each data set clustered unsmoothed), transfer
* TDCM no isometry      -- ``isometry_weight=0`` (linear encoder free to project), transfer
* TDCM MLP encoder       -- ``hidden_dims=(64, 64)`` (the paper's 3-layer MLP; the default
                            encoder is linear since it keeps the target's geometry), transfer
* TDCM faithful         -- ``embedding_norm=None, adapt_n_init=1`` (the paper's objective
                            without our normalisation of the embeddings, and its single
                            forward pass from ``c^(0)``), transfer
* variant-R/-O/-E       -- ``symmetric=False`` / ``ortho_weight=0`` / ``beta=0``, transfer
* KMeans source->target -- KMeans fitted on the source, ``predict(target)``
* KMeans refit target   -- KMeans fitted on the target itself (not a transfer; a reference)
* GMM refit target      -- full-covariance Gaussian mixture fitted on the target (a reference:
                            the generating model class, so roughly the best any method can do)

Digits cross-task (the estimator's defaults, 3 seeds): fit on digits 0-4 (K=5), transfer
to digits 5-9, beside KMeans fitted on 0-4 applied to 5-9 and KMeans refitted on 5-9.

Throughput: ``predict`` of a fitted TDCMCluster (default encoder and blocks, K=10) on
10^6 points with d=10, beside ``sklearn.cluster.KMeans.predict`` (K=10) on the same
points, as a time ratio (best of 3 repeats each).

Results go to benchmarks/results/tdcm/tdcm_quality.{json,md} (another ``--name``, or
``--quick``, goes to ``tdcm/variants/``; ``--smoke`` -- one K = 3 data set of 50 points per
cluster, one digits seed on 300 rows of three digits a side (K = 3), the registry's smallest
TDCM with ``embedding_dim >= K``, 10^4 predict rows of a model fitted on 500 -- under a
temporary folder).
"""

import argparse
import time

import _common
import numpy as np
import torch
from _common import add_name_argument, scores, write
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture

from sktransfer_cluster.cluster.tdcm import TDCMCluster
from sktransfer_cluster.datasets import load_digits_transfer, make_tdcm_transfer

# Keys starting with "_" are not estimator parameters: "_fine_tune_epochs" goes to transfer().
# The ablations "..., input model" vary the input model (representation="input", the paper's
# family and the default before 2026-11-27), whose parameters they are.
_INPUT_ABLATIONS = {
    "TDCM paper start (adapt_n_init=1)": {"adapt_n_init": 1},
    "TDCM batch norm (embedding_norm='batch')": {"embedding_norm": "batch"},
    "TDCM previous default (batch norm, adapt_n_init=1, n_init=5)": {
        "embedding_norm": "batch",
        "adapt_n_init": 1,
        "n_init": 5,
    },
    "TDCM transfer + 16 extra adapt steps": {"extra_adapt_steps": 16},
    "TDCM no neighbour smoothing (smoothing_steps=0)": {"smoothing_steps": 0},
    "TDCM no isometry (isometry_weight=0)": {"isometry_weight": 0.0},
    "TDCM MLP encoder (hidden_dims=(64, 64))": {"hidden_dims": (64, 64)},
    "TDCM faithful (embedding_norm=None, adapt_n_init=1)": {"embedding_norm": None, "adapt_n_init": 1},
    "TDCM variant-R (symmetric=False)": {"symmetric": False},
    "TDCM variant-O (ortho_weight=0)": {"ortho_weight": 0.0},
    "TDCM variant-E (beta=0)": {"beta": 0.0},
}
TDCM_VARIANTS = {
    "TDCM transfer": {},  # the defaults (representation="neighbours", n_init=1)
    "TDCM transfer + fine-tune 30 epochs on target": {"_fine_tune_epochs": 30},
    "TDCM transfer, n_init=5": {"n_init": 5},
    "TDCM input model (representation='input')": {"representation": "input"},
    **{f"{name}, input model": {"representation": "input", **kw} for name, kw in _INPUT_ABLATIONS.items()},
}


def run_task(task, K, seed, tdcm_kwargs):
    out = {}
    # A smoke run checks the two code paths (transfer, and transfer with fine-tuning), not every variant.
    for name, extra in list(TDCM_VARIANTS.items())[: 2 if _common.SMOKE else None]:
        params = {k: v for k, v in extra.items() if not k.startswith("_")}
        transfer_kwargs = {"fine_tune_epochs": extra.get("_fine_tune_epochs", 0)}
        t0 = time.perf_counter()
        model = TDCMCluster(K, random_state=seed, device="cpu", **{**tdcm_kwargs, **params})
        if _common.SMOKE:  # the smallest budget, with room for K centroids (embedding_dim >= K)
            model.set_params(**{**_common.smoke_params("TDCMCluster"), "embedding_dim": max(4, K), **params})
        model.fit(task.X_source)
        source = scores(task.y_source, model.labels_)
        if name == "TDCM transfer":
            out["TDCM source centroids (predict)"] = scores(task.y_target, model.predict(task.X_target))
            out["TDCM source centroids (predict)"]["source_nmi"] = source["nmi"]
        out[name] = scores(task.y_target, model.transfer(task.X_target, **transfer_kwargs))
        out[name]["source_nmi"] = source["nmi"]
        out[name]["seconds"] = time.perf_counter() - t0
    km = KMeans(K, n_init=10, random_state=seed).fit(task.X_source)
    out["KMeans source->target"] = scores(task.y_target, km.predict(task.X_target))
    out["KMeans source->target"]["source_nmi"] = scores(task.y_source, km.labels_)["nmi"]
    refit = KMeans(K, n_init=10, random_state=seed).fit_predict(task.X_target)
    out["KMeans refit target"] = scores(task.y_target, refit)
    # (A smoke run: one short EM; five full-covariance fits on 64-D digits take half a minute.)
    gmm = GaussianMixture(K, n_init=1 if _common.SMOKE else 5, max_iter=5 if _common.SMOKE else 100,
                          random_state=seed).fit_predict(task.X_target)
    out["GMM refit target (full covariance)"] = scores(task.y_target, gmm)
    return out


# Table 1 of the paper (target NMI, and k-means fitted on the source applied to the target).
PAPER_TARGET_NMI = {2: (0.989, 0.622), 3: (0.953, 0.883), 5: (0.901, 0.750), 10: (0.885, 0.782)}


def table(rows, title, paper=None):
    names = list(rows[0].keys())
    header = "| method | target NMI | target ARI | target ACC | source NMI | fit + transfer s |"
    md = [f"### {title}", "", header]
    md.append("|---|---|---|---|---|---|")
    if paper is not None:
        md.append(f"| paper: TDCM | {paper[0]:.3f} | - | - | - | - |")
        md.append(f"| paper: k-means source->target | {paper[1]:.3f} | - | - | - | - |")
    agg = {}
    for name in names:
        keys = ("nmi", "ari", "acc", "source_nmi", "seconds")
        vals = {k: [r[name][k] for r in rows if k in r[name]] for k in keys}
        agg[name] = {k: (float(np.mean(v)) if v else None) for k, v in vals.items()}
        sd = float(np.std(vals["nmi"]))
        a = agg[name]
        src = f"{a['source_nmi']:.3f}" if a["source_nmi"] is not None else "-"
        secs = f"{a['seconds']:.1f}" if a["seconds"] is not None else "-"
        scores = f"{a['nmi']:.3f} ± {sd:.3f} | {a['ari']:.3f} | {a['acc']:.3f}"
        md.append(f"| {name} | {scores} | {src} | {secs} |")
    return agg, md


def _best_time(fn, repeats=3):
    return _common.best_of(fn, repeats, clock="wall")[0]


def throughput(n, n_features=10, n_clusters=10, seed=0):
    """Seconds of ``predict`` on ``n`` points, TDCMCluster beside KMeans (both K=10, float64)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(n_clusters, n_features))
    # predict's cost does not depend on the rows the model was fitted on; a smoke run's 10^4
    # rows fit on 500 (the neighbour encoder's graph and epochs dominated the smoke run).
    n_fit = min(20_000, max(500, n // 50))
    X_fit = centers[rng.integers(n_clusters, size=n_fit)] + rng.normal(size=(n_fit, n_features))
    X = centers[rng.integers(n_clusters, size=n)] + rng.normal(size=(n, n_features))
    # Training quality does not change predict's cost: a few epochs suffice.
    tdcm = TDCMCluster(n_clusters, max_epochs=3, device="cpu", random_state=seed).fit(X_fit)
    km = KMeans(n_clusters, n_init=1, random_state=seed).fit(X_fit)
    t_tdcm = _best_time(lambda: tdcm.predict(X))
    t_km = _best_time(lambda: km.predict(X))
    return {
        "n_samples": n,
        "n_features": n_features,
        "n_clusters": n_clusters,
        "tdcm_predict_s": t_tdcm,
        "kmeans_predict_s": t_km,
        "ratio_tdcm_over_kmeans": t_tdcm / t_km,
        "tdcm_params": {
            k: v for k, v in tdcm.get_params().items() if k in ("hidden_dims", "embedding_dim", "n_blocks")
        },
    }


def throughput_lines(t):
    return [
        f"### Throughput: predict on {t['n_samples']:,} points "
        f"(d={t['n_features']}, K={t['n_clusters']}, float64)",
        "",
        "| method | seconds (best of 3) | points/s |",
        "|---|---|---|",
        f"| TDCMCluster.predict {t['tdcm_params']} | {t['tdcm_predict_s']:.3f} | "
        f"{t['n_samples'] / t['tdcm_predict_s']:.3g} |",
        f"| KMeans.predict | {t['kmeans_predict_s']:.3f} | {t['n_samples'] / t['kmeans_predict_s']:.3g} |",
        "",
        f"TDCM / KMeans time ratio: {t['ratio_tdcm_over_kmeans']:.2f}.",
    ]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", type=int, default=10, help="data sets per K (as the paper)")
    parser.add_argument("--epochs", type=int, default=100, help="training epochs (paper: 500)")
    parser.add_argument("--shift", type=float, default=3.0, help="std of the centre perturbation")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 3, 5, 10])
    parser.add_argument("--quick", action="store_true", help="2 data sets, 30 epochs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--throughput-n", type=int, default=10**6, help="points for the predict timing")
    parser.add_argument("--skip-throughput", action="store_true")
    add_name_argument(parser, "tdcm")
    args = _common.setup(parser.parse_args())
    torch.set_num_threads(args.threads)
    if args.smoke:  # one data set of K = 3, 50 points per cluster, one digits seed, 10^4 predict rows
        args.datasets, args.ks, args.throughput_n = 1, [3], 10_000
    elif args.quick:
        args.datasets, args.epochs = 2, 30
    t_start = time.perf_counter()
    payload = {"settings": vars(args), "synthetic": {}, "digits": {}}
    md = [
        f"TDCM synthetic protocol: {args.datasets} data set(s) per K, 1 run each, {args.epochs} epochs "
        f"(paper: 10 data sets x 5 runs, 500 epochs), shift={args.shift}, 200 points per cluster, 2-D. "
        "Mean over data sets (± std of target NMI).",
        "",
    ]
    for K in args.ks:
        rows = []
        for d in range(args.datasets):
            task = make_tdcm_transfer(
                n_clusters=K, n_samples_per_cluster=50 if args.smoke else 200, shift=args.shift,
                random_state=1000 * K + d
            )
            # One training run per row unless the row says otherwise (the estimator's default).
            kw = dict(embedding_dim=max(10, K), max_epochs=args.epochs, n_init=1)
            rows.append(run_task(task, K, seed=d, tdcm_kwargs=kw))
            summary_line = ", ".join(f"{n}={r['nmi']:.3f}" for n, r in rows[-1].items())
            print(f"K={K} dataset {d}: {summary_line}", flush=True)
        agg, lines = table(rows, f"K = {K}", PAPER_TARGET_NMI.get(K))
        payload["synthetic"][str(K)] = {"mean": agg, "per_dataset": rows}
        md += lines + [""]
    # Digits cross-task: learn on 0-4, cluster 5-9.
    task = load_digits_transfer()
    K_digits = 5
    if args.smoke:  # 300 rows of three digits a side: still non-negative pixels (the cosine graph)
        task, K_digits = _common.shrink_task(task, rows=300), _common.SMOKE_K
    rows = []
    for seed in range(1 if args.quick else 3):
        kw = dict(max_epochs=args.epochs)  # the defaults otherwise
        rows.append(run_task(task, K_digits, seed=seed, tdcm_kwargs=kw))
        summary_line = ", ".join(f"{n}={r['nmi']:.3f}" for n, r in rows[-1].items())
        print(f"digits seed {seed}: {summary_line}", flush=True)
    agg, lines = table(
        rows,
        f"Digits: fit on 0-4, cluster 5-9 ({len(rows)} seed(s), the estimator's defaults; "
        "the MLP row uses hidden_dims=(64, 64))",
    )
    payload["digits"] = {"mean": agg, "per_seed": rows}
    md += lines
    if not args.skip_throughput:
        payload["throughput"] = throughput(args.throughput_n)
        md += ["", *throughput_lines(payload["throughput"])]
    payload["total_seconds"] = time.perf_counter() - t_start
    md += ["", f"Total wall time {payload['total_seconds']:.0f} s."]
    write("tdcm", args.name, payload, "\n".join(md), quick=args.quick)


if __name__ == "__main__":
    main()
