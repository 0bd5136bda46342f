"""snapshotd: a prerender / snapshot proxy for single-page apps."""

__version__ = "0.1.0"
