"""What search engines are told of a site from its snapshots: its own sitemap (``sitemap``) and
its changes as they happen (``indexnow``)."""
