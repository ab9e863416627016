"""The fault proxy itself: it forwards faithfully and its faults are real.

Plain ``http.client`` and raw sockets against the emulator, so each fault is
seen exactly as the proxy produced it, without a client library's retries.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.parse
from collections.abc import Iterator

import pytest
from support.faultproxy import FaultMix, FaultProxy, path_contains
from support.faultproxy import fault_proxy as fault_proxy  # the fixture


def connect(proxy: FaultProxy, timeout: float = 10) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)


def upload_path(bucket: str, name: str) -> str:
    quoted = urllib.parse.quote(name, safe="")
    return f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quoted}"


def media_path(bucket: str, name: str) -> str:
    quoted = urllib.parse.quote(name, safe="")
    return f"/download/storage/v1/b/{bucket}/o/{quoted}?alt=media"


def request(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    conn.request(method, path, body=body)
    response = conn.getresponse()
    return response.status, response.read()


def test_forwards_requests_over_one_keep_alive_connection(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """Upload and download pass through unchanged, reusing one client connection."""
    conn = connect(fault_proxy)
    status, _ = request(conn, "POST", upload_path(bucket, "a/b.txt"), b"hello")
    assert status == 200
    first_socket = conn.sock
    status, body = request(conn, "GET", media_path(bucket, "a/b.txt"))
    assert (status, body) == (200, b"hello")
    assert conn.sock is first_socket  # kept alive: no reconnect
    assert fault_proxy.counts == {"requests": 2, "passed": 2}
    assert fault_proxy.faults() == 0


def test_streams_chunked_and_large_bodies(fault_proxy: FaultProxy, bucket: str) -> None:
    """A chunked 24 MB upload arrives whole and downloads back identical."""
    payload = os.urandom(24 << 20)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(payload), 1 << 20):
            yield payload[start : start + (1 << 20)]

    conn = connect(fault_proxy, timeout=60)
    conn.request(
        "POST", upload_path(bucket, "big.bin"), body=chunks(), encode_chunked=True
    )
    response = conn.getresponse()
    assert response.status == 200, response.read()
    assert int(json.loads(response.read())["size"]) == len(payload)
    status, body = request(conn, "GET", media_path(bucket, "big.bin"))
    assert status == 200 and body == payload


def test_error_status_has_a_gcs_style_body(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """An injected status answers with a JSON error and keeps the connection usable."""
    fault_proxy.set_mix(FaultMix(error_rate=1.0, statuses=(503,), max_faults=1))
    conn = connect(fault_proxy)
    status, body = request(conn, "POST", upload_path(bucket, "x"), b"data")
    assert status == 503
    assert json.loads(body)["error"]["code"] == 503
    status, _ = request(conn, "POST", upload_path(bucket, "x"), b"data")  # same conn
    assert status == 200
    assert fault_proxy.counts["error:503"] == 1 and fault_proxy.counts["passed"] == 1


def test_match_limits_faults_to_some_paths(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """A 403 rule for heartbeat/ objects leaves every other request alone."""
    fault_proxy.set_mix(
        FaultMix(error_rate=1.0, statuses=(403,), match=path_contains("heartbeat/"))
    )
    conn = connect(fault_proxy)
    assert request(conn, "POST", upload_path(bucket, "run.json"), b"{}")[0] == 200
    assert request(conn, "POST", upload_path(bucket, "heartbeat/1"), b"{}")[0] == 403
    assert request(conn, "GET", media_path(bucket, "run.json"))[0] == 200
    assert [s.fault for s in fault_proxy.seen] == [None, "error:403", None]


def test_reset_is_a_real_tcp_reset(fault_proxy: FaultProxy, bucket: str) -> None:
    """The client sees ECONNRESET, not a clean end of stream."""
    fault_proxy.set_mix(FaultMix(reset_rate=1.0))
    with socket.create_connection(("127.0.0.1", fault_proxy.port), timeout=5) as sock:
        sock.sendall(
            f"GET {media_path(bucket, 'x')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        with pytest.raises(ConnectionResetError):
            while sock.recv(1024):
                pass
    assert fault_proxy.counts["reset"] == 1


def test_truncated_body_promises_more_than_it_sends(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """Headers carry the full Content-Length; half the body comes, then the end."""
    payload = os.urandom(100_000)
    conn = connect(fault_proxy)
    request(conn, "POST", upload_path(bucket, "t.bin"), payload)
    fault_proxy.set_mix(FaultMix(truncate_rate=1.0))
    conn.request("GET", media_path(bucket, "t.bin"))
    response = conn.getresponse()
    assert response.status == 200
    assert int(response.getheader("Content-Length")) == len(payload)
    with pytest.raises((http.client.IncompleteRead, ConnectionResetError)):
        response.read()
    assert fault_proxy.counts["truncate"] == 1


def test_stall_delays_and_stall_forever_drops(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """A finite stall delays the request; an endless one is dropped when the
    client gives up, and never reaches the server."""
    fault_proxy.set_mix(FaultMix(stall_rate=1.0, stall_seconds=0.6))
    started = time.monotonic()
    assert (
        request(connect(fault_proxy), "POST", upload_path(bucket, "s1"), b"1")[0] == 200
    )
    assert time.monotonic() - started >= 0.6

    fault_proxy.set_mix(FaultMix(stall_rate=1.0, stall_seconds=None))
    with pytest.raises(TimeoutError):
        request(
            connect(fault_proxy, timeout=0.5), "POST", upload_path(bucket, "s2"), b"2"
        )
    fault_proxy.set_mix(FaultMix())
    time.sleep(0.3)  # the proxy notices the hang-up within 0.05 s
    status, _ = request(connect(fault_proxy), "GET", media_path(bucket, "s2"))
    assert status == 404
    assert fault_proxy.counts["stall"] == 2


def test_outage_window_fails_everything_then_ends(
    fault_proxy: FaultProxy, bucket: str
) -> None:
    """During outage() every request fails; afterwards traffic passes again."""
    fault_proxy.outage(0.5)
    assert request(connect(fault_proxy), "GET", media_path(bucket, "x"))[0] == 503
    fault_proxy.start_outage(kind="reset")
    with pytest.raises(ConnectionError):
        request(connect(fault_proxy), "GET", media_path(bucket, "x"))
    fault_proxy.end_outage()
    assert request(connect(fault_proxy), "GET", media_path(bucket, "x"))[0] == 404
    assert fault_proxy.counts["outage"] == 2


def test_same_seed_gives_the_same_faults(fault_proxy: FaultProxy, bucket: str) -> None:
    """Faults are a function of the seed and the request order."""
    mix = FaultMix(error_rate=0.3, truncate_rate=0.2, statuses=(500, 503), seed=5)

    def run() -> list[str | None]:
        fault_proxy.set_mix(mix)
        start = len(fault_proxy.seen)
        for i in range(20):
            conn = connect(fault_proxy)
            try:
                request(conn, "POST", upload_path(bucket, f"d{i}"), b"x")
            except (http.client.HTTPException, ConnectionError):
                pass
            conn.close()
        return [s.fault for s in fault_proxy.seen[start:]]

    first, second = run(), run()
    assert first == second
    assert len(set(first)) >= 3  # None and at least two kinds of fault


def test_max_faults_caps_injection(fault_proxy: FaultProxy, bucket: str) -> None:
    fault_proxy.set_mix(FaultMix(error_rate=1.0, statuses=(429,), max_faults=2))
    conn = connect(fault_proxy)
    statuses = [request(conn, "GET", media_path(bucket, "x"))[0] for _ in range(4)]
    assert statuses == [429, 429, 404, 404]


def test_close_releases_a_stalled_client(emulator, bucket: str) -> None:
    """Closing the proxy ends an endless stall at once instead of hanging."""
    proxy = FaultProxy(emulator.url, FaultMix(stall_rate=1.0, stall_seconds=None))
    conn = connect(proxy, timeout=10)
    conn.request("GET", media_path(bucket, "x"))
    time.sleep(0.2)
    started = time.monotonic()
    proxy.close()
    with pytest.raises(ConnectionError):
        conn.getresponse()
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "field, value",
    [
        ("error_rate", 1.5),
        ("reset_rate", -0.1),
        ("statuses", ()),
        ("statuses", (200,)),
        ("stall_seconds", 0),
    ],
)
def test_fault_mix_rejects_bad_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        FaultMix(**{field: value})


def test_fault_mix_rejects_rates_above_one() -> None:
    with pytest.raises(ValueError, match="at most 1"):
        FaultMix(error_rate=0.6, reset_rate=0.6)
