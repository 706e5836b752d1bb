"""deploy/model_server.py as a replica runs it: a real process on a free port, read over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = Path(__file__).resolve().parents[2] / "deploy" / "model_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Running:
    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.process = process

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as answer:  # noqa: S310
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, data=body, method="POST")  # noqa: S310
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


def start(*args: str, **env: str) -> Running:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", str(port), "--host", "127.0.0.1", *args],
        env={**os.environ, "MODEL_LATENCY_MS": "0", **env},
        stderr=subprocess.DEVNULL,
    )
    running = Running(port, process)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return running
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("the model server did not start")


@pytest.fixture
def servers() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        running.process.terminate()
        running.process.wait(timeout=5)


def test_serves_a_json_model_and_its_version(servers: list[Running], tmp_path: Path) -> None:
    model = tmp_path / "sentiment.json"
    model.write_text(json.dumps({"scale": 2}))
    servers.append(server := start("--model", str(model), QM_MODEL_VERSION="3"))
    status, body = server.get("/health")
    assert status == 200
    assert json.loads(body)["status"] == "ok"
    status, answer = server.post("/v1/predict", json.dumps({"input": [1, 2, 3.5]}).encode())
    assert status == 200
    assert answer["model"] == "sentiment.json"
    assert answer["version"] == "3"
    assert answer["replica"].endswith(f":{server.url.rsplit(':', 1)[1]}")
    assert answer["output"] == {"input": [1, 2, 3.5], "score": 13.0}


def test_a_model_file_that_says_it_is_bad_fails_its_health(servers: list[Running], tmp_path: Path) -> None:
    model = tmp_path / "broken.json"
    model.write_text(json.dumps({"healthy": False, "reason": "weights are NaN"}))
    servers.append(server := start("--model", str(model)))
    status, body = server.get("/health")
    assert status == 500
    assert json.loads(body)["detail"] == "weights are NaN"
    assert server.post("/v1/predict", b"{}")[0] == 503


def test_fail_health_on_purpose_and_a_missing_model(servers: list[Running], tmp_path: Path) -> None:
    servers.append(failing := start(MODEL_SERVER_FAIL_HEALTH="1"))
    servers.append(missing := start("--model", str(tmp_path / "nowhere.bin")))
    assert failing.get("/health")[0] == 500
    status, body = missing.get("/health")
    assert status == 500
    assert "could not be read" in json.loads(body)["detail"]


def test_bad_input_is_a_400_naming_the_problem(servers: list[Running]) -> None:
    servers.append(server := start())
    status, answer = server.post("/v1/predict", b"{not json")
    assert status == 400
    assert answer["detail"] == "the body is not JSON"
    assert server.post("/v1/nothing", b"{}")[0] == 404


def test_concurrency_is_limited_and_metrics_count(servers: list[Running]) -> None:
    # Four predictions of 300 ms on two slots take two rounds: at least 600 ms, well under four rounds.
    servers.append(server := start("--concurrency", "2", MODEL_LATENCY_MS="300"))
    answers: list[int] = []

    def one() -> None:
        answers.append(server.post("/v1/predict", b'{"input": 1}')[0])

    threads = [threading.Thread(target=one) for _ in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    assert answers == [200] * 4
    assert took >= 0.6
    status, body = server.get("/metrics")
    assert status == 200
    text = body.decode()
    assert 'model_server_requests_total{path="/v1/predict",status="200"} 4' in text
    assert "model_server_predict_seconds_count 4" in text
    assert 'model_server_predict_seconds_bucket{le="0.25"} 0' in text
    assert "model_server_inflight 1" in text  # the /metrics request itself


def test_the_load_generator_holds_its_rate_against_a_real_server(servers: list[Running]) -> None:
    from benchmarks import loadgen

    assert [round(t, 3) for t in loadgen.schedule([loadgen.Step(2.5, 2)])] == [0.0, 0.4, 0.8, 1.2, 1.6]
    assert len(list(loadgen.schedule([loadgen.Ramp(0, 10, 2), loadgen.Step(4, 1)]))) == 14
    servers.append(server := start(MODEL_LATENCY_MS="10"))
    seen: list[int] = []
    result = loadgen.run(
        loadgen.http_sender(server.url + "/v1/predict", body=b'{"input": 1}'),
        [loadgen.Step(20, 1), loadgen.Step(40, 1)],
        on_second=seen.append,
    )
    assert seen == [0, 1]
    assert [s.sent for s in result.seconds] == [20, 40]
    assert sum(s.errors for s in result.seconds) == 0
    window = result.window(0, 2)
    assert window["ok"] == 60
    assert window["p50_ms"] is not None
    assert window["p50_ms"] >= 10
    refused = loadgen.run(loadgen.http_sender("http://127.0.0.1:1/"), [loadgen.Step(5, 1)])
    assert refused.window(0, 1)["errors"] == 5


def test_the_model_comes_from_the_registry_uri_the_replica_is_given(servers: list[Running], tmp_path: Path) -> None:
    model = tmp_path / "ranker.json"
    model.write_text(json.dumps({"scale": 3}))
    servers.append(server := start(QM_MODEL_URI=f"file://{model}", QM_MODEL_VERSION="7"))
    status, answer = server.post("/v1/predict", b'{"input": [2]}')
    assert status == 200
    assert (answer["model"], answer["version"], answer["output"]["score"]) == ("ranker.json", "7", 6.0)
