"""edgetune.board."""
