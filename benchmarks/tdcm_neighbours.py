"""TDCMCluster at its defaults (the neighbour representation, issue 28) against the peer, KMeans and the input model.

``TDCMCluster(K[, image_shape=...])`` (default ``representation="neighbours"``) beside,
in the same process and on the same data: the peer
(:func:`sktransfer_cluster.compare.umap_gmm`: UMAP(10, n_neighbors=15,
min_dist=0) + GaussianMixture(K, n_init=3)), ``KMeans(K, n_init=10)`` and
``TDCMCluster(K, representation="input")`` (the default before 2026-11-27). Seeds 0-2,
ACC median [min, max]; CPU seconds are ``time.process_time()`` of one fit (plus
``transfer`` for the transfer rows), with torch and every BLAS pool on one thread.

Parts (``--parts``, default all; each writes its own results file):

- ``mnist``: MNIST-5k, K = 10 (``fit_predict``).
- ``mnist_tr``: MNIST 0-4 -> 5-9, K = 5: fit on the source + ``transfer(target)``,
  the same estimator fitted on the target alone, and the peer / KMeans on the target.
- ``digits``: sklearn digits, K = 10, and digits 0-4 -> 5-9 (the ``compare`` task).
- ``synth``: ``make_tdcm_transfer(n_clusters=5, shift=3.0, random_state=s)``, fit + transfer.
- ``tabular``: wine and breast cancer, standardised, K = their classes.
- ``second``: a second set of real images nobody here tuned for (``_common.second_images``:
  UCI's mfeat-pix, 2,000 images of 16 x 15), K = 10, and its classes 0-4 -> 5-9, K = 5.

``--keep-source K ...`` adds, for each transfer task, the transfer whose refinement starts from
the source encoder with the share K of its weights kept (``TDCMCluster._refine_keep_source``; 1:
the source encoder as it is, the default before 2026-11-27's fifth session; the default is 0);
``--transfer-only`` runs the transfer tasks alone. ``--random-start`` adds the defaults with ``fit``'s
neighbour encoder started at random instead of from the rows' principal-axis layout
(``TDCMCluster._principal_start = False``, the default before 2026-11-27's sixth session).
Each transfer task's table ends with the margin ``transfer - fitted on the target alone`` seed by seed.

Usage::

    python benchmarks/tdcm_neighbours.py [--parts mnist mnist_tr ...] [--no-input] [--no-image]
    python benchmarks/tdcm_neighbours.py --smoke    # seconds: tiny data, 1 seed, results in a temp folder

Writes ``benchmarks/results/tdcm/neighbours_<part>[_<tag>].{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _common  # noqa: E402
from sktransfer_cluster import TDCMCluster  # noqa: E402
from sktransfer_cluster.datasets import (  # noqa: E402
    load_digits_transfer,
    load_mnist_5k,
    load_mnist_transfer,
    make_tdcm_transfer,
)
from sktransfer_cluster.metrics import clustering_accuracy  # noqa: E402

PARTS = ("mnist", "mnist_tr", "digits", "synth", "tabular", "second")


class Task:
    def __init__(self, name, Xs, ys, Xt=None, yt=None, image_shape=None):
        self.name, self.Xs, self.ys, self.Xt, self.yt, self.image_shape = name, Xs, ys, Xt, yt, image_shape

    per_seed = None  # seed -> Task: the data set depends on the seed (synthetic task)

    @property
    def transfer(self):
        return self.Xt is not None

    def at(self, seed):
        return self if self.per_seed is None else self.per_seed[seed]


def _small(X, y, rows, seed=0):
    rng = np.random.default_rng(seed)
    keep = np.flatnonzero(np.isin(y, np.unique(y)[:3]))
    idx = np.sort(rng.choice(keep, size=min(rows, keep.size), replace=False))
    return X[idx], y[idx]


def tasks(part, smoke):
    if part == "mnist":
        X, y = load_mnist_5k()
        out = [Task("MNIST-5k (K=10)", X, y, image_shape=(28, 28))]
    elif part == "mnist_tr":
        t = load_mnist_transfer()
        out = [Task("MNIST 0-4 -> 5-9 (K=5)", t.X_source, t.y_source, t.X_target, t.y_target, (28, 28))]
    elif part == "digits":
        d = load_digits()
        t = load_digits_transfer()
        out = [
            Task("sklearn digits (K=10)", d.data, d.target, image_shape=(8, 8)),
            Task("digits 0-4 -> 5-9 (K=5)", t.X_source, t.y_source, t.X_target, t.y_target, (8, 8)),
        ]
    elif part == "synth":
        sets = {s: make_tdcm_transfer(n_clusters=5, shift=3.0, random_state=s) for s in range(3)}
        task = Task("tdcm-shift-k5 (data set = seed)", sets[0].X_source, sets[0].y_source, sets[0].X_target, sets[0].y_target)
        task.per_seed = {s: Task(task.name, t.X_source, t.y_source, t.X_target, t.y_target) for s, t in sets.items()}
        out = [task]
    elif part == "second":
        reason = _common.second_images_skip_reason("mfeat-pix")
        if reason is not None:
            print(f"second: skipped ({reason})", flush=True)
            return []
        X, y, shape, _ = _common.second_images("mfeat-pix")
        src, tgt = y < 5, y >= 5
        out = [
            Task("mfeat-pix (K=10)", X, y, image_shape=shape),
            Task("mfeat-pix 0-4 -> 5-9 (K=5)", X[src], y[src], X[tgt], y[tgt], shape),
        ]
    else:
        out = []
        for name, loader in (("wine (K=3), standardised", load_wine), ("breast cancer (K=2), standardised", load_breast_cancer)):
            d = loader()
            out.append(Task(name, StandardScaler().fit_transform(d.data), d.target))
    if smoke:
        for task in out:
            for t in [task, *(task.per_seed or {}).values()]:
                t.Xs, t.ys = _small(t.Xs, t.ys, 120)
                if t.transfer:
                    t.Xt, t.yt = _small(t.Xt, t.yt, 120)
    return out


def n_clusters(task):
    return len(np.unique(task.yt if task.transfer else task.ys))


def tdcm(task, seed, smoke, epochs=None, keep=None, random_start=False, **params):
    """The estimator; ``epochs`` = (neighbour, refine) epochs of the neighbour encoder, None: the defaults;
    ``keep``: the share of the source encoder kept at the start of transfer's refinement (None: the default)."""
    if smoke:
        params.update(max_epochs=2)
        epochs = (2, 1)
    est = TDCMCluster(n_clusters(task), random_state=seed, device="cpu", **params)
    if epochs is not None and params.get("representation", "neighbours") == "neighbours":
        # Private class constants, set on the instance (not constructor parameters).
        est._neighbour_epochs, est._refine_epochs = epochs
    if keep is not None:
        est._refine_keep_source = float(keep)
    if random_start:
        est._principal_start = False  # fit's neighbour encoder from its random start (before 2026-11-27, sixth session)
    return est


def run_tdcm(task, seed, smoke, on_target=False, epochs=None, keep=None, random_start=False, **params):
    """ACC on the scored set and CPU seconds: fit (+ transfer), or fit on the target alone."""
    task = task.at(seed)
    est = tdcm(task, seed, smoke, epochs, keep, random_start, **params)
    c0 = time.process_time()
    if not task.transfer:
        labels, y = est.fit_predict(task.Xs), task.ys
    elif on_target:
        labels, y = est.fit_predict(task.Xt), task.yt
    else:
        est.fit(task.Xs)
        labels, y = est.transfer(task.Xt), task.yt
    return clustering_accuracy(y, labels), time.process_time() - c0


def run_baseline(task, seed, which):
    task = task.at(seed)
    X, y = (task.Xt, task.yt) if task.transfer else (task.Xs, task.ys)
    k = n_clusters(task)
    c0 = time.process_time()
    if which == "kmeans":
        labels = KMeans(k, n_init=10, random_state=seed).fit_predict(X)
    else:
        from sktransfer_cluster.compare import umap_gmm

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            labels = umap_gmm(X, k, random_state=seed)
    return clustering_accuracy(y, labels), time.process_time() - c0


def methods(task, with_input, with_image=True, refine_epochs=(), keep_source=(), random_start=False):
    """(row name, callable(seed, smoke) -> (acc, cpu)) for one task.

    ``refine_epochs``: for a transfer task, a row per value N: the defaults with the target
    refinement of the neighbour encoder run N epochs, and the target alone with N neighbour epochs.
    """
    on = " on the target alone" if task.transfer else ""
    rows = [
        (f"KMeans(n_init=10){on}", lambda s, sm: run_baseline(task, s, "kmeans")),
        (f"peer: UMAP(10) + GMM{on}", lambda s, sm: run_baseline(task, s, "peer")),
    ]
    how = " fit source + transfer" if task.transfer else ""
    if with_input:
        rows.append((f'TDCMCluster(representation="input"){how}', lambda s, sm: run_tdcm(task, s, sm, representation="input")))
    shapes = [("TDCMCluster() defaults", None)]
    if task.image_shape and with_image:
        shapes.append((f"TDCMCluster(image_shape={tuple(task.image_shape)})", task.image_shape))
    for name, shape in shapes:
        kw = dict(image_shape=shape)
        rows.append((name + how, lambda s, sm, kw=kw: run_tdcm(task, s, sm, **kw)))
        if task.transfer:
            rows.append((name + ", fitted on the target alone", lambda s, sm, kw=kw: run_tdcm(task, s, sm, on_target=True, **kw)))
    if random_start:
        rows.append(("TDCMCluster(), fit's encoder from its random start" + how,
                     lambda s, sm: run_tdcm(task, s, sm, random_start=True)))
        if task.transfer:
            rows.append(("TDCMCluster(), fit's encoder from its random start, fitted on the target alone",
                         lambda s, sm: run_tdcm(task, s, sm, on_target=True, random_start=True)))
    if task.transfer:
        for k in keep_source:
            rows.append((f"TDCMCluster(), refinement from the source encoder, {k:g} of it kept, fit source + transfer",
                         lambda s, sm, k=k: run_tdcm(task, s, sm, keep=k)))
        default = TDCMCluster()
        for n in refine_epochs:
            both = (n, n)
            rows.append((f"TDCMCluster(), refinement {n} epochs, fit source + transfer",
                         lambda s, sm, n=n: run_tdcm(task, s, sm, epochs=(default._neighbour_epochs, n))))
            rows.append((f"TDCMCluster(), {n} neighbour epochs, fitted on the target alone",
                         lambda s, sm, both=both: run_tdcm(task, s, sm, on_target=True, epochs=both)))
    return rows


def margins(rows):
    """Markdown lines: each transfer row minus the same image setting fitted on the target alone, seed by seed."""
    out = []
    for r in rows:
        if "fit source + transfer" not in r["method"] or "representation=" in r["method"]:
            continue
        shape = r["method"].split("image_shape=")[1].split(")")[0] if "image_shape=" in r["method"] else None
        alone = next((a for a in rows if a["task"] == r["task"] and "fitted on the target alone" in a["method"]
                      and "neighbour epochs" not in a["method"]
                      and ("random start" in a["method"]) == ("random start" in r["method"])
                      and (shape is None) == ("image_shape=" not in a["method"])), None)
        if alone is None:
            continue
        gaps = np.asarray(r["acc"]) - np.asarray(alone["acc"])
        out.append(f"- {r['task']}, {r['method']} - fitted on the target alone: "
                   + ", ".join(f"{g:+.4f}" for g in gaps)
                   + f" (median {np.median(gaps):+.4f}; at or above on {int((gaps >= 0).sum())} of {gaps.size})")
    return ["", "Transfer minus the same estimator fitted on the target alone, seed by seed:", "", *out] if out else []


def fmt(v, digits=3):
    return f"{np.median(v):.{digits}f} [{np.min(v):.{digits}f}, {np.max(v):.{digits}f}]"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-input", action="store_true", help='skip the TDCMCluster(representation="input") rows')
    parser.add_argument("--no-image", action="store_true", help="skip the rows that pass image_shape")
    parser.add_argument("--tag", default="", help="results go to neighbours_<part>_<tag>.{md,json}")
    parser.add_argument("--no-peer", action="store_true", help="skip the UMAP + GMM rows (umap-learn missing)")
    parser.add_argument("--refine-epochs", type=int, nargs="*", default=[],
                        help="transfer tasks: also the defaults refined N epochs on the target (and N on the target alone)")
    parser.add_argument("--keep-source", type=float, nargs="*", default=[],
                        help="transfer tasks: also the transfer whose refinement keeps this share of the source encoder")
    parser.add_argument("--transfer-only", action="store_true", help="run the transfer tasks only")
    parser.add_argument("--random-start", action="store_true",
                        help="also the defaults with fit's neighbour encoder from its random start "
                             "(the default before 2026-11-27's sixth session)")
    _common.add_smoke_argument(parser)
    args = _common.setup(parser.parse_args())
    smoke = args.smoke
    seeds = args.seeds[:1] if smoke else args.seeds
    torch.set_num_threads(1)
    out_dir = _common.RESULTS / "tdcm"
    out_dir.mkdir(parents=True, exist_ok=True)
    with threadpool_limits(1):
        for part in args.parts:
            rows = []
            for task in tasks(part, smoke):
                if args.transfer_only and not task.transfer:
                    continue
                for name, fn in methods(task, not args.no_input, not args.no_image, args.refine_epochs,
                                        args.keep_source, args.random_start):
                    if args.no_peer and name.startswith("peer"):
                        continue
                    accs, cpus = [], []
                    for seed in seeds:
                        a, c = fn(seed, smoke)
                        accs.append(a)
                        cpus.append(c)
                        print(f"{part} | {task.name} | {name} | seed {seed}: ACC {a:.3f}, {c:.1f} CPU s", flush=True)
                    rows.append({"task": task.name, "method": name, "acc": accs, "cpu_s": cpus})
            state = _common.code_state()
            md = [
                f"# TDCMCluster at its defaults (neighbour representation): {part} ({time.strftime('%Y-%m-%d %H:%M')} UTC, "
                f"seeds {seeds}, 1 thread{', SMOKE' if smoke else ''})",
                "",
                f"`{_common.command_line()}`",
                "",
                f"Package at {state['commit']}" + (" with uncommitted changes" if state["dirty"] else "") + ".",
                "",
                "| task | method | ACC median [min, max] | ACC per seed | CPU s median [min, max] |",
                "|---|---|---|---|---|",
            ]
            md += [f"| {r['task']} | {r['method']} | {fmt(r['acc'])} | {', '.join(f'{a:.4f}' for a in r['acc'])} | "
                   f"{fmt(r['cpu_s'], 1)} |" for r in rows]
            md += margins(rows)
            stem = out_dir / f"neighbours_{part}{'_' + args.tag if args.tag else ''}"
            stem.with_suffix(".md").write_text("\n".join(md) + "\n")
            payload = {"machine": _common.machine(), "command": _common.command_line(), "seeds": seeds, "rows": rows,
                       "code": state}
            stem.with_suffix(".json").write_text(json.dumps(payload, indent=2))
            print("\n".join(md), flush=True)
            print(f"wrote {stem}.md and .json", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
