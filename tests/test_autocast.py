"""Mixed precision (issue 43): ``torch.autocast``, ``Trainer(bf16=True)`` and ``Accelerator(mixed_precision="bf16")``
through ElmoModel and every head, forward and backward, on the CPU.

Before the fix every one of them failed at the first step (``Index put requires the source and destination dtypes
match``: layer 0 was scattered into a tensor allocated in the model's float32 while autocast returned bfloat16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import TINY

from modeling_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    demo_model_path,
)

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
# Worst cosine, per word, between each layer (and the mix) under autocast and in float32, on the demo biLM with the
# sentences below: measured 0.99997 in bfloat16 (AMD EPYC, AVX2 kernels) and 0.99999 in float16. The issue's bound:
MIN_COSINE = 0.999
SENTENCES = [
    "The quick brown fox jumps over the lazy dog .",
    "Peter Blackburn",
    "EU rejects German call to boycott British lamb .",
    "It rained all day in London on Saturday and nobody went out .",
]


def _batch(config: ElmoConfig, rows: int = 3, words: int = 5) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(1, 200, (rows, words, config.max_characters_per_token))
    ids[1, 3:] = 0
    ids[2, 1:] = 0
    return {"input_ids": ids, "attention_mask": ids.ne(0).any(-1).long()}


def _models():
    """ElmoModel and every head, tiny, trainable biLM, each with the arguments that make it return a loss."""
    base = dict(TINY, freeze_bilm=False, num_labels=3)
    yield "model", ElmoModel(ElmoConfig(**base)), {}
    tagger = ElmoConfig(**base, tagger_num_layers=1, tagger_hidden_size=8, use_crf=True, tagger_elmo_output=True)
    yield "tagger-crf", ElmoForTokenClassification(tagger), {"labels": torch.randint(0, 3, (3, 5))}
    plain = ElmoConfig(**base, tagger_num_layers=0, use_crf=False)
    yield "tagger-softmax", ElmoForTokenClassification(plain), {"labels": torch.randint(0, 3, (3, 5))}
    yield "classifier", ElmoForSequenceClassification(ElmoConfig(**base)), {"labels": torch.tensor([0, 1, 2])}
    lm = ElmoConfig(**TINY, lm_vocab_size=50, lm_num_samples=8)
    yield "lm-sampled", ElmoForPreTraining(lm), {"labels": torch.randint(0, 50, (3, 5))}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_forward_and_backward_through_every_model(dtype):
    for name, model, extra in _models():
        model.train()
        batch = _batch(model.config)
        with torch.autocast("cpu", dtype):
            out = model(**batch, **extra)
        loss = out.loss if name != "model" else out.elmo.float().square().mean()
        # The losses (the CRF's log-likelihood, the sampled softmax's cross entropy) are reduced in float32.
        assert loss.dtype == torch.float32 and torch.isfinite(loss), name
        loss.backward()
        # Every parameter the loss reaches gets a finite gradient (a pair head, unused on single sentences, none).
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert all(torch.isfinite(g).all() for g in grads), name
        base = model if name == "model" else model.base_model
        assert all(p.grad is not None for p in base.char_cnn.parameters()), name  # down to the characters
        # The biLM itself ran in the autocast dtype (the fix keeps it there rather than casting back to float32).
        if name == "model":
            assert out.last_hidden_state.dtype == dtype


@pytest.fixture(scope="module")
def demo():
    path = demo_model_path()
    return ElmoModel.from_pretrained(path).eval(), ElmoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_layers_stay_within_the_measured_cosine_of_float32(demo, dtype):
    model, tokenizer = demo
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        reference = model(**batch, output_hidden_states=True)
        with torch.autocast("cpu", dtype):
            mixed = model(**batch, output_hidden_states=True)
    pairs = list(zip(reference.hidden_states, mixed.hidden_states, strict=True)) + [(reference.elmo, mixed.elmo)]
    for k, (ref, out) in enumerate(pairs):
        assert out[~mask].abs().max() == 0  # padding stays exactly zero
        cosine = F.cosine_similarity(ref[mask].float(), out[mask].float(), dim=-1).min().item()
        assert cosine >= MIN_COSINE, (k, cosine)


def _token_dataset(tokenizer, rows: int = 8):
    from datasets import Dataset

    words = [s.split() for s in SENTENCES] * (rows // len(SENTENCES))
    features = [tokenizer(w, is_split_into_words=True) for w in words]
    return Dataset.from_list(
        [{**f, "labels": [k % 3 for k in range(len(w))]} for f, w in zip(features, words, strict=True)]
    )


def test_trainer_bf16_step_on_the_cpu(tmp_path, demo):
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    _, tokenizer = demo
    model = ElmoForTokenClassification.from_pretrained(demo_model_path(), num_labels=3, freeze_bilm=False)
    before = model.elmo.bilm.layers[0].state_kernel.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path), bf16=True, use_cpu=True, max_steps=1, per_device_train_batch_size=4,
        report_to=[], save_strategy="no", disable_tqdm=True, learning_rate=1e-3,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=_token_dataset(tokenizer),
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    result = trainer.train()
    assert result.global_step == 1 and torch.isfinite(torch.tensor(result.training_loss))
    assert not torch.equal(before, model.elmo.bilm.layers[0].state_kernel)  # the biLM trained under bf16


def test_accelerator_bf16_step(demo):
    accelerate = pytest.importorskip("accelerate")
    _, tokenizer = demo
    model = ElmoForSequenceClassification.from_pretrained(demo_model_path(), num_labels=2, freeze_bilm=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    accelerator = accelerate.Accelerator(mixed_precision="bf16", cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    before = model.classifier.weight.detach().clone()
    loss = model(**batch, labels=torch.tensor([0, 1, 0, 1])).loss
    accelerator.backward(loss)
    optimizer.step()
    assert torch.isfinite(loss) and not torch.equal(before, model.classifier.weight)


def _train_tagger(tmp_path: Path, bf16: bool) -> float:
    out = tmp_path / f"ner-bf16-{bf16}"
    argv = [
        sys.executable, "-m", "modeling_elmo.training.train_tagger", "--bilm", "demo",
        "--train_file", str(REPO / "docs/data/ner/train.txt"), "--eval_file", str(REPO / "docs/data/ner/dev.txt"),
        "--output_dir", str(out), "--num_train_epochs", "5", "--num_threads", "1", "--bf16", str(bf16).lower(),
        "--use_cpu", "true", "--disable_tqdm", "true", "--seed", "42",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["eval_f1"]


@pytest.mark.slow
def test_a_tagger_trained_in_bf16_reaches_the_float32_f1(tmp_path):
    """The docs' CoNLL sample (docs/training.md's first example, 5 epochs instead of 15, to keep it short): the dev
    F1 of a tagger trained under bf16 autocast is that of float32 within the noise between seeds."""
    pytest.importorskip("seqeval")
    f32, bf16 = _train_tagger(tmp_path, False), _train_tagger(tmp_path, True)
    assert f32 > 0.5 and abs(bf16 - f32) <= NOISE_F1, (f32, bf16)


# Measured (AMD EPYC, 1 thread, 5 epochs): float32 dev F1 0.611 (seed 42) and 0.722 (seed 7), a spread of 0.11 between
# seeds; bf16 0.568 and 0.701 with the same seeds (differences 0.04 and 0.02). The bound is the seed spread.
NOISE_F1 = 0.11
