"""Settings: frozen values, their ranges and their loading from TOML."""
