"""Warnings point at the user's line, not at the package's internals (base.runtime.warn)."""

import inspect
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from sktransfer_cluster import SinkhornKMeans, TDCMCluster


def _at_line(caught, line):
    """The ConvergenceWarnings caught, and whether each names ``line`` of this file."""
    found = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    return found, all((w.filename, w.lineno) == (__file__, line) for w in found)


def _duplicates():
    # Two distinct rows only: any estimator asked for 3 clusters finds at most 2.
    return np.repeat([[0.0, 0.0], [5.0, 5.0]], 30, axis=0)


def test_a_convergence_warning_of_fit_names_the_line_that_called_fit():
    est, X = SinkhornKMeans(3, n_init=1, random_state=0), _duplicates()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        est.fit(X)
    found, at_line = _at_line(caught, line)
    assert found and at_line


def test_a_convergence_warning_of_transfer_names_the_line_that_called_transfer():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.1, (20, 2)) for c in (0.0, 4.0, 8.0)])
    est = TDCMCluster(3, max_epochs=2, random_state=0).fit(X)
    target = _duplicates()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        est.transfer(target)
    found, at_line = _at_line(caught, line)
    assert found and at_line
