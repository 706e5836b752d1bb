"""Job pages: views, forms and URLs."""
