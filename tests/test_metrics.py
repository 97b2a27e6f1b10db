import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sktransfer_cluster.metrics import clustering_accuracy, match_labels, n_dominant_clusters

labelings = st.lists(st.integers(0, 5), min_size=1, max_size=60)


@settings(max_examples=50, deadline=None)
@given(labelings, st.randoms(use_true_random=False))
def test_accuracy_is_invariant_to_renaming_cluster_ids(labels, rnd):
    labels = np.array(labels)
    ids = list(range(6))
    rnd.shuffle(ids)
    renamed = np.array(ids)[labels]
    assert clustering_accuracy(labels, renamed) == 1.0


@settings(max_examples=50, deadline=None)
@given(labelings, labelings, st.randoms(use_true_random=False))
def test_accuracy_is_symmetric_in_renaming_the_prediction(true, pred, rnd):
    n = min(len(true), len(pred))
    true, pred = np.array(true[:n]), np.array(pred[:n])
    ids = list(range(6))
    rnd.shuffle(ids)
    assert clustering_accuracy(true, pred) == clustering_accuracy(true, np.array(ids)[pred])


def test_accuracy_with_more_clusters_than_classes_counts_unmatched_as_errors():
    assert clustering_accuracy([0, 0, 0, 0], [0, 1, 2, 3]) == 0.25


def test_accuracy_with_fewer_clusters_than_classes():
    assert clustering_accuracy([0, 0, 1, 1, 2, 2], [0, 0, 0, 0, 1, 1]) == pytest.approx(4 / 6)


def test_accuracy_accepts_string_labels():
    assert clustering_accuracy(["a", "a", "b"], [5, 5, 7]) == 1.0


def test_accuracy_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        clustering_accuracy([0, 1], [0])


def test_n_dominant_clusters_counts_clusters_above_n_over_k():
    labels = [0] * 40 + [1] * 40 + [2] * 15 + [3] * 5
    assert n_dominant_clusters(labels, n_clusters=5) == 2  # threshold 20
    assert n_dominant_clusters(labels, n_clusters=10) == 3  # threshold 10


def test_n_dominant_clusters_defaults_k_to_the_number_of_distinct_labels():
    assert n_dominant_clusters([0] * 40 + [1] * 40 + [2] * 15 + [3] * 5) == 2  # threshold 25


def test_match_labels_renames_clusters_to_their_best_matching_class():
    from sktransfer_cluster.metrics import match_labels

    renamed = match_labels([0, 0, 1, 1, 2, 2], [5, 5, 3, 3, 3, 9])
    assert renamed.tolist() == [0, 0, 1, 1, 1, 2]


def test_match_labels_gives_unmatched_clusters_fresh_ids():
    from sktransfer_cluster.metrics import match_labels

    # cluster 1 matches class 0; clusters 0 and 2 become 1 and 2
    assert match_labels([0, 0, 0, 0], [0, 1, 1, 2]).tolist() == [1, 0, 0, 2]


def test_match_labels_refuses_fractional_class_labels_instead_of_truncating_them():
    # V11 E3: [0.5, 0.5, 1.5] came back as the ids [0, 0, 1], with no error.
    from sktransfer_cluster.metrics import match_labels

    with pytest.raises(ValueError, match="labels_true must be integers"):
        match_labels([0.5, 0.5, 1.5], [0, 0, 1])


def test_match_labels_refuses_text_class_labels():
    from sktransfer_cluster.metrics import match_labels

    with pytest.raises(ValueError, match="labels_true must be integers"):
        match_labels(["1", "1", "2"], [0, 0, 1])


def test_match_labels_takes_integers_stored_as_floats():
    from sktransfer_cluster.metrics import match_labels

    assert match_labels(np.array([1.0, 1.0, 3.0]), [7, 7, 4]).tolist() == [1, 1, 3]


def test_within_cluster_sum_of_squares_accepts_lists():
    from sktransfer_cluster.metrics import within_cluster_sum_of_squares

    assert within_cluster_sum_of_squares([[0.0], [2.0], [10.0]], [0, 0, 1], 2) == 2.0


@pytest.mark.parametrize(
    "labels, n_labels, match",
    [
        ([0, 1], 2, "2 labels for 4 rows"),
        ([0, 0, 1, 2], 2, r"labels must lie in 0 \.\. 1"),
        ([0, 0, 1, -1], 2, r"labels must lie in 0 \.\. 1"),
        ([0.0, 0.0, 1.0, 1.0], 2, "integer"),
        ([[0, 0], [1, 1]], 2, "one label per row"),
        ([0, 0, 1, 1], 0, "n_labels must be an integer >= 1"),
    ],
    ids=["short", "too-large", "negative", "float", "2-d", "no-labels"],
)
def test_within_cluster_sum_of_squares_refuses_labels_that_do_not_fit_x(labels, n_labels, match):
    from sktransfer_cluster.metrics import within_cluster_sum_of_squares

    X = np.array([[0.0], [2.0], [10.0], [11.0]])
    with pytest.raises(ValueError, match=match):
        within_cluster_sum_of_squares(X, np.array(labels), n_labels)


def test_within_cluster_sum_of_squares_refuses_x_that_is_not_two_dimensional():
    from sktransfer_cluster.metrics import within_cluster_sum_of_squares

    with pytest.raises(ValueError, match="X must be 2-D"):
        within_cluster_sum_of_squares(np.array([0.0, 2.0]), np.array([0, 1]), 2)


def test_within_cluster_sum_of_squares_of_read_only_arrays_raises_no_torch_warning():
    # torch warns about non-writable arrays once per process, so a fresh process tells
    # whether the warning would be raised, whatever earlier tests wrapped.
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from sktransfer_cluster.metrics import within_cluster_sum_of_squares\n"
        "X = np.array([[0.0], [2.0], [10.0]]); X.setflags(write=False)\n"
        "labels = np.array([0, 0, 1]); labels.setflags(write=False)\n"
        "assert within_cluster_sum_of_squares(X, labels, 2) == 2.0\n"
    )
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_match_labels_takes_integer_labels_in_an_object_array():
    # V12 5: refused (with an AttributeError for text) after the integer check came in.
    from sktransfer_cluster.metrics import match_labels

    assert match_labels(np.array([0, 1, 1], dtype=object), [1, 0, 0]).tolist() == [0, 1, 1]


@pytest.mark.parametrize("labels", [np.array(["a", "b", "b"], dtype=object), np.array(["1", "2", "2"], dtype=object)],
                         ids=["text", "numeric-text"])
def test_match_labels_refuses_text_in_an_object_array_with_a_clear_message(labels):
    from sktransfer_cluster.metrics import match_labels

    with pytest.raises(ValueError, match="labels_true must be integers"):
        match_labels(labels, [1, 0, 0])


def test_match_labels_keeps_large_integer_labels_of_an_object_array_exact():
    # V13 2: through float64, 2**53 and 2**53 + 1 merged into one class.
    from sktransfer_cluster.metrics import match_labels

    big = np.array([2**53, 2**53 + 1, 2**53 + 1], dtype=object)
    assert match_labels(big, [0, 1, 1]).tolist() == [2**53, 2**53 + 1, 2**53 + 1]
    with pytest.raises(ValueError, match="must fit in int64"):
        match_labels(np.array([2**63, 2**63, 5], dtype=object), [0, 0, 1])


def test_match_labels_names_the_text_label_of_a_mixed_object_array():
    from sktransfer_cluster.metrics import match_labels

    with pytest.raises(ValueError, match="got 'a'"):
        match_labels(np.array([1, 2, "a"], dtype=object), [0, 1, 1])


def test_match_labels_refuses_uint64_class_labels_past_int64_with_a_value_error():
    """V15 #6: a raw OverflowError from the int64 mapping."""
    y = np.array([2**63 + 5, 2**63 + 5, 7, 7], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"must fit in int64, got 9223372036854775813"):
        match_labels(y, [1, 1, 0, 0])


def test_match_labels_refuses_whole_float_class_labels_past_int64_with_a_value_error():
    with pytest.raises(ValueError, match=r"must fit in int64, got 1e\+30"):
        match_labels(np.array([1e30, 1e30, 7.0, 7.0]), [1, 1, 0, 0])


def test_match_labels_says_when_unmatched_clusters_get_no_fresh_id_within_int64():
    y = np.array([np.iinfo(np.int64).max] * 2 + [0, 0])
    with pytest.raises(ValueError, match=r"1 unmatched cluster\(s\) need fresh ids after the largest class id"):
        match_labels(y, [0, 0, 1, 2])


def test_match_labels_refuses_empty_labels_as_clustering_accuracy_does():
    with pytest.raises(ValueError, match="needs at least one sample"):
        match_labels(np.array([], dtype=int), np.array([], dtype=int))


def test_match_labels_keeps_the_largest_int64_class_id_when_every_cluster_is_matched():
    big = np.iinfo(np.int64).max
    assert match_labels(np.array([big, big, 0, 0]), [1, 1, 0, 0]).tolist() == [big, big, 0, 0]
