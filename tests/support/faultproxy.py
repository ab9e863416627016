"""A fault-injecting HTTP reverse proxy for storage tests.

It sits between gcsfs and the GCS emulator on 127.0.0.1 and turns a share
of requests into the failures real networks produce: error statuses, TCP
resets, stalls, truncated or corrupted response bodies, and whole outages.
Faults are drawn from a seeded random generator, so a sequential test sees
the same faults on every run, and each injected fault is counted, so a
test can assert that it really exercised a failure.

    with FaultProxy(emulator.url) as proxy:
        proxy.set_mix(FaultMix(error_rate=0.3, seed=1))
        Storage("gs://b/run", {"token": "anon", "endpoint_url": proxy.url})

Standard library only: one thread per client connection
(``http.server.ThreadingHTTPServer``), one upstream connection per request,
bodies streamed in blocks in both directions.
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import io
import json
import random
import select
import socket
import struct
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator

import pytest

BLOCK = 1 << 16
# Per-connection headers a proxy must not forward (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    }
)
Match = Callable[[str, str], bool]  # match(method, path) -> fault this request?
# token_ok(authorization_header_or_None) -> may this request through?
TokenCheck = Callable[[str | None], bool]


@dataclasses.dataclass(frozen=True, kw_only=True)
class FaultMix:
    """Which faults to inject, and how often.

    Attributes:
        error_rate: share of requests answered with one of ``statuses``.
        reset_rate: share closed with a TCP reset before being forwarded.
        stall_rate: share held ``stall_seconds`` before being forwarded.
        stall_seconds: how long a stall lasts; None holds the request until
            the client gives up (or the proxy closes).
        truncate_rate: share whose response body is cut off halfway
            (after the upstream server has acted on the request).
        corrupt_rate: share whose response body arrives whole but with one
            byte in its middle inverted: damage in transit that no length
            check sees.
        statuses: error statuses to choose from, e.g. ``(403,)``.
        seed: seed of the random draws (reset by ``set_mix``).
        match: only requests with ``match(method, path)`` true are faulted.
        max_faults: stop injecting after this many faults (None: never).
        body_match: only requests whose body contains these bytes are
            faulted (e.g. ``b"/heartbeat/"``: uploads name their object in
            the body, not the path). The body is then read before deciding.
        error_reason: the reason an injected error names, in the
            ``{"error": {"errors": [{"reason": ...}]}}`` form Google APIs
            answer with (Drive's 403 ``userRateLimitExceeded``...).
    """

    error_rate: float = 0.0
    reset_rate: float = 0.0
    stall_rate: float = 0.0
    stall_seconds: float | None = 5.0
    truncate_rate: float = 0.0
    corrupt_rate: float = 0.0
    statuses: tuple[int, ...] = (500, 503, 429)
    seed: int = 0
    match: Match | None = None
    max_faults: int | None = None
    body_match: bytes | None = None
    error_reason: str | None = None

    def __post_init__(self) -> None:
        rates = (
            "error_rate",
            "reset_rate",
            "stall_rate",
            "truncate_rate",
            "corrupt_rate",
        )
        for name in rates:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"FaultMix.{name} must be in [0, 1], got {value!r}.")
        if sum(getattr(self, name) for name in rates) > 1.0 + 1e-9:
            raise ValueError("FaultMix rates must add up to at most 1.")
        if not self.statuses or not all(400 <= s < 600 for s in self.statuses):
            raise ValueError(
                f"FaultMix.statuses must be 4xx/5xx, got {self.statuses!r}."
            )
        if self.stall_seconds is not None and self.stall_seconds <= 0:
            raise ValueError("FaultMix.stall_seconds must be > 0 or None.")


def path_contains(text: str, method: str | None = None) -> Match:
    """A ``FaultMix.match`` for requests whose path contains ``text``."""

    def match(request_method: str, path: str) -> bool:
        return text in urllib.parse.unquote(path) and method in (None, request_method)

    return match


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that hangs up (a killed worker, a reset we injected) is no error."""

    def handle_error(self, request: object, client_address: object) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Seen:
    """One request the proxy received and what it did to it."""

    method: str
    path: str
    fault: str | None  # None, "reset", "stall", "truncate", "error:503", "outage:..."


class FaultProxy:
    """Reverse proxy to ``upstream`` on a free loopback port; see the module doc.

    Attributes:
        url: where clients should send requests (``endpoint_url``).
        counts: injected faults by kind ("error", "error:503", "reset",
            "stall", "truncate", "outage") plus "requests" (all received)
            and "passed" (forwarded and answered intact).
        seen: every request in arrival order, with its fault.
    """

    def __init__(self, upstream: str, mix: FaultMix | None = None) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = f"{parsed.scheme}://{parsed.netloc}"
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port or 80
        self.counts: collections.Counter[str] = collections.Counter()
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._outage_until = 0.0
        self._outage_kind = "503"
        self._token_check: TokenCheck | None = None
        self.set_mix(mix or FaultMix())
        self._server = _QuietServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="faultproxy",
            daemon=True,
        )
        self._thread.start()

    # --- configuration ------------------------------------------------------

    def set_mix(self, mix: FaultMix) -> None:
        """Inject ``mix`` from now on, with a fresh generator seeded by it."""
        with self._lock:
            self.mix = mix
            self._random = random.Random(mix.seed)
            self._mix_faults = 0

    def outage(self, seconds: float, *, kind: str = "503") -> None:
        """Fail every request for ``seconds`` from now ("503" or "reset")."""
        if kind not in ("503", "reset"):
            raise ValueError(f"outage kind must be '503' or 'reset', got {kind!r}.")
        with self._lock:
            self._outage_kind = kind
            self._outage_until = time.monotonic() + seconds

    def start_outage(self, *, kind: str = "503") -> None:
        """Fail every request until :meth:`end_outage`."""
        self.outage(float("inf"), kind=kind)

    def require_tokens(self, check: TokenCheck | None) -> None:
        """Answer 401 "Invalid Credentials" where ``check(Authorization)`` is False.

        The emulator accepts any token; with this the proxy plays the part
        of a server that checks them (None: stop checking). Rejections are
        counted as "unauthorized" faults.
        """
        with self._lock:
            self._token_check = check

    def end_outage(self) -> None:
        with self._lock:
            self._outage_until = 0.0

    def faults(self) -> int:
        """How many faults were injected so far, of all kinds."""
        kinds = (
            "error",
            "reset",
            "stall",
            "truncate",
            "corrupt",
            "outage",
            "unauthorized",
        )
        return sum(self.counts[kind] for kind in kinds)

    # --- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        """Stop serving and drop every open client connection."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _count_passed(self) -> None:
        with self._lock:
            self.counts["passed"] += 1

    def _recount(self, old: str, new: str) -> None:
        """A planned fault turned out to be impossible; ``new`` was done instead."""
        with self._lock:
            self.counts[old] -= 1
            self.counts[new] += 1

    # --- the decision -------------------------------------------------------

    def _decide(
        self,
        method: str,
        path: str,
        authorization: str | None = None,
        body: bytes | None = None,
    ) -> str | None:
        """The fault for this request (None: forward it untouched)."""
        with self._lock:
            self.counts["requests"] += 1
            fault = None
            if self._token_check is not None and not self._token_check(authorization):
                fault = "unauthorized"
            elif time.monotonic() < self._outage_until:
                fault = f"outage:{self._outage_kind}"
            elif self._eligible(method, path, body):
                fault = self._draw()
                self._mix_faults += fault is not None
            self.seen.append(Seen(method, path, fault))
            if fault is not None:
                self.counts[fault.split(":")[0]] += 1
                if fault.startswith("error:"):
                    self.counts[fault] += 1
            return fault

    def _eligible(self, method: str, path: str, body: bytes | None) -> bool:
        mix = self.mix
        if mix.max_faults is not None and self._mix_faults >= mix.max_faults:
            return False
        if mix.body_match is not None and mix.body_match not in (body or b""):
            return False
        return mix.match is None or mix.match(method, path)

    def _draw(self) -> str | None:
        mix, draw = self.mix, self._random.random()
        for kind, rate in (
            ("error", mix.error_rate),
            ("reset", mix.reset_rate),
            ("stall", mix.stall_rate),
            ("truncate", mix.truncate_rate),
            ("corrupt", mix.corrupt_rate),
        ):
            if draw < rate:
                if kind == "error":
                    return f"error:{self._random.choice(mix.statuses)}"
                return kind
            draw -= rate
        return None


class _Handler(http.server.BaseHTTPRequestHandler):
    """One client connection; HTTP/1.1 so keep-alive works."""

    protocol_version = "HTTP/1.1"
    server: http.server.ThreadingHTTPServer

    @property
    def proxy(self) -> FaultProxy:
        return self.server.proxy  # type: ignore[attr-defined]

    def setup(self) -> None:
        super().setup()
        with self.proxy._lock:
            self.proxy._connections.add(self.connection)

    def finish(self) -> None:
        with self.proxy._lock:
            self.proxy._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: tests read proxy.seen instead

    def handle_expect_100(self) -> bool:
        return True  # the client's body is read (or dropped) by _proxy

    def _proxy(self) -> None:
        self._preread: bytes | None = None
        if self.proxy.mix.body_match is not None:
            self._preread = b"".join(self._body())
        fault = self.proxy._decide(
            self.command, self.path, self.headers.get("Authorization"), self._preread
        )
        if fault == "unauthorized":  # GCS's answer to an expired token
            return self._error(401, "Invalid Credentials")
        if fault in ("reset", "outage:reset"):
            return self._reset()
        if fault and fault.startswith("error:"):
            return self._error(int(fault[6:]), reason=self.proxy.mix.error_reason)
        if fault == "outage:503":
            return self._error(503)
        if fault == "stall" and not self._stall(self.proxy.mix.stall_seconds):
            return self._reset()  # the client gave up; so does the request
        try:
            self._forward(truncate=fault == "truncate", corrupt=fault == "corrupt")
        except (ConnectionError, TimeoutError, http.client.HTTPException):
            self._reset()  # the upstream or the client went away mid-way

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _proxy

    # --- faults -------------------------------------------------------------

    def _reset(self) -> None:
        """Close with RST (SO_LINGER 0), not FIN: the client sees a reset."""
        self.close_connection = True
        try:
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
        except OSError:
            pass
        # The socket closes for real only once no file wraps it; inert
        # stand-ins keep BaseHTTPRequestHandler's final flush harmless.
        self.rfile.close()
        self.wfile.close()
        self.rfile, self.wfile = io.BytesIO(), io.BytesIO()
        self.connection.close()

    def _error(
        self, status: int, message: str | None = None, *, reason: str | None = None
    ) -> None:
        for _ in self._body():  # drop the request body so keep-alive works
            pass
        phrase = http.client.responses.get(status, "Error")
        text = message or f"{phrase} (faultproxy)"
        error: dict[str, object] = {"code": status, "message": text}
        if reason is not None:
            error["errors"] = [{"reason": reason, "message": text}]
        body = json.dumps({"error": error}).encode()
        self.send_response_only(status, phrase)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stall(self, seconds: float | None) -> bool:
        """Hold the request; False if the client hung up meanwhile."""
        deadline = time.monotonic() + (seconds if seconds is not None else 1e9)
        while time.monotonic() < deadline and not self.proxy._closing.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                return False
        return not self.proxy._closing.is_set()

    # --- forwarding ---------------------------------------------------------

    def _body(self) -> Iterator[bytes]:
        """The request body in blocks, de-chunked if it came chunked."""
        preread, self._preread = getattr(self, "_preread", None), None
        if preread is not None:  # already read to match it
            if preread:
                yield preread
            return
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                while size:
                    block = self.rfile.read(min(size, BLOCK))
                    if not block:
                        raise ConnectionResetError("client body ended early")
                    size -= len(block)
                    yield block
                self.rfile.readline()  # CRLF after each chunk
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                block = self.rfile.read(min(left, BLOCK))
                if not block:
                    raise ConnectionResetError("client body ended early")
                left -= len(block)
                yield block

    def _forward(self, *, truncate: bool, corrupt: bool = False) -> None:
        proxy = self.proxy
        upstream = http.client.HTTPConnection(
            proxy.upstream_host, proxy.upstream_port, timeout=60
        )
        try:
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            upstream.putrequest(
                self.command, self.path, skip_host=True, skip_accept_encoding=True
            )
            upstream.putheader("Host", f"{proxy.upstream_host}:{proxy.upstream_port}")
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP and name.lower() != "host":
                    upstream.putheader(name, value)
            if chunked:
                upstream.putheader("Transfer-Encoding", "chunked")
            upstream.endheaders()
            for block in self._body():
                upstream.send(
                    b"%x\r\n%s\r\n" % (len(block), block) if chunked else block
                )
            if chunked:
                upstream.send(b"0\r\n\r\n")
            self._relay(upstream.getresponse(), truncate=truncate, corrupt=corrupt)
        finally:
            upstream.close()

    def _relay(
        self, response: http.client.HTTPResponse, *, truncate: bool, corrupt: bool
    ) -> None:
        """Send the upstream response on, whole, (truncate) cut halfway, or
        (corrupt) whole with its middle byte inverted."""
        length = response.getheader("Content-Length")
        no_body = self.command == "HEAD" or response.status in (204, 304)
        if corrupt:
            body = bytearray(response.read())
            if no_body or not body:
                self.proxy._recount("corrupt", "passed")  # nothing to damage
            else:
                body[len(body) // 2] ^= 0xFF
            self._send_head(response, length if no_body else str(len(body)))
            if not no_body:
                self.wfile.write(bytes(body))
            return None
        if truncate:
            body = response.read()  # whole, to promise it all and send half
            if no_body or not body:
                self.proxy._recount("truncate", "reset")  # nothing to cut
                return self._reset()
            self._send_head(response, str(len(body)))
            self.wfile.write(body[: len(body) // 2])
            return self._reset()
        self._send_head(response, length, no_body=no_body)
        self.proxy._count_passed()  # before the last byte: the client may be quick
        if no_body:
            return
        while block := response.read1(BLOCK):
            self.wfile.write(block if length else b"%x\r\n%s\r\n" % (len(block), block))
        if not length:
            self.wfile.write(b"0\r\n\r\n")

    def _send_head(
        self,
        response: http.client.HTTPResponse,
        length: str | None,
        *,
        no_body: bool = False,
    ) -> None:
        """Status and headers; ``length`` None means a chunked body follows.

        A response without a body (204, 304, HEAD) is never announced as
        chunked: the client would wait for a chunk that never comes.
        """
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            lower = name.lower()
            if lower in HOP_BY_HOP or lower == "content-length":
                continue
            if lower == "location":  # resumable uploads must come back here
                value = value.replace(self.proxy.upstream, self.proxy.url)
            self.send_header(name, value)
        if length is not None:
            self.send_header("Content-Length", length)
        elif not no_body:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()


@pytest.fixture
def fault_proxy(emulator: object) -> Iterator[FaultProxy]:
    """A FaultProxy in front of the session's emulator, injecting nothing yet."""
    with FaultProxy(emulator.url) as proxy:  # type: ignore[attr-defined]
        yield proxy
