"""``compare()``'s options from Python: refused up front, as the command line refuses them
(V14's findings, 2026-11-28); and the command line's words for an unavailable device."""

import re

import numpy as np
import pytest
import torch

from sktransfer_cluster import compare as cmp
from sktransfer_cluster.cli import main
from sktransfer_cluster.errors import UsageError


@pytest.fixture
def no_loading(monkeypatch):
    def load_tasks(*args, **kw):
        raise AssertionError("tasks were loaded")

    monkeypatch.setattr(cmp, "_load_tasks", load_tasks)


def _compare(**kwargs):
    return cmp.compare(**{"data": ["tdcm"], "methods": ["SinkhornKMeans"], "progress": False, "log": False, **kwargs})


def test_compare_refuses_empty_data(no_loading):
    with pytest.raises(UsageError, match=re.escape("data is empty; pass built-in task names (digits, tdcm, mnist) "
                                                   "or paths to .npz/.csv files")):
        _compare(data=[])


@pytest.mark.parametrize("value", [True, "3", 2.5, 0, -2], ids=["bool", "str", "float", "zero", "negative"])
def test_compare_refuses_an_n_clusters_that_is_not_an_integer_of_at_least_1(value, no_loading):
    with pytest.raises(UsageError, match=re.escape(f"n_clusters must be a positive integer or None, got {value!r}")):
        _compare(n_clusters=value)


@pytest.mark.parametrize("value", [True, 2.5, 0], ids=["bool", "float", "zero"])
def test_compare_refuses_threads_that_are_not_an_integer_of_at_least_1(value, no_loading):
    with pytest.raises(UsageError, match=re.escape(f"threads must be a positive integer or None, got {value!r}")):
        _compare(threads=value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 0, "1024"], ids=["nan", "inf", "negative", "zero", "str"])
def test_compare_refuses_a_max_array_mb_that_is_not_a_finite_number_above_0(value, no_loading):
    with pytest.raises(UsageError, match=re.escape(f"max_array_mb must be a positive, finite number of MiB, got {value!r}")):
        _compare(max_array_mb=value)


def test_compare_takes_numpy_integers_for_n_clusters_and_threads(monkeypatch):
    monkeypatch.setattr(cmp, "_load_tasks", lambda *args: [])
    assert _compare(n_clusters=np.int64(3), threads=np.int32(1), max_array_mb=np.float32(8)) == ([], [])


def test_an_unavailable_device_on_the_command_line_is_answered_with_the_option_to_pass(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["compare", "--quick", "--device", "cuda", "--methods", "SinkhornKMeans"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("sktransfer-cluster: error: --device cuda was requested but CUDA is not available on this machine; "
                   "use --device cpu or --device auto.")
