"""Cluster backends: one small interface (``base.py``), one package per kind, imported lazily."""
