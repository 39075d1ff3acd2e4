"""The package's version: one place, at layer 0, so any module may name it without importing
the package root (pyproject.toml reads it from here too)."""

__version__ = "0.1.0"
