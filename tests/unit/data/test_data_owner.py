"""Data belongs to a project (issue 36): a server's boxed run of project P reads only P's and the
shared datasets and datastores (another project's is answered as if it did not exist), and an
object store with P's credentials (the datastore's profile, else P's secrets), never the server's
environment. A run on one's own machine (no reader) reads everything with its own, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.data.credentials import Access
from phalanx.data.inputs import resolve
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.spec.inputs import InputSpec
from phalanx.store import catalog, secrets


def test_a_dataset_is_its_projects_or_shared(store: Any, folder: Path) -> None:
    mine, _ = catalog.add_dataset(store, "digits", str(folder), project="vision")
    shared, _ = catalog.add_dataset(store, "mnist", str(folder), shared=True)
    legacy, _ = catalog.add_dataset(store, "old", str(folder))
    assert (mine.project, mine.shared, shared.shared) == ("vision", False, True)
    assert catalog.readable_by(mine, "vision") and not catalog.readable_by(mine, "nlp")
    assert catalog.readable_by(shared, "nlp") and not catalog.readable_by(legacy, "nlp")
    (folder / "more.txt").write_text("x")
    with pytest.raises(Conflict, match="belongs to project vision"):
        catalog.add_dataset(store, "digits", str(folder), project="nlp")
    adopted, _ = catalog.add_dataset(store, "old", str(folder), project="nlp")  # an unowned name is adopted
    assert adopted.project == "nlp" and adopted.version == 2


def test_a_boxed_run_reads_only_its_projects_and_shared_data(
    store: Any, folder: Path, phalanx_home: Path
) -> None:
    catalog.add_dataset(store, "digits", str(folder), project="vision")
    catalog.add_datastore(store, "lake", str(folder), project="vision")
    settings = Settings(home=phalanx_home)
    spec = InputSpec(name="digits", dataset="digits@latest")
    lake = InputSpec(name="raw", datastore="lake", path="train")
    for reader in ("vision", None):  # its own project, or this machine's user
        env, _ = resolve([spec, lake], settings, dry=True, reader=reader)
        assert set(env) == {"PHALANX_INPUT_DIGITS", "PHALANX_INPUT_RAW"}
    with pytest.raises(NotFound, match="no dataset 'digits@latest' in project nlp"):
        resolve([spec], settings, dry=True, reader="nlp")
    with pytest.raises(NotFound, match="no datastore 'lake' in project nlp"):
        resolve([lake], settings, dry=True, reader="nlp")
    # a name that exists nowhere gets the same answer: what the catalog would say of it (the nearest
    # name, every datastore's name, another project's versions) is not the reader's to know
    for missing in (
        InputSpec(name="d", dataset="digitz@latest"),
        InputSpec(name="d", dataset="digits@7"),
        InputSpec(name="r", datastore="lakes", path="train"),
    ):
        with pytest.raises(NotFound) as refused:
            resolve([missing], settings, dry=True, reader="nlp")
        said = str(refused.value)
        assert said.endswith("in project nlp, nor shared with it") and "lake'" not in said, said
        assert "digits'" not in said and "versions" not in said, said


def test_latest_is_the_newest_version_the_boxed_runs_project_reads(
    store: Any, folder: Path, phalanx_home: Path
) -> None:
    catalog.add_dataset(store, "digits", str(folder), shared=True)  # digits@1: every project's
    (folder / "more.txt").write_text("x")
    catalog.add_dataset(store, "digits", str(folder), project="vision")  # digits@2: vision's own
    settings = Settings(home=phalanx_home)
    for reader, newest in (("nlp", "digits@1"), ("vision", "digits@2"), (None, "digits@2")):
        for ref in ("digits", "digits@latest"):
            _, [record] = resolve([InputSpec(name="d", dataset=ref)], settings, dry=True, reader=reader)
            assert record["ref"] == newest, (reader, ref, record)
    with pytest.raises(NotFound) as refused:  # vision's version is no more there for nlp than a 3rd
        resolve([InputSpec(name="d", dataset="digits@2")], settings, dry=True, reader="nlp")
    assert str(refused.value) == "inputs: d: no dataset 'digits@2' in project nlp, nor shared with it"
    catalog.add_dataset(store, "own", str(folder), project="vision")
    with pytest.raises(NotFound, match=r"^inputs: d: no dataset 'own@latest' in project nlp, nor shared"):
        resolve([InputSpec(name="d", dataset="own@latest")], settings, dry=True, reader="nlp")


def test_an_object_store_is_read_with_the_projects_credentials_never_the_servers(
    store: Any, phalanx_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "the-server's")
    settings = Settings(home=phalanx_home)
    assert Access(store, settings, None).credentials("s3://b/x") is None  # one's own machine: the env
    assert Access(store, settings, "nlp").credentials("/local/folder") is None
    with pytest.raises(UsageError, match=r"project nlp has no credentials.*never read with the server.s own"):
        Access(store, settings, "nlp").credentials("s3://b/x")
    secrets.put(store, phalanx_home, "nlp", "AWS_ACCESS_KEY_ID", "nlp-key")
    secrets.put(store, phalanx_home, "nlp", "AWS_SECRET_ACCESS_KEY", "nlp-secret")
    assert Access(store, settings, "nlp").credentials("s3://b/x") == {
        "key": "nlp-key",
        "secret": "nlp-secret",
    }
    profiled = Access(store, settings, "nlp")
    profiled.profile = "nlp-reader"  # the datastore names the profile its project reads it with
    assert profiled.credentials("s3://b/x") == {"profile": "nlp-reader"}


def test_a_missing_name_says_which_input_and_on_ones_own_machine_the_name_meant(
    store: Any, folder: Path, phalanx_home: Path
) -> None:
    catalog.add_dataset(store, "digits", str(folder))
    with pytest.raises(NotFound) as refused:
        resolve([InputSpec(name="train", dataset="digitz@latest")], Settings(home=phalanx_home), dry=True)
    assert str(refused.value) == "inputs: train: no dataset 'digitz'; did you mean 'digits'?"
