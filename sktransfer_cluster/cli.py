"""The command line, ``sktransfer-cluster``: the torch-free front door.

Parsing and the method names (read from :mod:`sktransfer_cluster.registry`) only, so
that ``--help`` and ``--version`` answer without importing torch. The work is in
:mod:`sktransfer_cluster.compare`.
"""

import argparse

from . import __version__
from .registry import REGISTRY, method_names

_COMPARE_HELP = """\
Fit every estimator on the source of each task, transfer it to the target, and
print one table beside KMeans and GaussianMixture fitted on the target. Each
method runs at its defaults; --quick and --full only scale the epoch counts.
One line per method goes to stderr as it starts and ends.

Files (--data FILE):
  .npz  arrays X_source, X_target (2-D, numbers) and optional y_source, y_target
        (one label per row). Nothing is unpickled.
  .csv  a header row; a 'domain' column whose values are source or target (any
        case); an optional label column ('label', or --label-column NAME); every
        other column is a numeric feature. Labels may be strings; a blank label
        is missing, and a side whose labels are all blank has none.
K is the number of target classes, or --n-clusters. Without target labels pass
--n-clusters, or run only the methods that estimate K ({estimators}; they need
source labels), which get an upper bound of 20.

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
    cmp_.add_argument("--n-clusters", type=_positive_int, default=None, help="K for every task (default: the number of target classes)")
    cmp_.add_argument("--label-column", default="label", help="label column of .csv files; 'none' if they have none (default: label)")
    cmp_.add_argument("--device", default="cpu", help="auto, cpu, cuda, cuda:N or mps (default: cpu)")
    cmp_.add_argument("--threads", type=_positive_int, default=None, help="torch and BLAS threads (default: OMP_NUM_THREADS, else the physical cores)")
    cmp_.add_argument("--seed", type=int, default=0)
    cmp_.add_argument("--max-array-mb", type=float, default=1024, help="refuse file arrays larger than this once loaded (default: 1024)")
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
    from .compare import run  # torch, scikit-learn and the estimators load here

    return run(args)
