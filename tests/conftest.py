"""Fixtures shared by the test modules."""

import contextlib

import pytest

from sktransfer_cluster import registry


@contextlib.contextmanager
def registered_only(*methods):
    """The method registry holding only ``methods`` inside the block, restored afterwards."""
    saved = dict(registry.REGISTRY)
    for name in saved:
        registry.unregister(name)
    try:
        for method in methods:
            registry.register(method)
        yield
    finally:
        for name in list(registry.REGISTRY):
            registry.unregister(name)
        for method in saved.values():
            registry.register(method)


@pytest.fixture
def only_methods():
    """``only_methods(*methods)``: the registry holds only these until the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda *methods: stack.enter_context(registered_only(*methods))


@pytest.fixture
def no_cxx():
    """A machine without a C++ compiler, as inductor's own compiler search sees it."""
    from torch._inductor import config, cpp_builder

    cpp_builder.cpp_compiler_search.cache_clear()
    with config.patch({"cpp.cxx": ("/nonexistent/c++",)}):
        yield
    cpp_builder.cpp_compiler_search.cache_clear()
