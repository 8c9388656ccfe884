"""The toy paper: a sixth paper as a folder (docs/adding-a-paper.md; the tests' tiny pipeline adds it)."""
