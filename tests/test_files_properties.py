"""Properties of the file loaders over generated files (issue 30).

Each property writes a transfer task the way a user's tool would -- pandas with its
index, R with row names, Excel with a byte-order mark and CRLF, quoted cells,
columns in any order -- and checks that the loader gives back exactly the task
that was written, or one ValueError that names the problem. These would have
caught S4 (domain typos dropped), S5 (the index used as a feature), S6 (the
domain column taken as labels) and the R2/R4 defects.
"""

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sktransfer_cluster.files import load_transfer_file

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
# "10" and "9" among words are strings; on a side of only those two, numbers (9 before 10).
_STRING_LABELS = ["cat", "dog", "ant bee", "x,y", 'say "hi"', "é", "10", "9"]


@st.composite
def tasks(draw):
    """A task as the lists a file holds: features, and per side labels (or None)."""
    n_features = draw(st.integers(1, 4))
    sides = {}
    kind = draw(st.sampled_from(["none", "ints", "strings"]))
    for side in ("source", "target"):
        n = draw(st.integers(1, 6))
        row = st.lists(_floats, min_size=n_features, max_size=n_features)
        X = draw(st.lists(row, min_size=n, max_size=n))
        if kind == "ints":
            y = [str(v) for v in draw(st.lists(st.integers(-3, 12), min_size=n, max_size=n))]
        elif kind == "strings":
            y = draw(st.lists(st.sampled_from(_STRING_LABELS), min_size=n, max_size=n))
        else:
            y = None
        if y is not None and side == "target" and draw(st.booleans()):
            y = [""] * n  # an unlabelled target: blank cells
        sides[side] = (X, y)
    return n_features, kind, sides


@st.composite
def spellings(draw):
    """How a tool writes the file: index column, BOM, line ends, quoting, column order, domain case."""
    return {
        "index": draw(st.sampled_from(["none", "pandas", "pandas-reread", "R", "multiindex"])),
        "bom": draw(st.booleans()),
        "lineterminator": draw(st.sampled_from(["\n", "\r\n"])),
        "quoting": draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL])),
        "order_seed": draw(st.integers(0, 2**16)),
        "domain_case": draw(st.sampled_from([str.lower, str.upper, str.title, lambda s: f" {s} "])),
        "blank_lines": draw(st.booleans()),
    }


# The leading header cells each tool writes for its index (pandas, pandas after a
# read_csv/to_csv round trip, R's row names, a pandas MultiIndex).
_INDEX_HEADERS = {"none": [], "pandas": [""], "pandas-reread": ["", "Unnamed: 0"], "R": [""], "multiindex": ["", ""]}


def _write(path, task, how, domain_of=None):
    """Write ``task`` to ``path`` spelled as ``how``; ``domain_of(i, d)`` may replace row i's domain.

    Returns the feature numbers in the order the file holds them.
    """
    n_features, kind, sides = task
    columns = ["domain", *(f"x{j}" for j in range(n_features))] + ([] if kind == "none" else ["label"])
    order = np.random.default_rng(how["order_seed"]).permutation(len(columns))
    rows = []
    for side, (X, y) in sides.items():
        for i, x in enumerate(X):
            rows.append({"domain": how["domain_case"](side), **{f"x{j}": repr(v) for j, v in enumerate(x)},
                         **({} if y is None else {"label": y[i]})})
    if domain_of is not None:
        for i, row in enumerate(rows):
            row["domain"] = domain_of(i, row["domain"])
    lead = _INDEX_HEADERS[how["index"]]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=how["lineterminator"], quoting=how["quoting"])
    writer.writerow(lead + [columns[k] for k in order])
    for i, row in enumerate(rows):
        labels = [str(i + (how["index"] == "R"))] * len(lead)  # R numbers rows from 1
        writer.writerow(labels + [row[columns[k]] for k in order])
        if how["blank_lines"] and i == 0:
            buf.write(how["lineterminator"])
    path.write_bytes(buf.getvalue().encode("utf-8-sig" if how["bom"] else "utf-8"))
    return [int(columns[k][1:]) for k in order if columns[k].startswith("x")]  # features in file order


def _expected_codes(y):
    """Classes in sorted order: numeric order when every label is a number."""
    if y is None or all(v == "" for v in y):
        return None
    try:
        values = np.array([float(v) for v in y])
    except ValueError:
        values = np.array(y)
    return np.unique(values, return_inverse=True)[1]


@SETTINGS
@given(task=tasks(), how=spellings())
def test_a_written_task_loads_back_exactly_however_it_is_spelled(tmp_path, task, how):
    path = tmp_path / "task.csv"
    features = _write(path, task, how)
    before = path.read_bytes()
    loaded = load_transfer_file(path)
    for side, (X, y) in task[2].items():
        want_X = np.array(X, dtype=float)[:, features]
        np.testing.assert_array_equal(getattr(loaded, f"X_{side}"), want_X)  # the index is never a feature
        want, got = _expected_codes(y), getattr(loaded, f"y_{side}")
        assert (got is None) if want is None else got.tolist() == want.tolist()
    assert path.read_bytes() == before


_typos = st.one_of(
    st.sampled_from(["tagret", "sorce", "src", "tgt", "", "source target", "targets", "trgt", "Ziel", "0"]),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cc", "Cs", "Zl", "Zp"]), max_size=8),
).filter(lambda v: v.strip().lower() not in ("source", "target"))


@SETTINGS
@given(task=tasks(), how=spellings(), typo=_typos, data=st.data())
def test_a_domain_typo_is_refused_with_its_value_and_line(tmp_path, task, how, typo, data):
    n_rows = sum(len(X) for X, _ in task[2].values())
    bad_row = data.draw(st.integers(0, n_rows - 1))
    path = tmp_path / "typo.csv"
    _write(path, task, how, domain_of=lambda i, d: typo if i == bad_row else d)
    # Line of the bad row: the header, then a blank line after the first row if any.
    line = 2 + bad_row + (how["blank_lines"] and bad_row > 0)
    with pytest.raises(ValueError) as info:
        load_transfer_file(path)
    assert f"{typo!r} (line {line})" in str(info.value) and "'source' or 'target'" in str(info.value)


@SETTINGS
@given(task=tasks(), how=spellings(), spelling=st.sampled_from(["domain", "Domain", "DOMAIN", " domain "]))
def test_the_domain_column_is_never_the_labels(tmp_path, task, how, spelling):
    path = tmp_path / "task.csv"
    _write(path, task, how)
    with pytest.raises(ValueError, match="is the domain column"):
        load_transfer_file(path, label_column=spelling)


@SETTINGS
@given(task=tasks(), how=spellings(), slack=st.integers(-40, 40))
def test_the_size_guard_admits_exactly_the_arrays_that_fit(tmp_path, task, how, slack):
    path = tmp_path / "task.csv"
    _write(path, task, how)
    n_features, kind, sides = task
    n_rows = sum(len(X) for X, _ in sides.values())
    needed = n_rows * (n_features + (kind != "none")) * 8
    limit = max(needed + slack, 0)
    if limit >= needed:
        load_transfer_file(path, max_bytes=limit)
    else:
        with pytest.raises(ValueError, match=f"{n_rows} rows x .* would take {needed:,} bytes once loaded"):
            load_transfer_file(path, max_bytes=limit)


PLAIN = {"index": "none", "bom": False, "lineterminator": "\n", "quoting": csv.QUOTE_MINIMAL,
         "order_seed": 0, "domain_case": str.lower, "blank_lines": False}


@SETTINGS
@given(task=tasks(), n_blank=st.integers(1, 5), side=st.sampled_from(["source", "target"]))
def test_some_blank_labels_on_a_side_are_refused_never_a_class(tmp_path, task, n_blank, side):
    n_features, _, sides = task
    sides = {s: (X, ["a"] * len(X)) for s, (X, _) in sides.items()}
    X, y = sides[side]
    if n_blank >= len(X):
        return  # all blank means "no labels": the round trip covers it
    y[:n_blank] = [""] * n_blank
    path = tmp_path / "blank.csv"
    _write(path, (n_features, "strings", sides), PLAIN)
    with pytest.raises(ValueError, match=f"y_{side} has {n_blank} blank labels among {len(X)} rows"):
        load_transfer_file(path)


@SETTINGS
@given(task=tasks(), as_bytes=st.booleans())
def test_an_npz_task_loads_back_exactly(tmp_path, task, as_bytes):
    _, kind, sides = task
    arrays = {}
    for side, (X, y) in sides.items():
        arrays[f"X_{side}"] = np.array(X, dtype=float)
        if y is not None:
            arrays[f"y_{side}"] = np.array([int(v) for v in y]) if kind == "ints" and y[0] else np.array(y)
            if as_bytes and arrays[f"y_{side}"].dtype.kind == "U":
                arrays[f"y_{side}"] = np.char.encode(arrays[f"y_{side}"], "utf-8")
    path = tmp_path / "task.npz"
    np.savez(path, **arrays)
    loaded = load_transfer_file(path)
    for side, (X, y) in sides.items():
        np.testing.assert_array_equal(getattr(loaded, f"X_{side}"), arrays[f"X_{side}"])
        want, got = _expected_codes(y), getattr(loaded, f"y_{side}")
        assert (got is None) if want is None else got.tolist() == want.tolist()


# ---------------------------------------------------------------- names of the files in a data list
_STEMS = ["t", "task", "digits"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(_STEMS), st.sampled_from([".csv", ".npz"])),
                   min_size=1, max_size=4, unique_by=lambda f: (f[0], f[1], f[2])),
    with_built_in=st.booleans(),
)
def test_a_data_list_loads_files_of_distinct_names_and_refuses_a_shared_one_naming_both(tmp_path_factory, files,
                                                                                          with_built_in):
    """Duplicate stems (a/t.csv b/t.csv, t.csv t.npz, digits.csv beside the built-in digits) were
    pooled into one task or overwrote each other's figures; distinct names load as they are."""
    from sktransfer_cluster.files import load_data_list

    root = tmp_path_factory.mktemp("stems")
    items = ["digits"] if with_built_in else []
    for folder, stem, suffix in files:
        path = root / f"d{folder}" / f"{stem}{suffix}"
        path.parent.mkdir(exist_ok=True)
        if suffix == ".npz":
            np.savez(path, X_source=np.zeros((2, 1)), X_target=np.ones((2, 1)))
        else:
            path.write_text("domain,x\nsource,0\ntarget,1\n")
        items.append(str(path))
    names = [Path(item).stem for item in items]
    clash = next((name for i, name in enumerate(names) if name in names[:i]), None)  # the first repeat
    if clash is None:
        loaded = load_data_list(items, built_in=("digits",))
        assert [item if isinstance(item, str) else item.name for item in loaded] == names
    else:
        with pytest.raises(ValueError, match=rf"both named '{clash}'.*rename one"):
            load_data_list(items, built_in=("digits",))
