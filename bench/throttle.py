"""A TCP proxy that caps each connection's bandwidth and adds latency.

For benchmarks: between a storage client and an emulator on loopback, it
makes each connection behave like one stream to a far, slow service (a
Drive upload stream runs at a few MB/s). Every connection gets its own
cap per direction, so parallel transfers over several connections add up,
as they do against the real services; each request-response turnaround
(the first bytes coming back after bytes went up) waits ``latency_s``.

    with Throttle("http://127.0.0.1:4443", bytes_per_s=2.5e6, latency_s=0.1) as t:
        Storage("gs://b/run", {"token": "anon", "endpoint_url": t.url})

Standard library only; two threads per connection.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse

BLOCK = 16 << 10


class Throttle:
    """Listens on 127.0.0.1; forwards to ``upstream`` at ``bytes_per_s`` a
    connection and direction, ``latency_s`` per turnaround."""

    def __init__(self, upstream: str, *, bytes_per_s: float, latency_s: float) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.rate = float(bytes_per_s)
        self.latency = float(latency_s)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.connections = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self._upstream)
            turn = {"last": "down"}
            for src, dst, way in ((client, upstream, "up"), (upstream, client, "down")):
                threading.Thread(
                    target=self._pump, args=(src, dst, way, turn), daemon=True
                ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, way: str, turn: dict[str, str]
    ) -> None:
        allowed = time.monotonic()
        try:
            while data := src.recv(BLOCK):
                if way == "down" and turn["last"] == "up" and self.latency:
                    time.sleep(self.latency)  # the round trip of a request
                turn["last"] = way
                allowed = max(allowed, time.monotonic())
                wait = allowed - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(data)
                allowed += len(data) / self.rate
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            src.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def __enter__(self) -> Throttle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
