"""edgetune.deploy."""
