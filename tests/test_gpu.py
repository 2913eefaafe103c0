"""CUDA checks (issue 43), under the ``cuda`` marker: each skips, with the reason, where no CUDA GPU is visible.

Run them on a GPU machine with ``python -m pytest tests/test_gpu.py -m cuda``. They have not run yet: no GPU was
available when they were written (see docs/speed.md). Tolerances are the CPU's, measured there; a GPU that misses
them needs a measured figure, not a wider guess."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import BATCHING_ATOL

from modeling_elmo import ElmoForTokenClassification, ElmoModel, ElmoTokenizer, demo_model_path

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

SENTENCES = ["The quick brown fox jumps over the lazy dog .", "Peter Blackburn", "EU rejects German call ."]
MIN_COSINE = 0.999  # as tests/test_autocast.py (measured there on the CPU: 0.99997 in bfloat16)


@pytest.fixture
def no_tf32():
    """float32 means float32: TF32 products off for the test, restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def demo():
    path = demo_model_path()
    return ElmoModel.from_pretrained(path).eval().cuda(), ElmoTokenizer.from_pretrained(path)


def test_float32_without_tf32_matches_the_tensorflow_fixture(converted_fixture, fixture_dir, no_tf32):
    from test_modeling import PARITY, fixture_batches

    model = ElmoModel.from_pretrained(converted_fixture, stateful=True).eval().cuda()
    tokenizer = ElmoTokenizer.from_pretrained(converted_fixture)
    worst = 0.0
    for batch, targets in fixture_batches(fixture_dir):
        enc = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt").to("cuda")
        with torch.no_grad():
            top = model(**enc, output_hidden_states=True).hidden_states[-1].cpu()
        for k, target in enumerate(targets):
            worst = max(worst, float(np.abs(top[k, : len(target)].numpy() - target).max()))
    assert worst <= PARITY, f"max abs difference to the TensorFlow outputs on CUDA: {worst:.2e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_stays_within_the_cosine_bound_of_float32(demo, dtype, no_tf32):
    model, tokenizer = demo
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt").to("cuda")
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        reference = model(**batch, output_hidden_states=True).hidden_states
        with torch.autocast("cuda", dtype):
            mixed = model(**batch, output_hidden_states=True).hidden_states
    for k, (ref, out) in enumerate(zip(reference, mixed, strict=True)):
        cosine = F.cosine_similarity(ref[mask].float(), out[mask].float(), dim=-1).min().item()
        assert cosine >= MIN_COSINE, (k, cosine)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_equals_eager(demo, mode, no_tf32):
    """The graph path compiled with inductor (Triton kernels), and with CUDA graphs: within 1e-5 of eager."""
    model, tokenizer = demo
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    for sentences in (SENTENCES, SENTENCES[:2] * 3):
        batch = tokenizer(sentences, padding=True, return_tensors="pt").to("cuda")
        with torch.no_grad():
            for _ in range(3):  # CUDA graphs record on a later call than the first
                got = compiled(**batch, output_hidden_states=True).hidden_states
            want = model(**batch, output_hidden_states=True).hidden_states
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, atol=BATCHING_ATOL, rtol=0)


def test_trainer_bf16_step(tmp_path, demo):
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    _, tokenizer = demo
    model = ElmoForTokenClassification.from_pretrained(demo_model_path(), num_labels=3, freeze_bilm=False)
    words = [s.split() for s in SENTENCES] * 4
    rows = [{**tokenizer(w, is_split_into_words=True), "labels": [k % 3 for k in range(len(w))]} for w in words]
    args = TrainingArguments(
        output_dir=str(tmp_path), bf16=True, max_steps=1, per_device_train_batch_size=4, report_to=[],
        save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    result = trainer.train()
    assert next(model.parameters()).device.type == "cuda"
    assert result.global_step == 1 and np.isfinite(result.training_loss)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_the_recurrence_operators_on_cuda_equal_the_cpu(mode, no_tf32):
    """The custom operators' CUDA implementations (every step of the padded batch, no host read: compiled_ops_elmo)
    inside a compiled CRF tagger with a 2-layer task BiLSTM and a trained biLM: logits and gradients as the CPU
    eager model's."""
    from helpers import TINY

    from modeling_elmo import ElmoConfig

    torch.manual_seed(0)
    config = ElmoConfig(**TINY, num_labels=3, use_crf=True, freeze_bilm=False, elmo_dropout=0.0, tagger_dropout=0.0)
    cpu = ElmoForTokenClassification(config).train()
    gpu = ElmoForTokenClassification(config).cuda().train()
    gpu.load_state_dict(cpu.state_dict())
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([6, 3, 1, 5])
    mask = (torch.arange(6) < lengths.unsqueeze(1)).long()
    ids = torch.randint(1, 262, (4, 6, 50), generator=generator) * mask.unsqueeze(-1)
    labels = torch.randint(0, 3, (4, 6), generator=generator).masked_fill(mask == 0, -100)
    compiled = torch.compile(gpu, mode=mode)
    for _ in range(3):  # CUDA graphs record on a later call than the first
        gpu.zero_grad()
        out = compiled(input_ids=ids.cuda(), attention_mask=mask.cuda(), labels=labels.cuda())
        out.loss.backward()
    ref = cpu(input_ids=ids, attention_mask=mask, labels=labels)
    ref.loss.backward()
    torch.testing.assert_close(out.logits.cpu(), ref.logits, atol=BATCHING_ATOL, rtol=0)
    for (name, p), q in zip(gpu.named_parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5 * max(1.0, q.grad.abs().max()), msg=name)
