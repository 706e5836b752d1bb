"""Quota and budget pages: views, forms and URLs."""
