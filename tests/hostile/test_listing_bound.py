"""A listing is bounded: a million objects are refused by name, not walked.

Every reader lists the run directory; one prefix stuffed with objects made
each of them take minutes and gigabytes. ``Storage.list`` now stops past
``max_list_objects`` (100,000 by default) with an error naming the run
directory and the folder to clean.
"""

from __future__ import annotations

import pytest
from support.hostile import stopped_run

from colab_resume.errors import TooManyObjectsError
from colab_resume.protocol.listing import read_leases
from colab_resume.storage import Storage


def test_a_listing_past_the_cap_names_the_run_dir_and_the_folder(tmp_path):
    url = str(tmp_path / "run")
    stopped_run(url, {})
    junk = tmp_path / "run" / "history"
    for n in range(40):
        (junk / f"junk-{n}.json").write_bytes(b"{}")
    storage = Storage(url, max_list_objects=30)

    with pytest.raises(TooManyObjectsError) as caught:
        storage.list()
    message = str(caught.value)
    assert f"{url} holds more than 30 objects under /" in message
    assert "history/: 41" in message and f"under {url}/history/" in message
    with pytest.raises(TooManyObjectsError):
        storage.list("history/")
    assert [n for n, _ in read_leases(storage)] == [1]  # other folders still list


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_the_cap_is_checked_up_front(bad, tmp_path):
    with pytest.raises(ValueError, match="max_list_objects"):
        Storage(str(tmp_path), max_list_objects=bad)
