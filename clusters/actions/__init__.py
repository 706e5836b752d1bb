"""Admins' actions on clusters and nodes: register and edit clusters, sync one now, cordon, drain and
resume nodes, plan and cancel maintenance, issue and revoke probe tokens. One transaction each, authorized,
audited; a cluster itself is told afterwards, by a task (``clusters.tasks.apply_drain``), once the change is
committed.

Each action raises ``ValidationError`` naming the field for bad input and ``PermissionDenied`` when the
actor may see the node but not change it; both leave the database as it was. ``actor=None`` is the
auto-drain policy acting on its own.

Size: every change to a cluster and its nodes (drains, cordons, maintenance windows, probe tokens, the cluster's own
definition and credentials); the cluster definition (``create_cluster``, ``update_cluster`` and their checks) would
split out first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from clusters.backends import kinds
from clusters.models import OPEN_DRAINS, Cluster, Drain, GpuSample, MaintenanceWindow, Node, ProbeToken
from clusters.secrets import CredentialsError
from common import enqueue, outbound
from common.validation import REQUIRED, check_max_length, message_of
from tenancy import policy
from tenancy.actions import audit, use_is_news

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

    from tenancy.models import Organization

MAX_REASON = 2000
MAX_GRACE = 24 * 3600
#: Drains still in force (the node is out of service because of them).


def _reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why, for the people whose jobs this moves and for the audit log."})
    if len(reason) > MAX_REASON:
        raise ValidationError({"reason": message_of(check_max_length, reason, MAX_REASON)})
    return reason


def cordon_node(actor: User | None, node: Node, reason: str, *, http: HttpRequest | None = None) -> Drain:
    """Stop new work landing on the node; work running there finishes undisturbed."""
    return _take_out(actor, node, reason, Drain.Kind.CORDON, None, None, http)


def drain_node(
    actor: User | None,
    node: Node,
    reason: str,
    *,
    grace_seconds: int | None = None,
    window: MaintenanceWindow | None = None,
    http: HttpRequest | None = None,
) -> Drain:
    """Take the node out of service: no new work now; each job running there is signalled, given
    ``grace_seconds`` (else its tier's grace) to checkpoint, then requeued elsewhere without spending a retry
    (``scheduler.placement.dispatch``). A cordoned node may be drained."""
    if grace_seconds is not None and not 0 <= grace_seconds <= MAX_GRACE:
        raise ValidationError({"grace_seconds": f"Give 0 to {MAX_GRACE} seconds, or leave it out for each job's tier."})
    return _take_out(actor, node, reason, Drain.Kind.DRAIN, grace_seconds, window, http)


def _take_out(
    actor: User | None,
    node: Node,
    reason: str,
    kind: str,
    grace_seconds: int | None,
    window: MaintenanceWindow | None,
    http: HttpRequest | None,
) -> Drain:
    reason = _reason(reason)
    if actor is not None:  # (None: the maintenance planner or the health policy)
        policy.require(actor, "node.drain", node)
    state = Node.State.CORDONED if kind == Drain.Kind.CORDON else Node.State.DRAINING
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state in (Node.State.DRAINING, Node.State.DRAINED) or locked.state == state:
            raise ValidationError({"node": f"{locked.name} is already {locked.get_state_display().lower()}."})
        drain = Drain.objects.create(
            node=locked,
            requested_by=actor,
            automatic=actor is None,
            reason=reason,
            kind=kind,
            grace_seconds=grace_seconds,
            state=Drain.State.CORDONED if kind == Drain.Kind.CORDON else Drain.State.DRAINING,
            window=window,
        )
        Node.objects.filter(pk=locked.pk).update(state=state)
        audit.record(
            f"node.{'cordoned' if kind == Drain.Kind.CORDON else 'drained'}",
            actor=actor,
            target=locked,
            organization=locked.cluster.organization,
            changes={"state": [locked.state, state], "automatic": actor is None, "grace_seconds": grace_seconds},
            reason=reason,
            request=http,
        )
        transaction.on_commit(lambda: _tell_cluster(drain.pk))
    node.refresh_from_db()
    return drain


def resume_node(actor: User | None, node: Node, reason: str, *, http: HttpRequest | None = None) -> Node:
    """Put a cordoned, draining or drained node back in service."""
    reason = _reason(reason)
    if actor is not None:
        policy.require(actor, "node.drain", node, f"You may not resume nodes of {node.cluster}.")
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state not in (Node.State.CORDONED, Node.State.DRAINING, Node.State.DRAINED):
            raise ValidationError({"node": f"{locked.name} is {locked.get_state_display().lower()}, not drained."})
        Node.objects.filter(pk=locked.pk).update(state=Node.State.SCHEDULABLE, passing_checks=0)
        open_drains = Drain.objects.filter(node=locked, state__in=OPEN_DRAINS)
        ids = list(open_drains.values_list("pk", flat=True))
        open_drains.update(state=Drain.State.RESUMED, finished_at=timezone.now())
        audit.record(
            "node.resumed",
            actor=actor,
            target=locked,
            organization=locked.cluster.organization,
            changes={"state": [locked.state, Node.State.SCHEDULABLE], "drains": ids},
            reason=reason,
            request=http,
        )
        transaction.on_commit(lambda: _tell_cluster_resume(locked.pk))
    node.refresh_from_db()
    return node


def _tell_cluster(drain_id: int) -> None:
    enqueue.send("clusters.tasks.apply_drain", drain_id)


def _tell_cluster_resume(node_id: int) -> None:
    enqueue.send("clusters.tasks.apply_resume", node_id)


def issue_probe_token(
    actor: User, cluster: Cluster, name: str, *, http: HttpRequest | None = None
) -> tuple[ProbeToken, str]:
    """A token for the node probes of ``cluster``; returns the row and the raw token, shown only once."""
    name = (name or "").strip()
    if not name or len(name) > 80:
        raise ValidationError({"name": "Name the token (at most 80 characters), e.g. the rack or image using it."})
    policy.require(actor, "probe_token.issue", cluster)
    raw, key_hash, hint = ProbeToken.generate()
    with transaction.atomic():
        token = ProbeToken.objects.create(cluster=cluster, name=name, key_hash=key_hash, hint=hint, created_by=actor)
        audit.record(
            "probe_token.created",
            actor=actor,
            target=token,
            organization=cluster.organization,
            changes={"cluster": cluster.slug, "name": name},
            request=http,
        )
    return token, raw


def plan_maintenance(
    actor: User,
    cluster: Cluster,
    *,
    starts_at: datetime,
    ends_at: datetime,
    reason: str,
    nodes: list[Node] | None = None,
    drain_ahead_minutes: int = 60,
    http: HttpRequest | None = None,
) -> MaintenanceWindow:
    """Plan work on some nodes of a cluster (all when none are named): they are drained
    ``drain_ahead_minutes`` before the window and resumed when it ends (``clusters.maintenance``)."""
    reason = _reason(reason)
    policy.require(actor, "maintenance.plan", cluster)
    if ends_at <= starts_at:
        raise ValidationError({"ends_at": "The window must end after it starts."})
    if ends_at <= timezone.now():
        raise ValidationError({"ends_at": "The window is already over."})
    if not 0 <= drain_ahead_minutes <= 7 * 24 * 60:
        raise ValidationError({"drain_ahead_minutes": "Between 0 and 10080 minutes (a week)."})
    nodes = nodes or []
    if any(n.cluster_id != cluster.pk for n in nodes):
        raise ValidationError({"nodes": f"Every node must belong to {cluster}."})
    with transaction.atomic():
        window = MaintenanceWindow.objects.create(
            cluster=cluster,
            starts_at=starts_at,
            ends_at=ends_at,
            reason=reason,
            drain_ahead_minutes=drain_ahead_minutes,
            created_by=actor,
        )
        window.nodes.set(nodes)
        audit.record(
            "maintenance.planned",
            actor=actor,
            target=window,
            organization=cluster.organization,
            changes={
                "starts_at": starts_at.isoformat(),
                "ends_at": ends_at.isoformat(),
                "nodes": [n.name for n in nodes] or "all",
                "drain_ahead_minutes": drain_ahead_minutes,
            },
            reason=reason,
            request=http,
        )
    return window


def cancel_maintenance(actor: User, window: MaintenanceWindow, *, http: HttpRequest | None = None) -> list[Node]:
    """Cancel a maintenance window that has not ended (or end one in progress now): the nodes drained for it
    are resumed, and the window is deleted. A node also taken out for another reason (an admin's cordon, the
    health policy) stays out; the audit log names it. Returns the nodes resumed."""
    policy.require(actor, "maintenance.plan", window.cluster, f"You may not cancel maintenance on {window.cluster}.")
    resumed: list[Node] = []
    with transaction.atomic():
        locked = MaintenanceWindow.objects.select_for_update().filter(pk=window.pk).first()
        if locked is None:
            raise ValidationError({"window": "This maintenance window is already cancelled."})
        if locked.ends_at <= timezone.now():
            raise ValidationError({"ends_at": f"The window ended at {locked.ends_at:%Y-%m-%d %H:%M} UTC."})
        drains = Drain.objects.filter(window=locked, state__in=OPEN_DRAINS).select_related("node")
        kept: list[str] = []
        for node in sorted({drain.node for drain in drains}, key=lambda n: n.pk):  # locks in pk order
            others = Drain.objects.filter(node=node, state__in=OPEN_DRAINS).exclude(window=locked)
            if others.exists():
                kept.append(node.name)
                continue
            resume_node(actor, node, f"maintenance from {locked.starts_at:%Y-%m-%d %H:%M} UTC cancelled", http=http)
            resumed.append(node)
        audit.record(
            "maintenance.cancelled",
            actor=actor,
            target=locked,
            organization=window.cluster.organization,
            changes={
                "starts_at": locked.starts_at.isoformat(),
                "ends_at": locked.ends_at.isoformat(),
                "resumed": [n.name for n in resumed],
                "kept_out": kept,
            },
            reason=locked.reason,
            request=http,
        )
        locked.delete()
    return resumed


# --- Clusters: register, edit, sync now, probe tokens ------------------------------------------------------

#: ``update_cluster(..., credentials=CLEAR)`` removes the stored credentials.
CLEAR = "clear"
#: Option names never stored in the clear: secrets belong in the encrypted credentials.
SECRET_OPTION = re.compile(r"secret|password|passwd|token|credential|private|api_?key", re.IGNORECASE)
#: Options that name a file or program on the Quartermaster host itself (the simulated state file, the
#: scontrol binary and slurm.conf it runs with): an organization admin is a tenant, not the host's
#: operator, so only a superuser sets or changes them.
HOST_OPTIONS = frozenset({"state_file", "scontrol", "slurm_conf"})
LEVEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
MAX_LEVELS = 8
#: The longest name, slug, endpoint and region of a cluster (the form's limits too).
LIMITS = {"name": 120, "slug": 60, "endpoint": 500, "region": 60}
#: How much the scheduler prefers a cluster: from (avoid) to (prefer).
PREFERENCE = (0, 100)
#: How long ``failover_after`` and ``start_timeout`` may be, in seconds: a minute to a week (the model's validators).
TIMEOUT_SECONDS = (60, 7 * 24 * 3600)
EDITABLE = (
    "name",
    "slug",
    "endpoint",
    "region",
    "levels",
    "options",
    "preference",
    "failover_after",
    "start_timeout",
)
#: Changes that make the next sync worth trying now rather than after the backoff.
RECONNECTING = frozenset({"endpoint", "options", "credentials"})


def _text(fields: dict[str, Any], name: str, limit: int, *, required: bool = True) -> str:
    given = fields.get(name)
    value = "" if given is None else str(given).strip()
    if required and not value:
        raise ValidationError({name: REQUIRED})
    if len(value) > limit:
        raise ValidationError({name: message_of(check_max_length, value, limit)})
    return value


def _endpoint(kind: str, given: Any) -> str:
    endpoint = "" if given is None else str(given).strip()
    if not kinds.get(kind).endpoint:
        # Empty, or a sim:// name that keeps this simulated cluster's state apart (as the demo's do).
        if endpoint and not re.fullmatch(r"sim://[A-Za-z0-9._-]{1,100}", endpoint):
            raise ValidationError({"endpoint": "A simulated cluster has no endpoint (leave it empty)."})
        return endpoint
    if not endpoint:
        raise ValidationError({"endpoint": "The API URL of the cluster, e.g. https://slurm.example.org:6820."})
    try:
        URLValidator(schemes=["http", "https"])(endpoint)
    except ValidationError:
        raise ValidationError({"endpoint": "Enter an http:// or https:// URL."}) from None
    if len(endpoint) > LIMITS["endpoint"]:
        raise ValidationError({"endpoint": message_of(check_max_length, endpoint, LIMITS["endpoint"])})
    if urlsplit(endpoint).username is not None:
        # The endpoint is shown on the cluster's page and in the audit log; credentials are not.
        raise ValidationError({"endpoint": "Leave the user and password out of the URL: give them as credentials."})
    # The sync will connect there from inside the server's network, and show what it finds to the organization:
    # never the server's metadata service, nor (unless allowed) the server itself. Checked again at each
    # connection, against the addresses the name has then.
    outbound.for_clusters().validate(endpoint, "endpoint")
    return endpoint


def _levels(given: Any) -> list[str]:
    if given is None:
        return []
    if not isinstance(given, list) or not all(isinstance(level, str) for level in given):
        raise ValidationError({"levels": "A list of topology level names, widest first, e.g. block, rack."})
    levels: list[str] = [level.strip() for level in given if level.strip()]
    bad = [level for level in levels if not LEVEL.match(level)]
    if bad:
        raise ValidationError(
            {"levels": f"Level names are short lowercase names (letters, digits, - and _): not {', '.join(bad)}."}
        )
    if len(set(levels)) != len(levels):
        raise ValidationError({"levels": "A level is named twice."})
    if len(levels) > MAX_LEVELS:
        raise ValidationError({"levels": f"At most {MAX_LEVELS} levels."})
    return levels


def _preference(given: Any) -> int:
    low, high = PREFERENCE
    if isinstance(given, bool) or not isinstance(given, int) or not low <= given <= high:
        raise ValidationError({"preference": "A whole number from 0 (avoid) to 100 (prefer)."})
    return int(given)


def _seconds(fields: dict[str, Any], name: str) -> int:
    """``failover_after`` or ``start_timeout``: whole seconds within ``TIMEOUT_SECONDS`` (15 minutes if not given)."""
    given = fields.get(name, 15 * 60)
    low, high = TIMEOUT_SECONDS
    if isinstance(given, bool) or not isinstance(given, int) or not low <= given <= high:
        raise ValidationError({name: f"Whole seconds from {low} (a minute) to {high} (a week)."})
    return int(given)


def _options(actor: User, kind: str, options: Any, stored: dict[str, Any]) -> dict[str, Any]:
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ValidationError({"options": 'A JSON object, e.g. {"partition": "gpu"}.'})
    secret = sorted(str(key) for key in options if SECRET_OPTION.search(str(key)))
    if secret:
        raise ValidationError(
            {"options": f"Put {', '.join(secret)} in the credentials, which are encrypted; options are shown."}
        )
    host = sorted(key for key in HOST_OPTIONS if options.get(key) != stored.get(key))
    if host and not actor.is_superuser:
        raise ValidationError(
            {"options": f"{', '.join(host)} names a path on the Quartermaster host: only its operators set it."}
        )
    if problem := kinds.get(kind).check_options(options):
        raise ValidationError({"options": problem})
    return options


def _credentials(kind: str, given: Mapping[str, str], stored: dict[str, str]) -> dict[str, str]:
    """The credentials to store: the given non-blank values over the stored ones (the keys the kind's descriptor
    names: required, optional, and alternatives of which exactly one is given; giving one alternative replaces
    the others). Messages name keys only."""
    described = kinds.get(kind)
    keys = {need: described.keys(need) for need in ("required", "optional", "one_of")}
    allowed = {*keys["required"], *keys["optional"], *keys["one_of"]}
    given = {str(k): str(v) for k, v in given.items() if v is not None and str(v).strip()}
    unknown = sorted(set(given) - allowed)
    if unknown:
        expected = ", ".join(sorted(allowed)) or "none"
        raise ValidationError(
            {"credentials": f"{described.label} credentials take {expected}; not {', '.join(unknown)}."}
        )
    if not given:
        return stored
    merged = {k: v for k, v in stored.items() if k in allowed}
    if any(k in given for k in keys["one_of"]):
        merged = {k: v for k, v in merged.items() if k not in keys["one_of"]}
    merged.update(given)
    missing = [k for k in keys["required"] if k not in merged]
    if missing:
        label, needed = described.label, " and ".join(keys["required"])
        raise ValidationError({"credentials": f"{label} credentials need {needed}: give {', '.join(missing)} too."})
    if keys["one_of"] and sum(k in merged for k in keys["one_of"]) != 1:
        raise ValidationError({"credentials": f"Give one of {' or '.join(keys['one_of'])}."})
    if problem := described.check_credentials(merged):
        raise ValidationError({"credentials": problem})
    return merged


def create_cluster(
    actor: User,
    organization: Organization,
    *,
    credentials: Mapping[str, str] | None = None,
    http: HttpRequest | None = None,
    **fields: Any,
) -> Cluster:
    """Register a cluster of ``organization``. ``fields``: name, slug, kind, endpoint, region, levels,
    options, preference, failover_after and start_timeout (seconds). Credentials are encrypted at once; the
    audit log says only whether there are any."""
    unknown = set(fields) - {"kind", *EDITABLE}
    if unknown:
        raise TypeError(f"create_cluster() got unexpected fields {', '.join(sorted(unknown))}")
    policy.require(
        actor, "cluster.create", organization, f"Only organization admins of {organization} register clusters."
    )
    kind = str(fields.get("kind") or "")
    if kind not in kinds.KINDS:
        raise ValidationError({"kind": f"Choose one of {', '.join(kinds.KINDS)}."})
    _check_simulated(actor, kind, organization)
    cluster = Cluster(organization=organization, kind=kind, **_validated(actor, kind, fields, {}))
    if Cluster.objects.filter(organization=organization, slug=cluster.slug).exists():
        raise ValidationError({"slug": f"{organization} already has a cluster with the slug {cluster.slug!r}."})
    secrets = _credentials(kind, credentials or {}, {})
    cluster.set_credentials(secrets)
    with transaction.atomic():
        try:
            with transaction.atomic():
                cluster.save()
        except IntegrityError:  # the same slug registered at the same moment by someone else
            taken = f"{organization} already has a cluster with the slug {cluster.slug!r}."
            raise ValidationError({"slug": taken}) from None
        audit.record(
            "cluster.created",
            actor=actor,
            target=cluster,
            organization=organization,
            changes={**{name: getattr(cluster, name) for name in ("kind", *EDITABLE)}, "credentials": bool(secrets)},
            request=http,
        )
        transaction.on_commit(lambda: _queue_sync(cluster.pk))  # its first sync, now rather than at the beat
    return cluster


def _check_simulated(actor: User, kind: str, target: Organization | Cluster) -> None:
    """A kind for operators only (a simulated cluster): the installation's operators only, and only where the
    installation runs them."""
    if not kinds.get(kind).operators_only:
        return
    policy.require(actor, "cluster.simulated.set", target)
    if not settings.SIMULATED_CLUSTERS:
        raise ValidationError({"kind": "This installation runs no simulated clusters (SIMULATED_CLUSTERS is off)."})


def _validated(actor: User, kind: str, fields: dict[str, Any], stored_options: dict[str, Any]) -> dict[str, Any]:
    name = _text(fields, "name", LIMITS["name"])
    slug = slugify(_text(fields, "slug", LIMITS["slug"], required=False) or name)[: LIMITS["slug"]]
    if not slug:
        raise ValidationError({"slug" if fields.get("slug") else "name": "Needs at least one letter or digit."})
    return {
        "name": name,
        "slug": slug,
        "endpoint": _endpoint(kind, fields.get("endpoint")),
        "region": _text(fields, "region", LIMITS["region"]),
        "levels": _levels(fields.get("levels")),
        "options": _options(actor, kind, fields.get("options"), stored_options),
        "preference": _preference(fields.get("preference", 50)),
        "failover_after": _seconds(fields, "failover_after"),
        "start_timeout": _seconds(fields, "start_timeout"),
    }


def update_cluster(
    actor: User,
    cluster: Cluster,
    *,
    credentials: Mapping[str, str] | str | None = None,
    http: HttpRequest | None = None,
    **changes: Any,
) -> Cluster:
    """Change a cluster's settings. Credentials are write-only: ``None`` or blank values keep them, given
    values are merged in and re-encrypted, ``CLEAR`` removes them; the audit log says only that they
    changed. The kind cannot change (its nodes came from that backend): register a new cluster instead."""
    unknown = set(changes) - {"kind", *EDITABLE}
    if unknown:
        raise TypeError(f"update_cluster() got unexpected fields {', '.join(sorted(unknown))}")
    policy.require(
        actor, "cluster.change", cluster, f"Only organization admins of {cluster.organization} change its clusters."
    )
    if "kind" in changes and changes.pop("kind") != cluster.kind:
        raise ValidationError({"kind": "A cluster's kind cannot change; register a new cluster instead."})
    _check_simulated(actor, cluster.kind, cluster)
    with transaction.atomic():
        locked: Cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        current = {name: getattr(locked, name) for name in EDITABLE}
        values = _validated(actor, locked.kind, {**current, **changes}, dict(locked.options or {}))
        if values["slug"] != locked.slug and (
            Cluster.objects.filter(organization=locked.organization_id, slug=values["slug"])
            .exclude(pk=locked.pk)
            .exists()
        ):
            raise ValidationError(
                {"slug": f"{locked.organization} already has a cluster with the slug {values['slug']!r}."}
            )
        diff: dict[str, Any] = {
            name: [current[name], value] for name, value in values.items() if value != current[name]
        }
        if credentials == CLEAR:
            if locked.has_credentials:
                locked.set_credentials({})
                diff["credentials"] = "cleared"
        elif credentials is not None:
            if isinstance(credentials, str):
                raise ValidationError({"credentials": f"Give the credentials' fields, or {CLEAR!r} to remove them."})
            try:
                stored = locked.credentials()
            except CredentialsError:
                stored = {}  # unreadable under the current key: what is given replaces it
            merged = _credentials(locked.kind, credentials, stored)
            if merged != stored:
                locked.set_credentials(merged)
                diff["credentials"] = "changed"
        if not diff:
            return locked
        for name, value in values.items():
            setattr(locked, name, value)
        if RECONNECTING & set(diff):
            locked.next_sync_at = None  # try the new settings at the next beat, not after the backoff
        locked.save()
        audit.record(
            "cluster.updated",
            actor=actor,
            target=locked,
            organization=locked.organization,
            changes=diff,
            request=http,
        )
    cluster.refresh_from_db()
    return locked


def request_sync(actor: User, cluster: Cluster, *, http: HttpRequest | None = None) -> None:
    """Sync the cluster now: its backoff is cleared and a sync task queued once this commits."""
    policy.require(
        actor,
        "cluster.change",
        cluster,
        f"Only organization admins of {cluster.organization} sync its clusters by hand.",
    )
    if cluster.status == Cluster.Status.DISABLED:
        raise ValidationError({"cluster": f"{cluster} is disabled; it is not synced."})
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(next_sync_at=None)
        audit.record(
            "cluster.sync_requested", actor=actor, target=cluster, organization=cluster.organization, request=http
        )
        transaction.on_commit(lambda: _queue_sync(cluster.pk))
    cluster.refresh_from_db()


def _queue_sync(cluster_id: int) -> None:
    enqueue.send("clusters.tasks.sync_cluster", cluster_id)


def revoke_probe_token(actor: User, token: ProbeToken, *, http: HttpRequest | None = None) -> ProbeToken:
    """Revoke a cluster's probe token: its probes' reports are refused from now on. Twice is harmless."""
    policy.require(actor, "probe_token.revoke", token)
    with transaction.atomic():
        claimed = ProbeToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())
        token.refresh_from_db()
        if claimed:
            audit.record(
                "probe_token.revoked",
                actor=actor,
                target=token,
                organization=token.cluster.organization,
                changes={"cluster": token.cluster.slug, "name": token.name},
                request=http,
            )
    return token


def note_probe_token_use(token: ProbeToken) -> None:
    """Record that a node probe used ``token``, to the minute (as API tokens: ``LAST_USED_RESOLUTION``)."""
    now = timezone.now()
    if use_is_news(token.last_used_at, now):
        ProbeToken.objects.filter(pk=token.pk).update(last_used_at=now)


def note_drain_try(drain: Drain, message: str, *, failed: bool = False) -> None:
    """What the cluster said to the latest try of a cordon (``message``, empty once it took), unless the drain
    moved on meanwhile; ``failed`` gives up on it (the cluster refuses for good, or every retry was spent)."""
    fields: dict[str, Any] = {"message": message}
    if failed:
        fields.update(state=Drain.State.FAILED, finished_at=timezone.now())
    Drain.objects.filter(pk=drain.pk, state=drain.state).update(**fields)


#: Rows one pruning statement deletes: short transactions, whatever the backlog.
PRUNE_BATCH = 50_000


def prune_gpu_samples(before: datetime) -> int:
    """Delete GPU samples taken before ``before``, in batches; how many went."""
    deleted = 0
    while True:
        batch = list(GpuSample.objects.filter(at__lt=before).values_list("pk", flat=True)[:PRUNE_BATCH])
        if not batch:
            return deleted
        deleted += GpuSample.objects.filter(pk__in=batch).delete()[0]
