"""``qm``: the command-line client of the Quartermaster API. Django-free: it talks HTTP only."""
