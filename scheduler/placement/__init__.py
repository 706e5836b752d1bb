"""The engine's I/O edge: the snapshot built from the database, the loop that runs the engine and applies its
decisions, dispatch to the clusters, the loop's leader lock, feasibility checks and the prices it reads."""
