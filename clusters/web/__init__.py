"""Cluster pages: views, forms, filters and URLs."""
