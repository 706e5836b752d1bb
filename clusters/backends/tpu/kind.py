"""The Google Cloud TPU kind: TPU VMs held as queued resources in one project and zone (``backend.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusters.backends.kinds import BATCH, CONTAINERS, ON_DEMAND, TPU_VMS, Capabilities, Credential, Kind
from common import outbound, params


def capabilities(options: Mapping[str, Any]) -> Capabilities:
    """Containers (Docker on the TPU VM) and batch scripts (the startup script), on TPU VMs."""
    return Capabilities(frozenset({CONTAINERS, BATCH, TPU_VMS}), "docker")


def check_options(options: Mapping[str, Any]) -> str:
    """A TPU cluster names its Google Cloud project and zone, and the slices Quartermaster may hold."""
    missing = [key for key in ("project", "zone") if not isinstance(options.get(key), str) or not options[key]]
    if missing:
        return f"A TPU cluster needs {' and '.join(missing)} (its Google Cloud project and zone)."
    from clusters.backends.base import BackendError
    from clusters.backends.tpu.backend import parse_slices

    try:
        slots = parse_slices(options.get("slices"))
    except BackendError as error:
        return f"{str(error)[0].upper()}{str(error)[1:]}."
    if not slots:
        return (
            "A TPU cluster needs slices: how many slices of each type Quartermaster may hold "
            'at once (its reservation or quota), e.g. {"v5p-32": 2, "v5litepod-8/2x4": 4}.'
        )
    return ""


def check_credentials(credentials: Mapping[str, str]) -> str:
    """A service-account key is one (JSON), and the token endpoint google-auth posts to is one the outbound
    policy allows, as the endpoint is (the backend checks again when it connects)."""
    if "service_account_json" not in credentials:
        return ""
    try:
        key = params.parse_json(credentials["service_account_json"], "credentials")
    except params.BadParameter:
        key = None
    if not isinstance(key, dict) or key.get("type") != "service_account":
        return "service_account_json must be a service-account key file (JSON)."
    token_uri = key.get("token_uri")
    if token_uri is not None:
        if not isinstance(token_uri, str):
            return "service_account_json: token_uri must be a URL."
        try:
            outbound.for_clusters().check(token_uri)
        except outbound.Refused as refused:
            return f"service_account_json: token_uri: {refused}"
    return ""


KIND = Kind(
    name="tpu",
    label="Google Cloud TPU",
    backend="clusters.backends.tpu.backend:TpuBackend",
    capabilities=capabilities,
    credentials=(
        Credential(
            "service_account_json", "Service-account key (JSON)", need="one_of", multiline=True, max_length=50_000
        ),
        Credential("access_token", "or an OAuth access token", need="one_of"),
    ),
    check_options=check_options,
    check_credentials=check_credentials,
    capacity_type=ON_DEMAND,
    # A failed queued resource stays (FAILED, SUSPENDED, or ACTIVE over a broken slice) and holds its slots.
    leaves_behind=True,
    options_example='{"project": "...", "zone": "...", "slices": {"v5p-32": 2}}',
)
