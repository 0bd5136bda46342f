"""The request path of every URL outside ``/_snapshotd/``: a snapshot, or the origin's answer passed
through."""
