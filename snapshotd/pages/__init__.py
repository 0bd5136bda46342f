"""Reading captured pages: links, fingerprints, the flat tree of shadow roots, sitemap XML."""
