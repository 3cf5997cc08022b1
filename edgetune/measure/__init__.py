"""edgetune.measure."""
