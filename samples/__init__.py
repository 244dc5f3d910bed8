"""Runnable samples, each checked by a test against a plain-Python or networkx oracle."""
