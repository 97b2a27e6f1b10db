"""The main job: ``sktransfer-cluster compare``.

Fits every estimator on the source of a transfer task, transfers it to the
target, and prints one table beside ``KMeans`` and ``GaussianMixture`` fitted on
the target with the true K. ``--out DIR`` also writes ``results.json``,
``results.md`` and PNG figures (with the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.mixture import GaussianMixture
from sklearn.utils import get_tags

from .base import resolve_device
from .cluster import C2MCluster, CCNCluster, PreciseFeatureGAN, SinkhornKMeans, TDCMCluster
from .datasets import load_digits_transfer, load_transfer_file, make_tdcm_transfer
from .metrics import clustering_accuracy, match_labels

__all__ = ["main", "compare", "METHODS", "TASKS"]

# Training budget per mode: epochs scale with it so that the default run stays
# under ~5 minutes and --quick under ~1 minute on 2 CPU cores.
_BUDGET = {"quick": 0.2, "default": 1.0, "full": 4.0}


def _epochs(n, scale):
    return max(1, int(round(n * scale)))


def _sinkhorn_kmeans(k, seed, device, scale, n_features):
    return SinkhornKMeans(k, random_state=seed, device=device)


def _sinkhorn_kmeans_ae(k, seed, device, scale, n_features):
    return SinkhornKMeans(
        k,
        embedding="autoencoder",
        hidden_dims=(256, 128, 10),
        pretrain_epochs=_epochs(30, scale),
        max_epochs=_epochs(30, scale),
        random_state=seed,
        device=device,
    )


def _tdcm(k, seed, device, scale, n_features):
    if n_features > 10:
        # The paper's real-data settings (L = 5, lr 5e-4) and an embedding as wide as
        # the input, so the isometric linear encoder loses nothing (benchmarks/
        # tdcm_quality.py's digits run); capped, as the blocks hold d x d matrices.
        extra = dict(n_blocks=5, learning_rate=5e-4, embedding_dim=max(min(n_features, 128), k))
    else:
        extra = dict(embedding_dim=max(10, k))
    return TDCMCluster(k, max_epochs=_epochs(100, scale), random_state=seed, device=device, **extra)


def _ccn(k, seed, device, scale, n_features):
    return CCNCluster(
        k,
        similarity_epochs=_epochs(3, scale),
        clustering_epochs=_epochs(40, scale),
        random_state=seed,
        device=device,
    )


def _c2m(k, seed, device, scale, n_features):
    # K is not given: max_clusters is only an upper bound on what the critic may choose.
    return C2MCluster(
        max_clusters=max(10, 2 * k),
        critic_dims=(128, 128),
        max_epochs=_epochs(2, scale),
        sets_per_epoch=_epochs(10, scale),
        population=32,
        cem_iter=10,
        random_state=seed,
        device=device,
    )


def _precise_gan(k, seed, device, scale, n_features):
    # The settings that reached the ring goal on CPU (benchmarks/precise_gan_quality.py).
    return PreciseFeatureGAN(
        k,
        noise_dim=2,
        hidden_dims=(64, 64),
        n_iter=_epochs(1000, scale),
        learning_rate=1e-3,
        gp_weight=1.0,
        random_state=seed,
        device=device,
    )


# name -> factory(n_clusters, seed, device, budget scale, n_features). Whether a method
# needs the source labels is read from the estimator's tags (target_tags.required).
METHODS = {
    "SinkhornKMeans": _sinkhorn_kmeans,
    "SinkhornKMeans-AE": _sinkhorn_kmeans_ae,
    "TDCMCluster": _tdcm,
    "CCNCluster": _ccn,
    "C2MCluster": _c2m,
    "PreciseFeatureGAN": _precise_gan,
}
BASELINES = ("KMeans", "GaussianMixture")


def _digits(seed, mode):
    return [load_digits_transfer()]


def _tdcm_tasks(seed, mode):
    ks = (2, 3, 5, 10) if mode == "full" else (5,)
    tasks = []
    for k in ks:
        task = make_tdcm_transfer(n_clusters=k, shift=3.0, random_state=seed)
        task.name = f"tdcm-shift-k{k}"
        tasks.append(task)
    return tasks


TASKS = {"digits": _digits, "tdcm": _tdcm_tasks}


@dataclass
class Row:
    task: str
    method: str
    k: str
    acc: float | None
    nmi: float | None
    ari: float | None
    fit_s: float
    transfer_s: float
    labels: list


class UsageError(Exception):
    """A user mistake reported as one line, no traceback."""


def _n_clusters(task):
    if task.y_target is not None:
        return task.n_clusters_target
    return int(np.unique(task.y_source).shape[0])


def _scores(y, labels):
    if y is None:
        return None, None, None
    return (
        clustering_accuracy(y, labels),
        normalized_mutual_info_score(y, labels),
        adjusted_rand_score(y, labels),
    )


def _run_method(name, task, k, seed, device, scale):
    est = METHODS[name](k, seed, device, scale, task.X_source.shape[1])
    t0 = time.perf_counter()
    if get_tags(est).target_tags.required:
        est.fit(task.X_source, task.y_source)
    else:
        est.fit(task.X_source)
    t1 = time.perf_counter()
    labels = est.transfer(task.X_target)
    t2 = time.perf_counter()
    found = getattr(est, "n_clusters_", None)
    if "n_clusters" not in est.get_params():
        k_text = f"found {found}"
    else:  # CCN reports its number of dominant clusters even when K is given
        k_text = f"given {k}" if found is None else f"given {k}, NDC {found}"
    return Row(task.name, name, k_text, *_scores(task.y_target, labels), t1 - t0, t2 - t1, labels.tolist())


def _run_baseline(name, task, k, seed):
    t0 = time.perf_counter()
    if name == "KMeans":
        labels = KMeans(k, n_init=10, random_state=seed).fit_predict(task.X_target)
    else:
        labels = GaussianMixture(k, covariance_type="diag", random_state=seed).fit(task.X_target).predict(task.X_target)
    t1 = time.perf_counter()
    return Row(task.name, f"{name} (on target)", f"true {k}", *_scores(task.y_target, labels), 0.0, t1 - t0, labels.tolist())


def compare(data=("digits", "tdcm"), methods=None, device="cpu", seed=0, mode="default", progress=True):
    """Run every method on every task and return the rows.

    Parameters
    ----------
    data : sequence of str
        Built-in task names (``"digits"``, ``"tdcm"``) or paths to ``.npz``/``.csv`` files.
    methods : sequence of str, default=None
        Names from :data:`METHODS` (all by default).
    device : str, default="cpu"
    seed : int, default=0
    mode : {"quick", "default", "full"}
    progress : bool, default=True

    Returns
    -------
    rows : list of Row
    tasks : list of TransferTask
    """
    methods = list(METHODS) if not methods else list(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    try:
        resolve_device(device)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    tasks = []
    for item in data:
        if item in TASKS:
            tasks.extend(TASKS[item](seed, mode))
        elif Path(item).suffix in (".npz", ".csv"):
            try:
                tasks.append(load_transfer_file(item))
            except ValueError as exc:
                raise UsageError(str(exc)) from exc
        else:
            raise UsageError(f"unknown task {item!r}; use {', '.join(TASKS)} or a .npz/.csv file")
    scale = _BUDGET[mode]
    jobs = [(t, m) for t in tasks for m in [*methods, *BASELINES]]
    rows = []
    from tqdm.auto import tqdm

    for task, name in tqdm(jobs, desc="compare", disable=not progress):
        k = _n_clusters(task)
        if name in BASELINES:
            rows.append(_run_baseline(name, task, k, seed))
        else:
            try:
                rows.append(_run_method(name, task, k, seed, device, scale))
            except ValueError as exc:
                raise UsageError(f"{name} on {task.name}: {exc}") from exc
    return rows, tasks


def _fmt(v):
    return "-" if v is None else f"{v:.3f}"


def format_table(rows):
    """The results as a markdown table (also what is printed)."""
    lines = [
        "| task | method | K | ACC | NMI | ARI | fit s | transfer s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.task} | {r.method} | {r.k} | {_fmt(r.acc)} | {_fmt(r.nmi)} | {_fmt(r.ari)} | "
            f"{r.fit_s:.1f} | {r.transfer_s:.1f} |"
        )
    return "\n".join(lines)


def _figures(rows, tasks, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    written = []
    for task in tasks:
        task_rows = [r for r in rows if r.task == task.name]
        xy = PCA(n_components=2, random_state=0).fit_transform(task.X_target) if task.X_target.shape[1] > 2 else task.X_target
        n = len(task_rows) + (task.y_target is not None)
        cols = min(4, n)
        fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(3.2 * cols, 3.0 * ((n + cols - 1) // cols)), squeeze=False)
        panels = ([("true labels", task.y_target)] if task.y_target is not None else []) + [
            (f"{r.method}\nACC {_fmt(r.acc)}", np.asarray(r.labels)) for r in task_rows
        ]
        for ax, (title, labels) in zip(axes.flat, panels):
            if task.y_target is not None and np.issubdtype(np.asarray(task.y_target).dtype, np.integer):
                labels = match_labels(task.y_target, labels)  # same colour = same matched class
            ax.scatter(xy[:, 0], xy[:, 1], c=labels, s=4, cmap="tab20")
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"{task.name}: target, 2-D PCA, coloured by cluster")
        fig.tight_layout()
        path = out / f"clusters_{task.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

        scored = [r for r in task_rows if r.acc is not None]
        if scored:
            fig, ax = plt.subplots(figsize=(1.2 * len(scored) + 2, 3.2))
            x = np.arange(len(scored))
            ax.bar(x - 0.2, [r.acc for r in scored], 0.4, label="ACC")
            ax.bar(x + 0.2, [r.nmi for r in scored], 0.4, label="NMI")
            ax.set_xticks(x, [r.method for r in scored], rotation=30, ha="right", fontsize=8)
            ax.set_ylim(0, 1)
            ax.set_title(f"{task.name}: target ACC / NMI")
            ax.legend()
            fig.tight_layout()
            path = out / f"scores_{task.name}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


def write_outputs(rows, tasks, out):
    """Write results.json, results.md and (with matplotlib) PNG figures into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    (out / "results.md").write_text(format_table(rows) + "\n")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "note: matplotlib is not installed, so no figures were written; "
            "install the plot extra: pip install 'sktransfer-cluster[plot]'",
            file=sys.stderr,
        )
        return []
    return _figures(rows, tasks, out)


def build_parser():
    parser = argparse.ArgumentParser(prog="sktransfer-cluster", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmp_ = sub.add_parser("compare", help="every estimator against KMeans on transfer tasks")
    cmp_.add_argument(
        "--data",
        nargs="+",
        default=["digits", "tdcm"],
        help="built-in task names (digits, tdcm) or .npz/.csv files with X_source, X_target "
        "and optional y_source, y_target",
    )
    cmp_.add_argument("--methods", default=None, help=f"comma-separated subset of: {', '.join(METHODS)}")
    cmp_.add_argument("--device", default="cpu", help="auto, cpu, cuda, cuda:N or mps (default: cpu)")
    cmp_.add_argument("--seed", type=int, default=0)
    cmp_.add_argument("--out", default=None, help="directory for results.json, results.md and figures")
    speed = cmp_.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="small budget, under a minute")
    speed.add_argument("--full", action="store_true", help="paper-sized budgets and every TDCM K")
    return parser


def main(argv=None):
    """Entry point of ``sktransfer-cluster`` and ``python -m sktransfer_cluster``."""
    args = build_parser().parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "default"
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    try:
        rows, tasks = compare(args.data, methods, args.device, args.seed, mode, progress=sys.stderr.isatty())
    except UsageError as exc:
        print(f"sktransfer-cluster: error: {exc}", file=sys.stderr)
        return 2
    print(format_table(rows))
    if args.out:
        written = write_outputs(rows, tasks, args.out)
        print(f"\nwrote {Path(args.out) / 'results.json'}, results.md and {len(written)} figure(s)")
    return 0
