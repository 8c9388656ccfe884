"""One module per DVC stage kind; cli.py imports the one a command runs, by name."""
