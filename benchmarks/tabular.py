"""Tabular data: every registered estimator at its defaults on small tables, synthetic sets
that break k-means' assumptions, and transfer between shifted tables, beside ``KMeans`` and
``GaussianMixture`` measured in the same run.

Nothing here was tuned for: the data are scikit-learn's bundled tables and generators, all offline.

Data sets, each with K = its number of classes:

* ``cluster`` protocol (``fit_predict`` on the whole set; methods whose tags require source
  labels, CCN and C2M, are skipped):

  - ``iris``, ``wine``, ``breast-cancer``: standardised (``StandardScaler``, as a user would);
    ``wine-raw``, ``breast-cancer-raw``: the raw features (their scales span 4-5 decades), to
    catch scale issues.
  - ``aniso``: 600 blobs, 3 centres, 2 features, then the linear map ``[[0.6, -0.6], [-0.4, 0.8]]``
    (scikit-learn's k-means assumptions demo).
  - ``varied``: 600 blobs, 3 centres, 2 features, ``cluster_std=[1.0, 2.5, 0.5]``.
  - ``imbalanced``: blobs of 600 / 300 / 100 rows (60 / 30 / 10 %), 2 features.
  - ``informative``: ``make_classification``: 1,000 rows, 50 features of which 5 informative
    (no redundant or repeated ones), 4 classes, one cluster per class, ``class_sep=2``.
  - ``large``: 10,000 x 20 blobs, 5 centres, ``cluster_std=2.5``: the timing case. Only the
    methods of ``--large-methods`` (default: every one, as far as CPU allows) run on it.

  The synthetic sets are fed as generated (their features share one scale); each seed draws a
  new set.

* ``transfer`` protocol (``fit(source[, y_source])``, then ``transfer(target)``, scored on the
  target; the peers are fitted on the target alone). A ``StandardScaler`` is fitted on the source
  and applied to both sides, as a ``Pipeline`` would on transfer:

  - ``wine-shift``, ``breast-cancer-shift``, ``blobs-shift``: each class split in two random halves
    (per seed), the second half shifted as a new batch or instrument would shift it: per feature
    ``x' = m + s (x - m) + o sd`` with ``m``, ``sd`` the feature's mean and standard deviation,
    ``log s ~ N(0, 0.2)`` and ``o ~ N(0, 0.5)`` (:data:`SHIFT`). ``blobs-shift``: 1,000 blobs,
    4 centres, 10 features, ``cluster_std=2``.
  - ``class-split``: 1,600 blobs of 8 centres in 5 features; centres 0-3 are the source,
    4-7 the target (K = 4): new classes, same kind of structure.

Rows: ``KMeans(K, n_init=10)``, ``GaussianMixture(K, n_init=3)`` (full covariances, scikit-learn's
default) and every method of ``sktransfer_cluster.registry.REGISTRY`` at its defaults
(``REGISTRY[name].build(K, random_state=seed)``; C2M, which takes no K, gets
``max_clusters=max(10, 2K)`` from the registry). Scores: ACC (Hungarian,
``sktransfer_cluster.metrics.clustering_accuracy``), ARI, NMI, K found (``n_clusters_``; the
peers: distinct labels), the process CPU seconds of fit + transfer (or fit_predict) with
``--threads`` threads (default 1), and every warning a user would see (recorded, not hidden).
Cells are medians [min, max] over the seeds (default 0 1 2). The markdown ends with the flags:
each (method, data set) whose median ACC is below KMeans' - 0.02 or GMM's - 0.02.

    python benchmarks/tabular.py [--datasets iris wine ...] [--methods KMeans GMM TDCMCluster ...]
        [--large-methods ...] [--seeds 0 1 2] [--threads 1] [--name NAME] [--smoke]
    python benchmarks/tabular.py --combine NAME [NAME ...]

Canonical file: benchmarks/results/tabular/tabular.{json,md}, a full run or ``--combine`` of
variant runs (results/tabular/variants/NAME.json, e.g. the two protocols run side by side).
``--smoke``: seed 0, iris (cluster) and ``blobs-shift`` (transfer, K = 3) on at most 150 rows,
the registry's smallest budgets, results under a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import _common
import numpy as np

from sktransfer_cluster.base import limit_threads
from sktransfer_cluster.registry import REGISTRY

AREA = "tabular"  # the results folder, named in _common.CANONICAL

PEERS = ("KMeans", "GMM")
SEEDS = [0, 1, 2]
CLUSTER = ("iris", "wine", "wine-raw", "breast-cancer", "breast-cancer-raw", "aniso", "varied", "imbalanced",
           "informative", "large")
TRANSFER = ("wine-shift", "breast-cancer-shift", "blobs-shift", "class-split")
DATASETS = CLUSTER + TRANSFER
#: The target shift of the ``*-shift`` tasks: log-scale and offset (in feature standard deviations) spreads.
SHIFT = {"log_scale_sd": 0.2, "offset_sd": 0.5}
SMOKE_ROWS = 150
#: The flag threshold: a method's median ACC this far below a peer's.
MARGIN = 0.02

TITLES = {
    "iris": "iris, standardised (150 x 4)",
    "wine": "wine, standardised (178 x 13)",
    "wine-raw": "wine, raw features (178 x 13)",
    "breast-cancer": "breast cancer, standardised (569 x 30)",
    "breast-cancer-raw": "breast cancer, raw features (569 x 30)",
    "aniso": "anisotropic blobs (600 x 2, linear map)",
    "varied": "blobs of unequal variances (600 x 2, std 1.0 / 2.5 / 0.5)",
    "imbalanced": "imbalanced blobs (600 / 300 / 100 rows, 2 features)",
    "informative": "make_classification: 1,000 x 50, 5 informative",
    "large": "10,000 x 20 blobs, 5 centres, std 2.5 (timing)",
    "wine-shift": "wine, half of each class -> the other half shifted (offset + scale per feature)",
    "breast-cancer-shift": "breast cancer, half of each class -> the other half shifted",
    "blobs-shift": "blobs (1,000 x 10, 4 centres, std 2), half -> the other half shifted",
    "class-split": "blobs of 8 centres (1,600 x 5): centres 0-3 -> centres 4-7",
}


class Task:
    """One data set: source and target rows, K, and the protocol (``cluster`` or ``transfer``)."""

    def __init__(self, name, X_source, y_source, X_target=None, y_target=None):
        self.name = name
        self.protocol = "cluster" if X_target is None else "transfer"
        self.X_source, self.y_source = X_source, y_source
        self.X_target = X_source if X_target is None else X_target
        self.y_target = y_source if y_target is None else y_target
        self.k = len(np.unique(self.y_target))


def _table(name):
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine

    loader = {"iris": load_iris, "wine": load_wine, "breast-cancer": load_breast_cancer}[name]
    return loader(return_X_y=True)


def _halves(y, rng):
    """A boolean mask picking a random half of each class."""
    first = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        first[idx[: len(idx) // 2]] = True
    return first


def shift(X, rng, log_scale_sd=SHIFT["log_scale_sd"], offset_sd=SHIFT["offset_sd"]):
    """``X`` as a new batch or instrument would give it: per feature ``m + s (x - m) + o sd``,
    ``log s ~ N(0, log_scale_sd)``, ``o ~ N(0, offset_sd)``; ``m``, ``sd`` the feature's mean and
    standard deviation in ``X``."""
    m, sd = X.mean(axis=0), X.std(axis=0)
    s = np.exp(rng.normal(0.0, log_scale_sd, X.shape[1]))
    o = rng.normal(0.0, offset_sd, X.shape[1])
    return m + s * (X - m) + o * sd


def _scaled(X_source, X_target):
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X_source)
    return scaler.transform(X_source), scaler.transform(X_target)


def make_task(name, seed, smoke=False):
    """The data set ``name`` for ``seed`` (the synthetic ones are drawn with it)."""
    from sklearn.datasets import make_blobs, make_classification
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    if name in ("iris", "wine", "breast-cancer", "wine-raw", "breast-cancer-raw"):
        X, y = _table(name.removesuffix("-raw"))
        if not name.endswith("-raw"):
            X = StandardScaler().fit_transform(X)
        task = Task(name, X, y)
    elif name == "aniso":
        X, y = make_blobs(n_samples=600, centers=3, n_features=2, random_state=seed)
        task = Task(name, X @ np.array([[0.6, -0.6], [-0.4, 0.8]]), y)
    elif name == "varied":
        X, y = make_blobs(n_samples=600, centers=3, n_features=2, cluster_std=[1.0, 2.5, 0.5], random_state=seed)
        task = Task(name, X, y)
    elif name == "imbalanced":
        X, y = make_blobs(n_samples=[600, 300, 100], n_features=2, random_state=seed)
        task = Task(name, X, y)
    elif name == "informative":
        X, y = make_classification(n_samples=1000, n_features=50, n_informative=5, n_redundant=0, n_repeated=0,
                                   n_classes=4, n_clusters_per_class=1, class_sep=2.0, random_state=seed)
        task = Task(name, X, y)
    elif name == "large":
        X, y = make_blobs(n_samples=10_000, centers=5, n_features=20, cluster_std=2.5, random_state=seed)
        task = Task(name, X, y)
    elif name in ("wine-shift", "breast-cancer-shift", "blobs-shift"):
        if name == "blobs-shift":
            X, y = make_blobs(n_samples=1000, centers=4, n_features=10, cluster_std=2.0, random_state=seed)
        else:
            X, y = _table(name.removesuffix("-shift"))
        if smoke:  # K = 3 for the smallest budgets
            keep = y < 3
            X, y = X[keep], y[keep]
        first = _halves(y, rng)
        Xs, Xt = _scaled(X[first], shift(X[~first], rng))
        task = Task(name, Xs, y[first], Xt, y[~first])
    elif name == "class-split":
        X, y = make_blobs(n_samples=1600, centers=8, n_features=5, random_state=seed)
        src = y < 4
        Xs, Xt = _scaled(X[src], X[~src])
        task = Task(name, Xs, y[src], Xt, y[~src] - 4)
    else:
        raise ValueError(f"unknown data set {name!r}")
    if smoke:
        task = _common.shrink_task(task, seed=seed, rows=SMOKE_ROWS)
        task.k = len(np.unique(task.y_target))
    return task


def _skip_reason(name, task):
    if name in PEERS or task.protocol == "transfer":
        return None
    if _common.requires_y(REGISTRY[name].estimator_class()):
        return "needs source labels; skipped on fit_predict"
    return None


def _warning_text(w):
    return f"{w.category.__name__}: {str(w.message).splitlines()[0][:200]}"


def run_row(name, task, seed, smoke):
    """One row: ``name`` (a peer or a registry method) on ``task`` for ``seed``."""
    import torch
    from sklearn.cluster import KMeans
    from sklearn.mixture import GaussianMixture

    row = {"data": task.name, "protocol": task.protocol, "method": name, "seed": seed, "k": task.k,
           "n_source": int(task.X_source.shape[0]), "n_target": int(task.X_target.shape[0]),
           "n_features": int(task.X_target.shape[1])}
    skip = _skip_reason(name, task)
    if skip:
        return {**row, "skipped": skip}
    est = None
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with _common.Timer() as t:
                if name == "KMeans":
                    labels = KMeans(task.k, n_init=10, random_state=seed).fit_predict(task.X_target)
                elif name == "GMM":
                    labels = GaussianMixture(task.k, n_init=3, random_state=seed).fit_predict(task.X_target)
                else:
                    est = REGISTRY[name].build(task.k, smallest=smoke, random_state=seed)
                    if task.protocol == "cluster":
                        labels = est.fit_predict(task.X_target)
                    else:
                        _common.fit_source(est, task.X_source, task.y_source)
                        labels = est.transfer(task.X_target)
    except Exception as exc:  # a crash is a result here: what a user would meet at the defaults
        return {**row, "failed": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    finally:
        torch.set_num_threads(threads)
    return {**_common.scored_row(row, task.y_target, labels, est, t), "warnings": sorted({_warning_text(w) for w in caught})}


def summarise(rows):
    out = []
    order = {name: i for i, name in enumerate([*DATASETS, *PEERS, *REGISTRY])}
    keys = sorted(dict.fromkeys((r["data"], r["method"]) for r in rows),
                  key=lambda key: (order.get(key[0], 99), order.get(key[1], 99)))
    for data, method in keys:
        sel = [r for r in rows if (r["data"], r["method"]) == (data, method)]
        entry = {"data": data, "method": method, "protocol": sel[0]["protocol"], "k": sel[0]["k"],
                 "seeds": [r["seed"] for r in sel],
                 "warnings": sorted({w for r in sel for w in r.get("warnings", [])})}
        bad = [r for r in sel if "skipped" in r or "failed" in r]
        if bad:
            entry["note"] = bad[0].get("skipped") or "failed: " + bad[0]["failed"]
            if len(bad) == len(sel):
                out.append(entry)
                continue
            entry["note"] += f" (seeds {[r['seed'] for r in bad]})"
            sel = [r for r in sel if r not in bad]
        for key in ("acc", "nmi", "ari", "cpu_s", "k_found"):
            entry[key] = _common.summary([r[key] for r in sel])
        out.append(entry)
    return out


def flags(summary):
    """Each (method, data set) whose median ACC is below a peer's median - :data:`MARGIN`."""
    out = []
    for data in dict.fromkeys(e["data"] for e in summary):
        entries = {e["method"]: e for e in summary if e["data"] == data}
        peers = {p: entries[p]["acc"]["median"] for p in PEERS if "acc" in entries.get(p, {})}
        for method, e in entries.items():
            if method in PEERS or "acc" not in e:
                continue
            below = {p: v for p, v in peers.items() if e["acc"]["median"] < v - MARGIN}
            if below:
                out.append({"data": data, "method": method, "acc": e["acc"]["median"], "below": below})
    return out


def _cell(s, fmt="{:.3f}"):
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}, {fmt.format(s['max'])}]"


def markdown(summary, commands, codes, threads):
    seeds = sorted({s for e in summary for s in e["seeds"]})
    lines = [
        "# Tabular data: every estimator at its defaults beside KMeans and GaussianMixture",
        "",
        f"Cells: median [min, max] over seeds {', '.join(map(str, seeds))}; CPU s: process time of fit + "
        f"transfer (or fit_predict) at {threads} thread(s). Methods: `REGISTRY[name].build(K, random_state=seed)`; "
        "KMeans: `KMeans(K, n_init=10)`; GMM: `GaussianMixture(K, n_init=3)` (full covariances); both on the target "
        "alone. Transfer tasks: a `StandardScaler` fitted on the source, applied to both sides; "
        f"the shift is per feature `m + s (x - m) + o sd`, log s ~ N(0, {SHIFT['log_scale_sd']}), "
        f"o ~ N(0, {SHIFT['offset_sd']}). K found: `n_clusters_` (the peers: distinct labels).",
    ]
    codes = [c for i, c in enumerate(codes) if c and c not in codes[:i]]
    if codes:
        lines += ["", "Package code: " + "; ".join(
            f"commit {c.get('commit')}" + (" with uncommitted changes" if c.get("dirty") else "") for c in codes) + "."]
    if len(commands) > 1:
        lines += ["", "Commands of the combined runs:", ""] + [f"- `{c}`" for c in commands]
    for data in dict.fromkeys(e["data"] for e in summary):
        entries = [e for e in summary if e["data"] == data]
        proto = ("fit(source), transfer(target)" if entries[0]["protocol"] == "transfer" else "fit_predict")
        lines += ["", f"## {TITLES.get(data, data)}: K = {entries[0]['k']}, {proto}", "",
                  "| method | ACC | ARI | NMI | K found | CPU s | note |", "|---|---|---|---|---|---|---|"]
        for e in entries:
            note = e.get("note", "")
            if "acc" not in e:
                lines.append(f"| {e['method']} | {note} | | | | | |")
                continue
            if e["warnings"]:
                note = (note + "; " if note else "") + "warnings: " + " / ".join(e["warnings"])
            lines.append(f"| {e['method']} | {_cell(e['acc'])} | {_cell(e['ari'])} | {_cell(e['nmi'])} | "
                         f"{_cell(e['k_found'], '{:.0f}')} | {_cell(e['cpu_s'], '{:.2f}')} | {note} |")
    found = flags(summary)
    lines += ["", f"## Flags: median ACC below KMeans - {MARGIN} or GMM - {MARGIN}", ""]
    if found:
        lines += ["| data | method | ACC | below |", "|---|---|---|---|"]
        lines += [f"| {f['data']} | {f['method']} | {f['acc']:.3f} | "
                  + ", ".join(f"{p} {v:.3f}" for p, v in f["below"].items()) + " |" for f in found]
    else:
        lines.append("None.")
    failed = [e for e in summary if "note" in e and "failed" in e["note"]]
    if failed:
        lines += ["", "Failures: " + "; ".join(f"{e['method']} on {e['data']}: {e['note']}" for e in failed) + "."]
    return "\n".join(lines)


def combine(names):
    runs = [json.loads((_common.RESULTS / AREA / "variants" / f"{n}.json").read_text()) for n in names]
    # A row measured by two runs (data, method, seed) keeps the first listed run's.
    rows = list({(r["data"], r["method"], r["seed"]): r for run in reversed(runs) for r in run["rows"]}.values())
    summary = summarise(rows)
    commands, codes = [run["command"] for run in runs], [run.get("code") for run in runs]
    payload = {"rows": rows, "summary": summary, "flags": flags(summary), "combined": names, "commands": commands,
               "code": codes, "threads": runs[0]["threads"], "shift": SHIFT}
    _common.write(AREA, None, payload, markdown(summary, commands, codes, runs[0]["threads"]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--methods", nargs="+", default=[*PEERS, *REGISTRY], choices=[*PEERS, *REGISTRY])
    parser.add_argument("--large-methods", nargs="+", default=[*PEERS, *REGISTRY], choices=[*PEERS, *REGISTRY],
                        help="the methods run on the 10,000-row set (default: all of --methods)")
    parser.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--combine", nargs="+", metavar="NAME",
                        help="write the canonical table from these variant runs (results/tabular/variants/NAME.json)")
    _common.add_name_argument(parser, AREA)
    args = _common.setup(parser.parse_args(argv))
    if args.combine:
        return combine(args.combine)
    if args.smoke:
        args.seeds, args.datasets = [0], ["iris", "blobs-shift"]
    full = (set(args.methods) == {*PEERS, *REGISTRY} and args.seeds == SEEDS and set(args.datasets) == set(DATASETS))
    if args.name == _common.CANONICAL[AREA] and not args.smoke and not full:
        parser.error("a subset of data sets, methods or seeds is a variant study: give it a --name")
    rows = []
    t_start = time.process_time()
    with limit_threads(args.threads):
        for data in args.datasets:
            methods = [m for m in args.methods if data != "large" or m in args.large_methods]
            for seed in args.seeds:
                task = make_task(data, seed, args.smoke)
                for name in methods:
                    t0 = time.perf_counter()
                    rows.append(run_row(name, task, seed, args.smoke))
                    print(json.dumps(rows[-1]), f"({time.perf_counter() - t0:.1f} s)", flush=True)
    summary = summarise(rows)
    code = _common.code_state()
    payload = {"rows": rows, "summary": summary, "flags": flags(summary), "datasets": args.datasets,
               "methods": args.methods, "large_methods": args.large_methods, "seeds": args.seeds,
               "threads": args.threads, "shift": SHIFT, "code": code,
               "total_cpu_s": time.process_time() - t_start}
    _common.write(AREA, args.name, payload, markdown(summary, [_common.command_line()], [code], args.threads))


if __name__ == "__main__":
    main()
