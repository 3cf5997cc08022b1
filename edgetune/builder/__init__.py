"""edgetune.builder."""
