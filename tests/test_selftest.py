"""``colab-resume selftest``: the storage's assumptions, checked where it runs.

Against the Drive API emulator and the GCS emulator (both hold every
assumption, so every line must say held and the scratch folder must be
gone after), and against a Drive whose conditional update is broken (a
stand-in: the store's conditional update sent without its etag, since no
emulator misbehaves that way), which must be reported, not passed.
"""

from __future__ import annotations

from support import run_cli

from colab_resume.cli.selftest import selftest
from colab_resume.storage import Storage
from colab_resume.storage.drive_api import DriveApi


def test_selftest_holds_on_drive_and_leaves_nothing(
    drive_run_dir, drive_options
) -> None:
    base = drive_run_dir.rsplit("/", 1)[0]
    flags = ["--endpoint-url", drive_options["endpoint_url"]]
    flags += ["--token", drive_options["token"]]
    ran = run_cli("selftest", base, *flags, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = ran.stdout.splitlines()
    checked = [line for line in lines if line.startswith(("held", "FAILED"))]
    assert len(checked) == 11 and all(line.startswith("held") for line in checked)
    assert "If-Match" in ran.stdout and "appProperties" in ran.stdout
    assert lines[-1] == "11 of 11 held"
    assert any(line.startswith("removed ") for line in lines)
    store = Storage(base, drive_options).store
    left = store.api.children(  # type: ignore[attr-defined]
        "name contains 'colab-resume-selftest-'", "id,name", timeout=10
    )
    assert left == []  # the scratch folder, deleted with all it held


def test_selftest_holds_on_cloud_storage_and_leaves_nothing(
    gcs_run_dir, gcs_options
) -> None:
    flags = ["--endpoint-url", gcs_options["endpoint_url"], "--token", "anon"]
    ran = run_cli("selftest", gcs_run_dir, *flags, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines()[-1] == "7 of 7 held"
    assert Storage(gcs_run_dir, gcs_options).list("") == []


def test_a_broken_assumption_is_reported_failed(
    drive_run_dir, drive_options, monkeypatch
) -> None:
    honoured = DriveApi.replace_if_match

    def ignores_the_etag(self, file_id, data, etag, *, timeout):
        return honoured(self, file_id, data, "*", timeout=timeout)

    monkeypatch.setattr(DriveApi, "replace_if_match", ignores_the_etag)
    said: list[str] = []
    outcomes = selftest(drive_run_dir, drive_options, say=said.append)
    broken = {o.name: o.detail for o in outcomes if not o.held}
    [detail] = [why for name, why in broken.items() if "If-Match" in name]
    assert "two sessions" in detail
    assert any(line.startswith("FAILED") and "If-Match" in line for line in said)
