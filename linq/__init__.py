"""Fluent queries in the style of Naiad's Lindi: ``import linq`` adds operator methods to Stream."""

__all__: list = []
