"""Every head trains under DistributedDataParallel with gradient checkpointing (issue 49, item 1).

``Trainer`` under ``torchrun`` wraps the model in ``DistributedDataParallel``; with ``gradient_checkpointing=True`` it
sets ``find_unused_parameters=False`` (a checkpointed forward cannot be searched for unused parameters), so a
parameter that a valid batch leaves without a gradient stops training at the second step ("Expected to have finished
reduction in the prior iteration"). One launch of two processes (gloo, CPU) trains each head a few steps in turn:
the CRF tagger, the classifier on single sentences, the classifier on pairs, question answering and the LM head.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import TINY, run_two_processes

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed (gloo)")

# Runs in each of the two processes; argv: the output folder and the tiny biLM's settings (JSON). Inputs are random
# character ids of fixed width (every row full, so default_data_collator stacks them); each rank reads its own half.
SCRIPT = textwrap.dedent(
    r"""
    import json
    import os
    import sys

    import torch
    import torch.distributed as dist
    from transformers import Trainer, TrainingArguments

    from modeling_elmo import (
        ElmoConfig,
        ElmoForPreTraining,
        ElmoForQuestionAnswering,
        ElmoForSequenceClassification,
        ElmoForTokenClassification,
    )

    out, tiny = sys.argv[1], json.loads(sys.argv[2])
    ROWS, WORDS = 8, 5


    def rows(extra):
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(1, 262, (ROWS, WORDS, 50), generator=generator)
        types = (torch.arange(WORDS) >= 2).long()  # pairs: 2 words, then 3 words
        data = []
        for i in range(ROWS):
            row = {"input_ids": ids[i], "attention_mask": torch.ones(WORDS, dtype=torch.long)}
            data.append(row | extra(i, types, generator))
        return data


    HEADS = {
        "tagger_crf": (
            lambda: ElmoForTokenClassification(ElmoConfig(**tiny, num_labels=3, use_crf=True, tagger_num_layers=1)),
            lambda i, types, g: {"labels": torch.randint(0, 3, (WORDS,), generator=g)},
        ),
        "classifier_sentences": (
            lambda: ElmoForSequenceClassification(ElmoConfig(**tiny, num_labels=3)),
            lambda i, types, g: {"labels": torch.tensor(i % 3)},
        ),
        "classifier_pairs": (
            lambda: ElmoForSequenceClassification(ElmoConfig(**tiny, num_labels=3, classifier_head="pair")),
            lambda i, types, g: {"token_type_ids": types, "labels": torch.tensor(i % 3)},
        ),
        "question_answering": (
            lambda: ElmoForQuestionAnswering(ElmoConfig(**tiny)),
            lambda i, types, g: {"token_type_ids": types, "start_positions": torch.tensor(2 + i % 3),
                                 "end_positions": torch.tensor(4)},
        ),
        "pretraining": (
            lambda: ElmoForPreTraining(ElmoConfig(**tiny, lm_vocab_size=20, lm_num_samples=8)),
            lambda i, types, g: {"labels": torch.randint(0, 20, (WORDS,), generator=g)},
        ),
    }

    results = {}
    chosen = sys.argv[3].split(",") if len(sys.argv) > 3 else list(HEADS)
    for name, (build, extra) in ((name, HEADS[name]) for name in chosen):
        torch.manual_seed(0)
        model = build()
        before = {k: p.detach().clone() for k, p in model.named_parameters() if p.requires_grad}
        args = TrainingArguments(
            output_dir=os.path.join(out, name), per_device_train_batch_size=2, max_steps=3, learning_rate=1e-2,
            gradient_checkpointing=True, use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
            disable_tqdm=True, seed=0, dataloader_num_workers=0,
        )
        try:
            trainer = Trainer(model=model, args=args, train_dataset=rows(extra))
            trainer.train()
        except RuntimeError as error:
            results[name] = {"error": str(error).splitlines()[0][:300]}
            continue
        trained = trainer.accelerator.unwrap_model(trainer.model)
        distributed = type(trainer.model_wrapped).__name__
        # Every trainable weight moved, and the same way in both processes (DDP averaged the gradients).
        unchanged = [k for k, p in trained.named_parameters() if k in before and torch.equal(p, before[k])]
        total = torch.stack([p.detach().double().sum() for p in trained.parameters()]).sum().reshape(1)
        gathered = [torch.zeros_like(total) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, total)
        results[name] = {
            "steps": trainer.state.global_step, "wrapper": distributed, "unchanged": unchanged,
            "checkpointing": trained.is_gradient_checkpointing, "same": bool(gathered[0] == gathered[1]),
        }
    if dist.get_rank() == 0:
        with open(os.path.join(out, "results.json"), "w") as handle:
            json.dump(results, handle)
    dist.barrier()
    dist.destroy_process_group()
    """
)

EXPECTED_HEADS = ["tagger_crf", "classifier_sentences", "classifier_pairs", "question_answering", "pretraining"]


@pytest.mark.slow  # one launch of two processes that train five heads: about 40 s on 2 CPUs
def test_every_head_trains_under_ddp_with_gradient_checkpointing(tmp_path):
    script = tmp_path / "train_heads.py"
    script.write_text(SCRIPT)
    tiny = dict(TINY, classifier_hidden_size=8, tagger_hidden_size=8, elmo_dropout=0.0)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HOME": str(tmp_path / "hf")}
    done = run_two_processes([str(script), str(tmp_path), json.dumps(tiny)], cwd=tmp_path, env=env, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(Path(tmp_path / "results.json").read_text())
    assert list(results) == EXPECTED_HEADS
    problems = {
        name: result
        for name, result in results.items()
        if "error" in result
        or result["steps"] != 3
        or not result["checkpointing"]
        or result["wrapper"] != "DistributedDataParallel"
        or result["unchanged"]  # a trainable weight without a gradient
        or not result["same"]  # the two processes' weights differ
    }
    assert not problems, problems
