"""Helpers shared by the benchmark scripts: machine description, result files, estimator tags.

Results live in one folder per method under ``benchmarks/results/``::

    results/<method>/<canonical name>.{json,md}   the current run at the benchmark's settings
    results/<method>/variants/<name>.{json,md}     variant studies (opt-in settings, other seeds)
    results/<method>/variants/<name>_quick.*       smoke runs (``--quick``)

``benchmarks/results/README.md`` is the hand-kept index of the canonical files.
``SKTC_BENCH_RESULTS=/some/dir`` sends every result file there instead (for smoke runs
that must not touch the checkout).
"""

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(os.environ.get("SKTC_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")

# method folder -> canonical file stem (the one the README and results/README.md cite).
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
}


def machine():
    import torch

    return {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
    }


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


def requires_y(estimator):
    """Whether ``estimator.fit`` needs labels, read from its scikit-learn tags
    (``target_tags.required``; our estimators set it from ``_requires_y``)."""
    from sklearn.utils import get_tags

    return bool(get_tags(estimator).target_tags.required)


def fit_source(estimator, X, y):
    """``fit(X, y)`` for an estimator whose tags require labels, ``fit(X)`` otherwise."""
    return estimator.fit(X, y) if requires_y(estimator) else estimator.fit(X)


def add_name_argument(parser, method):
    """``--name``: the results file stem; anything but the canonical name is a variant."""
    canonical = CANONICAL[method]
    parser.add_argument(
        "--name",
        default=canonical,
        help=f"results file name without extension (default {canonical}, the canonical file in "
        f"results/{method}/; any other name goes to results/{method}/variants/)",
    )


def result_stem(method, name=None, quick=False):
    """Path, without extension, of a result file of ``method``.

    The canonical name (``CANONICAL[method]``, the default) sits at the top of
    ``results/<method>/``; any other name, and every smoke run (``quick``, which adds
    ``_quick`` so that it never overwrites a full result), goes to ``variants/``.
    """
    if method not in CANONICAL:
        raise ValueError(f"unknown benchmark method {method!r}; expected one of {sorted(CANONICAL)}")
    name = CANONICAL[method] if name is None else name
    folder = RESULTS / method
    if quick or name != CANONICAL[method]:
        folder = folder / "variants"
    return folder / (name + ("_quick" if quick else ""))


def command_line():
    """The command that is running, as typed from the repository root."""
    return " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])


def write(method, name, payload, markdown, quick=False):
    """Write ``<stem>.json`` and ``<stem>.md`` for ``result_stem(method, name, quick)``
    (``name=None``: the method's canonical name) and return the stem."""
    stem = result_stem(method, name, quick)
    stem.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), "command": command_line(), **payload}
    stem.parent.joinpath(stem.name + ".json").write_text(json.dumps(payload, indent=2))
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
