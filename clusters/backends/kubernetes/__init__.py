"""Kubernetes backend: nodes and their GPU topology, cordon/drain through evictions, gangs as Indexed Jobs.

The kind's descriptor is ``kind.py``; the backend (``backend.py``, and with it the Kubernetes client) is imported
only through ``clusters.backends.kinds.load("kubernetes")``, so a deployment without Kubernetes clusters never
imports the client.
"""
