"""The data plane: one asyncio process (aiohttp) that answers ``/serve/<organization>/<team>/<service>/<path>``
and relays each request to a ready replica of the service; the portal's web processes carry no inference
traffic (docs/services.md §The data plane says why a process of our own rather than nginx or HAProxy).

A request goes through, in order:

1. **The route.** The service by its organization, team and name, from the routing table (``source.table``,
   rebuilt every ``refresh`` seconds in a worker thread; until the first one, 503).
2. **Who.** An API token (``Authorization: Bearer``) of someone who may view the service, and whose scope allows
   the method; a public service needs none, but a token shown must be good. Unknown service or one the caller
   may not see: 404 (no token: 401). Verdicts are kept ``auth_seconds`` per token, service and method class, so
   a revoked token stops working within that time; one lookup at a time per key.
3. **The service's state and rate.** A stopped service is a 503; past its rate, a 429 with ``Retry-After``.
4. **A turn.** At most ``max_inflight`` of a service's requests are at its replicas; others wait, oldest first,
   up to ``queue_seconds``. Waiting is bounded per service and in all (``queue_per_service``, ``queue_total``):
   past either, a 503 with ``Retry-After`` at once, so no caller can hold the data plane up.
5. **A replica.** Fewest of this process's requests in flight, ties in turn. None ready: the service's demand is
   recorded (the control loop starts one) and the request waits, counted as above, up to
   ``cold_start_seconds``; then a 503 with ``Retry-After``.
6. **The relay.** Hop-by-hop headers and the caller's credentials are dropped; an idempotent request whose
   connection was refused or dropped before the answer began is tried once more on another replica; a replica
   that does not begin its answer within ``timeout_seconds`` is a 504, one that answers nothing a 502. The answer
   streams back with ``X-QM-Replica``, ``X-QM-Revision``, ``Content-Security-Policy: sandbox`` and ``nosniff``.

Every request is counted in memory (``serving.load.Tally``) and the counts are added to the services' load once
a second (``source.flush``), where the autoscaler reads them; counts that could not be added are kept for the
next flush. ``GET /healthz`` answers whether a table is loaded and how old it is. Each answer is measured
(``qm_dataplane_request_duration_seconds`` by status class and by who answered), as are the requests held
(``qm_dataplane_waiting_requests``) and the table's last load (``common/metrics.py``), in
``PROMETHEUS_MULTIPROC_DIR``: the portal's ``/metrics`` shows them where the processes share it (the demo), and a
``manage.py serve_metrics`` beside the data plane elsewhere (its Kubernetes pod); never on the public port.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import aiohttp
from aiohttp import web

from common import metrics
from serving.dataplane.table import (
    CREDENTIALS,
    HOP_BY_HOP,
    IDEMPOTENT,
    Chooser,
    Gate,
    Key,
    Limits,
    Route,
    Upstream,
    bearer,
    own,
)
from serving.load import Tally

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
RETRY_AFTER = 10
#: Worker threads for the portal's state (the routing table, token verdicts, counts, demand).
THREADS = 4
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


class Source(Protocol):
    """The portal's state, as ``serving/dataplane/source.py`` reads and writes it (synchronous)."""

    def table(self) -> Mapping[Key, Route]: ...
    def authorize(self, raw: str, service: int | None, method: str) -> Any: ...
    def flush(self, counts: Mapping[str, int]) -> None: ...
    def demand(self, service: int) -> None: ...
    def close(self) -> None: ...


class Refusal(Exception):
    """The data plane answers the request itself."""

    def __init__(self, status: int, detail: str, **headers: str) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers

    def response(self) -> web.Response:
        response = web.json_response({"detail": self.detail}, status=self.status)
        for name, value in self.headers.items():
            response.headers[name.replace("_", "-")] = value
        return response


def _unauthenticated(detail: str) -> Refusal:
    return Refusal(401, detail, WWW_Authenticate='Bearer realm="serve"')


@dataclass
class _Verdicts:
    """Token verdicts kept a while, and the lookups under way (one per key)."""

    seconds: float
    kept: dict[tuple[str, int | None, bool], tuple[float, Any]] = field(default_factory=dict)
    pending: dict[tuple[str, int | None, bool], asyncio.Future[Any]] = field(default_factory=dict)
    most: int = 100_000


class DataPlane:
    def __init__(
        self,
        source: Source,
        limits: Limits,
        *,
        refresh: float = 1.0,
        flush_every: float = 1.0,
        auth_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source, self.limits, self.refresh, self.flush_every, self.clock = (
            source,
            limits,
            refresh,
            flush_every,
            clock,
        )
        self.routes: Mapping[Key, Route] = {}
        self.by_service: dict[int, Route] = {}
        self.loaded_at: float | None = None
        self.changed = asyncio.Event()
        self.gates: dict[int, Gate] = {}
        self.waiting = 0
        self.chooser = Chooser()
        self.tally = Tally()
        self.verdicts = _Verdicts(auth_seconds)
        self.demanded: dict[int, float] = {}
        self.threads = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="dataplane")
        self.session: aiohttp.ClientSession | None = None
        self.tasks: list[asyncio.Task[None]] = []

    # --- the application ------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_route("*", r"/serve/{organization}/{team}/{service}/{path:.*}", self.handle)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, app: web.Application) -> None:
        self.changed = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=60, enable_cleanup_closed=True)
        self.session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
        )
        await self._load()
        self.tasks = [
            asyncio.create_task(self._every(self.refresh, self._load)),
            asyncio.create_task(self._every(self.flush_every, self._flush)),
        ]

    async def _stop(self, app: web.Application) -> None:
        for task in self.tasks:
            task.cancel()
        await self._flush()
        if self.session is not None:
            await self.session.close()
        # Each worker thread closes what it holds (its database connection): one task each, met at a barrier.
        met = threading.Barrier(THREADS)

        def close() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                met.wait(timeout=5)
            self.source.close()

        await asyncio.gather(*(self._in_thread(close) for _ in range(THREADS)), return_exceptions=True)
        self.threads.shutdown(wait=False)

    async def _every(self, seconds: float, step: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(seconds)
            await step()

    async def _in_thread(self, work: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.threads, work, *args)

    async def _load(self) -> None:
        try:
            routes = await self._in_thread(self.source.table)
        except Exception:  # the database away: keep serving the last table
            log.exception("the data plane could not read its routing table; it keeps the last one")
            return
        self.routes, self.by_service = routes, {route.service: route for route in routes.values()}
        self.loaded_at = self.clock()
        metrics.DATAPLANE_TABLE_LOADED.set_to_current_time()
        self.changed.set()
        self.changed = asyncio.Event()

    async def _flush(self) -> None:
        counts = self.tally.take()
        if not counts:
            return
        try:
            await self._in_thread(self.source.flush, counts)
        except Exception:  # the cache away: keep the counts for the next flush
            log.exception("the data plane could not add its counts; it keeps them")
            self.tally.counts.update(counts)

    async def healthz(self, request: web.Request) -> web.Response:
        if self.loaded_at is None:
            return web.json_response({"status": "starting"}, status=503)
        age = round(self.clock() - self.loaded_at, 3)
        return web.json_response({"status": "ok", "services": len(self.routes), "table_age_seconds": age})

    # --- a request ------------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        response, by = await self._answer(request)
        status = metrics.status_class(response.status)
        metrics.DATAPLANE_REQUESTS.labels(status, by).observe(time.perf_counter() - started)
        return response

    async def _answer(self, request: web.Request) -> tuple[web.StreamResponse, str]:
        """The answer, and who gave it: ``replica`` or ``plane``."""
        try:
            route = await self._admit(request)
        except Refusal as refusal:
            return refusal.response(), "plane"
        gate = self._gate(route)
        try:
            await self._turn(route, gate)
        except Refusal as refusal:
            self.tally.refused(route.service)
            return refusal.response(), "plane"
        try:
            try:
                upstreams = await self._upstreams(route)
            except Refusal as refusal:  # no replica in time: nothing was sent
                self.tally.refused(route.service)
                return refusal.response(), "plane"
            try:
                return await self._relay(request, route, upstreams), "replica"
            except Refusal as refusal:  # counted as it was sent, and as it failed (``Tally.begin``, ``end``)
                return refusal.response(), "plane"
        finally:
            self._release(gate)

    async def _admit(self, request: web.Request) -> Route:
        """Steps 1 to 3: the route, who calls, the service's state and rate."""
        if self.loaded_at is None:
            raise Refusal(503, "The data plane is starting.", Retry_After="1")
        match = request.match_info
        route = self.routes.get((match["organization"], match["team"], match["service"]))
        raw = bearer(request.headers.get("Authorization", ""))
        if raw == "":
            raise _unauthenticated("Malformed Authorization header: use 'Bearer <token>'.")
        if raw is None and (route is None or not route.public):
            raise _unauthenticated("Show an API token (Authorization: Bearer <token>).")
        if raw is not None:
            verdict = await self._verdict(raw, route.service if route else None, request.method)
            if verdict.status == 401:
                raise _unauthenticated(verdict.detail)
            if verdict.status == 403:
                raise Refusal(403, verdict.detail)
            if verdict.status and route is not None and not route.public:
                route = None
        if route is None:
            raise Refusal(404, f"No service {match['service']} in team {match['team']}.")
        if route.stopped:
            self.tally.refused(route.service)
            raise Refusal(503, f"Service {route.name} is stopped.", Retry_After=str(RETRY_AFTER * 6))
        bucket = self._gate(route).bucket
        if not bucket.take(self.clock()):
            self.tally.refused(route.service, error=False)
            wait = max(1, round(bucket.wait() + 0.5))
            raise Refusal(429, f"Service {route.name} takes no more requests a second.", Retry_After=str(wait))
        return route

    async def _verdict(self, raw: str, service: int | None, method: str) -> Any:
        key = (hashlib.sha256(raw.encode()).hexdigest(), service, method not in SAFE)
        now = self.clock()
        kept = self.verdicts.kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        pending = self.verdicts.pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._in_thread(self.source.authorize, raw, service, method))
            self.verdicts.pending[key] = pending
            try:
                verdict = await pending
            finally:
                self.verdicts.pending.pop(key, None)
            if len(self.verdicts.kept) >= self.verdicts.most:
                self.verdicts.kept.clear()
            self.verdicts.kept[key] = (self.clock() + self.verdicts.seconds, verdict)
            return verdict
        return await asyncio.shield(pending)

    def _gate(self, route: Route) -> Gate:
        limits = own(self.limits, route.max_inflight, route.max_rps)
        gate = self.gates.get(route.service)
        if gate is None:
            gate = self.gates[route.service] = Gate(limits)
        gate.adopt(limits)
        return gate

    def _room_to_wait(self, route: Route, gate: Gate) -> None:
        if len(gate.waiting) + gate.cold >= self.limits.queue_per_service or self.waiting >= self.limits.queue_total:
            raise Refusal(
                503, f"Service {route.name} has too many requests waiting; try again shortly.", Retry_After="1"
            )

    async def _turn(self, route: Route, gate: Gate) -> None:
        """Step 4: a place among the service's requests at its replicas, waiting for one if need be."""
        if gate.free() and not gate.waiting:
            gate.inflight += 1
            return
        self._room_to_wait(route, gate)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        gate.waiting.append(turn)
        self._held(+1)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.limits.queue_seconds)
        except TimeoutError:
            if turn.done() and not turn.cancelled():  # given at the last moment: keep it
                return
            raise Refusal(503, f"Service {route.name} is busy; try again shortly.", Retry_After="1") from None
        except asyncio.CancelledError:  # the caller went away: a place given meanwhile passes on
            if turn.done() and not turn.cancelled():
                self._release(gate)
            raise
        finally:
            self._held(-1)
            if not turn.done():
                turn.cancel()
            if turn in gate.waiting:
                gate.waiting.remove(turn)

    def _held(self, change: int) -> None:
        self.waiting += change
        metrics.DATAPLANE_WAITING.set(self.waiting)

    def _release(self, gate: Gate) -> None:
        while gate.waiting:
            turn = gate.waiting.popleft()
            if isinstance(turn, asyncio.Future) and not turn.done():
                turn.set_result(None)  # the place passes on: inflight stays as it is
                return
        gate.inflight -= 1

    async def _upstreams(self, route: Route) -> tuple[Upstream, ...]:
        """Step 5: the service's ready replicas, waiting for one while it starts (a cold start)."""
        current = self.by_service.get(route.service, route)
        if current.upstreams:
            return current.upstreams
        gate = self._gate(route)
        self._room_to_wait(route, gate)
        self._held(+1)
        gate.cold += 1
        deadline = self.clock() + self.limits.cold_start_seconds
        try:
            while True:
                await self._ask_for_replica(route.service)
                current = self.by_service.get(route.service, route)
                if current.upstreams:
                    return current.upstreams
                left = deadline - self.clock()
                if left <= 0:
                    raise Refusal(
                        503,
                        f"Service {route.name} has no replica ready yet; one is starting. Try again shortly.",
                        Retry_After=str(RETRY_AFTER),
                    )
                with contextlib.suppress(TimeoutError):  # a new table, or a second gone: look again
                    await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        finally:
            self._held(-1)
            gate.cold -= 1

    async def _ask_for_replica(self, service: int) -> None:
        now = self.clock()
        if now - self.demanded.get(service, -1e9) < 1.0:
            return
        self.demanded[service] = now
        try:
            await self._in_thread(self.source.demand, service)
        except Exception:
            log.exception("service %s: the data plane could not record its demand", service)

    async def _relay(self, request: web.Request, route: Route, upstreams: tuple[Upstream, ...]) -> web.StreamResponse:
        """Step 6: send the request to a replica and stream its answer back."""
        assert self.session is not None
        method = request.method
        body = await request.read() if request.body_exists else b""
        headers = {
            name: value
            for name, value in request.headers.items()
            if name.lower() not in HOP_BY_HOP and name.lower() not in CREDENTIALS
        }
        path = request.match_info["path"]
        query = request.query_string
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.limits.connect_seconds)
        tries = self.chooser.order(upstreams)[: 2 if method in IDEMPOTENT else 1]
        for tried, upstream in enumerate(tries):
            url = upstream.url.rstrip("/") + "/" + path.lstrip("/") + (f"?{query}" if query else "")
            self.tally.begin(route.service, upstream.replica, retry=tried > 0)
            self.chooser.sent(upstream.replica)
            started = self.clock()
            error = True
            try:
                try:
                    answer = await asyncio.wait_for(
                        self.session.request(
                            method, url, headers=headers, data=body or None, allow_redirects=False, timeout=timeout
                        ),
                        self.limits.timeout_seconds,
                    )
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as failed:
                    log.info("service %s: replica %s did not answer: %s", route.service, upstream.replica, failed)
                    if upstream is not tries[-1]:  # only an idempotent request has a second try: a replica
                        # that refused it (never saw it: no error of its own) or dropped it before it began to
                        # answer is passed over for the next one, and the request fails only if that one fails too
                        error = not isinstance(failed, aiohttp.ClientConnectorError)
                        continue
                    raise Refusal(
                        502, f"No replica of service {route.name} answered.", Retry_After=str(RETRY_AFTER)
                    ) from None
                except TimeoutError:
                    raise Refusal(
                        504, f"A replica of service {route.name} did not answer in time.", Retry_After=str(RETRY_AFTER)
                    ) from None
                try:
                    response = await self._stream(request, answer, upstream)
                finally:
                    answer.release()
                error = answer.status >= 500
                return response
            finally:
                self.chooser.done(upstream.replica)
                self.tally.end(route.service, upstream.replica, (self.clock() - started) * 1000, error=error)
        raise Refusal(502, f"No replica of service {route.name} answered.", Retry_After=str(RETRY_AFTER))

    async def _stream(
        self, request: web.Request, answer: aiohttp.ClientResponse, upstream: Upstream
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=answer.status, reason=answer.reason)
        for name, value in answer.headers.items():
            # No cookie: the endpoint takes none, and one set here would reach the portal (cookies ignore ports).
            if name.lower() not in HOP_BY_HOP and name.lower() != "set-cookie":
                response.headers.add(name, value)
        # A replica's page is the service's, not the portal's: sandboxed into an origin of its own.
        response.headers["Content-Security-Policy"] = "sandbox"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-QM-Replica"] = str(upstream.replica)
        response.headers["X-QM-Revision"] = str(upstream.revision)
        if answer.content_length is not None:
            response.content_length = answer.content_length
        await response.prepare(request)
        async for chunk in answer.content.iter_chunked(CHUNK):
            await response.write(chunk)
        await response.write_eof()
        return response


class InThread:
    """A data plane on a free local port of this machine, its event loop in a thread of this process: for tests
    and benchmarks, which share the process's database and cache with it. ``with InThread(...) as plane:``,
    then ``plane.url``."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dataplane-loop", daemon=True)
        self.url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        runner = web.AppRunner(self.plane.app(), access_log=None)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self.started.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        self.loop.close()

    def __enter__(self) -> Self:
        self.thread.start()
        if not self.started.wait(30):
            raise RuntimeError("the data plane did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
