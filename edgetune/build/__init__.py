"""edgetune.build."""
