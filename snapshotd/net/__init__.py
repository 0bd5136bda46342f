"""The process's own network: connections to origins, its fetches, the address policy they pass."""
