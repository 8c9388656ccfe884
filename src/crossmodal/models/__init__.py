"""One file per trained system (`model: <file name>` in params.yaml), each defining MODEL."""
