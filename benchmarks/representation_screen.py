"""Screen neighbour-graph representations against the peer (UMAP + GMM), issue 28.

Every table row is an embedding followed by a clusterer, scored with
``clustering_accuracy`` over seeds; the peer, ``umap.UMAP(n_components=10,
n_neighbors=15, min_dist=0.0, random_state=s)`` then ``GaussianMixture(K,
n_init=3, random_state=s)``, runs in the same process. CPU seconds are
``time.process_time()`` of embedding + clustering, with torch and every BLAS
pool limited to one thread.

Parts (``--parts``, default all):

- ``purity``: how much of each graph's edge weight joins rows of the same class
  (MNIST-5k and sklearn digits), the graph options one by one.
- ``graph``: MNIST-5k (K=10), the graph options one by one (what was tried).
- ``single``: one data set, K = its classes: MNIST-5k, sklearn digits, wine and
  breast cancer (standardised), with KMeans on the raw features.
- ``transfer``: digits 0-4 -> 5-9 (MNIST and sklearn digits): the encoder trained
  on the target alone, on the source alone (target only embedded), and on the
  source then refined on the target's graph.
- ``refine``: MNIST 0-4 -> 5-9, refinements of 5-40 epochs after the source fit,
  against target-only training of the same length.

Usage::

    python benchmarks/representation_screen.py            # full, seeds 0-2 (about 30 CPU-minutes; --parts to split)
    python benchmarks/representation_screen.py --smoke    # seconds: tiny data, 1 seed, 2 epochs

Writes ``benchmarks/results/representation/representation_screen{_tag}.{md,json}``; ``--smoke`` writes
to a temporary folder.
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
from sklearn.mixture import GaussianMixture
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sktransfer_cluster.datasets import load_digits_transfer, load_mnist_5k, load_mnist_transfer  # noqa: E402
from sktransfer_cluster.metrics import clustering_accuracy  # noqa: E402
from sktransfer_cluster.representation import NeighbourEmbedding  # noqa: E402

OUT = Path(os.environ.get("SKTC_BENCH_RESULTS") or Path(__file__).resolve().parent / "results") / "representation"

#: Graph options screened on MNIST-5k, one added at a time (image ones need image_shape).
#: (cosine + shared flat, and with shift + blur on images, are the defaults on pixels: part
#: "single". metric="auto" picks the cosine for non-negative rows with zeros; named here so the
#: screen does not hang on that rule.)
GRAPH_VARIANTS = {
    "euclidean (UMAP's graph)": dict(metric="euclidean", shared_neighbours=False),
    "euclidean + shared-neighbour weights": dict(metric="euclidean", shared_neighbours=True),
    "cosine + shared + shift 1 px, no blur (image)": dict(metric="cosine", blur=0.0, image=True),
    "cosine + shared + blur 1 px, no shift (image)": dict(metric="cosine", max_shift=0, image=True),
}


def peer(X, K, seed):
    import umap  # lazily: numba compiles on the first call

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Z = umap.UMAP(n_components=10, n_neighbors=15, min_dist=0.0, random_state=seed).fit_transform(X)
    return GaussianMixture(K, n_init=3, random_state=seed).fit(Z).predict(Z)


def on_top(Z, K, seed, clusterer):
    if clusterer == "gmm":
        return GaussianMixture(K, n_init=3, random_state=seed).fit(Z).predict(Z)
    return KMeans(K, n_init=10, random_state=seed).fit(Z).labels_


def make_embedding(params, image_shape, seed, smoke):
    params = dict(params)
    image = params.pop("image", False)
    if smoke:
        params.setdefault("n_epochs", 2)
        params.setdefault("refine_epochs", 1)
    return NeighbourEmbedding(image_shape=image_shape if image else None, random_state=seed, **params)


def timed(fn):
    t = time.process_time()
    out = fn()
    return out, time.process_time() - t


def summarise(values):
    v = np.asarray(values, dtype=float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()), "values": v.tolist()}


def fmt(s):
    return f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


class Table:
    def __init__(self, title, command):
        self.title, self.command, self.rows = title, command, []

    def add(self, task, method, accs, secs):
        self.rows.append({"task": task, "method": method, "acc": summarise(accs), "cpu_s": summarise(secs)})
        print(f"  {task:<28} {method:<52} {fmt(self.rows[-1]['acc'])}  {np.median(secs):7.1f} s", flush=True)

    def markdown(self):
        lines = [f"### {self.title}", "", f"`{self.command}`", ""]
        lines += ["| task | method | ACC median [min, max] | CPU s (median) |", "|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['method']} | {fmt(r['acc'])} | {r['cpu_s']['median']:.1f} |" for r in self.rows]
        return "\n".join(lines) + "\n"


def run_method(table, task, method, seeds, fn):
    accs, secs = [], []
    for s in seeds:
        acc, sec = fn(s)
        accs.append(acc)
        secs.append(sec)
    table.add(task, method, accs, secs)


def single_rows(table, task, X, y, K, seeds, image_shape, configs, smoke, kmeans_raw=True, with_peer=True):
    if kmeans_raw:
        run_method(table, task, "KMeans (raw features)", seeds,
                   lambda s: (lambda r: (clustering_accuracy(y, r[0]), r[1]))(timed(lambda: on_top(X, K, s, "kmeans"))))
    if with_peer:
        run_method(table, task, "peer: UMAP(10) + GMM", seeds,
                   lambda s: (lambda r: (clustering_accuracy(y, r[0]), r[1]))(timed(lambda: peer(X, K, s))))
    for name, params in configs.items():
        if params.get("image") and image_shape is None:
            continue
        # One embedding per seed, both clusterers on it; CPU s = embedding + that clusterer.
        res = {"gmm": ([], []), "kmeans": ([], [])}
        for s in seeds:
            Z, t_emb = timed(lambda: make_embedding(params, image_shape, s, smoke).fit_transform(X))
            for clusterer, (accs, secs) in res.items():
                labels, t_cl = timed(lambda: on_top(Z, K, s, clusterer))
                accs.append(clustering_accuracy(y, labels))
                secs.append(t_emb + t_cl)
        for clusterer, (accs, secs) in res.items():
            table.add(task, f"NE {name} + {clusterer.upper()}", accs, secs)


def transfer_rows(table, name, task, seeds, image_shape, configs, smoke):
    Xs, Xt, yt = task.X_source, task.X_target, task.y_target
    K = len(np.unique(yt))
    run_method(table, name, "peer: UMAP(10) + GMM on the target alone", seeds,
               lambda s: (lambda r: (clustering_accuracy(yt, r[0]), r[1]))(timed(lambda: peer(Xt, K, s))))
    for cname, params in configs.items():
        if params.get("image") and image_shape is None:
            continue
        modes = {
            "target only": lambda e: e.fit(Xt),
            "source only (target embedded)": lambda e: e.fit(Xs),
            "source, refined on target": lambda e: e.fit(Xs).refine(Xt),
        }
        for mode, train in modes.items():
            def one(s, params=params, train=train):
                def go():
                    emb = train(make_embedding(params, image_shape, s, smoke))
                    return on_top(emb.transform(Xt), K, s, "gmm")
                labels, sec = timed(go)
                return clustering_accuracy(yt, labels), sec
            run_method(table, name, f"NE {cname}, {mode} + GMM", seeds, one)


def refine_rows(table, name, task, seeds, image_shape, params, smoke, epochs=(5, 10, 20, 40)):
    """One source fit per seed, then refinements of different lengths on the target (copies)."""
    import copy

    Xs, Xt, yt = task.X_source, task.X_target, task.y_target
    K = len(np.unique(yt))
    res = {n: ([], []) for n in epochs}
    t_target = {n: ([], []) for n in epochs}
    for s in seeds:
        src, t_src = timed(lambda: make_embedding(params, image_shape, s, smoke).fit(Xs))
        for n in epochs:
            labels, t_ref = timed(lambda: on_top(copy.deepcopy(src).refine(Xt, n_epochs=n).transform(Xt), K, s, "gmm"))
            res[n][0].append(clustering_accuracy(yt, labels))
            res[n][1].append(t_src + t_ref)
            p = dict(params, n_epochs=n)
            labels, t_tgt = timed(lambda: on_top(make_embedding(p, image_shape, s, smoke).fit_transform(Xt), K, s, "gmm"))
            t_target[n][0].append(clustering_accuracy(yt, labels))
            t_target[n][1].append(t_tgt)
    for n in epochs:
        table.add(name, f"NE source fit, refined {n} ep on target + GMM", *res[n])
        table.add(name, f"NE target only, {n} ep + GMM", *t_target[n])


def purity_rows(table, task, X, y, image_shape):
    """Share of the graph's edge weight that joins two rows of the same class (no training)."""
    from sktransfer_cluster.representation import neighbour_graph

    variants = {
        "euclidean (UMAP's graph)": dict(metric="euclidean"),
        "cosine": dict(metric="cosine"),
        "euclidean + shared": dict(metric="euclidean", shared_neighbours=True),
        "cosine + shared (flat default)": dict(metric="cosine", shared_neighbours=True),
        "cosine + shared + shift 1 px": dict(metric="cosine", shared_neighbours=True, max_shift=1),
        "cosine + shared + blur 1 px": dict(metric="cosine", shared_neighbours=True, blur=1.0),
        "cosine + shared + shift + blur (image default)": dict(metric="cosine", shared_neighbours=True, max_shift=1, blur=1.0),
    }
    for name, kw in variants.items():
        shape = image_shape if ("max_shift" in kw or "blur" in kw) else None
        G, sec = timed(lambda: neighbour_graph(X, 15, image_shape=shape, **kw).tocoo())
        pur = float(np.average(y[G.row] == y[G.col], weights=G.data))
        table.add(task, f"graph {name}: edge-weight purity", [pur], [sec])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny data, one seed, 2 epochs (seconds)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--parts", default="purity,graph,single,transfer,refine")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    threadpool_limits(1)
    seeds = [0] if args.smoke else list(range(args.seeds))
    parts = args.parts.split(",")
    command = "python benchmarks/representation_screen.py " + " ".join(argv if argv is not None else sys.argv[1:])
    defaults = {"defaults (flat)": {}, "defaults + image_shape": {"image": True}}

    X, y = load_mnist_5k()
    Xd, yd = load_digits(return_X_y=True)
    Xd = Xd / 16.0
    mt, dt = load_mnist_transfer(), load_digits_transfer()
    if args.smoke:
        rs = np.random.default_rng(0)
        pick = rs.choice(len(X), 400, replace=False)
        X, y = X[pick], y[pick]
        pick = rs.choice(len(Xd), 300, replace=False)
        Xd, yd = Xd[pick], yd[pick]
        for t in (mt, dt):
            ps, pt = rs.choice(len(t.X_source), 200, replace=False), rs.choice(len(t.X_target), 200, replace=False)
            t.X_source, t.y_source, t.X_target, t.y_target = t.X_source[ps], t.y_source[ps], t.X_target[pt], t.y_target[pt]

    tables = []
    if "purity" in parts:
        tab = Table("Graph purity (share of edge weight within a class; no training, no seeds)", command)
        print(tab.title)
        purity_rows(tab, "MNIST-5k", X, y, (28, 28))
        purity_rows(tab, "sklearn digits", Xd, yd, (8, 8))
        tables.append(tab)
    if "graph" in parts:
        tab = Table("Graph options, MNIST-5k (K = 10), encoder defaults", command)
        print(tab.title)
        single_rows(tab, "MNIST-5k", X, y, 10, seeds, (28, 28), GRAPH_VARIANTS, args.smoke)
        tables.append(tab)
    if "single" in parts:
        tab = Table("One data set, K = its classes, NeighbourEmbedding defaults", command)
        print(tab.title)
        single_rows(tab, "MNIST-5k (K=10)", X, y, 10, seeds, (28, 28), defaults, args.smoke)
        single_rows(tab, "sklearn digits (K=10)", Xd, yd, 10, seeds, (8, 8), defaults, args.smoke)
        for name, loader in (("wine (K=3)", load_wine), ("breast cancer (K=2)", load_breast_cancer)):
            Xw, yw = loader(return_X_y=True)
            Xw = StandardScaler().fit_transform(Xw)
            single_rows(tab, name + ", standardised", Xw, yw, len(np.unique(yw)), seeds, None, defaults, args.smoke)
        tables.append(tab)
    if "transfer" in parts:
        tab = Table("Transfer 0-4 -> 5-9 (K = 5), scored on the target", command)
        print(tab.title)
        transfer_rows(tab, "MNIST 0-4 -> 5-9", mt, seeds, (28, 28), defaults, args.smoke)
        transfer_rows(tab, "digits 0-4 -> 5-9", dt, seeds, (8, 8), defaults, args.smoke)
        tables.append(tab)

    if "refine" in parts:
        tab = Table("Refinement length, MNIST 0-4 -> 5-9 (K = 5), defaults (flat), scored on the target", command)
        print(tab.title)
        run_method(tab, "MNIST 0-4 -> 5-9", "peer: UMAP(10) + GMM on the target alone", seeds,
                   lambda s: (lambda r: (clustering_accuracy(mt.y_target, r[0]), r[1]))(timed(lambda: peer(mt.X_target, 5, s))))
        refine_rows(tab, "MNIST 0-4 -> 5-9", mt, seeds, (28, 28), {}, args.smoke,
                    epochs=(1, 2) if args.smoke else (5, 10, 20, 40))
        tables.append(tab)
    OUT.mkdir(parents=True, exist_ok=True)
    stem = "representation_screen" + ("_smoke" if args.smoke else "") + (f"_{args.tag}" if args.tag else "")
    out = OUT
    if args.smoke:  # a smoke run never touches the measured results (CI runs it in the checkout)
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="sktc-representation-smoke-"))
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": command, "seeds": seeds,
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "tables": [
        {"title": t.title, "rows": t.rows} for t in tables]}, indent=1))
    md = [f"# Representation screen ({meta['date']}, seeds {seeds}, 1 thread)", ""]
    md += [t.markdown() for t in tables]
    (out / f"{stem}.md").write_text("\n".join(md))
    print("wrote", out / f"{stem}.md")


if __name__ == "__main__":
    main()
