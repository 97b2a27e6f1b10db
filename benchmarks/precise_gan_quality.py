"""PreciseFeatureGAN at its defaults: the paper's ring, the bundled digits, digits 0-4 -> 5-9, speed.

    python benchmarks/precise_gan_quality.py [--seeds 3] [--quick | --smoke] [--sections ...] [--name NAME]

Canonical run: ``python benchmarks/precise_gan_quality.py``.

Gan et al., *Learning the Precise Feature for Cluster Assignment*, on CPU budgets. Every
GAN here is ``PreciseFeatureGAN(k, random_state=seed)`` with nothing else set (``--quick``
divides ``n_iter`` by 4), beside ``KMeans(n_init=10)`` in the same run; times are process
(CPU) seconds of this process, which trains on one torch thread.

* ``ring``: 8-Gaussian ring (sigma 0.014, 4,000 points), K = 8. Goal: median ACC >= 0.99
  in <= 120 CPU-seconds.
* ``digits``: the 1,797 8x8 digits /16, K = 10, plain ``fit``. Goal: median ACC >= KMeans.
* ``transfer``: digits 0-4 -> 5-9 (``load_digits_transfer``), ``fit`` on the source then
  ``transfer`` to the target, beside KMeans refitted on the target.
* ``artifact`` (opt-in): artifact digits (pixel 0 in {0.1, 0.5, 0.9}), K = 3; a run
  solves it when ACC against the artifact ids is >= 0.95.
* ``mnist`` (opt-in): MNIST-5k (``load_mnist_5k``), K = 10, at the defaults (MLP) and
  with ``architecture="conv", image_shape=(28, 28)``, otherwise defaults; ``--mnist-iter``
  sets ``n_iter`` of both (default: the estimator's). Goal (conv): median ACC >= 0.70 in
  <= 30 CPU-minutes per fit. About 0.2 CPU-second per conv generator step (one thread).
* ``arena-mnist``, ``arena-mnist-image``, ``arena-mnist-transfer``, ``arena-digits``,
  ``arena-second``, ``arena-tabular`` (opt-in; issue 28): the GAN at its defaults beside
  ``KMeans(n_init=10)`` and the peer ``UMAP(10) + GaussianMixture(K, n_init=3)``
  (``compare.umap_gmm``), all in this process: MNIST-5k K = 10 (flat; with
  ``image_shape=(28, 28)``), MNIST 0-4 -> 5-9 K = 5 (``fit(source).transfer(target)`` and the
  GAN fitted on the target alone), the sklearn digits (K = 10 and 0-4 -> 5-9), UCI mfeat-pix
  (``_common.second_images``; flat and with its image_shape), wine and breast cancer
  (standardised). Run each with ``--name arena_<part>``.
* ``speed``: generator steps per second at the defaults on the ring and the digits, with
  the estimator's one training thread and with two (the cap bypassed), each alone and
  beside a busy process.

The digits sections also record training curves every ``n_iter / 10`` generator steps:
the critic's Wasserstein estimate and the classifier's accuracy on generated samples
(means over the interval, from ``history_``), the mean distance from 1,000 generated
samples to their nearest real row (pixel space; beside the mean nearest-neighbour
distance between real rows), the ACC of ``argmax C`` on the real rows and the ACC of
assigning each real row to its nearest generated cluster point ``G(y, z=0)`` (what a
Voronoi classifier of the generator's points would give; with ``noise_dim=0`` those
points are all ``G`` generates). They are plotted to ``<name>_curves.png``.

The curves come from a training callback (``CurveProbe`` through ``_common.observing``).

Results go to benchmarks/results/precise_gan/precise_gan_quality.{json,md} (another
``--name``, or ``--quick``, goes to ``precise_gan/variants/``; ``--smoke`` -- one seed, 300
rows, the registry's smallest GAN, 5 speed steps -- under a temporary folder).
"""

import argparse
import contextlib
import multiprocessing as mp
import os
import time

import _common
import numpy as np
import torch
from _common import add_name_argument, observing, result_stem, scores, summary, write
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.neighbors import NearestNeighbors

from sktransfer_cluster.base import contract
from sktransfer_cluster.cluster.precise_gan import PreciseFeatureGAN
from sktransfer_cluster.datasets import load_digits_transfer, make_artifact_digits, make_gaussian_ring
from sktransfer_cluster.metrics import clustering_accuracy

N_ITER = PreciseFeatureGAN().n_iter
#: The issue-28 sections (``--sections arena-...``): section name -> part of :func:`arena_section`.
ARENA = {f"arena-{p.replace('_', '-')}": p
         for p in ("mnist", "mnist_image", "mnist_transfer", "digits", "digits_transfer", "second", "tabular")}


class CurveProbe:
    """A training callback: a curve point every ``every`` generator steps of the model's fit
    (or transfer), from the history records (interval means of the monitored quantities)."""

    def __init__(self, model, X, y, every, rows):
        self.model, self.X, self.y, self.every, self.rows = model, X, y, every, rows
        self.nn = NearestNeighbors(n_neighbors=1).fit(X)
        self.t_start = time.process_time()

    def on_record(self, run, record):
        epoch = record["epoch"]
        if "wasserstein" not in record or (epoch % self.every and epoch != run.n_epochs):
            return  # another phase's record (the classifier re-fit), or between curve points
        model, X = self.model, self.X
        fake, _ = model.sample(1000, random_state=0)
        with torch.no_grad():
            labels = model.classifier_(model._prep(X)).argmax(1).cpu().numpy()
            ids = torch.arange(model.n_clusters, device=model.device_)
            centres = model._unprep(model.generator_(model._latent(ids, None, zero_noise=True)))
        nearest = NearestNeighbors(n_neighbors=1).fit(centres).kneighbors(X)[1][:, 0]
        self.rows.append({
            "phase": run.phase, "step": int(epoch), "wasserstein": float(record["wasserstein"]),
            "fake_accuracy": float(record["fake_accuracy"]),
            "knn_fake_to_real": float(self.nn.kneighbors(fake)[0].mean()),
            "acc": float(clustering_accuracy(self.y, labels)), "clusters_used": int(np.unique(labels).size),
            "nearest_point_acc": float(clustering_accuracy(self.y, nearest)),
            "cpu_seconds": time.process_time() - self.t_start,
        })


def gan(k, seed, n_iter, **params):
    """``PreciseFeatureGAN(k, n_iter=n_iter, random_state=seed, **params)`` through the registry
    (in a smoke run: at its smallest budget, ``n_iter`` included)."""
    budget = {} if _common.SMOKE else {"n_iter": n_iter}
    return _common.build("PreciseFeatureGAN", k, device="cpu", random_state=seed, **budget, **params)


def small(X, y, seed=0):
    """``X, y`` as given, or 300 random rows of them in a smoke run."""
    if not _common.SMOKE or X.shape[0] <= 300:
        return X, y
    idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], 300, replace=False))
    return X[idx], y[idx]


def real_nn_distance(X):
    """Mean distance from each real row to its nearest other real row."""
    return float(NearestNeighbors(n_neighbors=2).fit(X).kneighbors(X)[0][:, 1].mean())


def fit_gan(X, y, k, seed, n_iter, X_target=None, y_target=None, curves=False, **params):
    curve = []
    if curves:
        # The curves compare generated points with real rows in input space: the raw-input GAN
        # (as when the canonical tables were measured), not the neighbour codes of the default.
        params.setdefault("representation", None)
    model = gan(k, seed, n_iter, **params)
    probe = (observing(model, CurveProbe(model, X, y, max(1, model.n_iter // 10), curve)) if curves and X_target is None
             else contextlib.nullcontext())
    t0 = time.process_time()
    with probe:
        model.fit(X)
    out = {"cpu_seconds": time.process_time() - t0}
    if X_target is None:
        out.update(scores(y, model.labels_))
    else:
        out["source_acc"] = clustering_accuracy(y, model.labels_)
        probe = (observing(model, CurveProbe(model, X_target, y_target, max(1, model.n_iter // 4 // 10), curve))
                 if curves else contextlib.nullcontext())
        t0 = time.process_time()
        with probe:
            labels = model.transfer(X_target)
        out["transfer_cpu_seconds"] = time.process_time() - t0
        out.update(scores(y_target, labels))
    out["clusters_used"] = int(model.n_clusters_)
    # The last adversarial record (a classifier re-fit phase may log after it, without these).
    last = next(r for r in reversed(model.history_) if "wasserstein" in r)
    out["final_wasserstein"] = last["wasserstein"]
    out["final_fake_accuracy"] = last["fake_accuracy"]
    if curves:
        out["curve"] = curve
    return out


def fit_kmeans(X, y, k, seed):
    t0 = time.process_time()
    labels = KMeans(k, n_init=10, random_state=seed).fit_predict(X)
    return {**scores(y, labels), "cpu_seconds": time.process_time() - t0}


def fmt(s):
    return f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


def table(rows):
    """Markdown rows (name, ACC, NMI, ARI, CPU s) and summaries for ``{name: runs}``."""
    md, out = [], {}
    for name, runs in rows.items():
        s = {k: summary([r[k] for r in runs]) for k in ("acc", "nmi", "ari", "cpu_seconds")}
        out[name] = s
        md.append(f"| {name} | {fmt(s['acc'])} | {fmt(s['nmi'])} | {fmt(s['ari'])} | "
                  f"{s['cpu_seconds']['median']:.1f} |")
    return md, out


HEAD = ["| method | ACC median [min, max] | NMI | ARI | CPU s / run (median) |", "|---|---|---|---|---|"]


def ring_section(seeds, n_iter):
    gan, km = [], []
    for seed in seeds:
        X, y = make_gaussian_ring(300 if _common.SMOKE else 4000, random_state=seed)
        gan.append(fit_gan(X, y, 8, seed, n_iter))
        km.append(fit_kmeans(X, y, 8, seed))
        print(f"ring seed {seed}: GAN ACC {gan[-1]['acc']:.3f} ({gan[-1]['cpu_seconds']:.0f} CPU s), "
              f"KMeans {km[-1]['acc']:.3f}", flush=True)
    lines, s = table({"PreciseFeatureGAN (defaults)": gan, "KMeans(n_init=10)": km})
    md = [f"### 8-Gaussian ring (sigma 0.014, 4,000 points), K = 8, {len(seeds)} seeds, n_iter {n_iter}", "",
          "Goal: median ACC >= 0.99 in <= 120 CPU-seconds.", "", *HEAD, *lines, "",
          "Per-seed GAN ACC: " + " ".join(f"{r['acc']:.3f}" for r in gan),
          "; CPU s: " + " ".join(f"{r['cpu_seconds']:.0f}" for r in gan)]
    return {"gan": gan, "kmeans": km, "summary": s}, md


def _curve_lines(runs, real_nn, what="mean nearest-neighbour distance between real rows"):
    md = ["", f"Curves (seed 0; {what} {real_nn:.3f}):", "",
          "| phase | step | critic W estimate | fake accuracy | kNN fake->real | ACC of argmax C "
          "| ACC of nearest G point | clusters used | CPU s |",
          "|---|---|---|---|---|---|---|---|---|"]
    for c in runs[0]["curve"]:
        md.append(f"| {c['phase']} | {c['step']} | {c['wasserstein']:.3f} | {c['fake_accuracy']:.3f} | "
                  f"{c['knn_fake_to_real']:.3f} | {c['acc']:.3f} | {c['nearest_point_acc']:.3f} | "
                  f"{c['clusters_used']} | {c['cpu_seconds']:.0f} |")
    return md


def digits_section(seeds, n_iter):
    X, y = load_digits(return_X_y=True)
    X, y = small(X / 16.0, y)
    gan, km = [], []
    for seed in seeds:
        gan.append(fit_gan(X, y, 10, seed, n_iter, curves=True))
        km.append(fit_kmeans(X, y, 10, seed))
        print(f"digits seed {seed}: GAN ACC {gan[-1]['acc']:.3f} ({gan[-1]['cpu_seconds']:.0f} CPU s), "
              f"KMeans {km[-1]['acc']:.3f}", flush=True)
    lines, s = table({"PreciseFeatureGAN (defaults)": gan, "KMeans(n_init=10)": km})
    real_nn = real_nn_distance(X)
    md = [f"### Digits (1,797 images /16), K = 10, {len(seeds)} seeds, n_iter {n_iter}", "",
          "Goal: median ACC >= KMeans.", "", *HEAD, *lines, "",
          "Per-seed GAN ACC: " + " ".join(f"{r['acc']:.3f}" for r in gan), *_curve_lines(gan, real_nn)]
    return {"gan": gan, "kmeans": km, "summary": s, "real_nn_distance": real_nn}, md


def transfer_section(seeds, n_iter):
    task = load_digits_transfer()
    (task.X_source, task.y_source), (task.X_target, task.y_target) = (small(task.X_source, task.y_source),
                                                                      small(task.X_target, task.y_target))
    gan, km = [], []
    for seed in seeds:
        gan.append(fit_gan(task.X_source, task.y_source, 5, seed, n_iter, task.X_target, task.y_target,
                           curves=True))
        km.append(fit_kmeans(task.X_target, task.y_target, 5, seed))
        g = gan[-1]
        print(f"transfer seed {seed}: GAN target ACC {g['acc']:.3f} (source {g['source_acc']:.3f}; "
              f"{g['cpu_seconds'] + g['transfer_cpu_seconds']:.0f} CPU s), KMeans refit {km[-1]['acc']:.3f}",
              flush=True)
    for r in gan:
        r["cpu_seconds"] += r["transfer_cpu_seconds"]
    lines, s = table({"PreciseFeatureGAN fit(source).transfer(target)": gan, "KMeans(n_init=10) on the target": km})
    real_nn = real_nn_distance(task.X_target)
    md = [f"### Digits 0-4 -> 5-9, K = 5, {len(seeds)} seeds, n_iter {n_iter} (+ n_iter / 4 in transfer)", "",
          "Scores on the target; CPU seconds are fit + transfer.", "", *HEAD, *lines, "",
          "Per-seed GAN target ACC: " + " ".join(f"{r['acc']:.3f}" for r in gan)
          + "; source ACC after fit: " + " ".join(f"{r['source_acc']:.3f}" for r in gan),
          *_curve_lines(gan, real_nn, "the transfer phase, on the target; mean nearest-neighbour distance "
                        "between target rows")]
    return {"gan": gan, "kmeans": km, "summary": s, "real_nn_distance": real_nn}, md


def artifact_section(seeds, n_iter):
    gan, km = [], []
    for seed in seeds:
        X, y_art, _ = make_artifact_digits(random_state=seed)
        gan.append(fit_gan(X, y_art, 3, seed, n_iter))
        km.append(fit_kmeans(X, y_art, 3, seed))
    solved = {n: float(np.mean([r["acc"] >= 0.95 for r in runs])) for n, runs in (("gan", gan), ("kmeans", km))}
    lines, s = table({"PreciseFeatureGAN (defaults)": gan, "KMeans(n_init=10)": km})
    md = [f"### Artifact digits (pixel 0 in {{0.1, 0.5, 0.9}}), K = 3, {len(seeds)} seeds, n_iter {n_iter}", "",
          f"Runs solved (ACC >= 0.95 against the artifact ids): GAN {solved['gan']:.0%}, "
          f"KMeans {solved['kmeans']:.0%}.", "", *HEAD, *lines]
    return {"gan": gan, "kmeans": km, "solved_fraction": solved, "summary": s}, md


def mnist_section(seeds, n_iter):
    from sktransfer_cluster.datasets import load_mnist_5k

    X, y = load_mnist_5k()
    configs = {"PreciseFeatureGAN (defaults, MLP)": {},
               "PreciseFeatureGAN (conv, image_shape (28, 28))": {"architecture": "conv",
                                                                   "image_shape": (28, 28)}}
    runs, km = {name: [] for name in configs}, []
    for seed in seeds:
        for name, params in configs.items():
            runs[name].append(fit_gan(X, y, 10, seed, n_iter, curves=True, **params))
            print(f"mnist seed {seed} {name}: ACC {runs[name][-1]['acc']:.3f} "
                  f"({runs[name][-1]['cpu_seconds']:.0f} CPU s)", flush=True)
        km.append(fit_kmeans(X, y, 10, seed))
    lines, s = table({**runs, "KMeans(n_init=10)": km})
    real_nn = real_nn_distance(X)
    md = [f"### MNIST-5k (5,000 images in [0, 1]), K = 10, {len(seeds)} seeds, n_iter {n_iter}", "",
          "Goal (conv): median ACC >= 0.70 in <= 30 CPU-minutes (1,800 s) per fit.", "", *HEAD, *lines]
    for name, rs in runs.items():
        md += ["", f"{name}, per seed: ACC " + " ".join(f"{r['acc']:.3f}" for r in rs) + "; CPU s "
               + " ".join(f"{r['cpu_seconds']:.0f}" for r in rs)]
        md += _curve_lines(rs, real_nn)[1:]
    return {"runs": runs, "kmeans": km, "summary": s, "real_nn_distance": real_nn}, md


# ------------------------------------------------------------------ issue 28: the arena with the peer
def _cpu(fn):
    c0 = time.process_time()
    out = fn()
    return out, time.process_time() - c0


def _arena_gan(k, seed, **params):
    """The GAN at its defaults (smoke: the registry's smallest, 2 representation epochs)."""
    extra = {"representation_epochs": 2} if _common.SMOKE else {}
    return gan(k, seed, N_ITER, **extra, **params)


def _arena_row(task, method, accs, cpus, note=""):
    accs, cpus = np.asarray(accs, dtype=float), np.asarray(cpus, dtype=float)
    return {"task": task, "method": method, "acc": accs.tolist(), "cpu_s": cpus.tolist(),
            "median": float(np.median(accs)), "min": float(accs.min()), "max": float(accs.max()),
            "cpu_median": float(np.median(cpus)), "cpu_max": float(cpus.max()), "note": note}


def _arena_baselines(task, X, y, k, seeds, rows, what=""):
    """KMeans(n_init=10) on the raw rows and the peer (UMAP(10) + GMM), in this process."""
    runs = [_cpu(lambda s=s: KMeans(k, n_init=10, random_state=s).fit_predict(X)) for s in seeds]
    rows.append(_arena_row(task, f"KMeans(n_init=10){what}", [clustering_accuracy(y, lab) for lab, _ in runs],
                           [c for _, c in runs]))
    try:
        import umap  # noqa: F401
    except ImportError:
        print("peer skipped: umap-learn is not installed (pip install umap-learn)", flush=True)
        return
    from sktransfer_cluster.compare import umap_gmm

    runs = [_cpu(lambda s=s: umap_gmm(X, k, random_state=s)) for s in seeds]
    rows.append(_arena_row(task, f"peer: UMAP(10) + GMM{what}", [clustering_accuracy(y, lab) for lab, _ in runs],
                           [c for _, c in runs]))
    print(f"{task}: KMeans {rows[-2]['median']:.3f}, peer {rows[-1]['median']:.3f}", flush=True)


def _arena_single(task, X, y, k, seeds, rows, shapes=(None,)):
    _arena_baselines(task, X, y, k, seeds, rows)
    for shape in shapes:
        accs, cpus = [], []
        for s in seeds:
            model, c = _cpu(lambda s=s, sh=shape: _arena_gan(k, s, image_shape=sh).fit(X))
            accs.append(clustering_accuracy(y, model.labels_))
            cpus.append(c)
            print(f"  {task} image_shape={shape} seed {s}: {accs[-1]:.3f} ({c:.0f} CPU s, "
                  f"representation {'neighbours' if model.encoder_ is not None else 'none'})", flush=True)
        rows.append(_arena_row(task, "PreciseFeatureGAN (defaults" + ("" if shape is None else
                                                                    f", image_shape={shape}") + ")", accs, cpus))


def _arena_transfer(task_name, task, k, seeds, rows, shapes=(None,)):
    Xs, Xt, yt = task.X_source, task.X_target, task.y_target
    _arena_baselines(task_name, Xt, yt, k, seeds, rows, " on the target alone")
    for shape in shapes:
        tag = "" if shape is None else f", image_shape={shape}"
        res = {"transfer": ([], []), "alone": ([], [])}
        for s in seeds:
            model, c_fit = _cpu(lambda s=s, sh=shape: _arena_gan(k, s, image_shape=sh).fit(Xs))
            lab, c_tr = _cpu(lambda m=model: m.transfer(Xt))
            res["transfer"][0].append(clustering_accuracy(yt, lab))
            res["transfer"][1].append(c_fit + c_tr)
            start = getattr(model, "transfer_start_", "source")
            res.setdefault("starts", []).append(start)
            model, c = _cpu(lambda s=s, sh=shape: _arena_gan(k, s, image_shape=sh).fit(Xt))
            res["alone"][0].append(clustering_accuracy(yt, model.labels_))
            res["alone"][1].append(c)
            print(f"  {task_name}{tag} seed {s}: transfer {res['transfer'][0][-1]:.3f} "
                  f"({c_fit:.0f} + {c_tr:.0f} CPU s, kept: {start}), target alone {res['alone'][0][-1]:.3f} ({c:.0f} CPU s)",
                  flush=True)
        rows.append(_arena_row(task_name, f"PreciseFeatureGAN fit(source).transfer(target){tag}", *res["transfer"],
                               "CPU s: fit + transfer; GAN kept per seed: " + ", ".join(res["starts"])))
        rows.append(_arena_row(task_name, f"PreciseFeatureGAN fitted on the target alone{tag}", *res["alone"]))


def _subset(X, y, n, seed=0):
    idx = np.sort(np.random.default_rng(seed).permutation(X.shape[0])[:n])
    return X[idx], y[idx]


def arena_section(part, seeds):
    """Issue 28: the GAN at its defaults beside the peer and KMeans, in the same process.

    Parts: ``mnist`` (MNIST-5k, K = 10, flat), ``mnist_image`` (the same with
    ``image_shape=(28, 28)``), ``mnist_transfer`` (0-4 -> 5-9, K = 5, flat), ``digits``
    (sklearn digits K = 10, and 0-4 -> 5-9 K = 5; ``digits_transfer`` the latter only), ``second`` (UCI mfeat-pix, 2,000 16 x 15
    digits, K = 10, flat and with its image_shape), ``tabular`` (wine K = 3, breast cancer
    K = 2, standardised). A smoke run: 300 sklearn digits stand in for every image set.
    """
    from sklearn.datasets import load_breast_cancer, load_wine
    from sklearn.preprocessing import StandardScaler

    from sktransfer_cluster.datasets import TransferTask

    rows = []
    smoke = _common.SMOKE
    if part in ("mnist", "mnist_image", "mnist_transfer"):
        if smoke:
            Xd, yd = load_digits(return_X_y=True)
            X, y, shape, title = *_subset(Xd / 16.0, yd, 300), (8, 8), "[smoke: 300 digits] "
        else:
            from sktransfer_cluster.datasets import load_mnist_5k

            (X, y), shape, title = load_mnist_5k(), (28, 28), ""
        if part == "mnist_transfer":
            src, tgt = y < 5, y >= 5
            _arena_transfer(title + "MNIST 0-4 -> 5-9 (K=5)", TransferTask(X[src], y[src], X[tgt], y[tgt], name="mnist"),
                            5, seeds, rows)
        else:
            _arena_single(title + "MNIST-5k (K=10)", X, y, 10, seeds, rows,
                          (None,) if part == "mnist" else (shape,))
    elif part in ("digits", "digits_transfer"):
        if part == "digits":
            X, y = load_digits(return_X_y=True)
            X, y = small(X / 16.0, y)
            _arena_single("sklearn digits /16 (K=10)", X, y, 10, seeds, rows)
        task = load_digits_transfer()
        if smoke:
            task = TransferTask(*small(task.X_source, task.y_source), *small(task.X_target, task.y_target),
                                name="digits")
        _arena_transfer("digits 0-4 -> 5-9 (K=5)", task, 5, seeds, rows)
    elif part == "second":
        reason = _common.second_images_skip_reason("mfeat-pix")
        if reason is not None:
            print(f"second image set skipped: {reason}", flush=True)
            return rows, [f"Skipped: {reason}."]
        X, y, shape, title = _common.second_images("mfeat-pix")
        X, y = small(np.asarray(X, dtype=np.float64), y)
        _arena_single(f"UCI mfeat-pix, {X.shape[0]} images {shape[0]} x {shape[1]} (K=10)", X, y, 10, seeds, rows,
                      (None, shape))
    elif part == "tabular":
        for name, loader, k in (("wine (K=3), standardised", load_wine, 3),
                                ("breast cancer (K=2), standardised", load_breast_cancer, 2)):
            X, y = loader(return_X_y=True)
            _arena_single(name, StandardScaler().fit_transform(X), y, k, seeds, rows)
    md, task = [], None
    for r in rows:
        if r["task"] != task:
            task = r["task"]
            md += ["", f"### {task}", "", "| method | ACC median [min, max] | CPU s median (max) |", "|---|---|---|"]
        md.append(f"| {r['method']} | {r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}] | "
                  f"{r['cpu_median']:.1f} ({r['cpu_max']:.1f}){' ' + r['note'] if r['note'] else ''} |")
    return rows, md


def _busy(stop):
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextlib.contextmanager
def threads(n):
    """Train on ``n`` torch threads: 1 is the house rule (every training phase runs inside
    ``base.torch_threads(device, 1)``, called from ``base.contract``); more bypasses it by
    replacing that name in ``base.contract`` for the block (no public switch exists)."""
    if n == 1:
        yield
        return
    original = contract.torch_threads
    before = torch.get_num_threads()

    @contextlib.contextmanager
    def n_threads(device, _one):
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    contract.torch_threads = n_threads
    try:
        yield
    finally:
        contract.torch_threads = original


def speed_section(n_steps):
    X_ring = make_gaussian_ring(300 if _common.SMOKE else 4000, random_state=0)[0]
    X_digits = small(load_digits().data / 16.0, np.zeros(1797))[0]
    rows, md = [], ["### Generator steps per second at the defaults", "",
                    f"{n_steps} generator steps after a 5-step warm-up; `OMP_NUM_THREADS="
                    f"{os.environ.get('OMP_NUM_THREADS', 'unset')}`, `OMP_WAIT_POLICY="
                    f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}`; busy = one pure-Python spinning process "
                    "beside it; load = 1-minute load average of the machine at the end.", "",
                    "| data | torch threads in training | beside | steps / s (wall) | CPU ms / step | load |",
                    "|---|---|---|---|---|---|"]
    # A smoke run times the ring only: the digits' four runs add nothing to a check that it runs.
    for data, X, k in (("ring", X_ring, 8), ("digits", X_digits, 10))[:1 if _common.SMOKE else 2]:
        # A smoke run takes two of the four arms (each path once): the others would spin a core.
        arms = [(1, False), (2, True)] if _common.SMOKE else [(1, False), (1, True), (2, False), (2, True)]
        for n_threads, busy in arms:
            stop = mp.Event()
            proc = mp.Process(target=_busy, args=(stop,)) if busy else None
            if proc is not None:
                proc.start()
            try:
                with threads(n_threads):
                    gan(k, 0, 5).set_params(n_iter=5).fit(X)  # warm-up
                    with _common.Timer() as t:
                        gan(k, 0, n_steps).set_params(n_iter=n_steps).fit(X)
                    w, c = t.wall, t.cpu
            finally:
                stop.set()
                if proc is not None:
                    proc.join()
            r = {"data": data, "threads": n_threads, "busy_neighbour": busy, "steps_per_s": n_steps / w,
                 "cpu_ms_per_step": 1000 * c / n_steps, "load": os.getloadavg()[0]}
            rows.append(r)
            print(r, flush=True)
            md.append(f"| {data} | {n_threads} | {'busy process' if busy else 'alone'} | "
                      f"{r['steps_per_s']:.1f} | {r['cpu_ms_per_step']:.1f} | {r['load']:.1f} |")
    return rows, md


def plot(payload, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    # One row of panels per (section, configuration) with curves: MNIST-5k has two configurations.
    panels = [(sec, sec, payload[sec]["gan"], payload[sec]["summary"]["KMeans(n_init=10)" if sec == "digits"
                                                                      else "KMeans(n_init=10) on the target"],
               payload[sec]["real_nn_distance"]) for sec in ("digits", "transfer") if sec in payload]
    if "mnist" in payload:
        for name, runs in payload["mnist"]["runs"].items():
            label = "MNIST-5k conv" if "conv" in name else "MNIST-5k MLP"
            panels.append((label, "mnist", runs, payload["mnist"]["summary"]["KMeans(n_init=10)"],
                           payload["mnist"]["real_nn_distance"]))
    if not panels:
        return False
    keys = [("wasserstein", "critic W estimate"), ("fake_accuracy", "fake accuracy"),
            ("knn_fake_to_real", "kNN distance fake -> real"), ("acc", "ACC of argmax C (solid), nearest G point (dotted)")]
    fig, axes = plt.subplots(len(panels), len(keys), figsize=(16, 3.2 * len(panels)), squeeze=False)
    for row, (title_sec, sec, runs, km_summary, real_nn) in zip(axes, panels):
        for ax, (key, title) in zip(row, keys):
            for i, run in enumerate(runs):
                curve = run["curve"]
                fit_steps = max((c["step"] for c in curve if c["phase"] == "fit"), default=0)
                xs = [c["step"] + (fit_steps if c["phase"] == "transfer" else 0) for c in curve]
                ax.plot(xs, [c[key] for c in curve], marker=".", label=f"seed {i}")
            if key == "knn_fake_to_real":
                ax.axhline(real_nn, color="0.5", ls="--", label="real -> real")
            if key == "acc":
                for i, run in enumerate(runs):
                    curve = run["curve"]
                    fit_steps = max((c["step"] for c in curve if c["phase"] == "fit"), default=0)
                    xs = [c["step"] + (fit_steps if c["phase"] == "transfer" else 0) for c in curve]
                    ax.plot(xs, [c["nearest_point_acc"] for c in curve], ls=":", color=f"C{i}",
                            label=f"seed {i}: nearest G point")
                ax.axhline(km_summary["acc"]["median"], color="k", ls="--", label="KMeans")
            ax.set_title(f"{title_sec}: {title}")
            ax.set_xlabel("generator step")
        row[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed-list", type=int, nargs="+", default=None,
                        help="these seeds instead of 0 .. seeds-1 (to split a long part across processes)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, n_iter / 4")
    parser.add_argument("--sections", nargs="+", default=["ring", "digits", "transfer", "speed"],
                        choices=["ring", "digits", "transfer", "artifact", "mnist", "speed", *ARENA])
    parser.add_argument("--mnist-iter", type=int, default=None,
                        help="n_iter of the mnist section (default: the estimator's)")
    parser.add_argument("--speed-steps", type=int, default=200)
    add_name_argument(parser, "precise_gan")
    args = _common.setup(parser.parse_args())
    if args.smoke:  # one seed, 300 rows, the registry's smallest GAN; speed with 5 steps
        args.seeds, args.speed_steps = 1, 5
    torch.set_num_threads(1)
    seeds = list(range(1 if args.smoke else 2 if args.quick else args.seeds))
    if args.seed_list and not args.smoke:
        seeds = list(args.seed_list)
    n_iter = gan(2, 0, 1).n_iter if args.smoke else N_ITER // (4 if args.quick else 1)
    t_start = time.perf_counter()
    payload = {"settings": vars(args), "n_iter": n_iter}
    md = []
    sections = {"ring": ring_section, "digits": digits_section, "transfer": transfer_section,
                "artifact": artifact_section}
    for name in args.sections:
        if name in ARENA:
            payload[name], lines = arena_section(ARENA[name], seeds)
            lines = [f"## {name}: the peer and KMeans in the same process, seeds {seeds}, 1 thread",
                     "", ("ACC = clustering_accuracy, median [min, max]; CPU s = process seconds of each fit "
                          "(the transfer rows: source fit + transfer)."), *lines]
        elif name == "speed":
            payload["speed"], lines = speed_section(args.speed_steps)
        elif name == "mnist":
            payload[name], lines = mnist_section(seeds, args.mnist_iter or n_iter)
        else:
            payload[name], lines = sections[name](seeds, n_iter)
        md += lines + [""]
        if name in ARENA and name != args.sections[-1]:
            # Each arena part takes up to an hour on a busy machine: keep what is done so far.
            write("precise_gan", args.name, payload, "\n".join(md), quick=args.quick)
    payload["total_seconds"] = time.perf_counter() - t_start
    md.append(f"Total wall time {payload['total_seconds'] / 60:.1f} min.")
    stem = result_stem("precise_gan", args.name, args.quick)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png = stem.parent / (stem.name + "_curves.png")
    if plot(payload, png):
        md.append(f"\nCurves: `{png.name}`.")
    write("precise_gan", args.name, payload, "\n".join(md), quick=args.quick)


if __name__ == "__main__":
    main()
