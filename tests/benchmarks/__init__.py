"""Benchmarks: each compares against a baseline measured in the same run (``make bench``)."""
