"""Errors and input limits shared by the command line and the main job (torch-free)."""

__all__ = ["SEED_MAX", "UsageError"]

#: The largest seed numpy's and scikit-learn's random states take.
SEED_MAX = 2**32 - 1


class UsageError(ValueError):
    """A user mistake reported as one line, no traceback (exit status 2)."""
