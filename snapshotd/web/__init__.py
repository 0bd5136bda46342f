"""Pure functions of the web's texts: URLs, links, patterns, regexes, bots, page fingerprints."""
