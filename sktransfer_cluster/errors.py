"""Errors shared by the command line and the main job (torch-free)."""

__all__ = ["UsageError"]


class UsageError(ValueError):
    """A user mistake reported as one line, no traceback (exit status 2)."""
