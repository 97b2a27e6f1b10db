"""The command line, ``sktransfer-cluster``: the torch-free front door.

Parsing and the method names (read from :mod:`sktransfer_cluster.registry`) only, so
that ``--help`` and ``--version`` answer without importing torch. The work is in
:mod:`sktransfer_cluster.compare`.
"""

import argparse
import os
import re
import sys
from pathlib import Path

from . import __version__
from .errors import SEED_MAX, UsageError, check_megabytes
from .outputs import foreign_files
from .registry import REGISTRY, method_names, unknown_k_error

_COMPARE_HELP = """\
Fit every estimator on the source of each task, transfer it to the target, and
print one table beside KMeans, GaussianMixture and UMAP+GMM (umap-learn, the
bench extra) fitted on the target. Each method runs at its defaults; --quick and
--full only scale the epoch counts. One line per method goes to stderr as it
starts and ends, and one line per warning, which the table marks and lists.

Files (--data FILE):
  .npz  arrays X_source, X_target (2-D, numbers) and optional y_source, y_target
        (one label per row). Nothing is unpickled.
  .csv  a header row (UTF-8, a BOM is fine); a 'domain' column whose every value
        is source or target (any case); an optional label column ('label', or
        --label-column NAME, never the domain column); every other column is a
        numeric feature. Leading unnamed index columns (pandas' to_csv, R's row
        names) are skipped; write other index columns with index=False. Labels
        may be strings; a blank label, or NA, NaN, null, None, N/A (any case),
        is missing: a side whose labels are all missing has none, and a side
        with some missing is refused.
  Two files may not share a name (a/t.csv b/t.csv): results are keyed by it.
--out DIR is written all at once: a rerun replaces the outputs of the last one,
and a folder holding other files is refused.
K is the number of target classes, or --n-clusters. Without target labels pass
--n-clusters, or run only the methods that estimate K ({estimators}; they need
source labels), which get an upper bound of 20. Each side of a file needs at
least 2 rows, and at least K.

Bad input prints one line and exits with status 2.
"""


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="sktransfer-cluster",
        description="Transferable deep clustering: learn on a source data set, cluster a target.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cmp_ = sub.add_parser(
        "compare",
        help="every estimator against KMeans on transfer tasks",
        description=_COMPARE_HELP.format(
            estimators=", ".join(m.name for m in REGISTRY.values() if m.bounded_k is not None)
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmp_.add_argument(
        "--data",
        nargs="+",
        default=["digits", "tdcm"],
        help="built-in tasks (digits, tdcm, mnist) or .npz/.csv files (default: digits tdcm). mnist: 4 "
        "tasks on 5,000 real MNIST images (the bench extra), about an hour on 2 CPU cores",
    )
    cmp_.add_argument("--methods", default=None, help=f"comma-separated subset of: {', '.join(method_names())}")
    cmp_.add_argument(
        "--n-clusters", type=_positive_int, default=None, help="K for every task (default: the number of target classes)"
    )
    cmp_.add_argument(
        "--label-column", default="label", help="label column of .csv files; 'none' if they have none (default: label)"
    )
    cmp_.add_argument("--device", default="cpu", help="auto, cpu, cuda, cuda:N or mps (default: cpu)")
    cmp_.add_argument("--threads", type=_positive_int, default=None, help="torch and BLAS threads (default: 1)")
    cmp_.add_argument("--seed", type=int, default=0)
    cmp_.add_argument(
        "--max-array-mb", type=float, default=1024,
        help="refuse a file whose loaded arrays (rows x columns x 8 bytes) exceed this (default: 1024)",
    )
    cmp_.add_argument("--out", default=None, help="directory for results.json, results.md and figures")
    speed = cmp_.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="every epoch count x0.2 (default: each method at its defaults)")
    speed.add_argument("--full", action="store_true", help="every epoch count x4, and every TDCM K")
    return parser


def main(argv=None):
    """Entry point of ``sktransfer-cluster`` and ``python -m sktransfer_cluster``.

    Parameters
    ----------
    argv : list of str, default=None
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 2 after a one-line error about the input.
    """
    args = build_parser().parse_args(argv)
    try:
        args.data = check_inputs(args)
    except UsageError as exc:
        print(f"sktransfer-cluster: error: {exc}", file=sys.stderr)
        return 2
    from .compare import run  # torch and the estimators load here, after every input check

    return run(args)


_BUILT_IN = ("digits", "tdcm", "mnist")


def _check_out(out):
    """``UsageError`` when ``--out`` is a file or cannot be created, so that a run is not lost at its end."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} is a file; pass a directory (it is created if missing)")
    parent = path.absolute().parent
    while not parent.exists():  # the nearest existing folder above, where the new ones start
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out {out} cannot be created: {parent} is a file; pass a folder path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out} cannot be created: {parent} is not writable; pass a folder path you can write")


def check_inputs(args):
    """Every check of a ``compare`` command line that needs no torch; returns ``args.data`` loaded.

    User files are read here (:func:`~sktransfer_cluster.files.load_transfer_file`), so a
    bad file is reported at once, before torch is imported; built-in task names stay names.

    Raises
    ------
    UsageError
        Unknown methods or an empty ``--methods`` list, a ``--seed`` outside
        ``0 .. 2**32 - 1``, a non-finite or non-positive ``--max-array-mb``, an unknown
        task, a file that cannot be read, two files of the same name (their results and
        figures would overwrite each other), a file without target labels and no
        ``--n-clusters`` for a method that needs K, a file with fewer than 2 rows, or
        fewer than K, on a side (:func:`~sktransfer_cluster.files.task_size_error`), or an
        ``--out`` that is a file or cannot be created (under a file, or in a folder that
        is not writable).
    """
    if args.methods is None:
        methods = list(REGISTRY)
    else:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods:
            raise UsageError(f"--methods {args.methods!r} names no method; pass a comma-separated subset of: "
                             f"{', '.join(REGISTRY)} (or leave --methods out for all of them)")
        unknown = [m for m in methods if m not in REGISTRY]
        if unknown:
            raise UsageError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(REGISTRY)}")
    if not 0 <= args.seed <= SEED_MAX:
        # numpy's and scikit-learn's random states take 32-bit seeds only.
        raise UsageError(f"--seed must be an integer in 0 .. {SEED_MAX}, got {args.seed}")
    check_megabytes(args.max_array_mb, "--max-array-mb")
    if args.out is not None:
        _check_out(args.out)
    if args.out is not None and foreign_files(args.out):
        raise UsageError(
            f"--out {args.out} holds files that compare did not write ({', '.join(foreign_files(args.out)[:5])}); "
            "pass a new or empty folder (a rerun into compare's own output folder replaces it)"
        )
    from .files import load_data_list, task_size_error  # numpy only: no torch, no scikit-learn

    if args.device not in ("auto", "cpu", "mps", "cuda") and not re.fullmatch(r"cuda:\d+", args.device):
        # Availability is torch's to say (compare checks it); a misspelling is refused here.
        raise UsageError(f"--device {args.device!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    label_column = None if args.label_column.lower() == "none" else args.label_column
    try:
        items = load_data_list(
            args.data, built_in=_BUILT_IN, label_column=label_column, max_bytes=int(args.max_array_mb * 2**20)
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    for task in items:
        if isinstance(task, str):  # a built-in task: target labels, and rows enough for its K
            continue
        # Without K (no target labels, no --n-clusters) only the methods that estimate it can run.
        refusal = unknown_k_error(task.name, methods) if args.n_clusters is None and task.y_target is None else None
        refusal = refusal or task_size_error(task, args.n_clusters)
        if refusal:
            raise UsageError(refusal)
    return items
