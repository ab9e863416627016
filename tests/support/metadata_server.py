"""A local stand-in for the Compute Engine metadata server's notice paths.

No metadata server can run off Compute Engine, so tests point
``GCE_METADATA_HOST`` at this one. It answers only what the notice watcher
asks, as the real one documents it: ``GET
/computeMetadata/v1/instance/preempted`` (``TRUE``/``FALSE``) and
``.../instance/maintenance-event`` (``NONE``...), refusing a request without
``Metadata-Flavor: Google``, with an ``ETag`` per value, and holding a
``?wait_for_change=true&last_etag=E`` request until the value differs from
``E`` or ``timeout_sec`` passes.

    with MetadataServer() as server:       # server.host is "127.0.0.1:PORT"
        server.set("instance/preempted", "TRUE")
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import urllib.parse
from typing import Any

PREFIX = "/computeMetadata/v1/"


class MetadataServer:
    """See the module docstring. ``requests`` counts the GETs per path."""

    def __init__(self) -> None:
        self.values = {
            "instance/preempted": "FALSE",
            "instance/maintenance-event": "NONE",
        }
        self.requests: dict[str, int] = {}
        self.broken: list[str] = []  # how the next answers break, first first
        self._changed = threading.Condition()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                server._answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._http.server_address[1]}"

    def set(self, path: str, value: str) -> None:
        with self._changed:
            self.values[path] = value
            self._changed.notify_all()

    def break_answers(self, *how: str) -> None:
        """Break the next answers, one per entry: ``"not-http"`` (bytes that
        are no HTTP response) or ``"short"`` (a body cut short of its
        Content-Length); what a restarting metadata server or a proxy in
        the way can send."""
        with self._changed:
            self.broken.extend(how)

    def _etag(self, path: str) -> str:
        return hashlib.sha1(self.values[path].encode()).hexdigest()[:16]

    def _answer(self, request: http.server.BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        path = url.path[len(PREFIX) :] if url.path.startswith(PREFIX) else None
        if request.headers.get("Metadata-Flavor") != "Google":
            request.send_error(403, "Missing Metadata-Flavor:Google header.")
            return
        if path not in self.values:
            request.send_error(404)
            return
        query = urllib.parse.parse_qs(url.query)
        with self._changed:
            self.requests[path] = self.requests.get(path, 0) + 1
            broken = self.broken.pop(0) if self.broken else None
        if broken is not None:
            request.close_connection = True
            if broken == "not-http":
                request.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
            else:
                request.wfile.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nETag: cut\r\n\r\nTRU"
                )
            return
        with self._changed:
            if query.get("wait_for_change") == ["true"]:
                last = query.get("last_etag", [""])[0]
                timeout = float(query.get("timeout_sec", ["60"])[0])
                self._changed.wait_for(lambda: self._etag(path) != last, timeout)
            body, etag = self.values[path].encode(), self._etag(path)
        request.send_response(200)
        request.send_header("Content-Type", "application/text")
        request.send_header("ETag", etag)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> MetadataServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
