"""A user's transfer task from a file: every bad file is one clear ValueError."""

import io
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sktransfer_cluster.files import load_transfer_file


def _csv(tmp_path, text, name="task.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _npz(tmp_path, name="task.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


GOOD = {
    "X_source": np.arange(8.0).reshape(4, 2),
    "X_target": np.arange(8.0).reshape(4, 2) + 1,
    "y_source": np.array([0, 0, 1, 1]),
    "y_target": np.array([1, 1, 0, 0]),
}


def test_npz_task_is_loaded_as_float_features_and_integer_labels(tmp_path):
    task = load_transfer_file(_npz(tmp_path, **GOOD))
    assert task.X_source.dtype == np.float64 and task.X_target.shape == (4, 2)
    assert task.y_source.tolist() == [0, 0, 1, 1] and task.y_target.tolist() == [1, 1, 0, 0]
    assert task.name == "task"


def test_csv_gives_the_same_task_as_the_equivalent_npz(tmp_path):
    lines = ["domain,a,b,label"]
    for dom, X, y in (("source", GOOD["X_source"], GOOD["y_source"]), ("target", GOOD["X_target"], GOOD["y_target"])):
        lines += [f"{dom},{x[0]},{x[1]},{c}" for x, c in zip(X, y)]
    from_csv = load_transfer_file(_csv(tmp_path, "\n".join(lines) + "\n"))
    from_npz = load_transfer_file(_npz(tmp_path, **GOOD))
    for attr in ("X_source", "X_target", "y_source", "y_target"):
        np.testing.assert_array_equal(getattr(from_csv, attr), getattr(from_npz, attr))


def test_csv_domain_values_match_in_any_case_and_with_spaces(tmp_path):
    task = load_transfer_file(_csv(tmp_path, "Domain,x\nSource,1\n SOURCE ,2\nTarget,3\ntarget,4\n"))
    assert task.X_source.ravel().tolist() == [1, 2] and task.X_target.ravel().tolist() == [3, 4]


def test_csv_without_source_or_target_rows_names_the_values_found(tmp_path):
    with pytest.raises(ValueError, match=r"found \['src', 'tgt'\]"):
        load_transfer_file(_csv(tmp_path, "domain,x\nsrc,1\ntgt,2\n"))


def test_csv_string_labels_are_encoded_as_integers_in_sorted_order(tmp_path):
    task = load_transfer_file(_csv(tmp_path, "domain,x,label\nsource,1,cat\nsource,2,ant\ntarget,3,b\ntarget,4,a\n"))
    assert task.y_source.tolist() == [1, 0] and task.y_target.tolist() == [1, 0]


def test_csv_numeric_labels_keep_their_numeric_order(tmp_path):
    task = load_transfer_file(_csv(tmp_path, "domain,x,label\nsource,1,10\nsource,2,9\ntarget,3,2\ntarget,4,2.0\n"))
    assert task.y_source.tolist() == [1, 0]  # 9 < 10, not "10" < "9"
    assert task.y_target.tolist() == [0, 0]


def test_csv_all_blank_target_labels_mean_no_target_labels(tmp_path):
    task = load_transfer_file(_csv(tmp_path, "domain,x,label\nsource,1,a\nsource,2,b\ntarget,3,\ntarget,4, \n"))
    assert task.y_target is None and task.y_source.tolist() == [0, 1]


def test_csv_some_blank_labels_are_refused_never_a_class(tmp_path):
    with pytest.raises(ValueError, match="y_target has 1 blank labels among 2 rows"):
        load_transfer_file(_csv(tmp_path, "domain,x,label\nsource,1,a\nsource,2,b\ntarget,3,\ntarget,4,a\n"))


def test_csv_label_like_column_is_not_silently_a_feature(tmp_path):
    path = _csv(tmp_path, "domain,x,class\nsource,1,a\nsource,2,b\ntarget,3,a\ntarget,4,b\n")
    with pytest.raises(ValueError, match="--label-column class"):
        load_transfer_file(path)
    assert load_transfer_file(path, label_column="class").y_target.tolist() == [0, 1]
    as_feature = load_transfer_file(_csv(tmp_path, "domain,x,class\nsource,1,5\ntarget,3,6\n"), label_column=None)
    assert as_feature.X_source.tolist() == [[1.0, 5.0]] and as_feature.y_source is None


def test_csv_ragged_row_names_its_line(tmp_path):
    with pytest.raises(ValueError, match="line 3 has 3 fields, the header has 2"):
        load_transfer_file(_csv(tmp_path, "domain,x\nsource,1\ntarget,2,3\n"))


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p.write_bytes(_npy_bytes(np.zeros((3, 2)))), "not a valid .npz archive"),  # a .npy named .npz
        (lambda p: p.write_bytes(b""), "not a valid .npz archive"),
        (lambda p: p.mkdir(), "not a file"),
        (lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "not a valid .npz archive"),
    ],
)
def test_unreadable_npz_gives_a_clear_error(tmp_path, setup, message):
    path = tmp_path / "x.npz"
    setup(path)
    with pytest.raises(ValueError, match=message):
        load_transfer_file(path)


def _npy_bytes(array):
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _npz_with_header(path, shape, dtype="<f8"):
    """An .npz whose X_source header claims ``shape`` but holds almost no data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("X_source.npy", buf.getvalue() + b"\0" * 16)
        zf.writestr("X_target.npy", _npy_bytes(np.zeros((2, 2))))


def test_array_larger_than_the_cap_is_refused_before_loading(tmp_path):
    path = tmp_path / "huge.npz"
    _npz_with_header(path, (100_000, 100_000))
    with pytest.raises(ValueError, match=r"X_source would take 76,294 MiB .* above the limit of 1,024 MiB"):
        load_transfer_file(path)


def test_truncated_array_gives_a_clear_error(tmp_path):
    path = tmp_path / "short.npz"
    _npz_with_header(path, (10, 2))
    with pytest.raises(ValueError, match="X_source is not a readable array"):
        load_transfer_file(path)


def test_compressed_array_that_expands_past_the_cap_is_refused(tmp_path):
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, X_source=np.zeros((2000, 100)), X_target=np.zeros((2, 100)))
    with pytest.raises(ValueError, match="above the limit"):
        load_transfer_file(path, max_bytes=100_000)


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({**GOOD, "X_source": GOOD["X_source"] * 1j}, "complex"),
        ({**GOOD, "y_source": np.array([0, 1])}, "one label per row"),
        ({**GOOD, "y_target": np.array([0.0, np.nan, 1, 1])}, "NaN"),
        ({**GOOD, "X_target": np.array([["a", "b"]] * 4)}, "not numeric"),
        ({**GOOD, "X_source": np.zeros((4, 0))}, "non-empty 2-D"),
        ({**GOOD, "X_source": np.array([[1e308, 1e308]] * 4, dtype=np.longdouble) * 10}, "infinity"),
    ],
)
def test_bad_npz_arrays_give_a_clear_error(tmp_path, arrays, message):
    with pytest.raises(ValueError, match=message):
        load_transfer_file(_npz(tmp_path, **arrays))


def test_object_arrays_are_never_unpickled(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, X_source=np.array([{"a": 1}] * 2, dtype=object), X_target=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="Python objects"):
        load_transfer_file(path)


_members = st.dictionaries(
    st.sampled_from(["X_source", "X_target", "y_source", "y_target", "other"]),
    st.one_of(
        st.builds(np.zeros, st.tuples(st.integers(0, 4), st.integers(0, 3))),
        st.builds(np.arange, st.integers(0, 5)),
        st.lists(st.sampled_from(["a", "", "1", "x y"]), max_size=4).map(np.array),
        st.just(np.array([[np.nan, 1.0]])),
        st.just(np.array([1 + 2j, 3j])),
    ),
    min_size=1,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=_members)
def test_fuzzed_npz_members_give_a_task_or_a_value_error(tmp_path, members):
    path = tmp_path / "fuzz.npz"
    np.savez(path, **members)
    try:
        task = load_transfer_file(path)
    except ValueError as exc:
        assert str(exc).startswith(str(path))
        return
    assert task.X_source.ndim == 2 and np.isfinite(task.X_source).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".npz", ".csv"]))
def test_fuzzed_bytes_give_a_value_error_never_another_exception(tmp_path, data, suffix):
    path = tmp_path / f"bytes{suffix}"
    path.write_bytes(data)
    try:
        load_transfer_file(path)
    except ValueError:
        pass


_cells = st.sampled_from(["source", "Target", "SRC", "", "1", "2.5", "nan", "x", "1e400", "-3"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.lists(st.sampled_from(["domain", "label", "x", "y", "class", ""]), min_size=1, max_size=4),
       body=st.lists(st.lists(_cells, min_size=0, max_size=5), max_size=6))
def test_fuzzed_csv_gives_a_task_or_a_value_error(tmp_path, header, body):
    path = tmp_path / "fuzz.csv"
    path.write_text("\n".join(",".join(r) for r in [header, *body]) + "\n")
    try:
        task = load_transfer_file(path)
    except ValueError:
        return
    assert np.isfinite(task.X_source).all() and np.isfinite(task.X_target).all()
    for y, X in ((task.y_source, task.X_source), (task.y_target, task.X_target)):
        assert y is None or (y.dtype == np.int64 and y.shape == (X.shape[0],))
