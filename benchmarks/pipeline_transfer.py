"""Transfer through a pipeline: keep the preprocessing fitted on the source, or refit it
on the target? Measured on the bundled digits (0-4 -> 5-9) and the TDCM shifted-Gaussians
task (K = 5, shift 3), for SinkhornKMeans and TDCMCluster at their defaults behind
``StandardScaler`` and ``StandardScaler + PCA(min(20, d))``, beside the bare estimator and KMeans
refitted on the target, in the same run.

    python benchmarks/pipeline_transfer.py [--seeds 0 1 2] [--threads 1] [--name NAME] [--smoke]

Canonical run: ``python benchmarks/pipeline_transfer.py``.

Writes benchmarks/results/pipeline/pipeline_transfer.{json,md}. Cells: target ARI,
median [min, max] over the seeds. ``--smoke`` (seed 0, each task cut to 150 rows per side of
its first 3 classes, the registry's smallest budgets) writes under a temporary folder.
"""

from __future__ import annotations

import argparse

import _common
from sktransfer_cluster.base import limit_threads
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from sktransfer_cluster.datasets import load_digits_transfer, make_tdcm_transfer
from sktransfer_cluster.pipeline import make_transfer_pipeline

# name -> steps for data with d features (PCA keeps min(20, d) components).
PREPROCESSING = {
    "none": lambda d: [],
    "StandardScaler": lambda d: [StandardScaler()],
    "StandardScaler+PCA(20)": lambda d: [StandardScaler(), PCA(min(20, d), random_state=0)],
}


# The registry methods this study compares (the two whose preprocessing question it asks).
METHODS = ("SinkhornKMeans", "TDCMCluster")


def _tasks(seed):
    tasks = {
        "digits": load_digits_transfer(),
        "tdcm-shift-k5": make_tdcm_transfer(n_clusters=5, shift=3.0, random_state=seed),
    }
    return {name: _common.shrink_task(t, seed) for name, t in tasks.items()} if _common.SMOKE else tasks


def _estimator(name, k, seed):
    return _common.build(name, k, random_state=seed)


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=1)
    _common.add_name_argument(parser, "pipeline")
    args = _common.setup(parser.parse_args(argv))
    if args.smoke:
        args.seeds = [0]
    rows = []
    with limit_threads(args.threads):
        for seed in args.seeds:
            for task_name, task in _tasks(seed).items():
                k = task.n_clusters_target
                km = KMeans(k, n_init=10, random_state=seed).fit_predict(task.X_target)
                rows.append({"task": task_name, "method": "KMeans (on target)", "pre": "-", "mode": "-", "seed": seed,
                             "ari": adjusted_rand_score(task.y_target, km)})
                for method in METHODS:
                    for pre_name, pre in PREPROCESSING.items():
                        for mode in ("source", "target") if pre_name != "none" else ("-",):
                            pipe = make_transfer_pipeline(*pre(task.X_source.shape[1]), _estimator(method, k, seed)).fit(task.X_source)
                            labels = pipe.transfer(task.X_target, **({} if mode == "-" else {"preprocessing": mode}))
                            row = {"task": task_name, "method": method, "pre": pre_name, "mode": mode, "seed": seed,
                                   "ari": adjusted_rand_score(task.y_target, labels)}
                            rows.append(row)
                            print(row, flush=True)
    summary = []
    keys = list(dict.fromkeys((r["task"], r["method"], r["pre"], r["mode"]) for r in rows))
    for key in keys:
        vals = [r["ari"] for r in rows if (r["task"], r["method"], r["pre"], r["mode"]) == key]
        summary.append({"task": key[0], "method": key[1], "pre": key[2], "mode": key[3], "ari": _common.summary(vals)})
    lines = [
        "# Transfer through a pipeline: preprocessing fitted on the source or refitted on the target",
        "",
        f"Target ARI, median [min, max] over seeds {' '.join(map(str, args.seeds))}; estimators at their "
        "defaults; `mode` is `TransferPipeline.transfer(X, preprocessing=mode)`.",
        "",
        "| task | method | preprocessing | mode | ARI |",
        "|---|---|---|---|---|",
    ]
    for s in summary:
        a = s["ari"]
        lines.append(f"| {s['task']} | {s['method']} | {s['pre']} | {s['mode']} | "
                     f"{a['median']:.3f} [{a['min']:.3f}, {a['max']:.3f}] |")
    _common.write("pipeline", args.name, {"rows": rows, "summary": summary, "seeds": args.seeds,
                                          "threads": args.threads}, "\n".join(lines) + "\n", quick=args.smoke)


if __name__ == "__main__":
    main()
