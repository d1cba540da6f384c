"""A Hugging Face `Trainer` with `report_to="phalanx"` under `phalanx run`, on a tiny BERT built from
a config (random weights, nothing downloaded) and a dataset made here. The first attempt dies right
after its step-4 checkpoint; with `max_restarts: 1` the restarted one resumes from the Phalanx
checkpoint (`resume_path()`), so the Trainer's step counter continues at 5 and every per-step series
runs 1..6 exactly once. The `TrainingArguments` and the model config are the experiment's params."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.domain import ExperimentStatus

from .conftest import phalanx_run, read_store

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = pytest.mark.slow

SCRIPT = """
import os
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback
from transformers import TrainingArguments
import phalanx.integrations.huggingface as phalanx_hf


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 50, (n, 8), generator=generator)
        self.labels = (self.ids[:, 0] % 2).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class DieOnce(TrainerCallback):  # the first attempt is killed as step 5 begins
    def on_train_begin(self, args, state, control, **kwargs):
        print("starts at step", state.global_step, flush=True)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 4 and resume is None:
            os._exit(3)


config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
torch.manual_seed(0)
args = TrainingArguments(
    "out", report_to="phalanx", max_steps=6, per_device_train_batch_size=8, learning_rate=0.01,
    logging_steps=1, eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
    use_cpu=True, disable_tqdm=True, seed=0,
)
trainer = Trainer(model=BertForSequenceClassification(config), args=args, callbacks=[DieOnce],
                  train_dataset=Tokens(64, 0), eval_dataset=Tokens(16, 1))
resume = phalanx_hf.resume_path()
print("resuming from", resume and os.path.basename(resume), flush=True)
trainer.train(resume_from_checkpoint=resume)
print("finished at step", trainer.state.global_step, flush=True)
"""

EXPERIMENT = """
version: 1
kind: experiment
name: hf trainer
project: integrations
run:
  cmd: python train.py
  max_restarts: 1
"""


def test_hf_trainer_logs_each_step_and_resumes_from_the_phalanx_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "polyaxonfile.yml").write_text(EXPERIMENT)
    home = tmp_path / "home"
    done = phalanx_run(home, tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    store = read_store(home)
    [exp] = store.list_experiments().items
    assert exp.status == ExperimentStatus.SUCCEEDED
    lines = [line.text for line in store.logs(exp.id)]
    assert "resuming from None" in lines  # the first attempt started fresh
    assert "resuming from step-000000004-checkpoint-4" in lines, lines  # the second from Phalanx's copy
    assert "finished at step 6" in lines
    assert lines.count("starts at step 0") == 1 and lines.count("starts at step 4") == 1  # continued
    metrics = store.metrics(exp.id)
    for title in ("train/loss", "train/learning_rate", "train/grad_norm"):
        [series] = metrics[title].values()
        assert series.steps == [1, 2, 3, 4, 5, 6], (title, series.steps)  # each step once, continued
    [lr] = metrics["train/learning_rate"].values()
    assert lr.values == pytest.approx([0.01 * (6 - s) / 6 for s in range(6)])  # the schedule continued
    [eval_loss] = metrics["eval/loss"].values()
    assert eval_loss.steps == [2, 4, 6]
    params = {(p.section, p.key): p.value for p in store.params(exp.id)}
    assert params[("TrainingArguments", "learning_rate")] == 0.01
    assert params[("TrainingArguments", "max_steps")] == 6
    assert params[("ModelConfig", "hidden_size")] == 16
    from phalanx.checkpoints import from_artifacts

    kept = from_artifacts(store.artifacts(exp.id))
    assert [c.step for c in kept] == [2, 4, 6]
    assert "eval/loss" in kept[-1].metrics  # scored, so a keep_best policy can rank it
