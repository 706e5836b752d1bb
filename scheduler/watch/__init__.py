"""Watching running jobs: stragglers and hangs (``detector``: pure), and what follows (``watch``)."""
