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


def test_a_changed_endpoint_gets_its_own_client_and_listings_are_never_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fsspec caches one filesystem per set of options for the process's life: a client made for
    one endpoint must not answer for another, and a listing must not hide objects added since."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    first, _ = artifacts.open_fs("s3://bucket/prefix")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    second, root = artifacts.open_fs("s3://bucket/prefix")
    assert root == "bucket/prefix"
    assert first is not second
    assert (first.endpoint_url, second.endpoint_url) == ("http://127.0.0.1:1", "http://127.0.0.1:2")
    assert not second.dircache.use_listings_cache
