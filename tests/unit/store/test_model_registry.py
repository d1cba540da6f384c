"""The model registry on the SQL store (SQLite and PostgreSQL): versions numbered per name with their
lineage and signature, aliases that move, a tampered or corrupt file refused with its parity figure
and nothing recorded, a version that outlives a change of its experiment's file, and a removal that
never takes the file of a version registered meanwhile."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from phalanx.domain import Event, EventKind
from phalanx.errors import NotFound, StoreError, Unauthorized, UsageError
from phalanx.registry.checker import Checked, CheckStopped, check_in_process
from phalanx.registry.model import Model
from phalanx.registry.onnx_load import open_session, refuse_external_data
from phalanx.registry.parity import ParityFailed
from phalanx.registry.service import REGISTRY_ID, Registry
from phalanx.store.registry_records import ModelRef, parse_ref
from phalanx.store.sql import SqlStore
from tests.support.onnx_models import external_data_onnx, random_linear, record_model, run_onnx, tamper


def _experiment(store: SqlStore, seed: int, name: str = "digits") -> str:
    exp = store.create_experiment(name=f"train-{seed}", project="p").id
    store.write_events(
        [
            Event(exp, EventKind.PARAM, {"section": "Args", "key": "lr", "value": 0.1 * seed}),
            Event(exp, EventKind.SCALAR, {"title": "accuracy", "series": "test", "value": 0.5, "step": 1}),
            Event(exp, EventKind.SCALAR, {"title": "accuracy", "series": "test", "value": 0.9, "step": 2}),
            Event(exp, EventKind.SCALAR, {"title": "system/rss_mib", "series": "m", "value": 9, "step": 1}),
        ]
    )
    record_model(store, exp, name, random_linear(seed))
    return exp


def test_register_numbers_versions_and_keeps_lineage_and_signature(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    first, second = _experiment(store, 1), _experiment(store, 2)
    v1 = registry.register(first, "digits", description="first", tags={"team": "vision"})
    v2 = registry.register(f"{second}/digits", "digits")
    assert (v1.version, v2.version) == (1, 2)
    assert v1.experiment_id == first and v1.description == "first" and v1.tags == {"team": "vision"}
    assert v1.lineage["params"] == {"Args/lr": 0.1}
    assert v1.lineage["metrics"] == {"accuracy/test": 0.9}  # the machine's series are not the model's
    assert v1.parity["passed"] is True and v1.parity["max_abs_diff"] <= 1e-5
    assert v1.signature["inputs"] == [{"name": "input", "dtype": "float32", "shape": [None, 64]}]
    assert v1.signature["outputs"] == [{"name": "output", "dtype": "float32", "shape": [None, 10]}]
    assert registry.resolve("digits").version == 2
    assert registry.resolve("digits@1").experiment_id == first
    [listed] = registry.models()
    assert (listed.name, listed.latest_version) == ("digits", 2)


def test_a_registration_given_up_as_its_check_answers_records_nothing(store: SqlStore) -> None:
    # a server's registration whose client went away as its check answered: no version, no file
    exp = _experiment(store, 1)
    stop = threading.Event()

    def checked_as_the_client_leaves(
        data: bytes, metadata: dict[str, Any], project: str, where: str, stop: threading.Event | None = None
    ) -> Checked:
        checked = check_in_process(data, metadata, project, where)
        assert stop is not None
        stop.set()
        return checked

    with pytest.raises(CheckStopped, match=r"given up .* nothing was registered"):
        Registry(store, checked_as_the_client_leaves).register(exp, "digits", stop=stop)
    assert Registry(store).models() == []
    assert store.artifact_store.list(REGISTRY_ID) == []  # type: ignore[union-attr]


def test_a_version_keeps_its_own_copy_of_the_file(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    exp = _experiment(store, 1)
    original = store.artifact_store.read_bytes(exp, "models/digits.onnx")  # type: ignore[union-attr]
    v1 = registry.register(exp, "digits")
    store.artifact_store.delete_experiment(exp)  # type: ignore[union-attr]
    assert registry.read_bytes(v1) == original
    x = np.ones((3, 64), np.float32)
    assert np.array_equal(run_onnx(registry.read_bytes(v1), x), run_onnx(original, x))


def test_aliases_move_and_resolve(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    for seed in (1, 2):
        registry.register(_experiment(store, seed), "digits")
    assert registry.set_alias("digits", "prod", 1) is None
    assert registry.resolve("digits@prod").version == 1
    assert registry.set_alias("digits", "prod", 2) == 1
    assert registry.resolve("digits@prod").version == 2
    assert registry.resolve("digits@2").aliases == ["prod"]
    assert registry.resolve("digits@1").aliases == []
    with pytest.raises(NotFound, match="no version 7"):
        registry.set_alias("digits", "prod", 7)
    assert registry.resolve("digits@prod").version == 2  # a refused move changes nothing
    with pytest.raises(NotFound, match="no alias 'staging'"):
        registry.resolve("digits@staging")
    registry.delete_alias("digits", "prod")
    with pytest.raises(NotFound):
        registry.resolve("digits@prod")


def test_a_tampered_file_is_refused_with_its_parity_figure_and_nothing_is_recorded(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    exp = _experiment(store, 1)
    tamper(store, exp, "digits")
    with pytest.raises(ParityFailed, match=r"max abs diff \d") as caught:
        registry.register(exp, "digits")
    assert "altered or corrupted" in str(caught.value)
    assert registry.models() == []


def test_a_corrupt_file_is_refused(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    exp = _experiment(store, 1)
    data = store.artifact_store.read_bytes(exp, "models/digits.onnx")  # type: ignore[union-attr]
    store.artifact_store.put_bytes(exp, "models/digits.onnx", data[: len(data) // 2])  # type: ignore[union-attr]
    with pytest.raises(ParityFailed, match="does not run"):
        registry.register(exp, "digits")
    assert registry.models() == []


def test_a_model_whose_weights_lie_in_another_file_is_refused_before_anything_reads_it(
    store: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX external data is read from the loading process's working directory: an editor's model
    naming the server's secrets key (or its token, its store) would have the server read it as root
    and report a number computed from it (the parity figure). Such a file is refused, unread."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secrets.key").write_bytes(b"s3cr3t-key-bytes")
    registry = Registry(store, check_in_process)
    exp = store.create_experiment(name="leak", project="p").id
    record_model(store, exp, "leak", external_data_onnx("secrets.key"), n_in=1)  # its check passes
    with pytest.raises(UsageError, match="external data"):
        registry.register(exp, "leak")
    assert registry.models() == []


@pytest.mark.parametrize("where", ["initializer", "subgraph"])
def test_external_data_is_found_wherever_a_tensor_is(where: str) -> None:
    with pytest.raises(UsageError, match="external data"):
        refuse_external_data(external_data_onnx("../x", where=where))
    refuse_external_data(random_linear(1))  # a self-contained model passes
    refuse_external_data(random_linear(1)[:40])  # a cut one is onnxruntime's to refuse


def test_a_reference_the_check_missed_still_names_no_file_of_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second layer alone: onnxruntime loads the model from a file alone in a fresh folder, so
    external data it names resolves there, never in the process's working directory."""
    from phalanx.registry import onnx_load

    monkeypatch.chdir(tmp_path)
    (tmp_path / "secrets.key").write_bytes(bytes(range(16)))
    monkeypatch.setattr(onnx_load, "refuse_external_data", lambda data: None)  # as if it missed it
    with pytest.raises(Exception, match=r"secrets\.key") as raised:
        open_session(external_data_onnx("secrets.key"))
    assert not isinstance(raised.value, UsageError)  # onnxruntime's own: no such file where it looked
    assert open_session(random_linear(1)).get_inputs()[0].name == "input"  # a plain model loads


def test_serving_refuses_a_version_with_external_data_registered_before_the_registry_did() -> None:
    from phalanx.serving.follower import load

    with pytest.raises(UsageError, match="external data"):
        load(None, external_data_onnx("secrets.key"))  # type: ignore[arg-type]


def test_mistakes_are_named(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    exp = _experiment(store, 1)
    with pytest.raises(UsageError, match="model name"):
        registry.register(exp, "bad name")
    with pytest.raises(NotFound, match="no ONNX model 'other'"):
        registry.register(f"{exp}/other", "digits")
    with pytest.raises(NotFound, match="no registered model 'missing'"):
        registry.resolve("missing@prod")
    record_model(store, exp, "second", random_linear(5))
    with pytest.raises(UsageError, match="several ONNX models"):
        registry.register(exp, "digits")


def test_tags_and_description_update(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    registry.register(_experiment(store, 1), "digits", tags={"a": "1", "b": "2"})
    registry.update("digits", 1, description="better", tags={"a": None, "c": "3"})
    registry.update("digits", description="the digits classifier")
    v = registry.resolve("digits@1")
    assert (v.description, v.tags) == ("better", {"b": "2", "c": "3"})
    assert registry.models()[0].description == "the digits classifier"


def test_model_api_registers_aliases_and_downloads(store: SqlStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp = _experiment(store, 3)
    model = Model.register(exp, "digits", description="api", store=store)
    assert (model.name, model.version, model.experiment_id) == ("digits", 1, exp)
    model.set_alias("prod")
    again = Model("digits", alias="prod", store=store)
    assert again.version == 1 and again.aliases == ["prod"]
    path = again.download(tmp_path)
    assert path.name == "digits-v1.onnx"
    assert path.read_bytes() == store.artifact_store.read_bytes(exp, "models/digits.onnx")  # type: ignore[union-attr]


def test_version_0_of_a_model_is_a_clear_mistake_not_an_alias() -> None:
    assert parse_ref("digits@3") == ModelRef("digits", version=3)
    assert parse_ref("digits@prod") == ModelRef("digits", alias="prod")
    with pytest.raises(UsageError, match="versions of a model count from 1"):
        parse_ref("digits@0")


def test_removing_a_version_drops_its_aliases_its_file_last_and_never_gives_its_number_again(
    store: SqlStore,
) -> None:
    registry = Registry(store, check_in_process)
    first, second = _experiment(store, 1), _experiment(store, 2)
    for exp in (first, first, second):  # versions 1 and 2 share one file (the same bytes)
        registry.register(exp, "digits")
    registry.set_alias("digits", "prod", 3)
    registry.set_alias("digits", "old", 1)
    files = store.artifact_store
    assert files is not None
    shared, own = registry.resolve("digits@1").path, registry.resolve("digits@3").path
    assert shared == registry.resolve("digits@2").path != own
    [gone] = registry.remove("digits", 3)
    assert (gone.version, gone.aliases) == (3, ["prod"])
    assert [v.version for v in registry.versions("digits")] == [1, 2]
    assert registry.models()[0].aliases == {"old": 1}
    assert not files.exists(REGISTRY_ID, own) and files.exists(REGISTRY_ID, shared)
    assert registry.register(second, "digits").version == 4  # 3 named another file: never again
    registry.remove("digits", 1)
    assert files.exists(REGISTRY_ID, shared)  # version 2 still names it
    with pytest.raises(NotFound, match=r"no version 1 \(versions: 2, 4\)"):
        registry.remove("digits", 1)
    with pytest.raises(NotFound, match="no registered model 'digts'"):
        registry.remove("digts")
    assert [v.version for v in registry.versions("digits")] == [2, 4]  # a refused removal changes nothing


def test_removing_a_model_removes_every_version_alias_and_file(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    exp = _experiment(store, 1)
    registry.register(exp, "digits")
    registry.register(_experiment(store, 2), "digits")
    registry.register(exp, "other")
    registry.set_alias("digits", "prod", 2)
    paths = [v.path for v in registry.versions("digits")]
    gone = registry.remove("digits")
    assert [(v.version, v.aliases) for v in gone] == [(1, []), (2, ["prod"])]
    assert [m.name for m in registry.models()] == ["other"]
    assert not any(store.artifact_store.exists(REGISTRY_ID, p) for p in paths)  # type: ignore[union-attr]
    assert store.artifact_store.exists(exp, "models/digits.onnx")  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="no registered model 'digits'"):
        registry.resolve("digits@prod")
    assert registry.register(exp, "digits").version == 1  # a new model of the name starts again
    assert registry.read_bytes(registry.resolve("other")) == registry.read_bytes(registry.resolve("digits"))


@pytest.mark.parametrize("removed", [1, None], ids=["version", "model"])
def test_a_removal_racing_a_registration_of_the_same_bytes_leaves_the_new_version_its_file(
    store: SqlStore, removed: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`models rm digits@1` (or `rm digits`) decides that no version names the shared file and is held
    just before it deletes it, until a registration of the same bytes has copied the file and is
    recording its version: the new version still has its file once both are done."""
    remover, registerer = Registry(store), Registry(store, check_in_process)
    exp = _experiment(store, 1)
    registerer.register(exp, "digits")
    files = remover.artifacts
    deciding, recording = threading.Event(), threading.Event()
    delete, add_version = files.delete, registerer.sql.add_version

    def held_delete(experiment_id: str, path: str) -> None:
        deciding.set()
        assert recording.wait(30)
        delete(experiment_id, path)

    def recording_add_version(*args: Any, **kwargs: Any) -> int:
        recording.set()  # the file is copied; the version's row is next
        return add_version(*args, **kwargs)

    monkeypatch.setattr(files, "delete", held_delete)
    monkeypatch.setattr(registerer.sql, "add_version", recording_add_version)
    with ThreadPoolExecutor(2) as pool:
        removing = pool.submit(remover.remove, "digits", removed)
        assert deciding.wait(30)
        again = pool.submit(registerer.register, exp, "digits").result(timeout=60)
        [gone] = removing.result(timeout=60)
    assert gone.version == 1 and again.path == gone.path
    assert [v.version for v in registerer.versions("digits")] == [again.version]
    assert files.exists(REGISTRY_ID, again.path)
    assert registerer.read_bytes(registerer.resolve("digits")) == store.artifact_store.read_bytes(  # type: ignore[union-attr]
        exp, "models/digits.onnx"
    )


def _refused(project: str | None) -> None:
    """A door's rule that refuses (a server's: the caller edits no project the name belongs to)."""
    raise Unauthorized(f"you may not add a version to project {project}'s model")


def test_a_registration_refused_under_the_names_lock_leaves_no_copy_of_its_file(store: SqlStore) -> None:
    """The door's rule, applied again as the version is added (the name may have been registered by
    another project while the check ran), refuses it: the copy made for it goes too. Before, an
    unreferenced file stayed under the artifact root's `_registry/digits/`."""
    registry = Registry(store, check_in_process)
    with pytest.raises(Unauthorized):
        registry.register(_experiment(store, 1), "digits", may_add=_refused)
    assert registry.models() == []
    assert registry.artifacts.list(REGISTRY_ID, "digits") == []


def test_a_registration_that_fails_after_the_copy_leaves_none(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Registry(store, check_in_process)

    def failing_add_version(*args: Any, **kwargs: Any) -> int:
        raise StoreError("the database went away")

    monkeypatch.setattr(registry.sql, "add_version", failing_add_version)
    with pytest.raises(StoreError):
        registry.register(_experiment(store, 1), "digits")
    assert registry.artifacts.list(REGISTRY_ID, "digits") == []


def test_a_refused_registration_keeps_the_file_a_version_of_the_same_bytes_names(store: SqlStore) -> None:
    registry = Registry(store, check_in_process)
    exp = _experiment(store, 1)
    kept = registry.register(exp, "digits")
    with pytest.raises(Unauthorized):
        registry.register(exp, "digits", may_add=_refused)  # the same bytes: the same copy
    assert registry.artifacts.list(REGISTRY_ID, "digits") == [kept.path]
    assert registry.read_bytes(registry.resolve("digits@1")) == registry.artifacts.read_bytes(
        exp, "models/digits.onnx"
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _padded_external_data_onnx(location: str) -> bytes:
    """``Y = W`` (4 floats) with W's data_location and external_data written as their tags plus
    2**32: protobuf (C++, onnxruntime's) keeps a tag's low 32 bits, so to onnxruntime W lies in
    ``location``."""
    from onnx import TensorProto, helper

    def field(number: int, payload: bytes) -> bytes:
        return _varint(number << 3 | 2) + _varint(len(payload)) + payload

    def padded(number: int, wire: int) -> bytes:
        return _varint((number << 3 | wire) + (1 << 32))

    entry = field(1, b"location") + field(2, location.encode())
    tensor = b"\x08\x04\x10\x01" + field(8, b"W")  # dims [4], FLOAT, named W
    tensor += padded(13, 2) + _varint(len(entry)) + entry + padded(14, 0) + b"\x01"
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Identity", ["W"], ["Y"])], "g", [], [out])
    model = helper.make_model(helper.make_graph([], "x", [], []), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.ClearField("graph")
    return model.SerializeToString() + field(7, graph.SerializeToString() + field(5, tensor))


def test_external_data_is_found_behind_a_tag_padded_past_32_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tag padded past 32 bits is still external data to onnxruntime, which then reads the named
    file (an absolute path as it is, before onnxruntime 1.24): the walk reads a tag as protobuf does."""
    from phalanx.registry import onnx_load

    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.array([1.5, 2.5, 3.5, 4.5], dtype="<f4").tobytes())
    model = _padded_external_data_onnx(str(secret))
    with pytest.raises(UsageError, match="external data"):
        refuse_external_data(model)
    monkeypatch.setattr(onnx_load, "refuse_external_data", lambda data: None)  # as before the fix
    try:  # onnxruntime sees the external data: it reads the file, or refuses the absolute path
        leaked = open_session(model).run(None, {})[0].tolist()
    except Exception as exc:
        assert "xternal data" in str(exc)
    else:
        assert leaked == [1.5, 2.5, 3.5, 4.5]
