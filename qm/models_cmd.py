"""``qm model``: the model registry from the command line (docs/models.md), through ``/api/v1/models/``.

``qm model publish JOB --model NAME`` publishes the job's latest checkpoint as a new version of the team's model
NAME (made with it, in one request: a refused version leaves no empty model); with ``--file PATH`` it uploads
PATH instead, sending its SHA-256 so the server refuses bytes that changed on the way. ``qm model list``,
``qm model versions NAME``, and ``qm model download NAME VERSION -o PATH``, which resumes a partial download
(``PATH.part``, an HTTP range) and keeps the file only when its SHA-256 is the version's.

``qm.cli`` registers these commands and lends them its table and time formats and its error (``admin.Lent``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from qm.admin import Lent

if TYPE_CHECKING:
    from qm.client import Client, Settings

OK, FAILED, BAD_INPUT = 0, 1, 2
CHUNK = 1 << 20
TIMEOUT = 60.0


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def size_text(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover (the loop returns at GiB)


class Commands:
    def __init__(self, lent: Lent) -> None:
        self.lent = lent

    def model(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        handlers: dict[str, Callable[[argparse.Namespace, Settings, Client], int]] = {
            "publish": self.publish,
            "list": self.listing,
            "versions": self.versions,
            "download": self.download,
        }
        return handlers[args.action](args, settings, client)

    # --- finding ---------------------------------------------------------------------------------------------

    def find(self, client: Client, name: str, team: str | None) -> dict[str, Any]:
        """The model named ``name`` (in ``team``)."""
        query = {"name": name, **({"team": team} if team else {})}
        found = list(client.rows("models/", query))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            teams = ", ".join(m["team"] for m in found)
            raise self.lent.error(f"Several teams have a model {name} ({teams}): give --team.")
        raise self.lent.error(f"No model {name}" + (f" in team {team}" if team else "") + ", or not one you may see.")

    # --- the commands ----------------------------------------------------------------------------------------

    def publish(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        metrics: Any = {}
        if args.metrics:
            try:
                metrics = json.loads(args.metrics)
            except ValueError:
                raise self.lent.error("--metrics is not JSON: give an object such as '{\"acc\": 0.9}'.") from None
        # One request: the server makes the model with its first version, or neither (a refused version
        # leaves no empty model behind).
        fields = {"name": args.model, "version": args.version or "", "notes": args.notes or ""}
        if args.team:
            fields["team"] = args.team
        path = "models/publish/"
        if args.file:
            version = self._upload(client, path, Path(args.file), {**fields, "job": str(args.job)}, metrics)
        else:
            _, version = client.call("POST", path, body={**fields, "job": args.job, "metrics": metrics})
        where = "stored by the portal" if version["stored"] else f"recorded at {version['artifact_uri']} (not stored)"
        digest = version["sha256"][:12] or "unknown"
        print(
            f"Published {version['model_name']} version {version['version']}: {size_text(version['size_bytes'])}, "
            f"SHA-256 {digest}, {where}.",
            file=settings.out,
        )
        return OK

    def _upload(self, client: Client, path: str, file: Path, fields: dict[str, str], metrics: Any) -> Any:
        if not file.is_file():
            raise self.lent.error(f"No file {file}.")
        form = {**fields, "metrics": json.dumps(metrics), "sha256": sha256_of(file)}
        headers = {"Accept": "application/json", "Authorization": f"Bearer {client.token}"}
        try:
            with file.open("rb") as handle:
                response = client.session.post(
                    f"{client.url}/api/v1/{path}",
                    data=form,
                    files={"file": (file.name, handle, "application/octet-stream")},
                    headers=headers,
                    timeout=TIMEOUT,
                )
        except requests.RequestException as error:
            raise self.lent.error(f"Cannot reach {client.url}: {type(error).__name__}.") from None
        try:
            answer = response.json() if response.content else None
        except ValueError:
            answer = None
        if response.status_code >= 400:
            raise client._error(response.status_code, answer, path)
        return answer

    def listing(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        models = list(client.rows("models/", {"team": args.team} if args.team else None))
        if args.json:
            print(json.dumps(models, indent=2), file=settings.out)
            return OK
        if not models:
            print("No models.", file=settings.out)
            return OK
        rows = [["NAME", "TEAM", "VERSIONS", "LATEST", "SIZE", "PUBLISHED"]]
        for m in models:
            latest = m["latest"] or {}
            size = size_text(latest["size_bytes"]) if latest else "-"
            rows.append(
                [
                    m["name"],
                    m["team"],
                    str(m["versions"]),
                    latest.get("version", "-"),
                    size,
                    self.lent.when(latest.get("published_at")),
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def versions(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        model = self.find(client, args.name, args.team)
        versions = list(client.rows(f"models/{model['id']}/versions/"))
        if args.json:
            print(json.dumps(versions, indent=2), file=settings.out)
            return OK
        rows = [["VERSION", "SIZE", "SHA256", "JOB", "PUBLISHED", "BY", "METRICS"]]
        for v in versions:
            metrics = " ".join(f"{k}={val}" for k, val in v["metrics"].items()) or "-"
            rows.append(
                [
                    v["version"] + ("" if v["stored"] else " (not stored)"),
                    size_text(v["size_bytes"]),
                    v["sha256"][:12] or "-",
                    str(v["source_job"] or "-"),
                    self.lent.when(v["published_at"]),
                    v["published_by"] or "-",
                    metrics,
                ]
            )
        self.lent.table(rows, settings.out)
        return OK

    def download(self, args: argparse.Namespace, settings: Settings, client: Client) -> int:
        model = self.find(client, args.name, args.team)
        found = list(client.rows(f"models/{model['id']}/versions/", {"version": args.version}))
        if not found:
            raise self.lent.error(f"Model {args.name} has no version {args.version}.")
        version = found[0]
        if not version["download_url"]:
            raise self.lent.error(
                f"The portal does not hold version {args.version}: it is at {version['artifact_uri']}."
            )
        target = Path(args.output)
        part = target.with_name(target.name + ".part")
        self._fetch(client, version["download_url"], part)
        actual = sha256_of(part)
        if actual != version["sha256"]:
            part.unlink(missing_ok=True)
            raise self.lent.error(
                f"The download's SHA-256 is {actual}, not the version's {version['sha256']}: removed."
            )
        os.replace(part, target)
        print(f"Saved {args.name} version {args.version} to {target} (SHA-256 verified).", file=settings.out)
        return OK

    def _fetch(self, client: Client, url_path: str, part: Path) -> None:
        """Download into ``part``, resuming from its size (``Range``) when it exists."""
        have = part.stat().st_size if part.exists() else 0
        headers = {"Authorization": f"Bearer {client.token}"}
        if have:
            headers["Range"] = f"bytes={have}-"
        try:
            with client.session.get(f"{client.url}{url_path}", headers=headers, stream=True, timeout=TIMEOUT) as got:
                if got.status_code == 416:  # already whole
                    return
                if got.status_code >= 400:
                    try:
                        answer = got.json()
                    except ValueError:
                        answer = None
                    raise client._error(got.status_code, answer, url_path)
                mode = "ab" if got.status_code == 206 else "wb"
                with part.open(mode) as out:
                    for chunk in got.iter_content(CHUNK):
                        out.write(chunk)
        except requests.RequestException as error:
            raise self.lent.error(f"The download stopped ({type(error).__name__}); run it again to resume.") from None


def register(command: Callable[[str, Callable[..., int], str], argparse.ArgumentParser], lent: Lent) -> None:
    """Add ``qm model`` to ``qm``'s parser, through its ``command(name, handler, help)``."""
    run = Commands(lent)
    model = command("model", run.model, "the model registry: publish a job's checkpoint or a file, list, download")
    actions = model.add_subparsers(dest="action", required=True, metavar="ACTION")
    publish = actions.add_parser("publish", help="publish a new version of a model from a job (or a file)")
    publish.add_argument("job", type=int, help="the job it came from: its latest checkpoint, unless --file")
    publish.add_argument("--model", required=True, help="the model's name (made if the team has none by it)")
    publish.add_argument("--team", help="the team's slug (needed if you are in several)")
    publish.add_argument("--version", help="the version's name (default: the next number)")
    publish.add_argument("--metrics", help="evaluation results as JSON, e.g. '{\"acc\": 0.9}'")
    publish.add_argument("--notes", help="a note kept with the version")
    publish.add_argument("--file", help="upload this file as the artifact (its SHA-256 is checked by the server)")
    listing = actions.add_parser("list", help="your teams' models and their latest versions")
    listing.add_argument("--team", help="a team's slug")
    listing.add_argument("--json", action="store_true", help="the API's rows as JSON")
    versions = actions.add_parser("versions", help="a model's versions, newest first")
    versions.add_argument("name")
    versions.add_argument("--team", help="the team's slug (if several have a model by that name)")
    versions.add_argument("--json", action="store_true", help="the API's rows as JSON")
    download = actions.add_parser("download", help="download a version's artifact, verified by its SHA-256")
    download.add_argument("name")
    download.add_argument("version")
    download.add_argument("-o", "--output", required=True, help="where to save it")
    download.add_argument("--team", help="the team's slug (if several have a model by that name)")
