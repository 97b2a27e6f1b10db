"""A user's transfer task from a file: ``.npz`` or ``.csv``, checked before use.

Every problem with a file -- a wrong format, a missing member or column, a bad
value, an array too large to load -- raises one ``ValueError`` that names the
file and says what to do. Nothing in a file is ever executed (no pickles), and
the file is never modified.

``.npz``
    Arrays ``X_source`` and ``X_target`` (2-D, real numbers) and optional
    ``y_source`` and ``y_target`` (1-D, one label per row).
``.csv``
    UTF-8, with or without the byte-order mark that Excel's "CSV UTF-8" writes.
    A header row; a ``domain`` column whose value on every row is ``source`` or
    ``target`` (any case, spaces ignored) -- any other value, such as a typo,
    is refused with its lines, never dropped; an optional label column
    (``label`` unless told otherwise; never the ``domain`` column itself);
    every other column is a feature and must hold a number on every row.

    **Index columns.** Leading columns with an empty name -- the index that
    pandas' ``df.to_csv()`` writes unless given ``index=False``, or R's row
    names -- and pandas' ``Unnamed: 0`` (such a file read back and written
    again) are row labels, not data: they are skipped, so the features are the
    same as those of the file written with ``index=False``. An unnamed column
    after a named one is refused, and so is a feature named ``index`` that
    numbers the rows (``df.reset_index()``). Any other named index (such as
    ``df.index.name = "id"``) cannot be told from a feature: write such files
    with ``index=False``.

Labels may be numbers or strings; they are encoded as integers ``0..n-1`` in
sorted order. A blank label (an empty CSV cell) is missing, never a class, and
so is a text that marks a missing value (``NA``, ``NaN``, ``null``, ``None``,
``N/A``, ... in any case: :data:`MISSING_LABEL_TEXTS`, pandas' defaults): a side
whose labels are all missing has no labels, and a side with some missing
labels is refused.

Size. ``max_bytes`` bounds the arrays once loaded, not the file: for a CSV,
rows x (features + label column) x 8 bytes, checked after a first pass that
only counts rows and before anything is allocated. The second pass parses each
row straight into preallocated float64 arrays, so loading takes about the
arrays' size in memory, whatever the file's size.
"""

from __future__ import annotations

import contextlib
import csv
import re
import zipfile
from pathlib import Path

import numpy as np

from .datasets import TransferTask

__all__ = ["MAX_ARRAY_BYTES", "MISSING_LABEL_TEXTS", "load_data_list", "load_transfer_file"]

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
        column (``source``/``target``, any case, on every row), an optional
        label column and feature columns. Leading unnamed columns (pandas'
        index, R's row names) are skipped; see the module notes.
    label_column : str or None, default="label"
        The CSV column holding labels (any case); None: the file has none. It
        may not be the ``domain`` column. Ignored for ``.npz``.
    max_bytes : int, default=MAX_ARRAY_BYTES
        Refuse a file whose arrays would take more bytes than this once loaded:
        each ``.npz`` member, or a CSV's rows x (features + labels) x 8.

    Returns
    -------
    TransferTask
        Features as float64; labels as integers (None where a side has none);
        ``name`` is the file's stem, which two files in different folders can
        share (``a/t.csv``, ``b/t.csv``): a caller keying tasks by name must
        tell them apart.

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


def load_data_list(items, *, built_in, label_column="label", max_bytes=MAX_ARRAY_BYTES):
    """A ``compare`` data list with every file loaded: built-in task names and tasks stay as they are.

    The one reader of the command line's and :func:`~sktransfer_cluster.compare.compare`'s
    ``data``; it needs no torch, so the command line reports a bad file before torch loads.

    Parameters
    ----------
    items : sequence of str, path-like or TransferTask
        Built-in task names, ``.npz``/``.csv`` paths, or tasks loaded already.
    built_in : collection of str
        The built-in task names.
    label_column : str or None, default="label"
        Passed to :func:`load_transfer_file`.
    max_bytes : int, default=MAX_ARRAY_BYTES
        Passed to :func:`load_transfer_file`.

    Returns
    -------
    list of str or TransferTask

    Raises
    ------
    ValueError
        An unknown name, a file that cannot be read, or two tasks of the same name
        (results and figures are keyed by it, so one would overwrite the other).
    """
    # Only the built-in tasks this list runs take their names: a user's digits.csv is
    # refused beside "digits", not on its own.
    loaded, origin = [], {item: "the built-in task" for item in items if isinstance(item, str) and item in built_in}
    for item in items:
        if isinstance(item, str) and item in built_in:
            if item in loaded:
                raise ValueError(f"the built-in task {item!r} is listed twice; list it once")
            loaded.append(item)
            continue
        if isinstance(item, TransferTask):
            if item.name in origin:
                raise ValueError(
                    f"{origin[item.name]} and a task passed in are both named {item.name!r}: results and "
                    "figures are keyed by the name, so rename one of them"
                )
            origin[item.name] = "a task passed in"
            loaded.append(item)
            continue
        if Path(item).suffix not in (".npz", ".csv"):
            raise ValueError(f"unknown task {item!r}; use {', '.join(built_in)} or a .npz/.csv file")
        try:
            task = load_transfer_file(item, label_column=label_column, max_bytes=max_bytes)
        except OSError as exc:
            raise ValueError(str(exc)) from exc
        if task.name in origin:
            raise ValueError(
                f"{origin[task.name]} and {item} are both named {task.name!r}: results and figures are "
                "keyed by the file name, so rename one of them"
            )
        origin[task.name] = item
        loaded.append(task)
    return loaded


def task_size_error(task, n_clusters=None):
    """The refusal for a task too small to run, or None.

    Each side needs at least 2 rows; with K known (``n_clusters``, else the number of
    target classes) each side needs at least K: every method and baseline splits the
    target into K clusters, and most methods fit K clusters on the source first. Written
    once for the command line's torch-free checks and
    :func:`~sktransfer_cluster.compare.compare`, so that such a task is refused before
    any other task runs, not when its turn comes.
    """
    k = n_clusters if n_clusters is not None else task.n_clusters_target
    for side, X in (("source", task.X_source), ("target", task.X_target)):
        n = X.shape[0]
        if n < 2:
            return (
                f"{task.name}: the {side} has {n} row{'s' * (n != 1)}; compare needs at least 2 rows on each side "
                f"(source and target): add {side} rows"
            )
        if k is not None and n < k:
            given = "--n-clusters" if n_clusters is not None else "the number of target classes"
            why = (
                "every method and baseline splits the target into K clusters" if side == "target"
                else "the methods fit K clusters on the source"
            )
            return (
                f"{task.name}: the {side} has {n} rows, fewer than K = {k} ({given}); {why}: add {side} rows "
                "or pass a smaller --n-clusters"
            )
    return None


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
                    f"{path}: {name} would take {_size(nbytes)} once loaded, above the limit of "
                    f"{_size(max_bytes)}; raise it (compare --max-array-mb) if this is intended."
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
    # Two streaming passes, so no cell is ever held as a Python object beyond its
    # row: the first checks the layout and counts each side's rows (the size guard
    # then bounds the arrays before they exist); the second parses the numbers
    # straight into preallocated float64 arrays.
    raw = _csv_header(path)
    n_fields = len(raw)
    header = [h.strip() for h in raw]
    n_index = _n_index_columns(header)
    dom_i, lab_i = _key_columns(path, header, n_index, label_column)
    feat_i = [i for i in range(n_index, n_fields) if i not in (dom_i, lab_i)]
    if not feat_i:
        raise ValueError(f"{path}: no feature columns besides 'domain' and the labels.")

    sides = bytearray()  # one byte per row: _SOURCE or _TARGET
    bad = {}  # unknown domain value -> [its row count, its first lines]; a few values only
    n_bad = 0
    with contextlib.closing(_rows(path)) as rows:  # closed at once, even on an error
        for line, row in rows:
            if len(row) != n_fields:
                raise ValueError(f"{path}: line {line} has {len(row)} fields, the header has {n_fields}.")
            side = _SIDES.get(row[dom_i].strip().lower())
            if side is None:
                n_bad += 1
                if row[dom_i] in bad or len(bad) < _SHOWN:
                    seen = bad.setdefault(row[dom_i], [0, []])
                    seen[0] += 1
                    if len(seen[1]) < _SHOWN:
                        seen[1].append(line)
                continue
            sides.append(side)
    if n_bad:
        # S4: such rows used to vanish; a typo must never shrink a side unseen.
        shown = ", ".join(f"{value!r} ({_lines(*seen)})" for value, seen in bad.items())
        more = ", and other values" if n_bad > sum(count for count, _ in bad.values()) else ""
        raise ValueError(
            f"{path}: the 'domain' column must be 'source' or 'target' (any case) on every row, but "
            f"{n_bad} {'row holds' if n_bad == 1 else 'rows hold'} other values: {shown}{more}. "
            "Correct them, or delete the rows that belong to neither side."
        )
    n_src, n_tgt = sides.count(_SOURCE), sides.count(_TARGET)
    if not sides:
        raise ValueError(f"{path}: no data rows below the header; expected source and target rows.")
    for name, count in (("source", n_src), ("target", n_tgt)):
        if not count:
            raise ValueError(
                f"{path}: no '{name}' rows in the 'domain' column; a transfer task needs both sides."
            )
    n_rows, n_cols = n_src + n_tgt, len(feat_i) + (lab_i is not None)
    nbytes = n_rows * n_cols * 8  # float64 features and int64 label codes
    if nbytes > max_bytes:
        raise ValueError(
            f"{path}: {n_rows:,} rows x {n_cols:,} columns would take {_size(nbytes)} once loaded, above the "
            f"limit of {_size(max_bytes)}; raise it (compare --max-array-mb) if this is intended."
        )

    X = {_SOURCE: np.empty((n_src, len(feat_i))), _TARGET: np.empty((n_tgt, len(feat_i)))}
    codes = {_SOURCE: np.empty(n_src, dtype=np.intp), _TARGET: np.empty(n_tgt, dtype=np.intp)}
    filled = {_SOURCE: 0, _TARGET: 0}
    texts = {}  # each distinct label text once -> its code; rows keep only the code
    # A feature named 'index' (pandas' df.reset_index()) that counts the rows from 0 or 1
    # is a row number, not data: it would decide the clusters (S5).
    row_number = [feat_i.index(i) for i in feat_i if header[i].lower() == "index"]
    counts_from = {0, 1} if row_number else set()
    n_read = 0
    with contextlib.closing(_rows(path)) as rows:
        for line, row in rows:
            if n_read == n_rows or len(row) != n_fields:
                raise ValueError(f"{path}: the file changed while it was read; try again.")
            side = sides[n_read]
            k = filled[side]
            try:
                X[side][k] = [float(row[j]) for j in feat_i]
            except ValueError:
                raise ValueError(_bad_number(path, line, row, feat_i, header)) from None
            if lab_i is not None:
                codes[side][k] = texts.setdefault(row[lab_i].strip(), len(texts))
            if counts_from:
                counts_from = {c for c in counts_from if X[side][k, row_number[0]] == n_read + c}
            filled[side] = k + 1
            n_read += 1
    if n_read != n_rows:
        raise ValueError(f"{path}: the file changed while it was read; try again.")
    if counts_from and n_rows > 1:
        first, name = min(counts_from), header[feat_i[row_number[0]]]
        raise ValueError(
            f"{path}: column {name!r} numbers the rows {first}..{n_rows - 1 + first}, as pandas writes "
            "after df.reset_index(); a row number is not a feature. Write the file with "
            "df.to_csv(path, index=False) before reset_index, or delete the column."
        )
    if lab_i is None:
        return X[_SOURCE], X[_TARGET], None, None
    values = np.array(list(texts), dtype=object)
    return X[_SOURCE], X[_TARGET], _Coded(values, codes[_SOURCE]), _Coded(values, codes[_TARGET])


_SOURCE, _TARGET = 1, 2
_SIDES = {"source": _SOURCE, "target": _TARGET}


class _Coded:
    """CSV labels as each distinct text once plus one integer code per row."""

    def __init__(self, values, codes):
        self.values, self.codes = values, codes


def _rows(path):
    """``(line number, fields)`` of each non-blank CSV record after the header."""
    with contextlib.closing(_records(path)) as records:
        next(records, None)
        yield from records


def _records(path):
    # utf-8-sig: Excel's "CSV UTF-8" starts with a byte-order mark, which plain
    # utf-8 would glue onto the first column's name.
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            for row in reader:
                if row:
                    yield reader.line_num, row
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path}: not a readable UTF-8 CSV file ({exc}); save it as CSV UTF-8.") from exc
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc}).") from exc


def _csv_header(path):
    records = _records(path)
    try:
        first = next(records, None)
    finally:
        records.close()
    if first is None:
        raise ValueError(f"{path}: empty file; expected a header with a 'domain' column (source/target).")
    return first[1]


def _n_index_columns(header):
    """How many leading columns are row labels, never features.

    An unnamed first column is pandas' index (``df.to_csv()``) or R's row
    names; ``Unnamed: 0`` is such an index read back by pandas and written again.
    """
    n = 0
    while n < len(header) and _unnamed(header[n]):
        n += 1
    return n


def _unnamed(name):
    return name == "" or _PANDAS_UNNAMED.fullmatch(name) is not None


_PANDAS_UNNAMED = re.compile(r"Unnamed: \d+")  # pandas' name for a column without one


def _key_columns(path, header, n_index, label_column):
    """Indices of the domain column and the label column (None: no labels)."""
    named = header[n_index:]
    lower = [h.lower() for h in header]
    for i in range(n_index, len(header)):
        if _unnamed(header[i]):
            raise ValueError(
                f"{path}: column {i + 1} has no name ({header[i]!r}); name it in the header, or delete it. "
                "(Only the first columns may be unnamed: they are taken as a row index, as pandas and R "
                "write one.)"
            )
    if "domain" not in lower[n_index:]:
        # Excel in many locales writes ';', and "CSV" exports often use tabs: name the one seen.
        seen = next((name for sep, name in _OTHER_SEPARATORS if any(sep in h for h in named)), None)
        hint = f" The file looks {seen}-separated: save it with ',' between fields." if seen else ""
        raise ValueError(
            f"{path}: expected a header with a 'domain' column (source/target); {_columns(header)}.{hint}"
        )
    if lower.count("domain") > 1:
        raise ValueError(f"{path}: {lower.count('domain')} columns named 'domain'; keep one.")
    dom_i = lower.index("domain")
    if label_column is None:
        return dom_i, None
    want = str(label_column).strip().lower()
    if want == "domain":
        raise ValueError(
            f"{path}: label column {label_column!r} is the domain column, which says source/target, not "
            "the classes; name the column that holds the labels (--label-column NAME), or none."
        )
    if want in lower[n_index:]:
        if lower.count(want) > 1:
            raise ValueError(f"{path}: {lower.count(want)} columns named {label_column!r}; keep one.")
        return dom_i, lower.index(want)
    if want != "label":
        raise ValueError(f"{path}: no label column {label_column!r}; {_columns(header)}.")
    suspects = [h for h in named if h.lower() in _LABEL_LIKE]
    if suspects:
        raise ValueError(
            f"{path}: no 'label' column, but {suspects[0]!r} looks like one; pass "
            f"--label-column {suspects[0]} to use it as labels, or --label-column none "
            "to treat it as a feature."
        )
    return dom_i, None


_OTHER_SEPARATORS = ((";", "';'"), ("\t", "tab"))  # field separators other than ',', as the hint names them


def _columns(header, shown=10):
    """'the file has N columns: [...]', with '...' when the list is cut."""
    names = ", ".join(repr(h) for h in header[:shown]) + (", ..." if len(header) > shown else "")
    return f"the file has {len(header)} column{'s' * (len(header) != 1)}: [{names}]"


_SHOWN = 5  # unknown domain values, and lines of each, named in the error


def _lines(count, lines):
    if count == 1:
        return f"line {lines[0]}"
    return f"{count} rows: lines {', '.join(map(str, lines))}{', ...' if count > len(lines) else ''}"


def _bad_number(path, line, row, feat_i, header):
    """The message for the first feature cell of ``row`` that is not a number."""
    for j in feat_i:
        try:
            float(row[j])
        except ValueError:
            where = f"{path}: line {line}, column {header[j]!r}"
            what = " is empty" if not row[j].strip() else f": {row[j]!r} is not a number"
            return f"{where}{what}; every feature cell must hold a number (missing values are not filled in)."
    return f"{path}: line {line}: a feature value is not a number."


def _size(nbytes):
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes >= 10 * 2**20 else f"{nbytes:,} bytes"


def _features(path, name, X):
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{path}: {name} must be a non-empty 2-D array, got shape {X.shape}.")
    if np.iscomplexobj(X):
        raise ValueError(f"{path}: {name} holds complex numbers; clustering needs real features.")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"{path}: {name} is not numeric (dtype {X.dtype}).")
    with np.errstate(over="ignore"):
        X = X.astype(np.float64, copy=False)  # a CSV's float64 array is not copied again
    if not np.isfinite(X).all():
        raise ValueError(f"{path}: {name} contains NaN or infinity (or values too large for float64).")
    return X


def _labels(path, name, y, n_rows):
    """Integer labels 0..n-1 in sorted order, None when absent or all blank."""
    if y is None:
        return None
    if isinstance(y, _Coded):
        return _text_labels(path, name, y.values, y.codes, n_rows)
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise ValueError(f"{path}: {name} must hold one label per row ({n_rows}), got shape {y.shape}.")
    if np.iscomplexobj(y):
        raise ValueError(f"{path}: {name} holds complex numbers; labels must be integers or strings.")
    if y.dtype.kind in "OUS":
        values, codes = np.unique(y, return_inverse=True)
        return _text_labels(path, name, values, codes.ravel(), n_rows)
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError(f"{path}: {name} contains NaN or infinity; labels must be integers or strings.")
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


#: Label texts that mark a missing value, compared in lower case (pandas' ``read_csv`` defaults):
#: R's ``write.csv`` writes ``NA``, pandas' ``to_csv(na_rep=...)`` ``NaN`` or ``null``. Such a
#: label is missing, like a blank cell, never a class.
MISSING_LABEL_TEXTS = frozenset(
    ["na", "n/a", "nan", "-nan", "null", "none", "<na>", "#n/a", "#na", "#n/a n/a",
     "-1.#ind", "1.#ind", "-1.#qnan", "1.#qnan"]
)


def _text_labels(path, name, values, codes, n_rows):
    """Labels given as distinct texts ``values`` and a code per row into them.

    The work is on the distinct texts only, so a long file costs one integer
    per row, never a Python string per row.
    """
    text = np.array([_label_text(v) for v in values], dtype=object)
    blank = text == ""
    mark = np.array([t.lower() in MISSING_LABEL_TEXTS for t in text], dtype=bool)
    per_text = np.bincount(codes, minlength=len(text))
    n_blank, n_marked = int(per_text[blank].sum()), int(per_text[mark].sum())
    if n_blank + n_marked == n_rows:
        return None
    if n_marked:
        marks = ", ".join(f"{t!r}" + (f" x{c}" if c > 1 else "") for t, c in zip(text[mark], per_text[mark]) if c)
        raise ValueError(
            f"{path}: {name} has {n_blank + n_marked} missing labels ({marks}"
            f"{f', {n_blank} blank' if n_blank else ''}) among {n_rows} rows; a text such as NA, NaN or null "
            "marks a missing label, never a class: give every row of a side a label, or none "
            "(rename a class spelt like a missing value)."
        )
    if n_blank:
        raise ValueError(
            f"{path}: {name} has {n_blank} blank labels among {n_rows} rows; "
            "give every row of a side a label, or none."
        )
    used = per_text > 0
    # Texts that differ only in spaces, or numbers written differently ("2", "2.0"), are one class.
    classes = np.unique(_as_numbers(text[used]), return_inverse=True)[1]
    rank = np.zeros(len(text), dtype=np.int64)
    rank[used] = classes.ravel()
    return rank[codes]


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
