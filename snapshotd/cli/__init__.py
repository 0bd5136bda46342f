"""The ``snapshotd`` command: one module per command, and ``main`` that dispatches them."""
