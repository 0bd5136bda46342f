"""The crawler, in the order its modules import one another (each only the ones above it):

- :mod:`~snapshotd.crawl.robots` and :mod:`~snapshotd.crawl.sitemaps`: what the crawler reads
  from a site's origin besides its pages;
- :mod:`~snapshotd.crawl.frontier`: a URL becomes an admitted, queued path (seeds, sitemaps);
- :mod:`~snapshotd.crawl.follow`: what a stored capture points to is sent to the frontier;
- :mod:`~snapshotd.crawl.engine`: the :class:`~snapshotd.crawl.engine.Crawler`, its lifecycle,
  workers and maintenance;
- :mod:`~snapshotd.cli.crawl`: ``snapshotd crawl`` and ``snapshotd worker``, on the
  process wiring of :mod:`snapshotd.services`.
"""
