"""The object-store options of the artifact store: a clear message without the s3 extra, bounded
parts and retries handed to s3fs, and the AWS variables left to botocore."""

from __future__ import annotations

import sys

import pytest

from phalanx.errors import MissingExtra, exit_status
from phalanx.store import artifacts


def test_an_s3_url_without_s3fs_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # import s3fs -> ImportError
    with pytest.raises(MissingExtra) as caught:
        artifacts.open_fs("s3://bucket/prefix")
    assert exit_status(caught.value) == 2
    assert "pip install 'phalanx[s3]'" in caught.value.message
    assert "PHALANX_ARTIFACTS_URL='s3://bucket/prefix'" in caught.value.message


def test_s3_transfers_are_bounded_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    options = artifacts.s3_options()
    assert options["default_block_size"] == artifacts.PART_BYTES >= 5 * 1024 * 1024  # S3's least part
    assert options["max_concurrency"] == artifacts.PART_CONCURRENCY
    assert options["config_kwargs"]["retries"] == {
        "mode": "standard",
        "max_attempts": artifacts.RETRY_ATTEMPTS,
    }
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")  # the user's own setting wins
    assert "max_attempts" not in artifacts.s3_options()["config_kwargs"]["retries"]
