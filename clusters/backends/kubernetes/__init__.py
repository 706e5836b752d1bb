"""Kubernetes backend: nodes and their GPU topology, cordon/drain through evictions, gangs as Indexed Jobs.

Imported only through ``clusters.backends.load("kubernetes")``, so a deployment without Kubernetes clusters
never imports the client.
"""

from clusters.backends.kubernetes.backend import KubernetesBackend

BACKEND = KubernetesBackend

__all__ = ["BACKEND", "KubernetesBackend"]
