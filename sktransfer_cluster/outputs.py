"""What ``compare --out`` may replace (torch-free: the command line checks it before a run)."""

from pathlib import Path

__all__ = ["is_compare_output", "foreign_files"]


def is_compare_output(path):
    """Whether ``path`` is a file that ``compare`` writes into ``--out``."""
    path = Path(path)
    return path.is_file() and (
        path.name in ("results.json", "results.md")
        or (path.suffix == ".png" and path.name.startswith(("clusters_", "scores_")))
    )


def foreign_files(out):
    """Sorted names of the entries of an existing folder ``out`` that ``compare`` did not write."""
    out = Path(out)
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if not is_compare_output(p))
