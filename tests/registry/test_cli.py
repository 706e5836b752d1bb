"""``qm model`` against a real server (``live_server``): publish from a job's checkpoint and from a file (its
SHA-256 checked by the server), list, versions, and a download verified by its checksum, resumed from a
partial file with an HTTP range; the server's field errors on stderr."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from qm import cli
from registry.models import ModelVersion
from tenancy import actions as portal_actions
from tests.registry.conftest import Store, ended_job, sha
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

WEIGHTS = os.urandom(3 * 1024 * 1024 + 17)  # more than qm's chunk: the resume crosses chunks


@pytest.fixture
def server(live_server: Any, fleet: Fleet, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    _, token = portal_actions.issue_token(fleet.user("alice"), name="cli tests")
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("QM_TOKEN", token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return fleet


def qm(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_publish_list_versions_download(server: Fleet, store: Store, tmp_path: Path, capsys: Any) -> None:
    checkpoint = store.own / "step-500.pt"
    checkpoint.write_bytes(WEIGHTS)
    job = ended_job(server, str(checkpoint))
    status, out, err = qm(capsys, "model", "publish", str(job.pk), "--model", "resnet", "--metrics", '{"acc": 0.9}')
    assert (status, err) == (0, ""), err
    assert "Published resnet version 1" in out
    assert "stored by the portal" in out
    assert sha(WEIGHTS)[:12] in out

    artifact = tmp_path / "tuned.bin"
    artifact.write_bytes(b"fine-tuned")
    status, out, err = qm(capsys, "model", "publish", str(job.pk), "--model", "resnet", "--file", str(artifact))
    assert (status, err) == (0, ""), err
    assert "version 2" in out
    second = ModelVersion.objects.get(version="2")
    assert (second.sha256, second.source_job_id, second.artifact_uri) == (
        sha(b"fine-tuned"),
        job.pk,
        "upload:tuned.bin",
    )

    status, out, _ = qm(capsys, "model", "list")
    assert status == 0
    assert "resnet" in out
    assert "vision" in out
    status, out, _ = qm(capsys, "model", "versions", "resnet")
    assert status == 0
    assert "acc=0.9" in out
    assert sha(WEIGHTS)[:12] in out
    assert str(job.pk) in out

    target = tmp_path / "out" / "resnet-1.pt"
    target.parent.mkdir()
    part = target.with_name(target.name + ".part")
    part.write_bytes(WEIGHTS[: 1024 * 1024 + 5])  # a download that stopped part way: resumed with a range
    status, out, err = qm(capsys, "model", "download", "resnet", "1", "-o", str(target))
    assert (status, err) == (0, ""), err
    assert "SHA-256 verified" in out
    assert target.read_bytes() == WEIGHTS
    assert not part.exists()


def test_a_corrupt_partial_download_is_refused_and_removed(
    server: Fleet, store: Store, tmp_path: Path, capsys: Any
) -> None:
    artifact = tmp_path / "w.bin"
    artifact.write_bytes(WEIGHTS)
    job = ended_job(server, None)
    assert qm(capsys, "model", "publish", str(job.pk), "--model", "resnet", "--file", str(artifact))[0] == 0
    target = tmp_path / "w.out"
    part = tmp_path / "w.out.part"
    part.write_bytes(b"not these bytes")
    status, _, err = qm(capsys, "model", "download", "resnet", "1", "-o", str(target))
    assert status == 1
    assert "SHA-256" in err
    assert not target.exists()
    assert not part.exists()
    status, _, err = qm(capsys, "model", "download", "resnet", "1", "-o", str(target))  # again: whole, verified
    assert status == 0
    assert target.read_bytes() == WEIGHTS


def test_the_servers_refusals_name_the_field(server: Fleet, store: Store, tmp_path: Path, capsys: Any) -> None:
    job = ended_job(server, "s3://bucket/ckpt")
    status, _, err = qm(capsys, "model", "publish", str(job.pk), "--model", "resnet", "--metrics", '{"acc": "x"}')
    assert status == 2
    assert "metrics:" in err
    status, _, err = qm(capsys, "model", "publish", str(job.pk), "--model", "resnet", "--metrics", "{")
    assert status == 1
    assert "--metrics is not JSON" in err
    status, out, err = qm(capsys, "model", "publish", str(job.pk), "--model", "resnet", "--version", "a/b")
    assert status == 2
    assert "version:" in err
    status, _, err = qm(capsys, "model", "versions", "resnet")
    assert status == 1, err
    assert "No model resnet" in err  # three refused publishes left no empty model behind
    status, out, _ = qm(capsys, "model", "publish", str(job.pk), "--model", "resnet")
    assert status == 0
    assert "recorded at s3://bucket/ckpt (not stored)" in out
    status, _, err = qm(capsys, "model", "download", "resnet", "1", "-o", str(tmp_path / "never"))
    assert status == 1
    assert "does not hold" in err
    status, _, err = qm(capsys, "model", "versions", "nothing")
    assert status == 1
    assert "No model nothing" in err
