"""A user's transfer task from a file: ``.npz`` or ``.csv``, checked before use.

Every problem with a file -- a wrong format, a missing member or column, a bad
value, an array too large to load -- raises one ``ValueError`` that names the
file and says what to do. Nothing in a file is ever executed (no pickles).

``.npz``
    Arrays ``X_source`` and ``X_target`` (2-D, real numbers) and optional
    ``y_source`` and ``y_target`` (1-D, one label per row).
``.csv``
    A header row; a ``domain`` column whose values are ``source`` or ``target``
    (any case); an optional label column (``label`` unless told otherwise);
    every other column is a feature.

Labels may be numbers or strings; they are encoded as integers ``0..n-1`` in
sorted order. A blank label (an empty CSV cell) is missing, never a class: a
side whose labels are all blank has no labels, and a side with some blank
labels is refused.
"""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import numpy as np

from .datasets import TransferTask

__all__ = ["load_transfer_file", "MAX_ARRAY_BYTES"]

#: Largest array, in bytes once loaded, that :func:`load_transfer_file` reads by
#: default (1 GiB): a small compressed ``.npz`` can expand to many GB.
MAX_ARRAY_BYTES = 2**30

_ARRAYS = ("X_source", "X_target", "y_source", "y_target")
# Column names that usually hold labels: seen without the label column, they are
# not silently used as features.
_LABEL_LIKE = ("class", "classes", "labels", "target", "y", "cluster")


def load_transfer_file(path, *, label_column="label", max_bytes=MAX_ARRAY_BYTES):
    """Load a user's transfer task from ``.npz`` or ``.csv``.

    Parameters
    ----------
    path : str or path-like
        A ``.npz`` with arrays ``X_source``, ``X_target`` and optional
        ``y_source``, ``y_target``; or a ``.csv`` with a header, a ``domain``
        column (``source``/``target``, any case), an optional label column and
        feature columns.
    label_column : str or None, default="label"
        The CSV column holding labels; None: the file has none. Ignored for
        ``.npz``.
    max_bytes : int, default=MAX_ARRAY_BYTES
        Refuse any array larger than this once loaded.

    Returns
    -------
    TransferTask
        Features as float64; labels as integers (None where a side has none).

    Raises
    ------
    ValueError
        If the file cannot be read as a transfer task; the message says why.

    Examples
    --------
    >>> import tempfile, os
    >>> from sktransfer_cluster.files import load_transfer_file
    >>> path = os.path.join(tempfile.mkdtemp(), "task.csv")
    >>> with open(path, "w") as fh:
    ...     _ = fh.write("domain,x1,x2,label\\nsource,0,0,a\\nsource,5,5,b\\nTarget,1,0,\\nTarget,6,5,\\n")
    >>> task = load_transfer_file(path)
    >>> task.X_target.shape, task.y_source.tolist(), task.y_target
    ((2, 2), [0, 1], None)
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file.")
    if not path.is_file():
        raise ValueError(f"{path}: not a file.")
    if path.suffix == ".npz":
        Xs, Xt, ys, yt = _read_npz(path, max_bytes)
    elif path.suffix == ".csv":
        Xs, Xt, ys, yt = _read_csv(path, label_column, max_bytes)
    else:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .npz or .csv.")
    Xs, Xt = _features(path, "X_source", Xs), _features(path, "X_target", Xt)
    if Xs.shape[1] != Xt.shape[1]:
        raise ValueError(f"{path}: source has {Xs.shape[1]} features but target has {Xt.shape[1]}.")
    ys = _labels(path, "y_source", ys, Xs.shape[0])
    yt = _labels(path, "y_target", yt, Xt.shape[0])
    return TransferTask(Xs, ys, Xt, yt, name=path.stem)


def _read_npz(path, max_bytes):
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a valid .npz archive ({exc}); save one with numpy.savez.") from exc
    with archive:
        members = {name[:-4]: name for name in archive.namelist() if name.endswith(".npy")}
        missing = [a for a in ("X_source", "X_target") if a not in members]
        if missing:
            found = ", ".join(sorted(members)) or "none"
            raise ValueError(f"{path}: missing arrays {missing}; expected X_source, X_target (found: {found}).")
        return tuple(_read_member(path, archive, members[a], max_bytes) if a in members else None for a in _ARRAYS)


def _read_member(path, archive, member, max_bytes):
    name = member[:-4]
    read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    try:
        with archive.open(member) as fh:
            version = np.lib.format.read_magic(fh)
            if version not in read_header:
                raise ValueError(f"{path}: {name} uses .npy format {version}; save it with numpy.savez.")
            shape, _, dtype = read_header[version](fh)
            nbytes = int(np.prod(shape, dtype=float)) * dtype.itemsize
            if nbytes > max_bytes:
                raise ValueError(
                    f"{path}: {name} would take {nbytes / 2**20:,.0f} MiB once loaded, above the limit of "
                    f"{max_bytes / 2**20:,.0f} MiB; raise it (compare --max-array-mb) if this is intended."
                )
            if dtype.hasobject:
                raise ValueError(f"{path}: {name} holds Python objects, which are never loaded; save numbers or strings.")
        with archive.open(member) as fh:
            array = np.lib.format.read_array(fh, allow_pickle=False)
    except ValueError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path}: {name} is not a readable array ({exc}).") from exc
    except (OSError, EOFError, zipfile.BadZipFile, SyntaxError, TypeError) as exc:
        raise ValueError(f"{path}: {name} is not a readable array ({type(exc).__name__}: {exc}).") from exc
    return array


def _read_csv(path, label_column, max_bytes):
    if path.stat().st_size > max_bytes:
        raise ValueError(
            f"{path}: {path.stat().st_size / 2**20:,.0f} MiB is above the limit of {max_bytes / 2**20:,.0f} MiB; "
            "raise it (compare --max-array-mb) if this is intended."
        )
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.reader(fh) if r]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path}: not a readable UTF-8 CSV file ({exc}).") from exc
    if not rows:
        raise ValueError(f"{path}: empty file; expected a header with a 'domain' column (source/target).")
    header = [h.strip() for h in rows[0]]
    lower = [h.lower() for h in header]
    if "domain" not in lower:
        raise ValueError(
            f"{path}: expected a header with a 'domain' column (source/target); found columns {header[:10]}."
        )
    dom_i = lower.index("domain")
    lab_i = None
    if label_column is not None:
        if label_column.lower() in lower:
            lab_i = lower.index(label_column.lower())
        elif label_column != "label":
            raise ValueError(f"{path}: no label column {label_column!r}; found columns {header[:10]}.")
        else:
            suspects = [h for h in header if h.lower() in _LABEL_LIKE]
            if suspects:
                raise ValueError(
                    f"{path}: no 'label' column, but {suspects[0]!r} looks like one; pass "
                    f"--label-column {suspects[0]} to use it as labels, or --label-column none "
                    "to treat it as a feature."
                )
    feat_i = [i for i in range(len(header)) if i not in (dom_i, lab_i)]
    if not feat_i:
        raise ValueError(f"{path}: no feature columns besides 'domain' and the labels.")
    body = rows[1:]
    for line, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise ValueError(f"{path}: line {line} has {len(r)} fields, the header has {len(header)}.")
    domain = np.array([r[dom_i].strip().lower() for r in body], dtype=object)
    found = sorted({str(d) for d in domain})
    if not {"source", "target"} <= set(found):
        raise ValueError(
            f"{path}: the 'domain' column must hold 'source' and 'target' rows; found {found[:10]}."
        )
    try:
        feats = np.array([[float(r[i]) for i in feat_i] for r in body], dtype=float)
    except ValueError as exc:
        raise ValueError(f"{path}: non-numeric or missing feature value ({exc}).") from exc
    labels = None if lab_i is None else np.array([r[lab_i].strip() for r in body], dtype=object)
    src, tgt = domain == "source", domain == "target"
    return (
        feats[src],
        feats[tgt],
        None if labels is None else labels[src],
        None if labels is None else labels[tgt],
    )


def _features(path, name, X):
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{path}: {name} must be a non-empty 2-D array, got shape {X.shape}.")
    if np.iscomplexobj(X):
        raise ValueError(f"{path}: {name} holds complex numbers; clustering needs real features.")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"{path}: {name} is not numeric (dtype {X.dtype}).")
    with np.errstate(over="ignore"):
        X = X.astype(float)
    if not np.isfinite(X).all():
        raise ValueError(f"{path}: {name} contains NaN or infinity (or values too large for float64).")
    return X


def _labels(path, name, y, n_rows):
    """Integer labels 0..n-1 in sorted order, None when absent or all blank."""
    if y is None:
        return None
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise ValueError(f"{path}: {name} must hold one label per row ({n_rows}), got shape {y.shape}.")
    if np.iscomplexobj(y):
        raise ValueError(f"{path}: {name} holds complex numbers; labels must be integers or strings.")
    if y.dtype.kind in "OUS":
        text = np.array([_label_text(v) for v in y], dtype=object)
        blank = text == ""
        if blank.all():
            return None
        if blank.any():
            raise ValueError(
                f"{path}: {name} has {int(blank.sum())} blank labels among {n_rows} rows; "
                "give every row of a side a label, or none."
            )
        y = _as_numbers(text)
    elif y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError(f"{path}: {name} contains NaN or infinity; labels must be integers or strings.")
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


def _label_text(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).strip()


def _as_numbers(text):
    """Numeric labels stay ordered as numbers ("10" after "9"); otherwise strings."""
    try:
        values = np.array([float(t) for t in text])
    except ValueError:
        return text.astype(str)
    return values if np.isfinite(values).all() else text.astype(str)
