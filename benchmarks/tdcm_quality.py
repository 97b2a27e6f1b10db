"""TDCMCluster on the paper's synthetic transfer protocol and the digits cross-task split.

    python benchmarks/tdcm_quality.py [--datasets 3] [--epochs 100] [--shift 3.0] [--quick]

Synthetic (Zhang & Zhao, Sec. 5.1): for K in {2, 3, 5, 10}, several data sets from
``make_tdcm_transfer`` (K equal-sized Gaussians with random centres and
covariances; the target moves every centre by N(0, shift^2) per coordinate).
Every model is trained on the source only and scored (NMI/ARI/ACC) on the target:

* TDCM transfer        -- ``fit(source)`` then ``transfer(target)`` (forward pass, no fine-tuning)
* TDCM source centroids -- same model, ``predict(target)`` with the source-adapted centroids
* TDCM faithful         -- ``embedding_norm=None`` (the paper's objective without our
                            batch-norm standardisation of the embeddings), transfer
* variant-R/-O/-E       -- ``symmetric=False`` / ``ortho_weight=0`` / ``beta=0``, transfer
* KMeans source->target -- KMeans fitted on the source, ``predict(target)``
* KMeans refit target   -- KMeans fitted on the target itself (not a transfer; a reference)

Digits cross-task: fit on digits 0-4 (K=5), transfer to digits 5-9, beside KMeans
fitted on 0-4 applied to 5-9 and KMeans refitted on 5-9.

Results go to benchmarks/results/tdcm_quality.{json,md}.
"""

import argparse
import time

import numpy as np
import torch
from _common import write
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from sktransfer_cluster.cluster.tdcm import TDCMCluster
from sktransfer_cluster.datasets import load_digits_transfer, make_tdcm_transfer
from sktransfer_cluster.metrics import clustering_accuracy

TDCM_VARIANTS = {
    "TDCM transfer": {},
    "TDCM faithful (embedding_norm=None)": {"embedding_norm": None},
    "TDCM variant-R (symmetric=False)": {"symmetric": False},
    "TDCM variant-O (ortho_weight=0)": {"ortho_weight": 0.0},
    "TDCM variant-E (beta=0)": {"beta": 0.0},
}


def metrics(y, labels):
    return {
        "nmi": normalized_mutual_info_score(y, labels),
        "ari": adjusted_rand_score(y, labels),
        "acc": clustering_accuracy(y, labels),
    }


def run_task(task, K, seed, tdcm_kwargs):
    out = {}
    for name, extra in TDCM_VARIANTS.items():
        t0 = time.perf_counter()
        model = TDCMCluster(K, random_state=seed, device="cpu", **{**tdcm_kwargs, **extra}).fit(task.X_source)
        source = metrics(task.y_source, model.labels_)
        if name == "TDCM transfer":
            out["TDCM source centroids (predict)"] = metrics(task.y_target, model.predict(task.X_target))
            out["TDCM source centroids (predict)"]["source_nmi"] = source["nmi"]
        out[name] = metrics(task.y_target, model.transfer(task.X_target))
        out[name]["source_nmi"] = source["nmi"]
        out[name]["seconds"] = time.perf_counter() - t0
    km = KMeans(K, n_init=10, random_state=seed).fit(task.X_source)
    out["KMeans source->target"] = metrics(task.y_target, km.predict(task.X_target))
    out["KMeans source->target"]["source_nmi"] = metrics(task.y_source, km.labels_)["nmi"]
    refit = KMeans(K, n_init=10, random_state=seed).fit_predict(task.X_target)
    out["KMeans refit target"] = metrics(task.y_target, refit)
    return out


def table(rows, title):
    names = list(rows[0].keys())
    md = [f"### {title}", "", "| method | target NMI | target ARI | target ACC | source NMI |"]
    md.append("|---|---|---|---|---|")
    agg = {}
    for name in names:
        vals = {k: [r[name][k] for r in rows if k in r[name]] for k in ("nmi", "ari", "acc", "source_nmi")}
        agg[name] = {k: (float(np.mean(v)) if v else None) for k, v in vals.items()}
        sd = float(np.std(vals["nmi"]))
        src = f"{agg[name]['source_nmi']:.3f}" if agg[name]["source_nmi"] is not None else "-"
        a = agg[name]
        md.append(f"| {name} | {a['nmi']:.3f} ± {sd:.3f} | {a['ari']:.3f} | {a['acc']:.3f} | {src} |")
    return agg, md


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--datasets", type=int, default=3, help="data sets per K (paper: 10)")
    parser.add_argument("--epochs", type=int, default=100, help="training epochs (paper: 500)")
    parser.add_argument("--shift", type=float, default=3.0, help="std of the centre perturbation")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 3, 5, 10])
    parser.add_argument("--quick", action="store_true", help="2 data sets, 30 epochs")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
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
                n_clusters=K, n_samples_per_cluster=200, shift=args.shift, random_state=1000 * K + d
            )
            kw = dict(hidden_dims=(64, 64), embedding_dim=max(10, K), max_epochs=args.epochs)
            rows.append(run_task(task, K, seed=d, tdcm_kwargs=kw))
            summary_line = ", ".join(f"{n}={r['nmi']:.3f}" for n, r in rows[-1].items())
            print(f"K={K} dataset {d}: {summary_line}", flush=True)
        agg, lines = table(rows, f"K = {K}")
        payload["synthetic"][str(K)] = {"mean": agg, "per_dataset": rows}
        md += lines + [""]
    # Digits cross-task: learn on 0-4, cluster 5-9.
    task = load_digits_transfer()
    rows = []
    for seed in range(1 if args.quick else 2):
        kw = dict(
            hidden_dims=(128, 64), embedding_dim=10, n_blocks=5, max_epochs=args.epochs, learning_rate=5e-4
        )
        rows.append(run_task(task, 5, seed=seed, tdcm_kwargs=kw))
        summary_line = ", ".join(f"{n}={r['nmi']:.3f}" for n, r in rows[-1].items())
        print(f"digits seed {seed}: {summary_line}", flush=True)
    agg, lines = table(rows, f"Digits: fit on 0-4, cluster 5-9 ({len(rows)} seed(s), lr 5e-4, L=5)")
    payload["digits"] = {"mean": agg, "per_seed": rows}
    md += lines
    payload["total_seconds"] = time.perf_counter() - t_start
    md += ["", f"Total wall time {payload['total_seconds']:.0f} s."]
    write("tdcm_quality", payload, "\n".join(md))


if __name__ == "__main__":
    main()
