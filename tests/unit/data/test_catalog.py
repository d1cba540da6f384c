"""The data catalog: datastores by name, and dataset versions that are immutable and content-addressed
(a changed file is a new version; the same content is not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.errors import Conflict, NotFound, UsageError, exit_status
from phalanx.store import catalog
from phalanx.store.manifest import DataChanged, copy_tree


def test_a_datastore_is_added_listed_and_removed(store: Any, folder: Path) -> None:
    record = catalog.add_datastore(store, "digits-store", str(folder))
    assert record.url == str(folder.resolve())
    assert [d.name for d in catalog.list_datastores(store)] == ["digits-store"]
    with pytest.raises(NotFound, match=r"no datastore 'digit-store'; did you mean 'digits-store'\?"):
        catalog.get_datastore(store, "digit-store")
    with pytest.raises(Conflict):
        catalog.add_datastore(store, "digits-store", str(folder))
    catalog.remove_datastore(store, "digits-store")
    with pytest.raises(NotFound) as missing:
        catalog.get_datastore(store, "digits-store")
    assert exit_status(missing.value) == 2
    assert "phalanx datastore add digits-store URL" in missing.value.message


def test_datastore_mistakes_are_refused_with_the_fix(store: Any, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file or folder"):
        catalog.add_datastore(store, "gone", str(tmp_path / "nope"))
    with pytest.raises(UsageError, match="holds credentials"):
        catalog.add_datastore(store, "leaky", "s3://AKIA:secret@bucket/prefix")
    with pytest.raises(UsageError, match="letters, digits"):
        catalog.add_datastore(store, "../x", str(tmp_path))
    assert catalog.list_datastores(store) == []


def test_versions_follow_the_content(store: Any, folder: Path) -> None:
    v1, new1 = catalog.add_dataset(store, "digits", str(folder))
    assert new1 and v1.ref == "digits@1" and not v1.copied
    assert {f.path: f.size for f in v1.files} == {"labels.txt": 4, "train/x.csv": 6}
    again, new = catalog.add_dataset(store, "digits", str(folder))
    assert not new and again.ref == "digits@1"  # same bytes: no new version
    (folder / "labels.txt").write_text("0\n2\n")  # same size, other bytes
    v2, new2 = catalog.add_dataset(store, "digits", str(folder))
    assert new2 and v2.version == 2 and v2.digest != v1.digest
    assert catalog.get_dataset(store, "digits@latest").version == 2
    assert catalog.get_dataset(store, "digits").version == 2
    assert catalog.get_dataset(store, "digits@1").digest == v1.digest  # kept as it was
    with pytest.raises(NotFound, match="no version 7"):
        catalog.get_dataset(store, "digits@7")
    with pytest.raises(NotFound, match="phalanx data add other PATH"):
        catalog.get_dataset(store, "other@latest")
    with pytest.raises(UsageError, match="NAME@VERSION"):
        catalog.get_dataset(store, "digits@v2")


def test_referenced_bytes_that_changed_are_refused_at_fetch(store: Any, folder: Path, tmp_path: Path) -> None:
    v1, _ = catalog.add_dataset(store, "digits", str(folder))
    (folder / "train" / "x.csv").write_text("9,9,9\n")
    with pytest.raises(DataChanged, match=r"'train/x\.csv' changed since the version was recorded") as caught:
        copy_tree(v1.manifest, str(tmp_path / "out"), "dataset digits@1")
    assert exit_status(caught.value) == 2
    assert not (tmp_path / "out" / "train" / "x.csv").exists()  # the bad copy is not left behind


def test_copy_to_a_datastore_keeps_the_version_when_the_source_changes(
    store: Any, folder: Path, tmp_path: Path
) -> None:
    (tmp_path / "lake").mkdir()
    catalog.add_datastore(store, "lake", str(tmp_path / "lake"))
    v1, _ = catalog.add_dataset(store, "digits", str(folder), copy_to="lake")
    assert v1.copied and v1.url == f"{tmp_path / 'lake'}/datasets/digits/{v1.digest}"
    (folder / "labels.txt").write_text("changed\n")
    copy_tree(v1.manifest, str(tmp_path / "out"))  # the copy still has the recorded bytes
    assert (tmp_path / "out" / "labels.txt").read_text() == "0\n1\n"


def test_a_dataset_from_a_datastore_folder(store: Any, folder: Path) -> None:
    catalog.add_datastore(store, "lake", str(folder))
    v, _ = catalog.add_dataset(store, "train-only", "lake:train")
    assert [f.path for f in v.files] == ["x.csv"] and v.url == str(folder.resolve() / "train")
    with pytest.raises(UsageError, match=r"'\.\.'"):
        catalog.add_dataset(store, "escape", "lake:../..")


def test_credentials_in_a_dataset_url_are_refused_and_not_echoed(store: Any) -> None:
    with pytest.raises(UsageError) as caught:
        catalog.add_dataset(store, "leaky", "s3://AKIAXXXX:hunter2@bucket/digits")
    assert "holds credentials" in caught.value.message and "hunter2" not in caught.value.message
    assert catalog.list_datasets(store) == []


def test_an_empty_source_is_refused_not_read_as_the_current_folder(store: Any) -> None:
    with pytest.raises(UsageError) as caught:
        catalog.add_dataset(store, "nothing", "  ")
    assert "no source" in caught.value.message and exit_status(caught.value) == 2
    assert catalog.list_datasets(store) == []


def test_a_version_or_every_version_is_forgotten_and_the_bytes_stay(store: Any, folder: Path) -> None:
    catalog.add_dataset(store, "digits", str(folder))
    (folder / "extra.txt").write_text("more\n")
    catalog.add_dataset(store, "digits", str(folder))
    assert [v.ref for v in catalog.remove_dataset(store, "digits@latest")] == ["digits@2"]
    assert (folder / "extra.txt").exists()
    assert [v.version for v in catalog.list_datasets(store, "digits")] == [1]
    catalog.add_dataset(store, "digits", str(folder))  # the content of the forgotten 2: a new 2
    assert [v.ref for v in catalog.remove_dataset(store, "digits")] == ["digits@1", "digits@2"]
    with pytest.raises(NotFound, match="phalanx data add digits PATH"):
        catalog.remove_dataset(store, "digits")


def test_a_missing_version_names_the_versions_that_exist_not_a_span_over_a_gap(
    store: Any, folder: Path
) -> None:
    for n in range(5):
        (folder / "labels.txt").write_text(f"{n}\n")
        catalog.add_dataset(store, "digits", str(folder))
    catalog.remove_dataset(store, "digits@2")
    with pytest.raises(NotFound, match=r"dataset 'digits' has no version 2 \(versions: 1, 3-5\)$"):
        catalog.get_dataset(store, "digits@2")


def test_version_0_is_no_version_and_never_the_newest(store: Any, folder: Path) -> None:
    """`NAME@0` read as "no version given" once: `phalanx data rm digits@0` removed the newest."""
    catalog.add_dataset(store, "digits", str(folder))
    (folder / "extra.txt").write_text("more\n")
    catalog.add_dataset(store, "digits", str(folder))
    for call in (catalog.get_dataset, catalog.remove_dataset):
        with pytest.raises(NotFound, match=r"dataset 'digits' has no version 0 \(versions: 1, 2\)"):
            call(store, "digits@0")
    assert [v.version for v in catalog.list_datasets(store, "digits")] == [1, 2]


def test_records_travel_as_json_unchanged(store: Any, folder: Path) -> None:
    """What a server answers is what this machine's catalog holds (the remote door's records)."""
    ds = catalog.add_datastore(store, "lake", str(folder.parent), project="nlp", profile="reader")
    assert catalog.DatastoreRecord.from_json(ds.to_json()) == ds
    version, _ = catalog.add_dataset(store, "digits", "lake:" + folder.name, project="nlp")
    assert catalog.DatasetVersion.from_json(version.to_json(with_files=True)) == version
    assert catalog.source_datastore("lake:sub/dir") == ("lake", "sub/dir")
    assert catalog.source_datastore("s3://bucket/x") is None and catalog.source_datastore("/abs") is None


def test_a_folders_version_is_copied_into_the_catalog_and_stays_fetchable(
    store: Any, folder: Path, phalanx_home: Path, tmp_path: Path
) -> None:
    door = catalog.catalog_of(store, phalanx_home)
    v1, new = door.add_dataset("digits", str(folder), copy_to=None, project=None, shared=False)
    kept = (phalanx_home / "data" / "datasets" / "digits" / v1.digest).resolve()
    assert new and v1.copied and v1.url == str(kept)
    assert not [p for p in kept.parent.iterdir() if p.name.startswith(".")]  # no partial copy left
    (folder / "labels.txt").write_text("changed\n")
    (folder / "train" / "x.csv").unlink()
    door.fetch(v1, tmp_path / "out")  # the source changed and lost a file: digits@1 is still whole
    assert (tmp_path / "out" / "labels.txt").read_text() == "0\n1\n"
    assert (tmp_path / "out" / "train" / "x.csv").read_text() == "1,2,3\n"
    v2, _ = door.add_dataset("digits", str(folder), copy_to=None, project=None, shared=False)
    assert v2.ref == "digits@2" and v2.url != v1.url
    assert [v.ref for v in door.remove_dataset("digits@1")] == ["digits@1"]
    assert not kept.exists() and Path(v2.url).is_dir()  # the catalog's own copy goes with its version


def test_reference_leaves_the_bytes_in_place_and_cannot_be_asked_with_copy_to(
    store: Any, folder: Path, phalanx_home: Path
) -> None:
    door = catalog.catalog_of(store, phalanx_home)
    v1, _ = door.add_dataset("digits", str(folder), copy_to=None, project=None, shared=False, reference=True)
    assert not v1.copied and v1.url == str(folder.resolve())
    again, new = door.add_dataset("digits", str(folder), copy_to=None, project=None, shared=False)
    assert new and again.copied  # the same content, now kept: a new version that no edit can break
    with pytest.raises(UsageError, match="--copy-to lake copies the bytes and --reference") as caught:
        door.add_dataset("digits", str(folder), copy_to="lake", project=None, shared=False, reference=True)
    assert exit_status(caught.value) == 2
    door.remove_dataset("digits@1")
    assert (folder / "labels.txt").exists()  # a referenced source is never the catalog's to delete
