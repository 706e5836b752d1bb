"""Development tools that are not part of the product (not installed with it)."""
