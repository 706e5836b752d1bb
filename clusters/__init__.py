"""Clusters, nodes, flavors, health and the backends for each kind of cluster."""
