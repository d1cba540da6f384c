"""``PhalanxCallback``: a Hugging Face ``Trainer``'s logs, arguments and checkpoints into Phalanx.

    import phalanx.integrations.huggingface  # registers report_to="phalanx"
    args = TrainingArguments("out", report_to="phalanx", logging_steps=1, eval_strategy="steps")
    trainer = Trainer(model, args, train_dataset=train, eval_dataset=val)
    trainer.train(resume_from_checkpoint=phalanx.integrations.huggingface.resume_path())

or, without the registration, ``Trainer(..., callbacks=[PhalanxCallback()])``.

Transformers resolves ``report_to`` names through one module-level table
(``transformers.integrations.integration_utils.INTEGRATION_TO_CALLBACK``) and has no hook for a
third-party name; importing this module adds ``"phalanx"`` to that table (the same table the Trainer
reads when it is built), so the name works in the process that imported it. Every log the Trainer
writes (``logging_steps``, each evaluation, the final summary) is reported at ``state.global_step``
as ``train/<name>`` or ``eval/<name>`` (``eval_loss`` -> ``eval/loss``); the ``TrainingArguments`` go to
section ``TrainingArguments`` and the model's config to ``ModelConfig``; each checkpoint folder the
Trainer saves is stored as a Phalanx checkpoint at its step with the latest eval metrics (retention,
``phalanx resume``), and ``resume_path()`` gives it back. The Trainer averages the loss over its ranks
before logging, so only the world's process zero reports (into its own series). Needs the ``hf`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.integrations import integration_utils
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from phalanx.tracking.task import Task, _own_series

ARGS_SECTION = "TrainingArguments"
CONFIG_SECTION = "ModelConfig"
PREFIXES = (("eval_", "eval/"), ("test_", "test/"))


class PhalanxCallback(TrainerCallback):
    """Report a ``Trainer`` into the process's experiment. ``project``/``name`` name the experiment
    a plain ``python train.py`` creates (ignored under ``phalanx run``); ``log_checkpoints=False``
    leaves checkpoints to the Trainer alone."""

    def __init__(
        self, project: str | None = None, name: str | None = None, *, log_checkpoints: bool = True
    ) -> None:
        # TensorBoard capture stands down: report_to=["tensorboard", "phalanx"] would store each point twice
        self._task = Task.init(project_name=project, task_name=name, capture_tensorboard=False)
        self._log_checkpoints = log_checkpoints
        self._eval: dict[str, float] = {}
        # found on the first log, once the Trainer has set up its process group (the rank decides
        # the series), then reused: ``on_log`` runs every ``logging_steps`` and must cost little
        self._series: str | None = None
        self._titles: dict[str, str] = {}  # a log key -> its title
        self._eval_titles: set[str] = set()  # the titles kept as a checkpoint's metrics

    @property
    def task(self) -> Task:
        return self._task

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero:
            return
        self._task.connect(_params(args.to_sanitized_dict()), name=ARGS_SECTION)
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "to_diff_dict"):
            self._task.connect(_params(config.to_diff_dict()), name=CONFIG_SECTION)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero:
            return
        logger = self._task.get_logger()
        series = self._series
        if series is None:
            series = self._series = _own_series(self._task)
        titles = self._titles
        numbers: list[tuple[str, float]] = []
        for key, value in (logs or {}).items():
            kind = type(value)
            plain = kind is float or kind is int  # the usual two first: this runs every step
            if not plain and (isinstance(value, bool) or not isinstance(value, (int, float))):
                continue
            title = titles.get(key)
            if title is None:
                title = titles[key] = _title(key)
                if title.startswith("eval/"):
                    self._eval_titles.add(title)
            if title in self._eval_titles:
                self._eval[title] = float(value)
            numbers.append((title, value))
        logger.report_scalars(series, numbers, state.global_step)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """The Trainer has written ``checkpoint-<step>`` (rank 0 writes; every rank is called)."""
        if not (self._log_checkpoints and state.is_world_process_zero):
            return
        folder = os.path.join(args.output_dir or ".", f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if os.path.isdir(folder):
            self._task.save_checkpoint(folder, state.global_step, self._eval)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._task.flush()


def resume_path() -> str | None:
    """The local folder of the checkpoint a restarted or resumed experiment continues from (or the
    newest this process stored); None on a fresh start. Pass it as
    ``trainer.train(resume_from_checkpoint=...)``."""
    latest = Task.init().latest_checkpoint()
    return None if latest is None else str(latest.path)


def _title(key: str) -> str:
    """``eval_loss`` -> ``eval/loss``, ``test_acc`` -> ``test/acc``, anything else ``train/<key>``."""
    for prefix, group in PREFIXES:
        if key.startswith(prefix):
            return group + key[len(prefix) :]
    return f"train/{key}"


def _params(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """What Phalanx stores as a parameter: numbers and text as they are, anything else as text. A
    read-only mapping: the values the Trainer runs with are recorded as they are, never replaced by a
    launched ``--param`` of the same name (``connect`` does that to a dict the script reads)."""
    plain: dict[str, Any] = {}
    for key, value in values.items():
        if value is None or isinstance(value, (bool, int, float, str)):
            plain[str(key)] = value
        else:
            plain[str(key)] = str(value)
    return MappingProxyType(plain)


def register() -> None:
    """Make ``TrainingArguments(report_to="phalanx")`` build a ``PhalanxCallback`` (idempotent)."""
    integration_utils.INTEGRATION_TO_CALLBACK.setdefault("phalanx", PhalanxCallback)


register()
