"""Edge's writes: every change to its tables goes through a module of this package."""
