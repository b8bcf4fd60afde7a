"""The package version (one place; the package root and config.json read it)."""

__version__ = "0.1.0"
