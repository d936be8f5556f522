"""The schema revisions, oldest first: ``v0001_initial``, ``v0002_rooflines``,
``v0003_rank_by_min``."""
