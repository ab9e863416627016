"""The Drive mount routed to the API, Drive's heartbeat pace, Drive credentials.

The mount is a stand-in: no DriveFS runs here, so a mount table naming a
temporary folder as a DriveFS mount (the line Colab's ``/proc/mounts``
has for ``/content/drive``) is what the storage layer reads. What it
proves: a run directory given as a path on the mount never writes to the
mount (whatever a write-back cache would lose, nothing relied on it) and
lands in the same folder through the Drive API, readable as
``gdrive://...`` by any other machine.
"""

from __future__ import annotations

import json
import logging

import pytest

from colab_resume import defaults
from colab_resume.agent import Agent
from colab_resume.errors import NoCredentialsError, UnsupportedURLError
from colab_resume.retry import RetryPolicy
from colab_resume.storage import Storage, auth, drivefs, split_url


@pytest.fixture
def mount(tmp_path, monkeypatch):
    """A folder the (fake) mount table says DriveFS is mounted on."""
    point = tmp_path / "drive mount"  # a space: escaped as \\040 in the table
    (point / "MyDrive").mkdir(parents=True)
    table = tmp_path / "mounts"
    escaped = str(point).replace(" ", "\\040")
    table.write_text(
        "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
        f"drive {escaped} fuse.drive rw,nosuid,nodev,relatime,user_id=0 0 0\n"
    )
    monkeypatch.setattr(drivefs, "MOUNTS_FILE", str(table))
    return point


def test_a_path_on_the_mount_goes_through_the_api_to_the_same_folder(
    mount, drive_options, caplog
) -> None:
    name = f"mounted-{id(mount)}"
    path = str(mount / "MyDrive" / name / "run")
    with caplog.at_level(logging.WARNING, logger="colab_resume.storage.drivefs"):
        assert split_url(path) == ("gdrive", f"{name}/run")
    [line] = [r.getMessage() for r in caplog.records]
    assert "loses and delays writes" in line and f"gdrive://{name}/run" in line

    storage = Storage(path, drive_options)
    storage.write_bytes("lease/00000001.json", b"{}", create_only=True)
    assert list((mount / "MyDrive").iterdir()) == []  # nothing on the mount
    other = Storage(f"gdrive://{name}/run", drive_options)
    assert [o.path for o in other.list("")] == ["lease/00000001.json"]


def test_the_mount_outside_my_drive_is_refused_with_the_url_to_use(mount) -> None:
    (mount / "Shareddrives" / "team").mkdir(parents=True)
    with pytest.raises(UnsupportedURLError, match="gdrive://id:FOLDER_ID"):
        split_url(str(mount / "Shareddrives" / "team" / "run"))
    with pytest.raises(UnsupportedURLError, match="MyDrive"):
        split_url(str(mount / "MyDrive"))


def test_colabs_mount_point_is_recognised_even_unmounted(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(drivefs, "MOUNTS_FILE", str(tmp_path / "no-such-table"))
    assert drivefs.route("/content/drive/MyDrive/runs/x") == "gdrive://runs/x"
    assert drivefs.route("/content/other/runs/x") is None
    assert drivefs.route(str(tmp_path / "runs")) is None


def test_the_mount_without_drive_credentials_is_refused_with_the_fix(
    mount, monkeypatch
) -> None:
    import google.auth
    import google.auth.exceptions

    def no_credentials(**kwargs):
        raise google.auth.exceptions.DefaultCredentialsError("none here")

    monkeypatch.setattr(google.auth, "default", no_credentials)
    monkeypatch.setattr(auth, "_authenticated", None)
    with pytest.raises(NoCredentialsError) as caught:
        Storage(str(mount / "MyDrive" / "runs" / "x"))
    text = str(caught.value)
    assert "Google Drive mount" in text and "does not trust" in text
    assert "cr.authenticate()" in text


@pytest.mark.parametrize(
    "env, name",
    [("KAGGLE_KERNEL_RUN_TYPE", "Kaggle"), ("VERTEX_PRODUCT", "Colab Enterprise")],
)
def test_platforms_without_drive_sign_in_name_gcs(monkeypatch, env, name) -> None:
    monkeypatch.setenv(env, "COLAB_ENTERPRISE" if env == "VERTEX_PRODUCT" else "x")
    monkeypatch.setattr(auth, "_authenticated", None)
    with pytest.raises(NoCredentialsError, match=f"{name} offers no Google Drive"):
        Storage("gdrive://runs/x")
    with pytest.raises(NoCredentialsError, match="gs://BUCKET"):
        Storage("gdrive://runs/x")


def test_a_raw_token_never_reaches_a_message(drive_emulator) -> None:
    secret = "ya29.not-a-real-token-but-shaped-like-one"
    storage = Storage(
        "gdrive://runs/x",
        {"token": secret, "endpoint_url": drive_emulator.url},
        retry=RetryPolicy(total_seconds=1.0, initial_seconds=0.05),
    )
    with pytest.raises(Exception) as caught:
        storage.write_bytes("lease/1.json", b"{}", create_only=True)  # 401
    assert secret not in str(caught.value)
    assert secret not in storage.principal


def test_drive_beats_at_its_own_pace_unless_told(
    drive_run_dir, drive_options, tmp_path
) -> None:
    on_drive = Agent(drive_run_dir, storage_options=drive_options)
    assert (
        on_drive.options.session.heartbeat_seconds == defaults.DRIVE_HEARTBEAT_SECONDS
    )
    assert on_drive.options.session.dead_after == 4 * defaults.DRIVE_HEARTBEAT_SECONDS
    told = Agent(drive_run_dir, storage_options=drive_options, heartbeat_seconds=5)
    assert told.options.session.heartbeat_seconds == 5
    local = Agent(str(tmp_path / "run"))
    assert local.options.session.heartbeat_seconds == defaults.HEARTBEAT_SECONDS


@pytest.mark.parametrize("text", ['{"type": "service_account"}', "not json at all"])
@pytest.mark.parametrize("url", ["gdrive://runs/r", "gs://bucket/runs/r"])
def test_a_malformed_key_file_is_named_with_the_fix(tmp_path, url, text) -> None:
    key = tmp_path / "key.json"
    key.write_text(text)
    with pytest.raises(NoCredentialsError) as refused:
        Storage(url, {"token": str(key)}).check()
    assert str(key) in str(refused.value)
    assert "Add key > JSON" in str(refused.value)


def test_a_well_formed_key_file_still_loads(tmp_path) -> None:
    """A service-account key made here (a fresh RSA key: no real account)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    key = tmp_path / "key.json"
    key.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "p",
                "private_key_id": "1",
                "private_key": pem,
                "client_email": "trainer@p.iam.gserviceaccount.com",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    credentials = auth.drive_credentials(str(key))
    assert credentials.service_account_email == "trainer@p.iam.gserviceaccount.com"
    assert auth.gcs_options({"token": str(key)})["token"] == str(key)
