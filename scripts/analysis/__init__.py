"""The results layer: reading the committed results and the statistics every claim uses."""
