"""The ``qm`` client against a real server (``live_server``): submit from YAML, list, show, follow, cancel;
bad files refused before anything is sent, the server's field errors on stderr, a wrong token explained."""

from __future__ import annotations

import io
import json
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from qm import cli, client, jobfile
from scheduler import actions
from scheduler.models import Job
from tenancy import actions as portal_actions
from tenancy.models import ApiToken
from tests.scheduler.conftest import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "examples" / "job.yaml"
JOB = """\
team: vision
name: train
time_limit: 2h
accelerators: 1
image: ghcr.io/lab/train:1
command: [python, train.py]
"""


@pytest.fixture
def server(live_server: Any, fleet: Fleet, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """The fleet behind a live server, with ``qm`` pointed at it as alice (QM_URL, QM_TOKEN)."""
    settings.VAR_DIR = tmp_path / "var"  # the placement loop's leader lock, this test's alone
    _, token = portal_actions.issue_token(fleet.user("alice"), name="cli tests")
    monkeypatch.setenv("QM_URL", live_server.url)
    monkeypatch.setenv("QM_TOKEN", token)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return fleet


def qm(capsys: pytest.CaptureFixture[str], *argv: str, sleep: Callable[[float], None] | None = None) -> Any:
    """Run ``qm argv`` in this process; (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = cli.main(list(argv), sleep=sleep) if sleep else cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def job_file(tmp_path: Path, text: str = JOB, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def submitted_id(out: str) -> int:
    match = re.search(r"Submitted job (\d+)", out)
    assert match, out
    return int(match.group(1))


def test_submit_list_show_events_and_cancel(server: Fleet, tmp_path: Path, capsys: Any) -> None:
    status, out, err = qm(capsys, "submit", job_file(tmp_path))
    assert (status, err) == (0, "")
    job = Job.objects.get(pk=submitted_id(out))
    assert (job.name, job.time_limit, job.submitted_by.username) == ("train", 7200, "alice")
    server.cycle()  # placed now, whether or not the submission's wake-up ran a cycle (it is debounced)
    for i in range(6):  # whole nodes; with alice's job on one of the 6, the last waits
        server.submit("lena", name=f"fill-{i}", accelerators=8)
    server.cycle()
    waiting = Job.objects.get(state=Job.State.PENDING)

    status, out, _ = qm(capsys, "list")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "TEAM", "USER", "STATE", "RESOURCES", "SUBMITTED", "NOTE"]
    rows = {int(line.split()[0]): line for line in lines[1:]}
    assert list(rows) == sorted(rows, reverse=True)  # newest first
    assert rows[waiting.pk].split()[1:6] == [waiting.name, "vision", "lena", "pending", "8"]
    assert waiting.pending_message[:40] in rows[waiting.pk]
    assert rows[job.pk].split()[1:6] == ["train", "vision", "alice", "placing", "1"]
    assert re.search(r"on (east|west), cost so far 0\.00$", rows[job.pk])
    status, out, _ = qm(capsys, "list", "--state", "pending", "--json")
    assert [row["id"] for row in json.loads(out)] == [waiting.pk]

    status, out, _ = qm(capsys, "show", str(waiting.pk))
    assert status == 0
    assert f"Job {waiting.pk}: {waiting.name}" in out
    assert re.search(rf"waiting\s+{re.escape(waiting.pending_message)}", out)
    assert "cost so far  0.00" in out
    status, out, _ = qm(capsys, "show", str(job.pk))
    assert re.search(r"placement\s+(east|west), H100-SXM-80GB", out), out
    status, out, _ = qm(capsys, "show", str(job.pk), "--json")
    assert json.loads(out)["placement"]["flavor"] == "H100-SXM-80GB"

    status, out, _ = qm(capsys, "cancel", str(job.pk), "--reason", "wrong data")
    assert (status, out.strip()) == (0, f"Job {job.pk} (train): cancelled.")
    assert Job.objects.get(pk=job.pk).state == Job.State.CANCELLED
    status, out, err = qm(capsys, "cancel", str(job.pk))
    assert status == 1
    assert "nothing to cancel" in err
    assert "  state: " in err

    status, out, _ = qm(capsys, "events", str(job.pk))
    assert status == 0
    reasons = [line.split()[5] for line in out.splitlines()]
    assert reasons[0] == "submitted"
    assert reasons[-1] == "cancelled"
    assert "Cancelled by alice: wrong data" in out.splitlines()[-1]
    # Alice cannot cancel her lead's job, and another team's job does not exist for her.
    status, _, err = qm(capsys, "cancel", str(waiting.pk))
    assert status == 1
    assert "owner" in err
    bobs = server.submit("bob", name="grasp")
    status, _, err = qm(capsys, "show", str(bobs.pk))
    assert status == 1
    assert err == f"qm: No job {bobs.pk}, or not one you may see.\n"


def test_an_admin_preempts_and_requeues_a_job(server: Fleet, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    job = server.submit("alice", name="train")
    server.cycle()
    status, _, err = qm(capsys, "preempt", str(job.pk), "--reason", "rack 3 maintenance")  # alice: not an admin
    assert status == 1
    assert "Only an admin" in err
    _, token = portal_actions.issue_token(server.user("adam"), name="on-call")
    monkeypatch.setenv("QM_TOKEN", token)
    status, out, err = qm(capsys, "preempt", str(job.pk))
    assert status == 2  # --reason is required
    assert "--reason" in err
    status, out, err = qm(capsys, "preempt", str(job.pk), "--reason", "rack 3 maintenance")
    assert (status, out.strip(), err) == (0, f"Job {job.pk} (train): preempting.", "")
    status, out, err = qm(capsys, "requeue", str(job.pk), "--reason", "again")
    assert status == 1
    assert "only a failed job can be requeued" in err
    assert "  state: " in err
    assert Job.objects.get(pk=job.pk).state == Job.State.PREEMPTING


def test_the_example_job_file_previews_and_submits(server: Fleet, capsys: Any) -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    status, out, err = qm(capsys, "submit", str(EXAMPLE), "--dry-run")
    assert (status, err) == (0, ""), err
    assert out.startswith("Dry run: nothing submitted. Cost per hour:")
    assert "It would start now." in out
    assert not Job.objects.exists()

    status, out, err = qm(capsys, "submit", str(EXAMPLE), "--idempotency-key", "example-1")
    assert (status, err) == (0, ""), err
    job = Job.objects.get(pk=submitted_id(out))
    assert (job.name, job.accelerators, job.workers, job.cpu, job.memory, job.time_limit) == (
        example["name"],
        8,
        2,
        32_000,
        256 * 1024,
        12 * 3600,
    )
    assert (job.project.slug, job.tier.name, job.env) == ("detection", "normal", example["env"])  # type: ignore[union-attr]
    status, out, _ = qm(capsys, "submit", str(EXAMPLE), "--idempotency-key", "example-1")
    assert status == 0
    assert f"Job {job.pk} was already submitted with this idempotency key" in out
    assert Job.objects.count() == 1


def test_follow_prints_each_event_once_until_the_job_succeeds(server: Fleet, capsys: Any) -> None:
    job = server.submit("alice")

    def its_hour_is_up() -> None:
        server.run_for(3600)
        server.follow()

    steps: Iterator[Callable[[], Any]] = iter(
        [
            server.cycle,  # placed and handed over (unless the submission's own cycle did it already)
            server.follow,  # the cluster says it runs
            lambda: None,  # a quiet poll: nothing new, nothing printed
            its_hour_is_up,  # it has run its hour and succeeded
        ]
    )

    def between_polls(seconds: float) -> None:
        assert seconds == 0.5
        next(steps)()

    status, out, err = qm(capsys, "follow", str(job.pk), "--interval", "0.5", sleep=between_polls)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    moves = [line.split()[2:5] for line in lines[:-1]]
    assert moves == [
        ["-", "->", "pending"],
        ["pending", "->", "admitted"],
        ["admitted", "->", "placing"],
        ["placing", "->", "running"],
        ["running", "->", "succeeded"],
    ]
    assert lines[-1] == f"Job {job.pk} succeeded"
    assert next(steps, None) is None  # every step was needed


def test_follow_exits_1_when_the_job_is_cancelled(server: Fleet, capsys: Any) -> None:
    job = server.submit("alice")

    def cancelled_by_the_lead(seconds: float) -> None:
        actions.cancel_job(server.user("lena"), Job.objects.get(pk=job.pk), "make room")

    status, out, _ = qm(capsys, "follow", str(job.pk), "--interval", "1", sleep=cancelled_by_the_lead)
    assert status == 1
    assert "Cancelled by lena: make room" in out
    assert out.splitlines()[-1] == f"Job {job.pk} cancelled: Cancelled by lena: make room"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed\ntime_limit: 2h\n", "not valid YAML: line 2, column 11"),
        ("name: train\n  time_limit: 2h\n", "not valid YAML: line 2"),
        (JOB + "name: again\n", "name: line 7: given twice (first on line 2)."),
        ("- name: train\n", "line 1: the file should map fields to values"),
        ("", "is empty"),
        ("name: !!python/object:os.system train\n", "not valid YAML"),
        # Anchors and aliases (a "billion laughs" expands from a few of them), named by key and line.
        (JOB + "env: {A: &seed '7', B: *seed}\n", "  env.A: line 7: YAML anchors and aliases are not allowed"),
        (JOB + "env: {A: &seed '7', B: *seed}\n", "  env.B: line 7: YAML anchors and aliases are not allowed"),
        ("base: &b {name: train}\njob:\n  <<: *b\n", "  job.<<: line 3: YAML anchors and aliases"),
        (JOB.replace("command: [python, train.py]", "command: &c [python, train.py]"), "  command: line 6: YAML"),
        # Numbers JSON cannot carry: refused by key, whatever the server would have made of them.
        (JOB + "cpu: .inf\n", "  cpu: line 7: '.inf' is not a finite number."),
        (JOB + "memory_gib: .NaN\n", "  memory_gib: line 7: '.NaN' is not a finite number."),
        (JOB + "max_price_per_hour: 1e999\n", "  max_price_per_hour: line 7: '1e999' is not a finite number."),
        (JOB.replace("[python, train.py]", "[python, -1.0e+999]"), "  command[1]: line 6: '-1.0e+999' is not a"),
    ],
)
def test_a_bad_job_file_is_refused_before_anything_is_sent(
    server: Fleet, tmp_path: Path, capsys: Any, text: str, expected: str
) -> None:
    status, out, err = qm(capsys, "submit", job_file(tmp_path, text))
    assert status == 2
    assert out == ""
    assert expected in err
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The API alone knows the fields: it names an unknown one and the closest known one; qm adds the line.
        (JOB + "acclerators: 8\n", "  acclerators: Unknown field. Did you mean accelerators? (line 7)"),
        (JOB + "gpus: 8\n", "  gpus: Unknown field. (line 7)"),
    ],
)
def test_an_unknown_key_is_named_by_the_server_with_its_line(
    server: Fleet, tmp_path: Path, capsys: Any, text: str, expected: str
) -> None:
    for dry_run in ([], ["--dry-run"]):
        status, out, err = qm(capsys, "submit", job_file(tmp_path, text), *dry_run)
        assert (status, out) == (2, "")
        assert expected in err
    assert not Job.objects.exists()


def test_numbers_read_as_yaml_1_2_and_quoted_text_stays_text(tmp_path: Path) -> None:
    data = jobfile.read_job_file(job_file(tmp_path, JOB + "cpu: 1e1\nmax_price_per_hour: 2.5e+1\nenv: {N: '1e999'}\n"))
    assert (data["cpu"], data["max_price_per_hour"], data["env"]) == (10.0, 25.0, {"N": "1e999"})


def test_secret_values_go_in_the_job_file_and_never_come_back(server: Fleet, tmp_path: Path, capsys: Any) -> None:
    secret = "hf_0123456789abcdef"
    status, out, err = qm(capsys, "submit", job_file(tmp_path, JOB + f"secret_env: {{HF_TOKEN: '{secret}'}}\n"))
    assert status == 0, err
    job = Job.objects.get(pk=submitted_id(out))
    assert job.secret_env() == {"HF_TOKEN": secret}
    status, out, _ = qm(capsys, "show", str(job.pk), "--json")
    assert status == 0
    assert json.loads(out)["secret_env_names"] == ["HF_TOKEN"]
    assert secret not in out


def test_a_missing_file_is_bad_input(server: Fleet, tmp_path: Path, capsys: Any) -> None:
    status, _, err = qm(capsys, "submit", str(tmp_path / "nope.yaml"))
    assert status == 2
    assert "Cannot read" in err
    assert "No such file" in err


def test_the_servers_400_names_the_field_on_stderr(server: Fleet, tmp_path: Path, capsys: Any) -> None:
    status, out, err = qm(capsys, "submit", job_file(tmp_path, JOB + "cpu: lots\nenv: {DEBUG: 1}\n"))
    assert (status, out) == (2, "")
    assert "qm: Invalid input: cpu, env." in err
    assert "  cpu: A valid number is required." in err
    assert "  env: DEBUG: Not a string." in err
    status, _, err = qm(capsys, "submit", job_file(tmp_path, JOB.replace("accelerators: 1", "accelerators: 16")))
    assert status == 2
    assert "  accelerators: " in err
    status, _, err = qm(capsys, "submit", job_file(tmp_path, JOB), "--dry-run", "--url", "http://127.0.0.1:9")
    assert status == 1
    assert err == "qm: Cannot reach http://127.0.0.1:9: ConnectionError.\n"
    assert not Job.objects.exists()


def test_a_wrong_token_is_refused_clearly_and_never_printed(
    server: Fleet, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "qm_" + "x" * 40
    monkeypatch.setenv("QM_TOKEN", wrong)
    status, out, err = qm(capsys, "list")
    assert (status, out) == (1, "")
    assert "refused the token" in err
    assert "qm login" in err
    assert wrong not in err
    monkeypatch.delenv("QM_TOKEN")
    status, _, err = qm(capsys, "list")
    assert status == 1
    assert "Not signed in" in err
    status, _, err = qm(capsys, "list", "--url", "localhost:8000")
    assert status == 2
    assert "must start with http:// or https://" in err


def test_login_keeps_the_token_for_this_server_only(
    server: Fleet, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, live_server: Any
) -> None:
    monkeypatch.delenv("QM_TOKEN")
    monkeypatch.setattr("sys.stdin", io.StringIO("wrong\n"))
    status, _, err = qm(capsys, "login", "--username", "alice", "--password-stdin")
    assert status == 2
    assert "password: Wrong username or password." in err
    assert not client.config_path().exists()

    monkeypatch.setattr("sys.stdin", io.StringIO("demo\n"))
    status, out, err = qm(capsys, "login", "--username", "alice", "--password-stdin")
    assert (status, err) == (0, "")
    path = tmp_path / "config" / "quartermaster" / "config.yaml"
    assert f"saved in {path}" in out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = yaml.safe_load(path.read_text())
    assert saved["url"] == live_server.url
    token = ApiToken.objects.get(user=server.user("alice"), name__startswith="qm on")
    assert token.hint in saved["token"]
    assert saved["token"] not in out

    server.submit("alice")
    status, out, _ = qm(capsys, "list", "--mine")
    assert status == 0
    assert "train" in out
    status, _, err = qm(capsys, "list", "--url", "http://127.0.0.1:9")  # the saved token is not sent there
    assert status == 1
    assert "Not signed in to http://127.0.0.1:9" in err


def test_list_all_pages(server: Fleet, capsys: Any) -> None:
    for i in range(51):
        server.submit("alice", name=f"job-{i:02}", accelerators=0, cpu=100)
    status, out, err = qm(capsys, "list", "--json")
    assert (status, len(json.loads(out))) == (0, 50)
    assert "50 of 51 jobs shown; --all-pages for all." in err
    status, out, err = qm(capsys, "list", "--all-pages", "--json", "--query", "job-")
    assert {row["name"] for row in json.loads(out)} == {f"job-{i:02}" for i in range(51)}
    assert err == ""


def test_the_console_script_is_installed() -> None:
    qm_script = shutil.which("qm", path=str(Path(sys.executable).parent))
    assert qm_script, "no qm on the virtualenv's PATH: run `.venv/bin/pip install -e .`"
    done = subprocess.run([qm_script, "--help"], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0
    assert "follow" in done.stdout
    refused = subprocess.run(
        [qm_script, "--url", "http://127.0.0.1:9", "--token", "qm_secret", "list"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert refused.returncode == 1
    assert "Cannot reach http://127.0.0.1:9" in refused.stderr
    assert "qm_secret" not in refused.stderr + refused.stdout


def test_dry_run_names_the_member_limit_and_show_counts_the_next_job_as_one(
    server: Fleet, tmp_path: Path, capsys: Any
) -> None:
    """The same answers as the page: the dry run is held by alice's own limit (not "start now"), and the job
    next in line is #1, as the job page says."""
    from governance.actions import quotas

    team = server.world.teams["vision"]
    quotas.set_member_limit(server.user("lena"), team, server.user("alice"), 1, reason="share")
    server.submit("alice", name="mine", accelerators=1)
    server.cycle()
    status, out, err = qm(capsys, "submit", job_file(tmp_path), "--dry-run")
    assert (status, err) == (0, ""), err
    assert "It would wait (member_limit)" in out
    assert "Estimated start: unknown" not in out  # her running job's time limit bounds it

    for i in range(6):
        server.submit("lena", name=f"fill-{i}", accelerators=8)
    server.cycle()
    waiting = Job.objects.filter(state=Job.State.PENDING).order_by("queue_position").first()
    assert waiting is not None
    assert waiting.queue_position == 1
    status, out, err = qm(capsys, "show", str(waiting.pk))
    assert (status, err) == (0, ""), err
    assert "#1 in the queue" in out
