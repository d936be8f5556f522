"""The schema revisions, oldest first: ``v0001_initial``, ``v0002_rooflines``."""
