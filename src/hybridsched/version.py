"""The package version (a leaf: every layer may read it)."""

__version__ = "0.1.0"
