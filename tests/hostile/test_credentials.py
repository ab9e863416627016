"""A raw access token never reaches the shared run directory or its readers.

gcsfs takes any ``token=`` string that is not a file as a raw OAuth access
token. A 403 (a role that may create but not delete) used to put that
string into ``PermissionDeniedError``, and from there into the heartbeat,
history, events and every collaborator's ``colab-resume status``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
import urllib.parse

import fsspec
import pytest
from support.faultproxy import FaultMix, path_contains

import colab_resume as cr
from colab_resume.errors import (
    ColabResumeError,
    NoCredentialsError,
    PermissionDeniedError,
)
from colab_resume.events import EventLog
from colab_resume.heartbeat import RunSession, SessionOptions
from colab_resume.redact import redact, register_secret
from colab_resume.storage import Storage

# Shaped like a real access token, but never valid anywhere.
TOKEN = "ya29.a0Ad52N3-" + "x7Qz" * 30
# Another, never registered as a secret: only its shape can give it away.
GLUED = "ya29.a0AfB_" + "Zq8w" * 12


def every_object(storage: Storage) -> dict[str, bytes]:
    return {o.path: storage.read_bytes(o.path) for o in storage.list()}


def test_raw_token_stays_out_of_errors_heartbeat_history_and_status(
    fault_proxy, bucket, emulator, monkeypatch
):
    # gcsfs would ask Google's tokeninfo endpoint when the token expires;
    # there is no network here, and the emulator accepts any token.
    monkeypatch.setenv("FETCH_RAW_TOKEN_EXPIRY", "false")
    url = f"gs://{bucket}/runs/r"
    storage = Storage(url, {"token": TOKEN, "endpoint_url": fault_proxy.url})
    events = EventLog()
    session = RunSession.open(
        storage, SessionOptions(heartbeat_seconds=5), events=events
    )
    storage.write_bytes("scratch/old.bin", b"x")
    # The role may create objects but not delete them.
    fault_proxy.set_mix(
        FaultMix(error_rate=1.0, statuses=(403,), match=path_contains("/o/", "DELETE"))
    )
    with pytest.raises(PermissionDeniedError) as caught:
        storage.delete("scratch/old.bin")
    message = str(caught.value)
    assert TOKEN not in message
    assert "a raw access token passed as token= (not shown)" in message
    assert "service-account key file" not in message

    # What the agent does with an unrecoverable error: an event, a failed beat.
    events.emit("run.failed", message, level="error")
    events.emit("echo", f"the token was {TOKEN}", detail=TOKEN)
    session.close("failed", error=f"{type(caught.value).__name__}: {message}")
    fault_proxy.set_mix(FaultMix(error_rate=0.0))

    for event in events.recent():
        assert TOKEN not in json.dumps(event.to_json())
    reader = Storage(url, {"token": "anon", "endpoint_url": emulator.url})
    objects = every_object(reader)
    assert any(path.startswith("heartbeat/") for path in objects)
    for path, data in objects.items():
        assert TOKEN.encode() not in data, path
    beat = json.loads(objects[min(p for p in objects if p.startswith("heartbeat/"))])
    assert "PermissionDeniedError" in beat["error"]

    # A collaborator's view, in a real process.
    status = subprocess.run(
        [sys.executable, "-m", "colab_resume", "status", url, "--json"]
        + ["--token", "anon", "--endpoint-url", emulator.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"},
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "FAILED"
    assert TOKEN not in status.stdout + status.stderr


def test_a_token_written_by_an_older_version_is_not_shown(bucket, emulator):
    """A heartbeat that already holds a token (written before this fix)."""
    url = f"gs://{bucket}/runs/r"
    storage = Storage(url, {"token": "anon", "endpoint_url": emulator.url})
    session = RunSession.open(storage, SessionOptions(heartbeat_seconds=5))
    session.close("stopped")
    [beat_path] = [o.path for o in storage.list() if o.path.startswith("heartbeat/")]
    beat = storage.read_json(beat_path)
    beat.update(state="failed", error=f"PermissionDeniedError: ... key file {TOKEN}")
    storage.write_json(beat_path, beat)

    status = subprocess.run(
        [sys.executable, "-m", "colab_resume", "status", url]
        + ["--token", "anon", "--endpoint-url", emulator.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"},
    )
    assert "FAILED" in status.stdout, status.stdout + status.stderr
    assert "ya29." not in status.stdout + status.stderr


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {TOKEN[5:]}",
        '{"access_token": "opaque-value-123456", "expires_in": 3599}',
        "refresh_token=1//0gAbCdEfGhIjKlMnOpQrStUv",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
        "jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
        # A space before the colon (Python's json.dumps never writes one;
        # other writers do).
        '{"access_token" : "opaque-value-123456"}',
        "'refresh_token' = 'opaque-value-123456'",
        '{\\"access_token\\": \\"opaque-value-123456\\"}',  # JSON in JSON
        # Any fsspec URL is a run directory, and URLs carry passwords.
        "sftp://alice:opaque-value-123456@host/runs/r",
        "run_dir 'ftp://:opaque-value-123456@10.0.0.1:21/runs' cannot be opened",
        "Authorization: Basic YWxpY2U6b3BhcXVlLXZhbHVlLTEyMzQ1Ng==",
        "{'Authorization': 'Basic YWxpY2U6b3BhcXVlLXZhbHVlLTEyMzQ1Ng=='}",
        "authorization=Token opaque-value-123456",
        "sent Basic YWxpY2U6b3BhcXVlLXZhbHVlLTEyMzQ1Ng== to the proxy",
        "-----begin private key-----\nMIIEvQIBADANBg\n-----end private key-----",
        '"private_key": "-----BEGIN RSA PRIVATE KEY-----\\nMIIEvQIBADANBg',
        # Glued to a word: no word boundary before the token.
        f"token{GLUED}",
        f"x{GLUED} and refresh1//0gAbCdEfGhIjKlMnOpQrStUv",
        "jwt=xeyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl",
        # What the last attack pass still found kept:
        '{"accessToken": "opaque-value-123456", "expireTime": "..."}',  # STS
        "client secret GOCSPX-opaque-value-123456 rejected",
        "{'hmac_secret': 'opaque-value-123456'}",  # a GCS HMAC key
        "{'key': 'AKIAIOSFODNN7EXAMPLE', 'secret': 'opaque-value-123456'}",
        f"TOKEN {TOKEN.upper()[:60]}",  # an upper-cased message
        "PUT ...&upload_id=opaque-value-123456 failed",
    ],
)
def test_token_shaped_strings_are_redacted(text):
    cleaned = redact(text)
    assert "<redacted>" in cleaned
    for secret in (
        "opaque-value",
        "YWxpY2U6",
        "1//0gAb",
        "MIIEvQ",
        "eyJzdWIi",
        TOKEN[5:20],
        TOKEN.upper()[5:20],
        GLUED[5:20],
        "AKIAIOSFODNN7",
    ):
        assert secret not in cleaned


def test_a_registered_secret_cut_short_is_redacted():
    """Error text is cut to a length: the secret's start must go too."""
    secret = "opaque-registered-" + "s3cr" * 10
    register_secret(secret)
    cut = f"request with token={secret}"[:50]
    assert secret[:20] not in redact(cut) and "<redacted>" in redact(cut)


def test_redaction_keeps_what_is_not_secret():
    """The user name, host and path of a URL, the word after an ordinary "Basic"."""
    assert redact("sftp://alice:pw-123456@host/runs/r") == (
        "sftp://alice:<redacted>@host/runs/r"
    )
    assert redact("gs://bucket/runs/r and alice@example.com") == (
        "gs://bucket/runs/r and alice@example.com"
    )
    assert redact("Basic usage: Basic test") == "Basic usage: Basic test"


def test_a_registered_secret_is_redacted_url_encoded_too():
    """A request's query string holds the token percent-encoded."""
    secret = "opaque/secret+value=="
    register_secret(secret)
    query = urllib.parse.urlencode({"t": secret})
    assert secret not in urllib.parse.unquote(redact(f"GET /info?{query} failed"))


def test_ordinary_text_is_left_alone():
    text = "step 1200 committed: checkpoints/step-000001200.e00000001 (crc32c ok)"
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("env WANDB_API_KEY=0f3c9a7e5b1d2c4e6a8b python t.py", "0f3c9a7e5b1d"),
        ("python t.py --hf-token hf_QmZkXwVtRpLsNjHgFdSaPoIu", "QmZkXwVtRp"),
        ("python t.py --api-key sk-proj-Tk8Vn2Lq9Wx4Zr7Yp3Ms", "Tk8Vn2Lq9W"),
        ("python t.py --db-password correct-horse-battery", "correct-horse"),
        ("env GITHUB_TOKEN=ghp_R7nK2vQ9xL4mZ8wT1yP6sD3f make", "R7nK2vQ9xL"),
        ("notify https://hooks.slack.com/services/T01/B02/XyZ9aBcDeF", "XyZ9aBcDeF"),
        ("env KAGGLE_KEY=5e8d1c4b7a0f3e6d9c2b kaggle", "5e8d1c4b7a0f"),
        ("env MLFLOW_TRACKING_PASSWORD=mlflow-Pa55-word x", "Pa55-word"),
        ("failed: sk-ant-api03-Tk8Vn2Lq9Wx4Zr7Yp3Ms6Hd", "Tk8Vn2Lq9W"),
        ("rejected hf_QmZkXwVtRpLsNjHgFdSaPoIu in the header", "QmZkXwVtRp"),
        ("slack said xoxb-1234567890-abcdefghij was revoked", "abcdefghij"),
        ("python t.py --db-password=correct-horse-battery", "correct-horse"),
    ],
)
def test_a_quoted_command_loses_its_secrets(text, secret):
    """Error text that quotes a command (a launcher's failure, a traceback)
    loses the 8 common ways of passing a secret; the rest stays readable."""
    cleaned = redact(text)
    assert secret not in cleaned and "<redacted>" in cleaned, cleaned
    assert cleaned.split()[0] == text.split()[0]


def test_ordinary_commands_keep_their_words():
    for text in (
        "KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3 python train.py --epochs 3",
        "colab-resume supervise gs://b/r --max-per-day 1 --interval 0.3",
        "python train.py --key-frames 3 --tokenizer bpe",
    ):
        assert redact(text) == text


# A GCS HMAC key's two parts, shaped as Cloud Storage issues them.
HMAC_ID = "GOOG1E" + "J7QX2MZP4KLT9WRB" * 3 + "A3VHN7QX2MZ"
HMAC_SECRET = "bGx9Q2x+Zk4wR1dzYTdmUk8vcHE3Tm1LdjJhQ2sz"  # 30 bytes, base64


@pytest.mark.parametrize(
    "text",
    [
        f"gsutil config: access id {HMAC_ID} secret {HMAC_SECRET}",
        f"{{'key': '{HMAC_ID}', 'password': '{HMAC_SECRET}'}}",
        f"s3fs.S3FileSystem(key={HMAC_ID}, secret={HMAC_SECRET})",
        f"AWS_ACCESS_KEY_ID={HMAC_ID} AWS_SECRET_ACCESS_KEY={HMAC_SECRET} python x",
        f"{HMAC_SECRET}",
    ],
)
def test_gcs_hmac_keys_are_redacted(text):
    """Both parts go, however they are passed; a hex digest of the same
    length (a commit, a SHA-1) is no secret and stays."""
    assert len(HMAC_ID) >= 61 and len(HMAC_SECRET) == 40
    cleaned = redact(text)
    assert HMAC_ID[:20] not in cleaned and HMAC_SECRET[:20] not in cleaned, cleaned
    digest = "11f6ad8ec52a2984abaafd7c3b516503785c2072"
    assert redact(f"commit {digest}") == f"commit {digest}"


# --- a raw token gcsfs cannot validate ----------------------------------------
#
# gcsfs asks Google's tokeninfo endpoint for a raw token's expiry, with the
# token in the query string; the error of a failed request names that URL.
# There is no route to Google here, so the request fails for real.

COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["watch", "--interval", "1"],
    ["ls"],
    ["prune", "--keep", "1", "--dry-run"],
    ["report", "-o", "unused.png"],
]


def without_token_check_bypass() -> dict[str, str]:
    env = {**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    env.pop("FETCH_RAW_TOKEN_EXPIRY", None)
    return env


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_cli_names_an_unvalidated_raw_token_without_showing_it(
    command, bucket, emulator, tmp_path
):
    done = subprocess.run(
        [sys.executable, "-m", "colab_resume", *command, f"gs://{bucket}/runs/r"]
        + ["--token", TOKEN, "--endpoint-url", emulator.url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=without_token_check_bypass(),
    )
    output = done.stdout + done.stderr
    assert TOKEN not in output
    assert TOKEN[5:20] not in output
    assert "Traceback" not in output
    assert done.returncode == 1, output
    [line] = done.stderr.splitlines()  # one line: the problem and the fix
    assert line.startswith("colab-resume: "), line
    assert "token" in line and "FETCH_RAW_TOKEN_EXPIRY=false" in line, line


def exception_texts(error: BaseException) -> str:
    """Every text an exception carries: message, args, repr, chained causes."""
    texts, seen = [], set()
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), repr(current.args)]
        todo += [current.__cause__, current.__context__]
    texts += traceback.format_exception(error)
    return "\n".join(texts)


@pytest.mark.parametrize("entry", ["inspect", "Agent"])
def test_api_error_for_an_unvalidated_raw_token_holds_no_token(
    entry, bucket, emulator, monkeypatch
):
    monkeypatch.delenv("FETCH_RAW_TOKEN_EXPIRY", raising=False)
    options = {"token": TOKEN, "endpoint_url": emulator.url}
    url = f"gs://{bucket}/runs/r"
    with pytest.raises(ColabResumeError) as caught:
        if entry == "inspect":
            cr.inspect(url, options)
        else:
            cr.Agent(url, storage_options=options)
    assert isinstance(caught.value, NoCredentialsError)
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    texts = exception_texts(caught.value)
    assert TOKEN not in texts
    assert urllib.parse.quote(TOKEN) not in texts
    message = str(caught.value)
    assert "a raw access token passed as token= (not shown)" in message
    assert "FETCH_RAW_TOKEN_EXPIRY=false" in message


def a_scheme_without_its_backend() -> str:
    """A URL scheme fsspec knows whose backend package is not installed here."""
    for scheme in sorted(fsspec.available_protocols()):
        try:
            fsspec.get_filesystem_class(scheme)
        except ImportError:
            return scheme
        except ValueError:
            continue
    raise AssertionError("every fsspec backend is installed; pick another error")


def test_cli_error_line_hides_the_password_of_the_run_dir_url(tmp_path):
    scheme = a_scheme_without_its_backend()
    done = subprocess.run(
        [sys.executable, "-m", "colab_resume", "ls"]
        + [f"{scheme}://alice:opaque-value-123456@host/runs/r"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert "needs the fsspec backend" in line, line
    assert f"{scheme}://alice:<redacted>@host/runs/r" in line, line
    assert "opaque-value" not in done.stdout + done.stderr
