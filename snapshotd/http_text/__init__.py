"""The texts of HTTP: URLs and site paths, header names and values."""
