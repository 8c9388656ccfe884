"""Transcribed paper tables and the builder that sets our numbers beside them."""
