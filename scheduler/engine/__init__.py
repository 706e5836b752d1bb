"""The placement engine: an immutable snapshot in, decisions out. No Django in here.

``schedule(snapshot) -> Decisions`` is the one entry point; its vocabulary is in ``model.py``.
Read ``cycle.py`` next: it is the whole cycle in order, and names the module each step lives in.
"""

from .cycle import schedule

__all__ = ["schedule"]
