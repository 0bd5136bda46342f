"""The ``snapshotd`` command: one module per command (``serve``, ``crawl`` and ``worker``,
``capture``, ``rules``, ``recipe``, ``metrics-token``, ``status``, ``report``, ``site``), what
they share (:mod:`~snapshotd.cli.common`) and the command line that runs them
(:mod:`~snapshotd.cli.parser`, whose :func:`main` is the ``snapshotd`` program)."""

from snapshotd.cli.parser import main

__all__ = ["main"]
