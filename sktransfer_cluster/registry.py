"""The one list of methods: name -> estimator, how it takes K, and its smallest budget.

The CLI, :mod:`~sktransfer_cluster.compare`, the lazy public names of
:mod:`sktransfer_cluster.cluster`, the tests and every benchmark read this module;
none keeps a list of its own. It imports neither torch nor an estimator, so
``sktransfer-cluster --help`` stays instant: :meth:`Method.build` imports the
estimator's wing on first use. A sixth estimator is its wing plus one
:func:`register` call here (``docs/adding_an_estimator.md``).

Examples
--------
>>> from sktransfer_cluster.registry import REGISTRY
>>> est = REGISTRY["TDCMCluster"].build(3, random_state=0)
>>> type(est).__name__, est.n_clusters
('TDCMCluster', 3)
>>> REGISTRY["C2MCluster"].bounded_k(20)
{'max_clusters': 20}
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable

__all__ = ["Method", "REGISTRY", "register", "method_names", "estimator_modules"]


def _given_k(k):
    return {"n_clusters": k}


@dataclass(frozen=True)
class Method:
    """One method of the package: an estimator class at fixed settings.

    Attributes
    ----------
    name : str
        What the CLI, ``compare`` and the benchmarks call it.
    target : str or type
        ``"module:Class"`` of the estimator (imported on first use), or the class
        itself (for estimators defined outside the package).
    params : dict
        Settings beyond the class defaults that make this method (e.g.
        ``embedding="autoencoder"``); empty for an estimator at its defaults.
    given_k : callable
        ``k -> params`` that give the estimator K (default ``{"n_clusters": k}``).
    bounded_k : callable or None
        ``bound -> params`` that make it estimate K, at most ``bound``; None when
        it cannot estimate K.
    smallest_budget : dict
        Training budgets that make a fit take seconds on a few hundred rows: for
        tests and every benchmark's ``--smoke``. Never a default.
    """

    name: str
    target: str | type
    params: dict = field(default_factory=dict)
    given_k: Callable[[int], dict] = _given_k
    bounded_k: Callable[[int], dict] | None = None
    smallest_budget: dict = field(default_factory=dict)

    @property
    def estimator_class(self):
        """The estimator class, imported on first use."""
        if isinstance(self.target, type):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def build(self, n_clusters=None, *, bound=None, smallest=False, **params):
        """An estimator of this method with K given (``n_clusters``) or bounded (``bound``).

        Parameters
        ----------
        n_clusters : int, default=None
            K, passed through :attr:`given_k`.
        bound : int, default=None
            Instead of K, an upper bound, passed through :attr:`bounded_k`.
        smallest : bool, default=False
            Apply :attr:`smallest_budget` (tests and benchmark smoke runs).
        **params
            Anything else, e.g. ``random_state`` or ``device``.

        Raises
        ------
        ValueError
            If ``bound`` is given to a method that cannot estimate K.
        """
        settings = dict(self.params)
        if bound is not None:
            if self.bounded_k is None:
                raise ValueError(f"{self.name} takes K and cannot estimate it; pass n_clusters.")
            settings.update(self.bounded_k(bound))
        elif n_clusters is not None:
            settings.update(self.given_k(n_clusters))
        if smallest:
            settings.update(self.smallest_budget)
        settings.update(params)
        return self.estimator_class(**settings)


_REGISTRY = {}
#: Read-only view of the registered methods, in registration order.
REGISTRY = MappingProxyType(_REGISTRY)

_WINGS = "sktransfer_cluster.cluster"


def register(method, *, replace=False):
    """Add ``method`` (a :class:`Method`) to :data:`REGISTRY`; return it.

    Raises
    ------
    ValueError
        If its name is taken (unless ``replace=True``).
    """
    if method.name in _REGISTRY and not replace:
        raise ValueError(f"a method named {method.name!r} is already registered; pick another name.")
    _REGISTRY[method.name] = method
    return method


def unregister(name):
    """Remove a method from :data:`REGISTRY` (for tests that add one)."""
    del _REGISTRY[name]


def method_names():
    """The registered names, in order."""
    return tuple(_REGISTRY)


def unknown_k_error(task_name, methods):
    """The refusal for a task without target labels when no K is given, or None.

    Only the methods with :attr:`Method.bounded_k` estimate K; when any of ``methods`` cannot,
    the run cannot proceed. Written once for the CLI's torch-free checks and :func:`compare`.
    """
    fixed = [m for m in methods if _REGISTRY[m].bounded_k is None]
    if not fixed:
        return None
    estimating = ", ".join(m.name for m in _REGISTRY.values() if m.bounded_k)
    verb = "needs" if len(fixed) == 1 else "need"
    return (
        f"{task_name} has no target labels, so K is unknown: pass --n-clusters K "
        f"({', '.join(fixed)} {verb} it; only {estimating} estimate K)"
    )


def estimator_modules():
    """``{class name: module}`` of the package's own estimators (for lazy public names)."""
    return {
        m.target.partition(":")[2]: m.target.partition(":")[0]
        for m in _REGISTRY.values()
        if isinstance(m.target, str) and m.target.startswith(_WINGS + ".")
    }


register(Method(
    "SinkhornKMeans", f"{_WINGS}.sinkhorn_kmeans:SinkhornKMeans",
    smallest_budget=dict(n_init=2, max_iter=30),
))
register(Method(
    "SinkhornKMeans-AE", f"{_WINGS}.sinkhorn_kmeans:SinkhornKMeans", params={"embedding": "autoencoder"},
    smallest_budget=dict(hidden_dims=(16, 4), pretrain_epochs=2, n_neighbors=8, n_init=1),
))
register(Method(
    "TDCMCluster", f"{_WINGS}.tdcm:TDCMCluster",
    smallest_budget=dict(hidden_dims=(16,), embedding_dim=4, n_blocks=2, max_epochs=3, batch_size=64),
))
register(Method(
    "CCNCluster", f"{_WINGS}.ccn:CCNCluster",
    bounded_k=lambda bound: {"n_clusters": bound, "estimate_n_clusters": True},
    smallest_budget=dict(
        hidden_dims=(8,), pair_hidden=8, similarity_epochs=2, clustering_epochs=3, batch_size=32,
        embedding_epochs=2, refine_epochs=1,
    ),
))
register(Method(
    # C2M takes no K: given one, it gets room to choose, up to max(10, 2K).
    "C2MCluster", f"{_WINGS}.c2m:C2MCluster",
    given_k=lambda k: {"max_clusters": max(10, 2 * k)},
    bounded_k=lambda bound: {"max_clusters": bound},
    smallest_budget=dict(
        critic_dims=(8,), gae_dims=(8, 4), population=8, cem_iter=2, max_epochs=1, sets_per_epoch=2, set_size=32,
    ),
))
register(Method(
    "PreciseFeatureGAN", f"{_WINGS}.precise_gan:PreciseFeatureGAN",
    smallest_budget=dict(
        noise_dim=0, hidden_dims=(16,), n_iter=20, batch_size=32, learning_rate=1e-2, gp_weight=1.0,
        representation_epochs=2,
    ),
))
