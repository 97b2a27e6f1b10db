"""CCNCluster quality on the digits cross-task split, beside KMeans measured in the same run.

G is learned on digits 0-4; the clustering network is trained on digits 5-9 with
K known (``n_clusters=5``) and unknown (``n_clusters=20, estimate_n_clusters=True``:
an upper bound, whose "auto" parameters resolve accordingly). Reports ACC / NMI, the K error
|NDC - 5|, G's pair precision/recall on the target, and time per clustering epoch
against the batch size (each batch holds b^2 pairs).

    python benchmarks/ccn_quality.py [--quick | --smoke] [--seeds 0 1 2 3 4 5 6 7] [--threads 1]
        [--params '{"n_similarity_nets": 5}'] [--name ens5] [--ccn-plus] [--no-timing]
        [--source-dihedral]

Canonical run: ``python benchmarks/ccn_quality.py --no-timing``.

The defaults (seeds 0-7, CCNCluster's own defaults for every parameter the script does
not set per run: n_clusters, estimate_n_clusters, device, random_state) write the canonical
benchmarks/results/ccn/ccn_quality.{json,md}; any other ``--name`` (required with
``--params``, ``--source-dihedral`` or other seeds) and every ``--quick`` run write into
benchmarks/results/ccn/variants/; ``--smoke`` (seed 0, the registry's smallest CCNCluster
under any ``--params``, one batch size, CCN+ included) writes under a temporary folder.
``--params`` sets CCNCluster parameters (JSON; values equal to the estimator's defaults
are not a variant); G's pair statistics are those of
``pairwise_similarity`` (G's probabilities binarised at 0.5, before any
``second_order_threshold`` relabelling). ``--source-dihedral`` learns G on
the source's 8 rotations/reflections, each a class of its own
(``datasets.dihedral_classes``: 40 classes instead of 5); CCN+ keeps the plain
source.
"""

from __future__ import annotations

import argparse
import json
import time

import _common
import numpy as np
import torch
from _common import CANONICAL, add_name_argument, write
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score, roc_auc_score

from sktransfer_cluster.cluster.ccn import CCNCluster
from sktransfer_cluster.datasets import dihedral_classes, load_digits_transfer
from sktransfer_cluster.metrics import clustering_accuracy, n_dominant_clusters

# Parameters the script sets for every run itself; --params may not set them.
_PER_RUN = ("n_clusters", "estimate_n_clusters", "device", "random_state")


def _departures(params):
    """The entries of ``params`` that differ from CCNCluster's defaults (lists compare as tuples)."""
    defaults = CCNCluster().get_params()
    return {k: v for k, v in params.items() if json.dumps(v) != json.dumps(defaults[k])}


def _pair_stats(P, y):
    S = P > 0.5
    same = y[:, None] == y[None, :]
    off = ~np.eye(y.shape[0], dtype=bool)
    tp = (S & same).sum()
    return {
        # Threshold-free quality of G's probabilities (self-pairs left out).
        "roc_auc": float(roc_auc_score(same[off], P[off])),
        "similar_precision": float(tp / max(S.sum(), 1)),
        "similar_recall": float(tp / same.sum()),
        "dissimilar_precision": float((~S & ~same).sum() / max((~S).sum(), 1)),
        "dissimilar_recall": float((~S & ~same).sum() / (~same).sum()),
    }


def _task():
    """Digits 0-4 -> 5-9 (a smoke run: 200 random rows per side)."""
    task = load_digits_transfer()
    if _common.SMOKE:
        rng = np.random.default_rng(0)
        s, t = (np.sort(rng.choice(n, 200, replace=False)) for n in (task.X_source.shape[0], task.X_target.shape[0]))
        task.X_source, task.y_source, task.X_target, task.y_target = (
            task.X_source[s], task.y_source[s], task.X_target[t], task.y_target[t])
    return task


def _source(task, dihedral):
    if dihedral:
        return dihedral_classes(task.X_source, task.y_source, (8, 8))
    return task.X_source, task.y_source


def _quality(seed, params, ccn_plus=False, dihedral=False):
    task = _task()
    Xt, yt = task.X_target, task.y_target
    rows = []
    t0 = time.perf_counter()
    # fit's own f (on the source) is not measured here: one start of it is enough; the
    # transfers then use the estimator's own n_init unless --params sets it.
    est = CCNCluster(n_clusters=5, device="cpu", random_state=seed, **{**params, "n_init": 1})
    est.fit(*_source(task, dihedral)).set_params(**{"n_init": CCNCluster().n_init, **params})
    fit_s = time.perf_counter() - t0
    pair = None
    runs = [(K, False) for K in (5, 20)] + ([(K, True) for K in (5, 20)] if ccn_plus else [])
    for K, plus in runs:
        # K=20 is an upper bound: the number of clusters is estimated (n_clusters_, its labels).
        est.set_params(n_clusters=K, estimate_n_clusters=K != 5)
        t0 = time.perf_counter()
        # CCN+: labelled source rows (cross-entropy) in every target batch.
        labels = est.transfer(Xt, source=(task.X_source, task.y_source) if plus else None)
        elapsed = time.perf_counter() - t0
        if pair is None:  # G (BN adapted to the target) is the same for both K
            pair = _pair_stats(est.pairwise_similarity(Xt), yt)
        rows.append(
            {
                "method": f"{'CCN+' if plus else 'CCN'} (K={K})",
                "seed": seed,
                "acc": clustering_accuracy(yt, labels),
                "nmi": normalized_mutual_info_score(yt, labels),
                "ndc": est.n_dominant_clusters_,  # the paper's count of dominant outputs
                "n_clusters": est.n_clusters_,  # distinct labels (= ndc under an upper bound)
                "k_error": abs(est.n_clusters_ - 5),
                "seconds": elapsed,
                "fit_seconds": fit_s,
            }
        )
    for K in (5, 20):
        t0 = time.perf_counter()
        labels = KMeans(K, n_init=10, random_state=seed).fit_predict(Xt)
        elapsed = time.perf_counter() - t0
        ndc = n_dominant_clusters(labels, n_clusters=K)
        rows.append(
            {
                "method": f"KMeans({K})",
                "seed": seed,
                "acc": clustering_accuracy(yt, labels),
                "nmi": normalized_mutual_info_score(yt, labels),
                "ndc": ndc,
                "k_error": abs(ndc - 5),
                "seconds": elapsed,
            }
        )
    return rows, dict(pair, seed=seed)


def _timing(batch_sizes, params, dihedral=False):
    task = _task()
    # Time per epoch of one f: a single start (n_init restarts would multiply it).
    est = CCNCluster(n_clusters=5, device="cpu", random_state=0, **{**params, "n_init": 1})
    est.fit(*_source(task, dihedral))
    # G's backbone width (the pair layer holds 2h features per pair in both pair_features modes).
    h = (est.hidden_dims if est.similarity_hidden_dims is None else est.similarity_hidden_dims)[-1]
    out = []
    for b in batch_sizes:
        est.set_params(batch_size=b)
        t0 = time.perf_counter()
        est.transfer(task.X_target, epochs=2)
        per_epoch = (time.perf_counter() - t0) / 2
        # Pair activations of G for one batch: enumerated features (2h), hidden (x2 for BN+ReLU), logits.
        pair_bytes = b * b * (2 * h + 3 * est.pair_hidden + 2) * 8
        out.append(
            {
                "batch_size": b,
                "pairs_per_batch": b * b,
                "g_pair_activation_mib": pair_bytes / 2**20,
                "seconds_per_epoch": per_epoch,
            }
        )
    return out


def _markdown(summary, pairs, timing, args, params):
    lines = [
        "# CCNCluster on digits 0-4 -> 5-9",
        "",
        f"Command: `python benchmarks/ccn_quality.py{' --quick' if args.quick else ''} "
        f"--seeds {' '.join(map(str, args.seeds))} --threads {args.threads}"
        + (f" --params '{json.dumps(args.params)}'" if args.params else "")
        + (f" --name {args.name}" if args.name != CANONICAL["ccn"] else "")
        + (" --ccn-plus" if args.ccn_plus else "")
        + (" --no-timing" if args.no_timing else "")
        + (" --source-dihedral" if args.source_dihedral else "")
        + "`.",
        f"CCN parameters: {params} (others CCNCluster's defaults; K=20 with estimate_n_clusters=True).",
        "",
        "| method | ACC (mean ± sd) | NMI | NDC | K error abs(NDC-5) | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for m, r in summary.items():
        lines.append(
            f"| {m} | {r['acc_mean']:.3f} ± {r['acc_std']:.3f} | {r['nmi_mean']:.3f} | "
            f"{r['ndc_mean']:.1f} | {r['k_error_mean']:.1f} | {r['seconds_mean']:.1f} |"
        )
    lines += ["", f"G's binarised pair predictions on the target (all {_task().X_target.shape[0]}^2 ordered pairs):",
              ""]
    lines += ["| seed | similar precision | similar recall | dissimilar precision | dissimilar recall | ROC AUC (probabilities) |", "|---|---|---|---|---|---|"]
    for p in pairs:
        lines.append(
            f"| {p['seed']} | {p['similar_precision']:.3f} | {p['similar_recall']:.3f} | "
            f"{p['dissimilar_precision']:.3f} | {p['dissimilar_recall']:.3f} | {p['roc_auc']:.3f} |"
        )
    if timing:
        lines += ["", f"Time per clustering epoch ({_task().X_target.shape[0]} target rows) vs batch size:", ""]
        lines += ["| batch size b | pairs per batch (b^2) | G pair activations (MiB, float64) | s / epoch |", "|---|---|---|---|"]
    for t in timing:
        lines.append(
            f"| {t['batch_size']} | {t['pairs_per_batch']} | {t['g_pair_activation_mib']:.1f} | "
            f"{t['seconds_per_epoch']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, fewer batch sizes")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0-7 (--quick: 0)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--params", type=json.loads, default={}, help="CCNCluster parameters as JSON")
    add_name_argument(parser, "ccn")
    parser.add_argument("--ccn-plus", action="store_true", help="also measure CCN+ (source rows in the batch)")
    parser.add_argument("--no-timing", action="store_true", help="skip the time-per-epoch table")
    parser.add_argument(
        "--source-dihedral", action="store_true", help="learn G on the source's rotations/reflections as new classes"
    )
    args = _common.setup(parser.parse_args(argv))
    torch.set_num_threads(args.threads)
    if args.smoke:
        args.seeds, args.ccn_plus = [0], True
    if args.seeds is None:
        args.seeds = [0] if args.quick else list(range(8))
    unknown = sorted(set(args.params) - set(CCNCluster().get_params()))
    if unknown:
        parser.error(f"--params: {unknown} are not CCNCluster parameters")
    if set(args.params) & set(_PER_RUN):
        parser.error(f"--params: the script sets {_PER_RUN} for every run itself")
    # The canonical file is the defaults over seeds 0-7: a study of anything else needs a --name.
    if args.name == CANONICAL["ccn"] and not args.quick and (
        _departures(args.params) or args.source_dihedral or args.seeds != list(range(8))
    ):
        parser.error(
            "--params, --source-dihedral and seeds other than 0-7 are variant studies: "
            "give them a --name (written to results/ccn/variants/)"
        )
    params = _common.smoke_params("CCNCluster", **args.params)  # the smallest budget in a smoke run
    if args.smoke:
        params.update(args.params)
    rows, pairs = [], []
    for seed in args.seeds:
        r, p = _quality(seed, params, ccn_plus=args.ccn_plus, dihedral=args.source_dihedral)
        rows += r
        pairs.append(p)
        print(json.dumps(r), flush=True)
    summary = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        sel = [r for r in rows if r["method"] == m]
        summary[m] = {
            f"{k}_{s}": float(getattr(np, s)([r[k] for r in sel]))
            for k in ("acc", "nmi", "ndc", "k_error", "seconds")
            for s in ("mean", "std")
        }
    timing = [] if args.no_timing else _timing(
        [32] if args.smoke else [50, 100, 200] if args.quick else [50, 100, 200, 400], params,
        dihedral=args.source_dihedral
    )
    payload = {"rows": rows, "summary": summary, "pairs": pairs, "timing": timing, "params": params,
               "threads": args.threads, "seeds": args.seeds, "quick": args.quick,
               "source_dihedral": args.source_dihedral}
    write("ccn", args.name, payload, _markdown(summary, pairs, timing, args, params), quick=args.quick)


if __name__ == "__main__":
    main()
