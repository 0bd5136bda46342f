"""What each site is and decides: the registry of sites, admission, the query parameters it
ignores."""
