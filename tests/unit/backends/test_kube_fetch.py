"""The fetch-code step a pod runs first: a server not up yet is waited for, a refusal is final.

The step is a `python -c` program; here it runs in this process with urlopen and sleep replaced, so
the retry rule is checked without a server or the 31 s of real back-off.
"""

from __future__ import annotations

import io
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from phalanx.backends import kube_code

URL = "http://server:8000/api/v1/experiments/e1/files/_phalanx/code.tar.gz"


def _bundle() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Answers:
    """urlopen that raises or answers in turn, counting the calls and the sleeps between them."""

    def __init__(self, *answers: BaseException | bytes) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.slept: list[float] = []

    def urlopen(self, request: urllib.request.Request, timeout: float) -> Any:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return io.BytesIO(answer)


def _fetch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: _Answers) -> Path:
    dest = tmp_path / "code"
    monkeypatch.setattr(urllib.request, "urlopen", answers.urlopen)
    monkeypatch.setattr("time.sleep", answers.slept.append)
    monkeypatch.setattr(sys, "argv", ["-c", URL, str(dest)])
    exec(compile(kube_code.FETCH.format(), "<fetch-code>", "exec"), {"__name__": "__main__"})
    return dest


def _http(code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError(URL, code, "refused", {}, None)  # type: ignore[arg-type]


def test_a_server_not_up_yet_or_busy_is_waited_for_then_the_code_is_unpacked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = _Answers(urllib.error.URLError("connection refused"), _http(503), _http(429), _bundle())
    dest = _fetch(tmp_path, monkeypatch, answers)
    assert (dest / "train.py").read_text() == "print('hi')\n"
    assert answers.calls == 4 and answers.slept == [1, 2, 4]


@pytest.mark.parametrize("code", [401, 403, 404])
def test_a_refused_token_or_a_missing_bundle_fails_the_pod_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    answers = _Answers(_http(code), _bundle())
    with pytest.raises(SystemExit) as exited:
        _fetch(tmp_path, monkeypatch, answers)
    assert exited.value.code == 1
    assert answers.calls == 1 and answers.slept == []
    assert f"HTTP Error {code}" in capsys.readouterr().err


def test_a_server_that_never_answers_fails_the_pod_after_six_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = _Answers(*[urllib.error.URLError("connection refused")] * 6)
    with pytest.raises(SystemExit):
        _fetch(tmp_path, monkeypatch, answers)
    assert answers.calls == 6 and answers.slept == [1, 2, 4, 8, 16]
