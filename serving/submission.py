"""The one definition of a service request, shared by the API, the pages and (through the API) ``qm service``:
its fields in people's units and by name (cores, GiB, a team's slug, a tier's name, clusters' slugs, a model
version's id), checked for type and resolved among what the user may see, then handed to
``serving.actions`` in the model's units (millicores, MiB, objects). Ranges and everything else about a
service are the actions' (a ``ValidationError`` naming each bad field); ``api_errors`` turns their names back
into the request's.

A name of another organization's team, project, cluster or model version gets the same answer as one that
does not exist.
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError

from clusters.models import Cluster
from common import params
from governance.models import PriorityTier
from registry.models import ModelVersion
from serving.models import Service
from tenancy import policy
from tenancy.models import Project, Team
from tenancy.scoping import Action

#: Fields that make the program (a change of one rolls out a new revision), in the request's names.
PROGRAM = (
    "image",
    "command",
    "env",
    "port",
    "health_path",
    "accelerators",
    "accelerator_types",
    "cpu",
    "memory_gib",
    "model_version",
)
SCALING = (
    "min_replicas",
    "max_replicas",
    "metric",
    "target",
    "scale_to_zero_after",
    "scale_up_window",
    "scale_down_window",
)
OTHER = ("tier", "clusters", "public", "max_inflight", "max_rps")
#: What a change may name (the team, the project and the name are fixed once the service exists).
CHANGEABLE = (*PROGRAM, *SCALING, *OTHER)
CREATE = ("team", "project", "name", *CHANGEABLE)
#: The actions' names of fields given here in other units.
ACTION_NAMES = {"cpu": "cpu", "memory_gib": "memory"}
REQUEST_NAMES = {"memory": "memory_gib"}
MILLI = Decimal(1000)
MIB_PER_GIB = Decimal(1024)
MAX_CORES = Decimal(100_000)
MAX_GIB = Decimal(1_000_000)


def api_errors(error: ValidationError) -> dict[str, list[str]]:
    """An action's ``ValidationError`` by the request's field names."""
    if not hasattr(error, "error_dict"):
        return {"non_field_errors": list(error.messages)}
    return {REQUEST_NAMES.get(name, name): messages for name, messages in error.message_dict.items()}


def service_teams(actor: User) -> list[Team]:
    """The teams where ``actor`` may create a service, by name."""
    visible = Team.objects.for_user(actor, Action.VIEW).select_related("organization").order_by("name")
    return list(policy.permitted(actor, "service.create", visible))


def _int(value: Any, errors: dict[str, str], name: str, *, null: bool = False) -> int | None:
    if value is None and null:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        errors[name] = "Give a whole number." + (" Or null." if null else "")
        return None
    return int(value)


def _number(value: Any, errors: dict[str, str], name: str) -> float | None:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value.strip())
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors[name] = "Give a number."
        return None
    return float(value)


def _amount(value: Any, errors: dict[str, str], name: str, per: Decimal, high: Decimal, unit: str) -> int | None:
    """Cores or GiB (a number, up to three decimals) in millicores or MiB."""
    try:
        amount = Decimal(str(value)) if not isinstance(value, bool) and isinstance(value, int | float | str) else None
    except InvalidOperation:
        amount = None
    if amount is None or not amount.is_finite():
        errors[name] = f"Give a number of {unit}."
        return None
    if amount <= 0 or amount > high:
        errors[name] = f"Give between 0.001 and {high} {unit}."
        return None
    return int((amount * per).to_integral_value())


def _text(value: Any, errors: dict[str, str], name: str, limit: int) -> str | None:
    if not isinstance(value, str):
        errors[name] = "Give text."
        return None
    if len(value) > limit:
        errors[name] = f"At most {limit} characters."
        return None
    return value.strip()


def _strings(value: Any, errors: dict[str, str], name: str) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    errors[name] = "Give a list of strings."
    return None


def _command(value: Any, errors: dict[str, str]) -> list[str] | None:
    """A list of strings, or a command line (split as a shell would, without running one)."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            errors["command"] = f"The command line cannot be split: {exc}."
            return None
    return _strings(value, errors, "command")


def _env(value: Any, errors: dict[str, str]) -> dict[str, str] | None:
    if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    errors["env"] = "Give an object of names to strings."
    return None


def _bool(value: Any, errors: dict[str, str], name: str) -> bool | None:
    if isinstance(value, bool):
        return value
    errors[name] = "Give true or false."
    return None


def _team(actor: User, ref: Any, errors: dict[str, str]) -> Team | None:
    """The team named (a slug or an id) among those ``actor`` sees, as a job's submission finds it: a name they
    cannot see is refused as one that does not exist (400); a team they see but may not create services in is
    a 403 if they may create one nowhere, else a 400 naming their choices."""
    mine = service_teams(actor)
    if ref is None or ref == "":
        if not mine:
            raise PermissionDenied("You may not create services in any team.")
        if len(mine) > 1:
            errors["team"] = f"Choose a team: {', '.join(t.slug for t in mine)}."
            return None
        return mine[0]
    visible = Team.objects.for_user(actor, Action.VIEW).select_related("organization")
    found = list(visible.filter(slug=ref)[:2]) if isinstance(ref, str) else []
    if not found and (pk := params.as_id(ref)) is not None:
        found = list(visible.filter(pk=pk)[:2])
    if len(found) != 1:
        errors["team"] = f"No team {ref!r}." if not found else f"Several teams are named {ref!r}: give its id."
        return None
    team: Team = found[0]
    if team not in mine:
        if not mine:
            raise PermissionDenied(f"You may not create services in team {team.slug}.")
        errors["team"] = f"You may not create services in team {team.slug}: choose {', '.join(t.slug for t in mine)}."
        return None
    return team


def _resolve_names(team: Team, given: dict[str, Any], out: dict[str, Any], errors: dict[str, str]) -> None:
    """Project, tier, clusters and model version: by name (or id) among the team's or its organization's."""
    if "project" in given:
        ref = given["project"]
        if ref is None or ref == "":
            out["project"] = None
        else:
            projects = Project.objects.filter(team=team)
            found = projects.filter(slug=ref).first() if isinstance(ref, str) else None
            if found is None and (pk := params.as_id(ref)) is not None:
                found = projects.filter(pk=pk).first()
            if found is None:
                errors["project"] = f"Team {team.slug} has no project {ref!r}."
            out["project"] = found
    if "tier" in given:
        name = given["tier"]
        if name is None or name == "":
            out["tier"] = None
        elif not isinstance(name, str):
            errors["tier"] = "Give a priority tier's name."
        else:
            out["tier"] = PriorityTier.objects.filter(organization=team.organization_id, name=name).first()
            if out["tier"] is None:
                errors["tier"] = f"No priority tier {name!r}."
    if "clusters" in given and (slugs := _strings(given["clusters"], errors, "clusters")) is not None:
        found = {c.slug: c for c in Cluster.objects.filter(organization=team.organization_id, slug__in=slugs)}
        if missing := [slug for slug in slugs if slug not in found]:
            errors["clusters"] = f"No cluster {', '.join(missing)}."
        out["clusters"] = [found[slug] for slug in dict.fromkeys(slugs) if slug in found]
    if "model_version" in given:
        ref = given["model_version"]
        if ref is None or ref == "":
            out["model_version"] = None
        elif (pk := params.as_id(ref)) is None:
            errors["model_version"] = "Give a model version's id."
        else:
            version = ModelVersion.objects.filter(pk=pk, model__team=team).select_related("model").first()
            if version is None:
                errors["model_version"] = f"Team {team.slug} has no model version {ref}."
            out["model_version"] = version


def _convert(given: dict[str, Any], out: dict[str, Any], errors: dict[str, str]) -> None:
    """The typed fields, in the actions' names and units."""
    for name in ("port", "accelerators", "min_replicas", "max_replicas", "scale_up_window", "scale_down_window"):
        if name in given:
            out[name] = _int(given[name], errors, name)
    for name in ("scale_to_zero_after", "max_inflight", "max_rps"):
        if name in given:
            out[name] = _int(given[name], errors, name, null=True)
    if "target" in given:
        out["target"] = _number(given["target"], errors, "target")
    if "cpu" in given:
        out["cpu"] = _amount(given["cpu"], errors, "cpu", MILLI, MAX_CORES, "cores")
    if "memory_gib" in given:
        out["memory"] = _amount(given["memory_gib"], errors, "memory_gib", MIB_PER_GIB, MAX_GIB, "GiB")
    if "image" in given:
        out["image"] = _text(given["image"], errors, "image", 500)
    if "health_path" in given:
        out["health_path"] = _text(given["health_path"], errors, "health_path", 200)
    if "metric" in given:
        out["metric"] = _text(given["metric"], errors, "metric", 20)
    if "command" in given:
        out["command"] = _command(given["command"], errors)
    if "env" in given:
        out["env"] = _env(given["env"], errors)
    if "accelerator_types" in given:
        out["accelerator_types"] = _strings(given["accelerator_types"], errors, "accelerator_types")
    if "public" in given:
        out["public"] = _bool(given["public"], errors, "public")


def _unknown(given: Mapping[str, Any], allowed: tuple[str, ...], errors: dict[str, str]) -> None:
    for name in sorted(set(given) - set(allowed)):
        errors[name] = "Unknown field." if name not in CREATE else "Fixed once the service exists."


def creation(actor: User, given: Mapping[str, Any]) -> tuple[Team, str, dict[str, Any]]:
    """The team, the name and the other arguments of ``actions.create_service`` for a request to create a
    service; a ``ValidationError`` naming every field of the wrong type or naming nothing known."""
    errors: dict[str, str] = {}
    _unknown(given, CREATE, errors)
    data = {k: v for k, v in given.items() if k in CREATE}
    team = _team(actor, data.get("team"), errors)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        errors["name"] = "Give the service a name."
    out: dict[str, Any] = {}
    _convert(data, out, errors)
    if team is not None:
        _resolve_names(team, data, out, errors)
    if errors or team is None:
        raise ValidationError(errors)
    assert isinstance(name, str)
    return team, name.strip(), out


def change(service: Service, given: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``actions.update_service`` for a request to change ``service`` (any of
    ``CHANGEABLE``); a ``ValidationError`` as ``creation``'s."""
    errors: dict[str, str] = {}
    _unknown(given, CHANGEABLE, errors)
    data = {k: v for k, v in given.items() if k in CHANGEABLE}
    out: dict[str, Any] = {}
    _convert(data, out, errors)
    _resolve_names(service.team, data, out, errors)
    if errors:
        raise ValidationError(errors)
    return out


def scaling(given: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``actions.scale`` (any of ``SCALING``)."""
    errors: dict[str, str] = {}
    _unknown(given, SCALING, errors)
    out: dict[str, Any] = {}
    _convert({k: v for k, v in given.items() if k in SCALING}, out, errors)
    if not out and not errors:
        errors["min_replicas"] = "Give at least one of " + ", ".join(SCALING) + "."
    if errors:
        raise ValidationError(errors)
    return out


def cores(millicores: int) -> float:
    return millicores / 1000


def gib(mib: int) -> float:
    return round(mib / 1024, 3)
