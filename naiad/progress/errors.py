"""The engine's base exception, defined here so that the pure progress package can use it."""

__all__ = ["NaiadError"]


class NaiadError(Exception):
    """Base class of the engine's own errors."""
