"""The Kubernetes kind: a namespace of a cluster's API server, with Kueue or without (``backend.py``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from clusters.backends.kinds import CONTAINERS, Capabilities, Credential, Kind

#: A Kubernetes name (a LocalQueue's): a DNS subdomain.
KUBE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
FLAG_WORDS = ("true", "false", "yes", "no", "1", "0", "")


def capabilities(options: Mapping[str, Any]) -> Capabilities:
    """Containers only: every pod runs an image."""
    return Capabilities(frozenset({CONTAINERS}), "kubernetes")


def check_options(options: Mapping[str, Any]) -> str:
    namespace = options.get("namespace", "default")
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        return "namespace must be a Kubernetes namespace name."
    return invalid_kueue_options(options)


def invalid_kueue_options(options: Mapping[str, Any]) -> str:
    """What is wrong with a Kubernetes cluster's Kueue options (docs/kueue.md), "" when nothing: ``kueue`` is a
    yes/no, and in Kueue mode jobs need a LocalQueue: ``local_queues`` (Quartermaster queue name -> LocalQueue)
    or ``local_queue`` (for every queue ``local_queues`` leaves out), or both."""
    flag = options.get("kueue", False)
    if not isinstance(flag, bool) and not (isinstance(flag, str) and flag.strip().lower() in FLAG_WORDS):
        return "kueue is true or false."
    kueue = flag if isinstance(flag, bool) else flag.strip().lower() in ("true", "yes", "1")
    mapped = options.get("local_queues", {})
    if not isinstance(mapped, dict) or not all(
        isinstance(queue, str) and isinstance(local, str) and KUBE_NAME.fullmatch(local)
        for queue, local in mapped.items()
    ):
        return 'local_queues maps Quartermaster queue names to Kueue LocalQueue names, e.g. {"nlp": "lq-nlp"}.'
    single = options.get("local_queue", "")
    if not isinstance(single, str) or (single and not KUBE_NAME.fullmatch(single)):
        return "local_queue is the name of a Kueue LocalQueue in the cluster's namespace."
    if kueue and not mapped and not single:
        return (
            "In Kueue mode jobs go to a LocalQueue: set local_queues (a LocalQueue for each Quartermaster queue, "
            'e.g. {"nlp": "lq-nlp"}) or local_queue (one for every queue), or both.'
        )
    return ""


KIND = Kind(
    name="kubernetes",
    label="Kubernetes",
    backend="clusters.backends.kubernetes.backend:KubernetesBackend",
    capabilities=capabilities,
    credentials=(
        Credential("token", "Bearer token", help_text="A service account's token."),
        Credential("ca_cert", "CA certificate (PEM, optional)", need="optional", multiline=True, max_length=50_000),
    ),
    check_options=check_options,
    options_example='{"namespace": "research", "kueue": true, "local_queue": "lq-research"}',
)
