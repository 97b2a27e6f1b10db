"""CCNCluster experiments behind results/ccn/variants/ (issue 15), one script with a ``--variant`` switch.

These were stored as the nine ``results/ccn/variants/*/*.py.txt`` files (named below), ported
to today's layout (the CCN wing's ``pairs`` module, the registry's CCNCluster); their results
files (``.jsonl``, ``.md``) stay where they were. Each variant prints one JSON line per row (``--out FILE`` also
appends them to FILE after a line with the command and the machine), as the stored ``.jsonl``
files were written; ``tables`` turns such
files into markdown rows.

* ``cost``: CCNCluster at its defaults on digits 0-4 -> 5-9, K = 5: fit and transfer process
  seconds and ACC, beside ``KMeans(5, n_init=10)`` on the target (``g_pairs_mnist/cost.py.txt``).
  ``--tag`` labels the row (the stored runs named the code version measured).
* ``full``: full transfers, K = 5 known and K at most 20 (``estimate_n_clusters=True``), for
  ``--settings mlp`` (the defaults) and ``conv`` (``image_shape`` set: 28 x 28 on MNIST, 8 x 8 on
  digits); one fit per setting (its own clustering network trained 1 epoch, not measured), then
  the transfers at the default ``clustering_epochs``; KMeans(K) on the target in the same run
  (``g_pairs_mnist/full.py.txt``).
* ``remeasure``: KMeans(5) and KMeans(20) on the target, then one CCN fit and transfers with
  K = 5 and K at most 20; for K at most 20 also the labels restricted to the dominant outputs
  (rows of minor outputs reassigned to their most probable dominant output). ``--params`` (JSON)
  sets CCNCluster parameters and ``--setting`` names the row (``n_clusters_normalised/remeasure.py.txt``).
* ``gbn``: per ``--specs`` entry ``NAME[,param=value...]`` (NAME ``default`` or ``gbn``: a
  ``BatchNorm1d`` after G's backbone) one fit (its clustering network 1 epoch, not measured), then
  transfers with K = 5 and K at most 20, and G's pair quality on all pairs of 1,000 fixed target
  rows with the target-adapted G (ROC AUC, precision/recall at p > 0.5); KMeans(5) in the same run
  (``float32_gbn/exp.py.txt``).
* ``gdiag``: G's target pairs, ``default`` against ``gbn``, with batch norm as fitted on the
  source and re-estimated on the target: AUC, precision/recall at p > 0.5, precision of the top
  5 % of pairs (``float32_gbn/gdiag.py.txt``).
* ``gnorm``: G's target pair quality with and without the estimator's affine input normalisation
  (a subclass with ``_input_normalization = None``) (``n_clusters_normalised/gnorm.py.txt``).
* ``labels``: CCN pair-label variants on one fitted G, per ``--specs`` entry: ``base`` (the
  defaults), ``eN`` (``clustering_epochs=N``), ``confdisT`` (dissimilar only where G's probability
  is below T and the pair are not neighbours, similar where above 0.5 and neighbours, unknown
  otherwise); a suffix ``:5`` or ``:20`` runs only that K (``n_clusters_normalised/variants.py.txt``).
* ``transfer`` (issue 29): on ``--data`` ``mnist`` / ``digits`` / ``mfeat`` (0-4 -> 5-9) or
  ``mnist-shift`` / ``digits-shift`` / ``mfeat-shift`` (same classes, the target blurred and noised:
  :func:`shifted_task`, :func:`mfeat_task`), the peers
  UMAP(10) + GMM (K given) and UMAP(10) + HDBSCAN (K unknown) on the target, then per ``--specs``
  entry ``{"name", "params"}`` a CCNCluster at today's defaults (``params`` win) fitted and
  transferred with K given and, unless ``--no-bound``, K at most 20: ACC, NMI, clusters found,
  fit and transfer CPU seconds, and ``G``'s target pairs (:func:`pair_quality`).
* ``gauc``: one G (``n_similarity_nets=1``) per ``--specs`` JSON entry ``{"name", "params",
  "prep", "dihedral", "conv"}`` and seed (``--seeds``): target and source pair AUC, precision and
  recall at p > 0.5. ``prep``: ``std`` (each domain z-scored with its own statistics),
  ``std_src`` (both with the source's), ``l2`` (rows to unit norm); ``dihedral``: G learned on
  the source's 8 rotations/reflections as classes; ``conv``: channels of the package's own
  convolutional stem (``image_shape`` set; the stored runs wired their own stem before the
  package had one) (``g_pairs_mnist/gauc.py.txt``).

* ``links`` (issue 29): how ``CCNCluster(20, estimate_n_clusters=True)`` labelled the target of
  ``--data``/``--seed`` (loaded from ``--save`` where ``transfer --save`` stored it, else fitted):
  each output's rows and true classes, ``G``'s share of similar calls within and between outputs,
  and the labels under the join rule of today (average linkage) and of 67ecebf (single linkage).
* ``s3`` (issue 30 S3): ``CCNCluster(bound, estimate_n_clusters=True)`` on labelled
  ``make_blobs(300, centers=3, cluster_std=0.5, random_state=0)``, bounds 3 and 4, ``--seeds``
  (``--touching``: also ``make_blobs(100, centers=3, random_state=0)``, two blobs touching).
* ``relabel`` (issue 29): K unknown under today's labelling rule (thresholds and ``_assign``
  rerun) on the ``CCNCluster(20, estimate_n_clusters=True)`` that ``transfer --bound-only --save``
  stored: ACC, clusters, ``G``'s precision and recall on unseen pairs at both thresholds.

The gbn, gdiag, labels and gauc variants replace functions of the CCN wing's ``pairs`` module
(or G's backbone) for the run: they are experiments on the estimator's internals and may need
mending when those change.

    python benchmarks/ccn_variants.py --variant cost [--tag NAME]
    python benchmarks/ccn_variants.py --variant full --data mnist --seed 0 --settings mlp conv
    python benchmarks/ccn_variants.py --variant remeasure --data mnist --seed 0 [--params '{...}'] [--setting NAME]
    python benchmarks/ccn_variants.py --variant tables FILE.jsonl [FILE.jsonl ...]
    python benchmarks/ccn_variants.py --variant gbn --data mnist --seed 0 --specs default gbn
    python benchmarks/ccn_variants.py --variant gdiag --data mnist --seed 0
    python benchmarks/ccn_variants.py --variant gnorm --data mnist --seed 0
    python benchmarks/ccn_variants.py --variant labels --data mnist --seed 0 --specs base confdis0.1 e10:20
    python benchmarks/ccn_variants.py --variant gauc --data mnist --seeds 0 1 --specs '{"name": "std", "prep": "std"}'
    python benchmarks/ccn_variants.py --variant transfer --data mnist --seed 0 --specs '{"name": "defaults"}'
    python benchmarks/ccn_variants.py --variant transfer --data mfeat-shift --seed 0 --specs '{"name": "defaults"}'
    python benchmarks/ccn_variants.py --variant links --data mnist --seed 2 [--save FOLDER]
    python benchmarks/ccn_variants.py --variant s3 --seeds 0 1 2 [--touching]
    python benchmarks/ccn_variants.py --variant relabel --data mfeat --seeds 0 1 2 --save FOLDER
    python benchmarks/ccn_variants.py --smoke

There is no canonical run: each stored result names its command. Every run uses one torch thread
and ``OMP_NUM_THREADS=1`` unless set. ``--smoke`` runs every variant on 150 digits per side at the
registry's smallest CCNCluster, then ``tables`` over their rows, writing under a temporary folder.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy and torch load their thread pools

import contextlib  # noqa: E402
import copy  # noqa: E402

import _common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.metrics import normalized_mutual_info_score as nmi  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from sktransfer_cluster.cluster.ccn import CCNCluster, pairs  # noqa: E402
from sktransfer_cluster.datasets import load_digits_transfer, load_mnist_transfer  # noqa: E402
from sktransfer_cluster.metrics import clustering_accuracy, n_dominant_clusters  # noqa: E402

VARIANTS = ("cost", "full", "remeasure", "tables", "gbn", "gdiag", "gnorm", "labels", "gauc", "transfer", "links", "s3",
            "relabel")


class Rows:
    """Prints each row as a JSON line (floats rounded), and appends it to ``path`` when given."""

    def __init__(self, path=None, digits=4):
        self.path, self.digits = path, digits
        if path:  # the command and machine first, as every results file has them (tables skips it)
            with open(path, "a") as f:
                f.write(json.dumps({"command": _common.command_line(), "machine": _common.machine()}) + "\n")

    def __call__(self, row):
        row = {k: (round(v, self.digits) if isinstance(v, float) else v) for k, v in row.items()}
        line = json.dumps(row)
        print(line, flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(line + "\n")


def load(data, seed=0):
    task = load_mnist_transfer() if data == "mnist" else load_digits_transfer()
    if _common.SMOKE:  # every class, 150 rows per side
        rng = np.random.default_rng(seed)
        for side in ("source", "target"):
            X, y = getattr(task, f"X_{side}"), getattr(task, f"y_{side}")
            idx = np.sort(rng.choice(X.shape[0], 150, replace=False))
            setattr(task, f"X_{side}", X[idx])
            setattr(task, f"y_{side}", y[idx])
    return task


def ccn(k, seed, **params):
    """CCNCluster through the registry (its smallest budget in a smoke run; ``params`` win).

    The stored variants measured ``G`` and ``f`` on the rows themselves with ``G``'s labels at
    0.5: they keep ``representation="input"`` and ``similarity_threshold=0.5`` (the defaults until
    2026-11-27) unless ``params`` say otherwise.
    """
    old = {"representation": "input", "similarity_threshold": 0.5}
    return _common.build("CCNCluster", k, device="cpu", random_state=seed,
                         **{**old, **_common.smoke_params("CCNCluster"), **params})


def ccn_defaults(k, seed, **params):
    """CCNCluster at today's defaults (the smallest budget in a smoke run; ``params`` win)."""
    return _common.build("CCNCluster", k, device="cpu", random_state=seed,
                         **{**_common.smoke_params("CCNCluster"), **params})


def default_clustering_epochs():
    return ccn(5, 0).clustering_epochs


def cost(args, out):
    t = load("digits")
    with _common.Timer() as km:
        _common.peer("KMeans", 5).fit(t.X_target)
    est = ccn(5, 0)
    with _common.Timer() as fit:
        est.fit(t.X_source, t.y_source)
    with _common.Timer() as tr:
        lab = est.transfer(t.X_target)
    out(dict(code=args.tag, acc=clustering_accuracy(t.y_target, lab), fit_cpu=round(fit.cpu, 1),
             transfer_cpu=round(tr.cpu, 1), kmeans_cpu=round(km.cpu, 2), threads=torch.get_num_threads()))


def full(args, out):
    task = load(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    shape = (28, 28) if args.data == "mnist" else (8, 8)
    settings = {"mlp": {}, "conv": {"image_shape": shape}}
    for K in (5, 20):
        with _common.Timer() as t:
            lab = _common.peer("KMeans", K, args.seed).fit_predict(Xt)
        out(dict(data=args.data, setting=f"KMeans({K})", seed=args.seed, acc=clustering_accuracy(yt, lab),
                 ndc=n_dominant_clusters(lab, n_clusters=K), cpu=t.cpu))
    for name in args.settings:
        est = ccn(5, args.seed, clustering_epochs=1, **settings[name])
        with _common.Timer() as g:
            est.fit(Xs, ys)
        est.set_params(clustering_epochs=default_clustering_epochs())
        for K, estimate in ((5, False), (20, True)):
            est.set_params(n_clusters=K, estimate_n_clusters=estimate)
            with _common.Timer() as t:
                lab = est.transfer(Xt)
            out(dict(data=args.data, setting=name, seed=args.seed, K=K, acc=clustering_accuracy(yt, lab),
                     n_clusters_=int(est.n_clusters_), k_error=abs(int(est.n_clusters_) - 5), cpu=t.cpu,
                     wall=t.wall, g_fit_cpu=g.cpu, threads=torch.get_num_threads(),
                     omp=os.environ.get("OMP_NUM_THREADS")))


def remeasure(args, out):
    task = load(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    common = dict(threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"))
    for K in (5, 20):
        with _common.Timer() as t:
            lab = _common.peer("KMeans", K, args.seed).fit_predict(Xt)
        out(dict(data=args.data, setting=f"KMeans({K})", seed=args.seed, K=K, acc=clustering_accuracy(yt, lab),
                 nmi=nmi(yt, lab), distinct=len(np.unique(lab)), ndc=n_dominant_clusters(lab, n_clusters=K),
                 cpu=t.cpu, **common))
    params = dict(args.params)
    est = ccn(5, args.seed, **{**params, "clustering_epochs": 1})
    with _common.Timer() as g:
        est.fit(Xs, ys)
    est.set_params(clustering_epochs=params.get("clustering_epochs", default_clustering_epochs()))
    for K in (5, 20):
        est.set_params(n_clusters=K, estimate_n_clusters=K > 5)
        with _common.Timer() as t:
            lab = est.transfer(Xt)
        r = dict(data=args.data, setting=args.setting, seed=args.seed, K=K, acc=clustering_accuracy(yt, lab),
                 nmi=nmi(yt, lab), distinct=len(np.unique(lab)), ndc=n_dominant_clusters(lab, n_clusters=K),
                 n_clusters_=int(est.n_clusters_), cpu=t.cpu, wall=t.wall, g_fit_cpu=g.cpu, **common)
        if K > 5:
            # The clustering network's outputs on the target (its logits, as predict sees them).
            with torch.no_grad():
                logits = est.clustering_net_(est._tensor(Xt)).cpu().numpy()
            sizes = np.bincount(lab, minlength=len(est.cluster_outputs_))
            dom = np.flatnonzero(sizes >= len(lab) / K)
            lab_d = dom[logits[:, est.cluster_outputs_[dom]].argmax(1)]
            r.update(acc_dom=clustering_accuracy(yt, lab_d), nmi_dom=nmi(yt, lab_d), distinct_dom=len(np.unique(lab_d)),
                     ndc_dom=n_dominant_clusters(lab_d, n_clusters=K), sizes=sorted(sizes.tolist(), reverse=True))
        out(r)


@contextlib.contextmanager
def replaced(module, **functions):
    """``module``'s functions replaced by ``functions`` for the block (the CCN estimator calls
    ``pairs.<name>`` at run time, so it sees the replacements)."""
    old = {name: getattr(module, name) for name in functions}
    for name, fn in functions.items():
        setattr(module, name, fn)
    try:
        yield
    finally:
        for name, fn in old.items():
            setattr(module, name, fn)


def similarity_network_bn(*args, **kwargs):
    """G with a BatchNorm1d after its backbone (h standardised per feature before the pair features)."""
    g = _ORIGINAL_SIMILARITY_NETWORK(*args, **kwargs)
    g.backbone = torch.nn.Sequential(g.backbone, torch.nn.BatchNorm1d(g.feature_dim))
    return g


_ORIGINAL_SIMILARITY_NETWORK = pairs.similarity_network


def g_networks(name):
    return replaced(pairs, similarity_network=similarity_network_bn) if name == "gbn" else contextlib.nullcontext()


class PairSample:
    """All pairs of (at most) 1,000 fixed target rows and whether each pair shares a class."""

    def __init__(self, yt, n=1000):
        m = min(n, yt.shape[0])
        self.sub = np.random.default_rng(123).choice(yt.shape[0], size=m, replace=False)
        self.iu = np.triu_indices(m, 1)
        self.same = (yt[self.sub][:, None] == yt[self.sub][None, :])[self.iu]

    def probabilities(self, g, T):
        return np.asarray(pairs.pair_probabilities(g, T[torch.as_tensor(self.sub)]))[self.iu]

    def quality(self, P):
        call = P > 0.5
        return dict(auc=roc_auc_score(self.same, P),
                    prec=float(self.same[call].mean()) if call.any() else float("nan"),
                    rec=float(call[self.same].mean()), called=float(call.mean()))


def target_g(est, T):
    """A copy of the fitted G with batch norm re-estimated on the target rows ``T`` (as transfer does)."""
    g = copy.deepcopy(est.similarity_net_)
    pairs.reestimate_batchnorm(g, [T[i:i + 100] for i in range(0, T.shape[0], 100)])
    return g


def gbn(args, out):
    task = load(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    sample = PairSample(yt)
    with _common.Timer() as t:
        lab = _common.peer("KMeans", 5, args.seed).fit_predict(Xt)
    out(dict(data=args.data, setting="KMeans(5)", seed=args.seed, K=5, acc=clustering_accuracy(yt, lab),
             nmi=nmi(yt, lab), cpu=t.cpu, threads=torch.get_num_threads()))
    for spec in args.specs or ["default", "gbn"]:
        name, *opts = spec.split(",")
        kw = {k: float(x) for k, x in (o.split("=") for o in opts)}
        with g_networks(name):
            est = ccn(5, args.seed, clustering_epochs=1, **kw)
            with _common.Timer() as g:
                est.fit(Xs, ys)
            est.set_params(clustering_epochs=default_clustering_epochs())
            for K in (5, 20):
                est.set_params(n_clusters=K, estimate_n_clusters=K > 5)
                with _common.Timer() as t:
                    lab = est.transfer(Xt)
                r = dict(data=args.data, setting=spec, seed=args.seed, K=K, acc=clustering_accuracy(yt, lab),
                         nmi=nmi(yt, lab), n_clusters_=int(est.n_clusters_), cpu=t.cpu, g_fit_cpu=g.cpu)
                if K == 5:
                    r.update(sample.quality(sample.probabilities(est.target_similarity_net_, est._tensor(Xt))))
                out(r)


def gdiag(args, out):
    task = load(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    sample = PairSample(yt)
    for name in ("default", "gbn"):
        with g_networks(name):
            est = ccn(5, args.seed, clustering_epochs=1).fit(Xs, ys)
        T = est._tensor(Xt)
        for bn in ("source", "target"):
            g = target_g(est, T) if bn == "target" else copy.deepcopy(est.similarity_net_)
            P = sample.probabilities(g, T)
            top = P >= np.quantile(P, 0.95)
            out(dict(data=args.data, seed=args.seed, variant=name, bn=bn, **sample.quality(P),
                     prec_top5=float(sample.same[top].mean()), threads=torch.get_num_threads()))


class _RawCCN(CCNCluster):
    """CCNCluster without the affine input normalisation."""

    _input_normalization = None


def gnorm(args, out):
    task = load(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    sample = PairSample(yt)
    for mode, cls in (("affine", CCNCluster), ("none", _RawCCN)):
        with _common.Timer() as t:
            params = ccn(5, args.seed, clustering_epochs=1).get_params()
            est = cls(**params).fit(Xs, ys)
            P = sample.probabilities(target_g(est, est._tensor(Xt)), est._tensor(Xt))
        q = sample.quality(P)
        out(dict(data=args.data, seed=args.seed, mode=mode, auc=q["auc"], precision=q["prec"], recall=q["rec"],
                 called=q["called"], cpu=t.cpu))


def labels(args, out):
    task = load(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    threshold = {}

    def soft_labels(g, xb, second_order_threshold=None, features=None, threshold=0.5):
        logits = g(xb) if features is None else g.pair_logits(features)
        return logits.softmax(-1)[..., 1]

    def confident_agree(p, knn, idx, xb=None):  # agree_with_neighbors' signature (xb: radius neighbourhoods)
        nb = pairs.neighbor_pairs(knn, idx) if torch.is_tensor(knn) else knn.pairs(idx, xb)
        sim = ((p > 0.5) & nb).to(p.dtype)
        known = ((p > 0.5) & nb) | ((p < threshold["t"]) & ~nb)
        return sim, known

    est = ccn(5, args.seed, clustering_epochs=1)
    with _common.Timer() as g:
        est.fit(Xs, ys)
    for spec in args.specs or ["base"]:
        name, _, only = spec.partition(":")
        ks = [int(only)] if only else [5, 20]
        confdis = name.startswith("confdis")
        if confdis:
            threshold["t"] = float(name[len("confdis"):])

        def swap():  # the pair labels of this spec, for each transfer
            if confdis:
                return replaced(pairs, similarity_labels=soft_labels, agree_with_neighbors=confident_agree)
            return contextlib.nullcontext()

        epochs = int(name[1:]) if name[0] == "e" and name[1:].isdigit() else default_clustering_epochs()
        for K in ks:
            est.set_params(n_clusters=K, estimate_n_clusters=K > 5, clustering_epochs=epochs)
            with swap(), _common.Timer() as t:
                lab = est.transfer(Xt)
            out(dict(data=args.data, setting=name, seed=args.seed, K=K, acc=clustering_accuracy(yt, lab),
                     nmi=nmi(yt, lab), distinct=len(np.unique(lab)), ndc=n_dominant_clusters(lab, n_clusters=K),
                     cpu=t.cpu, g_fit_cpu=g.cpu))


def _prepared(prep, Xs, Xt):
    if prep == "std":  # per-feature z-score, each domain with its own statistics
        return (Xs - Xs.mean(0)) / (Xs.std(0) + 1e-3), (Xt - Xt.mean(0)) / (Xt.std(0) + 1e-3)
    if prep == "std_src":
        m, sd = Xs.mean(0), Xs.std(0) + 1e-3
        return (Xs - m) / sd, (Xt - m) / sd
    if prep == "l2":
        return Xs / np.linalg.norm(Xs, axis=1, keepdims=True), Xt / np.linalg.norm(Xt, axis=1, keepdims=True)
    return Xs, Xt


def gauc(args, out):
    from sktransfer_cluster.datasets import dihedral_classes

    shape = (28, 28) if args.data == "mnist" else (8, 8)
    specs = [json.loads(v) for v in args.specs] if args.specs else [{"name": "defaults"}]
    for v in specs:
        for seed in args.seeds:
            task = load(args.data, seed)
            ys, yt = task.y_source, task.y_target
            xs, xt = _prepared(v.get("prep"), task.X_source.astype(np.float32), task.X_target.astype(np.float32))
            xs_fit, ys_fit = dihedral_classes(xs, ys, shape) if v.get("dihedral") else (xs, ys)
            params = {"n_similarity_nets": 1, **v.get("params", {})}
            if "conv" in v:
                params.update(image_shape=tuple(v.get("shape", shape)), conv_channels=tuple(v["conv"]))
            est = ccn(5, seed, clustering_epochs=1, **params)
            with _common.Timer() as t:
                est.fit(np.asarray(xs_fit, dtype=np.float32), ys_fit)
            target = PairSample(yt)
            q = target.quality(target.probabilities(target_g(est, est._tensor(xt)), est._tensor(xt)))
            # The source's pairs too (the generalisation gap), G as fitted.
            subs = np.random.default_rng(7).choice(xs.shape[0], size=min(600, xs.shape[0]), replace=False)
            ius = np.triu_indices(len(subs), 1)
            Ps = np.asarray(pairs.pair_probabilities(copy.deepcopy(est.similarity_net_), est._tensor(xs[subs])))[ius]
            sames = (ys[subs][:, None] == ys[subs][None, :])[ius]
            out(dict(data=args.data, name=v["name"], seed=seed, auc=q["auc"], src_auc=roc_auc_score(sames, Ps),
                     prec=q["prec"], rec=q["rec"], frac_sim=q["called"], g_cpu=t.cpu, g_wall=t.wall))


# ----------------------------------------------------------------------------- transfer (issue 29)
def shifted_task(data, seed=0):
    """Same classes on both sides, the target blurred and noised: the domain-shift check of issue 29.

    MNIST-5k (digits: scikit-learn's 1,797) split in two stratified halves: the source half
    clean and labelled, the target half blurred by a Gaussian of 1 pixel (digits 0.5 of 8) and
    noised with Gaussian noise of 0.2 of the pixel range, clipped to it; K = 10.
    """
    from scipy.ndimage import gaussian_filter
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from sktransfer_cluster.datasets import TransferTask, load_mnist_5k

    if data == "mnist":
        X, y = load_mnist_5k()
        side, top, blur = 28, 1.0, 1.0
    else:
        X, y = load_digits(return_X_y=True)
        side, top, blur = 8, 16.0, 0.5
    Xs, Xt, ys, yt = train_test_split(X, y, test_size=0.5, stratify=y, random_state=0)
    rng = np.random.default_rng(0)
    Xt = gaussian_filter(Xt.reshape(-1, side, side), sigma=(0, blur, blur)).reshape(Xt.shape[0], -1)
    Xt = np.clip(Xt + rng.normal(scale=0.2 * top, size=Xt.shape), 0.0, top)
    task = TransferTask(Xs, ys, Xt, yt, name=f"{data}-shift")
    if _common.SMOKE:
        task = _common.shrink_task(task, seed)
    return task


def mfeat_task(data, seed=0):
    """UCI mfeat-pix (:func:`_common.second_images`, 2,000 digits of 16 x 15 pixels, a set nobody
    here tuned for): ``mfeat`` classes 0-4 -> 5-9 (K = 5); ``mfeat-shift`` every class split in two
    stratified halves, the second blurred and noised by :func:`_common.domain_shift` (1 pixel, 0.1:
    the shift of ``heldout_images.py``), K = 10."""
    from sklearn.model_selection import train_test_split

    from sktransfer_cluster.datasets import TransferTask

    X, y, shape, _ = _common.second_images("mfeat-pix")
    if data == "mfeat":
        first = y < 5
        task = TransferTask(X[first], y[first], X[~first], y[~first], name="mfeat")
    else:
        Xs, Xt, ys, yt = train_test_split(X, y, test_size=0.5, stratify=y, random_state=0)
        task = TransferTask(Xs, ys, _common.domain_shift(Xt, shape, 0, blur=1.0, noise=0.1), yt, name="mfeat-shift")
    if _common.SMOKE:
        task = _common.shrink_task(task, seed)
    return task


def transfer_task(data, seed=0):
    """``mnist``/``digits`` (0-4 -> 5-9), ``mnist-shift``/``digits-shift`` (:func:`shifted_task`),
    ``mfeat``/``mfeat-shift`` (:func:`mfeat_task`)."""
    if data.startswith("mfeat"):
        return mfeat_task(data, seed)
    if data.endswith("-shift"):
        return shifted_task(data.split("-")[0], seed)
    return load(data, seed)


def _hdbscan_peer(X, seed):
    """UMAP(10) + scikit-learn's HDBSCAN(min_cluster_size=n // 20, min_samples=10): issue 29's K-unknown peer."""
    from sklearn.cluster import HDBSCAN
    from umap import UMAP

    n = X.shape[0]
    Z = UMAP(n_components=min(10, n - 2), n_neighbors=min(15, n - 1), min_dist=0.0, random_state=seed,
             n_jobs=1).fit_transform(X)
    return HDBSCAN(min_cluster_size=max(2, n // 20), min_samples=min(10, n - 1)).fit_predict(Z)


def pair_quality(est, X, y, n_rows=1000):
    """``G``'s target pairs (the target-adapted ``G`` of the last transfer) on ``n_rows`` fixed rows.

    ``g_*``: ``G`` alone at p > 0.5 (AUC, precision and recall of "similar"); ``gt_*``: at the
    threshold the transfer used (``similarity_threshold_``); ``lab_*``: the labels ``f`` is
    trained on (``G`` at that threshold and the ``similar_neighbors_`` nearest codes agree:
    similar where both say so, dissimilar where neither and ``G`` is below
    ``dissimilar_threshold_``, else unknown): precision and recall of similar, share unknown,
    precision of dissimilar.
    """
    from sktransfer_cluster.nn import knn_indices

    sub = np.sort(np.random.default_rng(123).choice(X.shape[0], size=min(n_rows, X.shape[0]), replace=False))
    P = est.pairwise_similarity(X[sub])
    same = y[sub][:, None] == y[sub][None, :]
    off = ~np.eye(sub.shape[0], dtype=bool)
    S = P > 0.5
    r = dict(g_auc=float(roc_auc_score(same[off], P[off])),
             g_precision=float((S & same & off).sum() / max((S & off).sum(), 1)),
             g_recall=float((S & same & off).sum() / (same & off).sum()),
             g_called=float((S & off).sum() / off.sum()))
    t = getattr(est, "similarity_threshold_", 0.5)  # before 2026-11-27: 0.5
    St = P > t
    r.update(threshold=t, gt_precision=float((St & same & off).sum() / max((St & off).sum(), 1)),
             gt_recall=float((St & same & off).sum() / (same & off).sum()), gt_called=float((St & off).sum() / off.sum()))
    S = St  # the labels below as f is trained on them: at the threshold used
    k = est.similar_neighbors_
    if k is not None:
        codes = est._codes(est._tensor(X)) if hasattr(est, "_codes") else est._tensor(X)  # before 2026-11-27
        nb = pairs.neighbor_pairs(knn_indices(codes, k), torch.as_tensor(sub)).numpy()
        t_dis = getattr(est, "dissimilar_threshold_", None)
        sure = np.ones_like(S) if t_dis is None else (P < t_dis)
        sim, dis = S & nb & off, ~S & ~nb & sure & off
        r.update(lab_sim_precision=float((sim & same).sum() / max(sim.sum(), 1)),
                 lab_sim_recall=float((sim & same).sum() / (same & off).sum()),
                 lab_unknown=float(1 - (sim.sum() + dis.sum()) / off.sum()),
                 lab_dis_precision=float((dis & ~same).sum() / max(dis.sum(), 1)))
    return r


def transfer(args, out):
    """Peers on the target, then per ``--specs`` entry ``{"name", "params"}`` one CCN fit and transfers.

    K given (``n_clusters`` = the target's classes) and, unless ``--no-bound``, K at most 20
    (``estimate_n_clusters=True``) by a second fit of the same seed; each row has the fit and the
    transfer CPU seconds, ACC, NMI and the clusters found; the K-given row has ``G``'s target pairs.
    """
    from sktransfer_cluster.compare import umap_gmm

    task = transfer_task(args.data, args.seed)
    Xs, ys, Xt, yt = task.X_source, task.y_source, task.X_target, task.y_target
    K = len(np.unique(yt))
    base = dict(data=args.data, seed=args.seed, threads=torch.get_num_threads())
    if not args.no_peers:
        with _common.Timer() as t:
            lab = umap_gmm(Xt, K, random_state=args.seed)
        out(dict(base, setting="peer UMAP(10)+GMM", K=K, acc=clustering_accuracy(yt, lab), nmi=nmi(yt, lab),
                 n_clusters_=len(np.unique(lab)), cpu=t.cpu))
        if not args.no_bound:
            with _common.Timer() as t:
                lab = _hdbscan_peer(Xt, args.seed)
            out(dict(base, setting="peer UMAP(10)+HDBSCAN", K=20, acc=clustering_accuracy(yt, lab),
                     nmi=nmi(yt, lab), n_clusters_=len(np.unique(lab[lab >= 0])), noise=float((lab < 0).mean()),
                     cpu=t.cpu))
    for spec in args.specs:
        spec = json.loads(spec)
        bounds = (True,) if args.bound_only else (False,) if args.no_bound else (False, True)
        for bound in bounds:
            k = 20 if bound else K
            est = ccn_defaults(k, args.seed, estimate_n_clusters=bound, **spec.get("params", {}))
            with _common.Timer() as f:
                est.fit(Xs, ys)
            with _common.Timer() as t:
                lab = est.transfer(Xt)
            r = dict(base, setting=spec["name"], K=k, acc=clustering_accuracy(yt, lab), nmi=nmi(yt, lab),
                     n_clusters_=int(est.n_clusters_), ndc=int(est.n_dominant_clusters_),
                     fit_cpu=f.cpu, cpu=t.cpu, total_cpu=f.cpu + t.cpu)
            if not bound:
                r.update(pair_quality(est, Xt, yt))
            out(r)
            if args.save:  # the fitted estimator, for diagnoses of its labelling (--variant links)
                import joblib

                os.makedirs(args.save, exist_ok=True)
                joblib.dump(est, os.path.join(args.save, f"{args.data}_{spec['name']}_K{k}_seed{args.seed}.joblib"))


def single_linked_outputs(similar, outputs, n_outputs, link=0.1, min_rows=5):
    """The join rule of 67ecebf (before average linkage): every pair of outputs that passes the
    test is joined, transitively (single linkage), the shares those of the outputs alone."""
    import math

    similar, outputs = np.asarray(similar, dtype=bool), np.asarray(outputs)
    root = np.arange(n_outputs)

    def find(a):
        while root[a] != a:
            a = root[a]
        return a

    used = [o for o in np.unique(outputs) if (outputs == o).sum() >= min_rows]
    rows = {o: np.flatnonzero(outputs == o) for o in used}
    within = {}
    for o in used:
        block = similar[np.ix_(rows[o], rows[o])]
        within[o] = (block.sum() - np.trace(block)) / (block.size - block.shape[0])
    cross = {(a, b): similar[np.ix_(rows[a], rows[b])].mean() for i, a in enumerate(used) for b in used[i + 1:]}
    floor = 3.0 * float(np.median(list(cross.values()))) if cross else 0.0
    for (a, b), rate in cross.items():
        if rate > link * math.sqrt(within[a] * within[b]) and rate > floor:
            ra, rb = find(a), find(b)
            root[max(ra, rb)] = min(ra, rb)
    return np.array([find(o) for o in range(n_outputs)], dtype=np.int64)


def links(args, out):
    """How ``estimate_n_clusters`` labelled the target: ``CCNCluster(20, estimate_n_clusters=True)``
    fitted and transferred at the defaults (or loaded from ``--save`` where that run stored it),
    then per output of ``f`` its rows and true classes, ``G``'s share of similar calls within and
    between outputs (the link rule's input), and the labels under the current join rule
    (average linkage) and under :func:`single_linked_outputs`."""
    from sktransfer_cluster.cluster.ccn import estimator as ccn_estimator

    task = transfer_task(args.data, args.seed)
    Xt, yt = task.X_target, task.y_target
    path = os.path.join(args.save or "", f"{args.data}_defaults_K20_seed{args.seed}.joblib")
    if args.save and os.path.exists(path):
        import joblib

        est = joblib.load(path)
    else:
        est = ccn_defaults(20, args.seed, estimate_n_clusters=True).fit(task.X_source, task.y_source)
        est.transfer(Xt)
    Z = est._codes(est._tensor(Xt))
    outputs = est._inference_net(Z).detach().cpu().numpy().argmax(1)
    n = outputs.shape[0]
    sub = np.unique(np.linspace(0, n - 1, min(n, ccn_estimator._LINK_ROWS)).astype(np.int64))
    similar = pairs.pair_probabilities(est._current_g(), Z[sub]) > getattr(est, "link_threshold_", est.similarity_threshold_)
    o = outputs[sub]
    used = [a for a in np.unique(o) if (o == a).sum() >= 5]
    share = [[float(similar[np.ix_(o == a, o == b)].mean()) for b in used] for a in used]
    for a in used:  # within: the diagonal left out
        m = int((o == a).sum())
        blk = similar[np.ix_(o == a, o == a)]
        share[used.index(a)][used.index(a)] = float((blk.sum() - np.trace(blk)) / max(m * (m - 1), 1))
    classes = {int(a): {int(c): int(v) for c, v in zip(*np.unique(yt[outputs == a], return_counts=True))}
               for a in np.unique(outputs)}
    row = dict(data=args.data, seed=args.seed, threshold=est.similarity_threshold_, outputs=[int(a) for a in used],
               classes=classes, share=[[round(v, 3) for v in r] for r in share])
    for rule, fn in (("average", pairs.linked_outputs), ("single", single_linked_outputs)):
        with replaced(pairs, linked_outputs=fn):
            lab = est._assign(est.clustering_net_, Z)
        row[rule] = dict(acc=clustering_accuracy(yt, lab), n_clusters_=int(est.n_clusters_),
                         groups=fn(similar, o, est.n_clusters)[used].tolist())
    out(row)


def thresholds_of_today(est, Z):
    """Recompute ``est``'s thresholds on the target codes ``Z`` with today's rule (``link_threshold_``
    included), for an estimator saved by an earlier ``transfer --save``: the same ``G`` and draw."""
    from sktransfer_cluster.base import chunked
    from sktransfer_cluster.nn import knn_indices

    g = est._current_g()
    knn = None if est.similar_neighbors_ is None else knn_indices(Z, est.similar_neighbors_)
    with torch.no_grad():
        feats = chunked(g.backbone, Z)
        est.similarity_threshold_, est.dissimilar_threshold_, est.link_threshold_ = est._threshold(g, Z, feats, knn, None)


def relabel(args, out):
    """K unknown under today's labelling rule, on the estimators that ``transfer --bound-only --save``
    stored (``--save``; ``--data``, ``--seeds``): their thresholds recomputed, ``_assign`` rerun (the
    training is untouched by the rule, so the labels are those a transfer of today would give from
    the same fit); ACC, NMI, clusters found, and ``G``'s precision and recall on the unseen pairs of
    1,000 fixed target rows at the training threshold (``t_*``) and at the link threshold
    (``link_*``), with the outputs' sizes and majority classes."""
    import joblib

    for seed in args.seeds:
        task = transfer_task(args.data, seed)
        Xt, yt = task.X_target, task.y_target
        est = joblib.load(os.path.join(args.save, f"{args.data}_defaults_K20_seed{seed}.joblib"))
        Z = est._codes(est._tensor(Xt))
        thresholds_of_today(est, Z)
        lab = est._assign(est.clustering_net_, Z)
        sub = np.sort(np.random.default_rng(123).choice(Xt.shape[0], size=min(1000, Xt.shape[0]), replace=False))
        P = np.asarray(pairs.pair_probabilities(est._current_g(), Z[sub]))
        same = yt[sub][:, None] == yt[sub][None, :]
        off = ~np.eye(sub.shape[0], dtype=bool)
        row = dict(data=args.data, seed=seed, setting="defaults, relabelled", K=20, acc=clustering_accuracy(yt, lab),
                   nmi=nmi(yt, lab), n_clusters_=int(est.n_clusters_), ndc=int(est.n_dominant_clusters_),
                   g_auc=float(roc_auc_score(same[off], P[off])))
        for name, t in (("t", est.similarity_threshold_), ("link", est.link_threshold_)):
            S = (P > t) & off
            row.update({name: float(t), f"{name}_precision": float((S & same).sum() / max(S.sum(), 1)),
                        f"{name}_recall": float((S & same).sum() / (same & off).sum()), f"{name}_called": float(S.mean())})
        outputs = est._inference_net(Z).detach().cpu().numpy().argmax(1)
        row["outputs"] = {int(a): [int((outputs == a).sum()), int(np.bincount(yt[outputs == a]).argmax())]
                          for a in np.unique(outputs)}
        row["labels"] = {int(c): [int((lab == c).sum()), int(np.bincount(yt[lab == c]).argmax())] for c in np.unique(lab)}
        out(row)


def s3(args, out):
    """Issue 30 S3: ``CCNCluster(bound, estimate_n_clusters=True)`` fitted on labelled
    ``make_blobs(300, centers=3, cluster_std=0.5, random_state=0)`` and transferred to the same rows,
    for bounds 3 and 4 and seeds ``--seeds``: clusters found and ACC of fit and transfer. ``--touching``
    adds ``make_blobs(100, centers=3, random_state=0)`` (std 1: two blobs touch, KMeans 0.90)."""
    from sklearn.datasets import make_blobs

    sets = {"make_blobs(300, centers=3, cluster_std=0.5, random_state=0)": dict(n_samples=300, cluster_std=0.5)}
    if args.touching:
        sets["make_blobs(100, centers=3, random_state=0)"] = dict(n_samples=100, cluster_std=1.0)
    for name, kw in sets.items():
        X, y = make_blobs(centers=3, random_state=0, **kw)
        for bound in (3, 4):
            for seed in args.seeds:
                est = ccn_defaults(bound, seed, estimate_n_clusters=True).fit(X, y)
                fit = (int(est.n_clusters_), clustering_accuracy(y, est.labels_))
                lab = est.transfer(X)
                out(dict(data=name, bound=bound, seed=seed, fit_n_clusters_=fit[0], fit_acc=fit[1],
                         transfer_n_clusters_=int(est.n_clusters_), transfer_acc=clustering_accuracy(y, lab),
                         link_threshold=getattr(est, "link_threshold_", None)))


def transfer_tables(rows):
    """Markdown rows of ``transfer`` results: per data set, setting and K, the median [min, max]
    over seeds of ACC, the clusters found per seed, CPU seconds of fit + transfer, and ``G``'s
    target pairs. A later row of the same (data, setting, K, seed) replaces an earlier one."""
    last = {}
    for r in rows:
        last[(r["data"], r["setting"], r["K"], r["seed"])] = r
    groups = collections.defaultdict(list)
    for (d, st, K, _), r in last.items():
        groups[(d, st, K)].append(r)

    def spread(v, fmt="{:.3f}"):
        return f"{fmt.format(np.median(v))} [{fmt.format(min(v))}, {fmt.format(max(v))}]" if v else "-"

    lines = ["| data | setting | K | ACC median [min, max] | ACC per seed | NMI median | clusters per seed "
             "| CPU s (fit + transfer) median | G at 0.5: AUC / precision / recall | seeds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (d, st, K), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rs.sort(key=lambda r: r["seed"])
        cpu = [c for c in (r.get("total_cpu", r.get("cpu")) for r in rs) if c is not None]  # relabel: none
        g = ""
        if "g_precision" in rs[0]:
            g = " / ".join(spread([r[k] for r in rs]).split(" [")[0] for k in ("g_auc", "g_precision", "g_recall"))
        lines.append(
            f"| {d} | {st} | {K} | {spread([r['acc'] for r in rs])} | "
            + " / ".join(f"{r['acc']:.3f}" for r in rs)
            + f" | {spread([r['nmi'] for r in rs]).split(' [')[0]} | "
            + " / ".join(str(r["n_clusters_"]) for r in rs)
            + f" | {spread(cpu, '{:.1f}').split(' [')[0]} | {g} | "
            + " ".join(str(r["seed"]) for r in rs) + " |")
    return lines


def tables(files):
    rows = []
    for name in files:
        with open(name) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if "command" not in r]
    # transfer's rows (and the peers beside them) have their own table.
    mine = [r for r in rows if "total_cpu" in r or str(r.get("setting", "")).startswith(("peer ", "defaults, relabelled"))]
    rows = [r for r in rows if r not in mine]
    lines = transfer_tables(mine) if mine else []
    groups = collections.defaultdict(list)
    for r in rows:
        if "data" in r and "K" in r:
            groups[(r["data"], r["setting"], r["K"])].append(r)

    def spread(v, fmt="{:.3f}"):
        v = [x for x in v if x is not None]
        return f"{fmt.format(np.median(v))} [{fmt.format(min(v))}, {fmt.format(max(v))}]" if v else "-"

    for (d, st, K), rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rs.sort(key=lambda r: r["seed"])
        line = f"| {d} | {st} | {K} | {spread([r['acc'] for r in rs])} | " + " / ".join(f"{r['acc']:.3f}" for r in rs)
        line += (f" | {spread([r.get('nmi') for r in rs])} | " + " / ".join(str(r.get("ndc")) for r in rs) + " | "
                 + " / ".join(str(r.get("distinct")) for r in rs))
        if all("acc_dom" in r for r in rs):
            line += (f" | {spread([r['acc_dom'] for r in rs])} | " + " / ".join(f"{r['acc_dom']:.3f}" for r in rs)
                     + f" | {spread([r['nmi_dom'] for r in rs])}")
        else:
            line += " | | |"
        line += f" | {spread([r['cpu'] for r in rs], '{:.1f}')} | {len(rs)} |"
        lines.append(line)
    print("\n".join(lines))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", choices=VARIANTS)
    ap.add_argument("files", nargs="*", help="tables: the .jsonl files to summarise")
    ap.add_argument("--data", choices=["digits", "mnist", "digits-shift", "mnist-shift", "mfeat", "mfeat-shift"],
                    default="digits", help="the -shift and mfeat sets only for transfer")
    ap.add_argument("--no-peers", action="store_true", help="transfer: skip the UMAP peers")
    ap.add_argument("--no-bound", action="store_true", help="transfer: K given only")
    ap.add_argument("--bound-only", action="store_true", help="transfer: K at most 20 only")
    ap.add_argument("--save", default=None, help="transfer: pickle each fitted estimator into this folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", nargs="+", choices=["mlp", "conv"], default=["mlp", "conv"], help="full")
    ap.add_argument("--params", type=json.loads, default={}, help="remeasure: CCNCluster parameters (JSON)")
    ap.add_argument("--setting", default="defaults", help="remeasure: the rows' setting name")
    ap.add_argument("--tag", default="", help="cost: a label for the row")
    ap.add_argument("--specs", nargs="+", default=None, help="gbn, labels, gauc: the variants to run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="gauc")
    ap.add_argument("--out", default=None, help="also append the JSON lines to this file")
    ap.add_argument("--touching", action="store_true", help="s3: also the touching blobs (100 rows, std 1)")
    _common.add_smoke_argument(ap)
    args = _common.setup(ap.parse_args(argv))
    torch.set_num_threads(1)
    if args.smoke:
        path = _common.RESULTS / "ccn" / "variants" / "ccn_variants_smoke.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        out = Rows(str(path))
        args.tag = "smoke"
        for fn in (cost, full, remeasure, gbn, gdiag, gnorm):
            fn(args, out)
        args.specs = ['{"name": "l2", "prep": "l2"}', '{"name": "conv", "conv": [4]}']
        gauc(args, out)
        args.specs = ["base", "confdis0.1:20", "e2:5"]
        labels(args, out)
        import tempfile

        args.specs, args.no_peers, args.no_bound = ['{"name": "defaults"}'], True, False
        with tempfile.TemporaryDirectory() as args.save:
            for args.data in ("digits", "digits-shift"):
                transfer(args, out)
            args.data, args.seeds = "digits", [args.seed]
            links(args, out)
            relabel(args, out)
        s3(args, out)
        tables([path])
        print(f"wrote {path}", flush=True)
        return
    if args.variant is None:
        ap.error("--variant is required (or --smoke)")
    if args.variant == "tables":
        if not args.files:
            ap.error("tables needs .jsonl files")
        tables(args.files)
        return
    fns = {"cost": cost, "full": full, "remeasure": remeasure, "gbn": gbn, "gdiag": gdiag, "gnorm": gnorm,
           "labels": labels, "gauc": gauc, "transfer": transfer, "links": links, "s3": s3, "relabel": relabel}
    fns[args.variant](args, Rows(args.out))


if __name__ == "__main__":
    sys.exit(main())
