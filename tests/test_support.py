"""The test support package can fail: its checks reject what they must."""

from __future__ import annotations

import numpy as np
import pytest
from support import assert_bitwise_equal, run_cli, wait_for


def test_bitwise_comparison_rejects_sign_of_zero_dtype_and_names(tmp_path):
    a = {"w": np.array([0.0, 1.0], "float32")}
    np.savez(tmp_path / "a.npz", **a)
    assert_bitwise_equal(tmp_path / "a.npz", a, must_contain=["w"])
    for other in (
        {"w": np.array([-0.0, 1.0], "float32")},  # array_equal would accept it
        {"w": np.array([0.0, 1.0], "float64")},
        {"w": np.array([[0.0, 1.0]], "float32")},
        {"v": np.array([0.0, 1.0], "float32")},
    ):
        with pytest.raises(AssertionError):
            assert_bitwise_equal(a, other)
    with pytest.raises(AssertionError, match="no variable named like"):
        assert_bitwise_equal(a, a, must_contain=["seed_generator"])
    with pytest.raises(AssertionError, match="empty"):
        assert_bitwise_equal({}, {})


def test_wait_for_returns_the_value_or_fails_naming_what():
    assert wait_for(lambda: 42, 1, "an answer") == 42
    with pytest.raises(AssertionError, match="timed out after 0.1s waiting for x"):
        wait_for(lambda: None, 0.1, "x", interval=0.01)
    with pytest.raises(AssertionError, match="gave up waiting for x: gone"):
        wait_for(lambda: None, 10, "x", unless=lambda: "gone")


def test_process_checks_the_exit_code():
    assert run_cli("--version", expect_rc=0).stdout.strip()
    with pytest.raises(AssertionError, match="expected exit code 0"):
        run_cli("no-such-command", expect_rc=0)
