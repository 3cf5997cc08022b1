"""edgetune's version, in the lowest layer: every package may read it (pyproject.toml carries the same number)."""

__version__ = "0.1.0"
