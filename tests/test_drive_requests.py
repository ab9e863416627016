"""Every request the Drive store sends is one the real Drive API defines.

The emulator answers requests real Drive would refuse (an unknown
parameter, a field no File has, a method on the wrong path), so a suite
green against it alone could hide them. Here every request of a run's
life — a session, checkpoints small and resumable, the trash, a lost
index rebuilt, a folder from before provenance stamped, deletion — is
recorded on the wire and checked against Drive's own discovery documents
(v2 and v3, as google-api-python-client ships them): the HTTP method, the
path, each query parameter and each metadata field sent.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import urllib.parse
from typing import Any

import pytest
from google.auth.transport.requests import AuthorizedSession

from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.storage import Storage, split_url
from colab_resume.storage.drive import DriveStore
from colab_resume.storage.drive_index import INDEX_NAME


def discovery(version: str) -> dict[str, Any]:
    documents = importlib.resources.files("googleapiclient") / "discovery_cache"
    text = (documents / "documents" / f"drive.{version}.json").read_text()
    return dict(json.loads(text))


class Api:
    """The methods of Drive v2 and v3: (http method, path regex, parameters)."""

    def __init__(self) -> None:
        self.methods: list[tuple[str, re.Pattern[str], set[str], str]] = []
        self.fields: dict[str, set[str]] = {}
        for version in ("v2", "v3"):
            doc = discovery(version)
            common = set(doc["parameters"])
            self.fields[version] = set(doc["schemas"]["File"]["properties"])
            for resource in doc["resources"].values():
                for name, method in resource.get("methods", {}).items():
                    params = common | set(method.get("parameters", {}))
                    paths = ["/" + doc["servicePath"] + method["path"]]
                    for protocol in (
                        (method.get("mediaUpload") or {}).get("protocols", {}).values()
                    ):
                        paths.append(protocol["path"])
                    for path in paths:
                        pattern = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(path))
                        self.methods.append(
                            (
                                method["httpMethod"],
                                re.compile(pattern + "$"),
                                params,
                                f"{version} {name}",
                            )
                        )

    def check(self, method: str, url: str, body: Any) -> str | None:
        """None if Drive defines this request, else what is wrong with it."""
        parts = urllib.parse.urlsplit(url)
        params = set(urllib.parse.parse_qs(parts.query))
        if "upload_id" in params and parts.path.startswith("/upload/drive/"):
            return None  # a resumable session's own URL, as Drive gave it
        matches = [m for m in self.methods if m[1].match(parts.path)]
        if not matches:
            return f"no Drive method has the path {parts.path}"
        named = [m for m in matches if m[0] == method]
        if not named:
            return f"{parts.path} is not {method} in Drive"
        _, _, allowed, name = named[0]
        unknown = params - allowed
        if unknown:
            return f"{name} has no parameter {sorted(unknown)}"
        version = "v2" if "/v2/" in parts.path else "v3"
        fields = set(metadata_of(body)) - self.fields[version]
        if fields:
            return f"{name}: a File has no field {sorted(fields)}"
        return None


def metadata_of(body: Any) -> dict[str, Any]:
    """The File metadata a request sends: its JSON, or a multipart's first part."""
    if isinstance(body, dict):
        return body
    if isinstance(body, bytes) and body.startswith(b"--"):
        first = body.split(b"\r\n\r\n", 1)[1].split(b"\r\n--", 1)[0]
        return dict(json.loads(first))
    return {}


@pytest.fixture
def wire(monkeypatch) -> list[tuple[str, str, Any]]:
    """Every request any Drive store in this test sends."""
    sent: list[tuple[str, str, Any]] = []
    original = AuthorizedSession.request

    def recording(self, method, url, *args, **kwargs):
        params = kwargs.get("params") or {}
        full = url
        if params:
            full += ("&" if "?" in url else "?") + urllib.parse.urlencode(params)
        sent.append((method, full, kwargs.get("json", kwargs.get("data"))))
        return original(self, method, url, *args, **kwargs)

    monkeypatch.setattr(AuthorizedSession, "request", recording)
    return sent


def open_store(url: str, options: dict) -> DriveStore:
    protocol, root = split_url(url)
    return DriveStore(url, protocol, root, dict(options))


def test_every_request_of_a_runs_life_is_one_drive_defines(
    wire, drive_run_dir, drive_options, tmp_path
) -> None:
    storage = Storage(drive_run_dir, drive_options)
    RunSession.open(storage, SessionOptions(heartbeat_seconds=1)).close()
    shard = tmp_path / "shard"
    shard.write_bytes(b"\x01" * (6 << 20))  # over the multipart limit: resumable
    storage.put_file(str(shard), "checkpoints/step-000000001.e00000001/ckpt.data")
    storage.write_bytes("checkpoints/step-000000001.e00000001/MANIFEST.json", b"{}")
    store = open_store(drive_run_dir, drive_options)
    store._run_folder(create=True, timeout=10)
    index = store.folder.index_id
    store.api.update_metadata(index, trashed=True, timeout=10)
    open_store(drive_run_dir, drive_options).write(
        "heartbeat/00000001.json", b"b", create_only=False, write_id=""
    )  # restores the index
    store.api.delete(str(index), timeout=10)
    assert "Repaired" in Storage(drive_run_dir, drive_options).repair()
    for item in storage.list("checkpoints"):
        storage.delete(item.path)
    storage.remove_leftovers("checkpoints/step-000000001.e00000001")

    # A folder from before provenance: its first writer stamps it.
    legacy_url = drive_run_dir.rsplit("/", 1)[0] + "/legacy"
    legacy = open_store(legacy_url, drive_options)
    parent = store.api.get(str(store.folder.folder_id), "parents", timeout=10)
    folder = legacy.api.create_folder("legacy", parent["parents"][0], timeout=10)
    made = legacy.api.create(
        {"name": "run.json", "parents": [folder]}, b"{}", None, timeout=10
    )
    legacy.api.touch(made["id"], timeout=10)
    old_index = json.dumps({"format": 1, "files": {"run.json": made["id"]}})
    legacy.api.create(
        {"name": INDEX_NAME, "parents": [folder]}, old_index.encode(), None, timeout=10
    )
    legacy.write("lease/00000001.json", b"{}", create_only=True, write_id="x")
    assert legacy.folder.run_id is not None  # stamped

    assert len(wire) > 50
    api = Api()
    refused = {
        f"{method} {url.split('?')[0]}: {why}"
        for method, url, body in wire
        if (why := api.check(method, url, body)) is not None
    }
    assert refused == set()
