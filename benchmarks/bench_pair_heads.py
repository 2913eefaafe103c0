"""Do the pair heads learn, and does ELMo help them? Two tasks built from CoNLL-2003, each head trained four ways.

- ``qa``: ``ElmoForQuestionAnswering`` on "Which person is mentioned ?" over sentences with exactly one person
  (``B-PER``/``I-PER``) and at least one other entity (a capitalised distractor), the person's words as the answer
  span (a character span of the context); scored with SQuAD's exact match and token F1 through the
  ``elmo-question-answering`` pipeline.
- ``pairs``: ``ElmoForSequenceClassification``'s ESIM pair head on "does the second sentence name an entity that the
  first names?" (pairs of sentences with entities; half share an entity string, half share none); accuracy and the
  positive class's F1.

Each variant is the same head (same class and sizes) trained for the same number of steps, with the same data and
optimiser, and scored at several step counts; only what the head reads differs:

- ``elmo``: the demo biLM (frozen), its scalar mix trained;
- ``noelmo``: the head without ELMo, as the paper's baselines (their task models read word vectors): the base model
  is replaced by [`WordEmbeddingBase`], a trainable word embedding over the training texts' words (cased; every
  word seen in training has a row, every other word shares one UNK row), as wide as the mix
  (``config.hidden_size``), initialised at random; no biLM, no character CNN;
- ``layer0``: the same head with the mix fixed on layer 0, the biLM's context-free character-CNN word vectors
  (the other layers' weights are 0): the head without ELMo's context that still reads every word's characters
  through the pretrained character CNN, so that the difference is what the biLM's context adds (as
  ``bench_ner.py``'s ``layer0_only``);
- ``random``: the same head on a biLM of the same shape with its initial random weights, frozen: the head without
  any pretraining (it still reads characters, through a random character CNN).

Each variant runs once per seed of ``--seeds``: the seed sets the head's initialisation (and the ``noelmo``
embedding's), dropout, and the order of the training batches (the training set is reshuffled every epoch); the
examples themselves are the same for every seed (``--data_seed`` draws the pairs). Training sentences come from
``train.txt``, evaluation sentences from ``dev.txt`` (held out). Prints a Markdown table of the mean and standard
deviation over seeds (and writes ``results.json``, with every seed's figures, into ``--output_dir``)::

    OMP_NUM_THREADS=1 python benchmarks/bench_pair_heads.py --tasks qa --output_dir /tmp/ph_qa
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import string
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, pipeline

from modeling_elmo import ElmoForQuestionAnswering, ElmoForSequenceClassification, ElmoTokenizer, demo_model_path
from modeling_elmo.modeling_elmo import ElmoModelOutput
from modeling_elmo.training.tagging_data import read_conll

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ELMO_SHARED_DIR", REPO.parent / "shared")) / "data" / "conll2003"
QUESTION = "Which person is mentioned ?"
VARIANTS = ("elmo", "noelmo", "layer0", "random")
LABELS = {"elmo": "ELMo", "noelmo": "no ELMo (word emb.)", "layer0": "layer 0 only", "random": "random biLM"}
TEXTS = {"qa": ("question", "context"), "pairs": ("text", "text_pair")}  # the two texts of an example, in order
PAD_ROW, UNK_ROW = 0, 1  # rows of WordEmbeddingBase's embedding


def entities(words: list[str], tags: list[str]) -> list[tuple[str, int, int]]:
    """The ``(type, first, last)`` word spans of a sentence's BIO (or IO) tags."""
    spans, start = [], None
    for i, tag in enumerate([*tags, "O"]):
        if start is not None and not (tag.startswith("I-") and tag[2:] == tags[start][2:]):
            spans.append((tags[start][2:], start, i - 1))
            start = None
        if tag.startswith("B-") or (tag.startswith("I-") and start is None):
            start = i
    return spans


def qa_examples(path: Path, limit: int, max_words: int) -> list[dict]:
    """SQuAD-style examples: contexts with exactly one person and at least one other named entity (a place, an
    organisation...: a capitalised distractor, so that spelling alone does not find the person), ``answer_start``
    in characters."""
    examples = []
    for words, tags in zip(*read_conll(path), strict=True):
        spans = entities(words, tags)
        people = [span for span in spans if span[0] == "PER"]
        if len(people) != 1 or len(spans) < 2 or len(words) > max_words:
            continue
        _, first, last = people[0]
        context = " ".join(words)
        start = len(" ".join(words[:first])) + (1 if first else 0)
        answer = " ".join(words[first : last + 1])
        assert context[start : start + len(answer)] == answer
        examples.append({"question": QUESTION, "context": context, "answer": answer, "answer_start": start})
        if len(examples) == limit:
            break
    return examples


def pair_examples(path: Path, limit: int, seed: int, max_words: int) -> list[dict]:
    """Balanced pairs of sentences with entities: label 1 when they share an entity string, else 0."""
    rng = random.Random(seed)
    sentences = []
    for words, tags in zip(*read_conll(path), strict=True):
        names = {" ".join(words[a : b + 1]) for _, a, b in entities(words, tags)}
        if names and len(words) <= max_words:
            sentences.append((" ".join(words), names))
    by_name: dict[str, list[int]] = {}
    for i, (_, names) in enumerate(sentences):
        for name in sorted(names):  # sets iterate in a per-process hash order: sorted, the pairs are reproducible
            by_name.setdefault(name, []).append(i)
    shared = [ids for ids in by_name.values() if len(ids) > 1]
    examples = []
    while len(examples) < limit:
        if len(examples) % 2 == 0:
            i, j = rng.sample(rng.choice(shared), 2)
        else:
            i, j = rng.randrange(len(sentences)), rng.randrange(len(sentences))
            if sentences[i][1] & sentences[j][1]:
                continue
        label = int(bool(sentences[i][1] & sentences[j][1]))
        examples.append({"text": sentences[i][0], "text_pair": sentences[j][0], "label": label})
    return examples


def normalize(text: str) -> list[str]:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles; the words."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def exact_and_f1(prediction: str, truth: str) -> tuple[float, float]:
    predicted, expected = normalize(prediction), normalize(truth)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not predicted or not expected:
        return float(predicted == expected), float(predicted == expected)
    if common == 0:
        return 0.0, 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return float(predicted == expected), 2 * precision * recall / (precision + recall)


def row_words(tokenizer, input_ids: torch.Tensor) -> list[list[str]]:
    """The words of ``(B, W, C)`` character ids, as the tokenizer decodes each row (``<pad>`` at padding)."""
    return [tokenizer.convert_ids_to_tokens(row) for row in input_ids.tolist()]


def word_vocabulary(tokenizer, texts: list[str]) -> dict[str, int]:
    """Rows of the ``noelmo`` embedding: every word of ``texts`` (cased, as the tokenizer gives it) gets its own row,
    from 2 on, in order of first appearance (0 is padding, 1 is UNK)."""
    vocab: dict[str, int] = {}
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    for words, mask in zip(row_words(tokenizer, encoded["input_ids"]), encoded["attention_mask"].tolist(), strict=True):
        for word, is_word in zip(words, mask, strict=True):
            if is_word:  # not the padding rows (their decoded word is the pad token)
                vocab.setdefault(word, len(vocab) + 2)
    return vocab


class WordEmbeddingBase(nn.Module):
    """The ``noelmo`` variant's base model, in place of the head's ``ElmoModel`` (``model.elmo``): each word's row of
    a trainable embedding, no biLM, no characters.

    It takes what the heads pass their base and returns the fields they read from [`ElmoModelOutput`]: ``elmo``
    ``(B, W, D)`` (D = ``config.hidden_size``, the mix's width) and ``mask`` ``(B, W)``. The vectors are context-free,
    so each word of a pair's row gets its vector at its own position, as the real base puts each text's vectors back
    at their positions; the head then splits the texts by ``token_type_ids`` as it does for ELMo.

    Args:
        tokenizer: the [`ElmoTokenizer`] whose character ids the head is given (rows are decoded back to words).
        vocab: word -> row (from 2; [`word_vocabulary`]).
        width: ``D``.
    """

    def __init__(self, tokenizer, vocab: dict[str, int], width: int):
        super().__init__()
        self.tokenizer, self.vocab = tokenizer, vocab
        # N(0, 1), torch's default: per dimension about the demo ELMo mix's spread (its std is 1.04).
        self.embedding = nn.Embedding(len(vocab) + 2, width, padding_idx=PAD_ROW)

    def rows(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, W)`` embedding rows of ``(B, W, C)`` character ids: the word's row, UNK for a word not seen in
        training, the padding row where ``mask`` ``(B, W)`` bool is False."""
        rows = [[self.vocab.get(word, UNK_ROW) for word in words] for words in row_words(self.tokenizer, input_ids)]
        rows = torch.tensor(rows, dtype=torch.long, device=input_ids.device).reshape(mask.shape)
        return rows.masked_fill(~mask, PAD_ROW)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=None, **unused):
        if any(value is not None for key, value in unused.items() if key != "return_dict"):
            raise ValueError(f"WordEmbeddingBase reads input_ids only, got {sorted(unused)}")
        mask = input_ids.ne(0).any(dim=-1) if attention_mask is None else attention_mask.bool()
        vectors = self.embedding(self.rows(input_ids, mask))  # (B, W, D), zero at padding
        return ElmoModelOutput(elmo=vectors, mask=mask.long(), last_hidden_state=vectors)

    def mix_l2_penalty(self) -> torch.Tensor:
        """No scalar mix: no penalty (the heads add this to their loss)."""
        return torch.zeros((), device=self.embedding.weight.device)

    def get_input_embeddings(self) -> nn.Module:
        return self.embedding


def fix_mix_on_layer0(model) -> None:
    """The ``layer0`` variant: the scalar mix's weights all on layer 0, frozen (softmax of ``[0, -1e4, ...]``:
    exactly 0 elsewhere)."""
    mix = model.elmo.scalar_mixes[0]
    with torch.no_grad():
        mix.scalar_parameters.fill_(-1e4)  # exp(-1e4) is 0 in float32; -inf would make the L2 penalty NaN
        mix.scalar_parameters[0] = 0.0
    mix.scalar_parameters.requires_grad_(False)


def build(head, variant: str, args, tokenizer, vocab: dict[str, int], **settings):
    """The head on the demo biLM (``elmo``), on a word embedding over ``vocab`` instead of the biLM (``noelmo``),
    with its mix fixed on layer 0 (``layer0``), or on a biLM of the same shape with its initial random weights
    (``random``), frozen as the others."""
    settings |= dict(classifier_hidden_size=args.hidden, classifier_dropout=0.1, elmo_dropout=0.0)
    if variant == "random":
        return head(AutoConfig.from_pretrained(args.bilm, **settings))
    model = head.from_pretrained(args.bilm, **settings)
    if variant == "layer0":
        fix_mix_on_layer0(model)
    if variant == "noelmo":
        model.elmo = WordEmbeddingBase(tokenizer, vocab, model.config.hidden_size)
    return model


def shuffled_chunks(examples: list[dict], batch_size: int, steps: int, seed: int) -> list[list[dict]]:
    """``steps`` batches of ``examples``: epoch after epoch, each in its own order drawn from ``seed`` (the last
    batch of an epoch may be smaller)."""
    rng, chunks = random.Random(seed), []
    while len(chunks) < steps:
        order = rng.sample(examples, len(examples))
        chunks += [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return chunks[:steps]


def train(model, batches, checkpoints: list[int], learning_rate: float, evaluate) -> list[dict]:
    """Adam steps over ``batches`` (cycled); at each step count of ``checkpoints`` the scores ``evaluate(model)``
    gives (in eval mode), with the training seconds so far and the step count."""
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    results, seconds = [], 0.0
    for step in range(max(checkpoints)):
        began = time.perf_counter()
        model.train()
        loss = model(**batches[step % len(batches)]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seconds += time.perf_counter() - began
        if step + 1 in checkpoints:
            with torch.no_grad():
                results.append(evaluate(model.eval()) | {"steps": step + 1, "train_seconds": seconds})
    return results


def qa_batches(tokenizer, chunks: list[list[dict]]) -> list[dict]:
    batches = []
    for chunk in chunks:
        encoded = tokenizer(
            [e["question"] for e in chunk],
            [e["context"] for e in chunk],
            padding=True,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        starts, ends = [], []
        for row, example in enumerate(chunk):  # the answer's first and last word, from the character offsets
            first, last = example["answer_start"], example["answer_start"] + len(example["answer"])
            words = [
                w
                for w, (s, e) in enumerate(encoded["offset_mapping"][row].tolist())
                if encoded.sequence_ids(row)[w] == 1 and s >= first and e <= last and e > s
            ]
            starts.append(words[0])
            ends.append(words[-1])
        encoded.pop("offset_mapping")
        batches.append(dict(encoded) | {"start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)})
    return batches


def pair_batches(tokenizer, chunks: list[list[dict]]) -> list[dict]:
    batches = []
    for chunk in chunks:
        encoded = tokenizer(
            [e["text"] for e in chunk], [e["text_pair"] for e in chunk], padding=True, return_tensors="pt"
        )
        batches.append(dict(encoded) | {"labels": torch.tensor([e["label"] for e in chunk])})
    return batches


def run_qa(variant: str, seed: int, args, tokenizer, vocab, train_set, test_set) -> list[dict]:
    torch.manual_seed(seed)
    model = build(ElmoForQuestionAnswering, variant, args, tokenizer, vocab)

    def evaluate(model) -> dict:
        qa = pipeline("elmo-question-answering", model=model, tokenizer=tokenizer)
        scores = [
            exact_and_f1(qa(question=e["question"], context=e["context"])["answer"], e["answer"]) for e in test_set
        ]
        return {
            "exact_match": 100 * sum(s[0] for s in scores) / len(scores),
            "f1": 100 * sum(s[1] for s in scores) / len(scores),
        }

    batches = qa_batches(tokenizer, shuffled_chunks(train_set, args.batch_size, max(args.eval_steps), seed))
    return train(model, batches, args.eval_steps, args.learning_rate, evaluate)


def run_pairs(variant: str, seed: int, args, tokenizer, vocab, train_set, test_set) -> list[dict]:
    torch.manual_seed(seed)
    model = build(ElmoForSequenceClassification, variant, args, tokenizer, vocab, num_labels=2, classifier_head="pair")
    truth = [e["label"] for e in test_set]

    def evaluate(model) -> dict:
        classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
        answers = classify([{"text": e["text"], "text_pair": e["text_pair"]} for e in test_set])
        predicted = [int(out["label"] == model.config.id2label[1]) for out in answers]
        hits = sum(p == t for p, t in zip(predicted, truth, strict=True))
        true_positives = sum(p and t for p, t in zip(predicted, truth, strict=True))
        return {
            "exact_match": 100 * hits / len(truth),  # accuracy: the exact match of a label
            "f1": 100 * 2 * true_positives / max(sum(predicted) + sum(truth), 1),  # F1 of the positive class
        }

    batches = pair_batches(tokenizer, shuffled_chunks(train_set, args.batch_size, max(args.eval_steps), seed))
    return train(model, batches, args.eval_steps, args.learning_rate, evaluate)


def check_vocabulary(tokenizer, vocab: dict[str, int], example: dict, task: str) -> None:
    """The ``noelmo`` rows of a training pair, encoded as the heads get it, are its words' rows, in row order."""
    first, second = (example[key] for key in TEXTS[task])
    encoded = tokenizer(first, second, return_tensors="pt")
    base = WordEmbeddingBase(tokenizer, vocab, 1)
    rows = base.rows(encoded["input_ids"], encoded["attention_mask"].bool())[0].tolist()
    assert rows == [vocab[word] for word in tokenizer.tokenize(first) + tokenizer.tokenize(second)], rows


def summarise(runs: list[dict]) -> list[dict]:
    """Mean and standard deviation (over seeds; the sample's, n - 1) of each task, variant and step count."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["task"], run["variant"], run["steps"]), []).append(run)
    summary = []
    for (task, variant, steps), group in groups.items():
        row = {"task": task, "variant": variant, "steps": steps, "seeds": [run["seed"] for run in group]}
        for key in ("exact_match", "f1", "train_seconds"):
            values = [run[key] for run in group]
            row[key] = statistics.mean(values)
            row[f"{key}_sd"] = statistics.stdev(values) if len(values) > 1 else 0.0
        summary.append(row)
    return summary


def spread(row: dict, key: str) -> str:
    """A table cell: ``mean ± sd`` of a summary row's ``key``."""
    return f"{row[key]:.1f} ± {row[key + '_sd']:.1f}"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bilm", default=str(demo_model_path()), help="an ElmoModel folder (default: the demo biLM)")
    parser.add_argument("--tasks", default="qa,pairs")
    parser.add_argument(
        "--eval_steps", default="25,50,100,150", help="step counts at which the variants are scored (comma-separated)"
    )
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=32, help="classifier_hidden_size of both heads")
    parser.add_argument("--train_examples", type=int, default=2400)
    parser.add_argument("--test_examples", type=int, default=400)
    parser.add_argument("--max_words", type=int, default=25, help="the longest sentence used (words)")
    parser.add_argument(
        "--seeds", default="0,1,2", help="one run per seed (comma-separated): initialisation, dropout, batch order"
    )
    parser.add_argument("--data_seed", type=int, default=0, help="draws the pair task's examples (the same each run)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"a subset of {','.join(VARIANTS)}")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: a busy shared machine thrashes with 2)"
    )
    parser.add_argument("--output_dir", default=None)
    args = parser.parse_args(argv)
    args.eval_steps = sorted({int(n) for n in args.eval_steps.split(",")})
    seeds = [int(n) for n in args.seeds.split(",")]
    variants = args.variants.split(",")
    tasks = args.tasks.split(",")
    if unknown := sorted(set(variants) - set(VARIANTS)):
        parser.error(f"unknown variants {unknown}: choose from {', '.join(VARIANTS)}")
    if unknown := sorted(set(tasks) - set(TEXTS)):
        parser.error(f"unknown tasks {unknown}: qa or pairs")
    if not DATA.is_dir():
        sys.exit(f"{DATA} not found: set ELMO_SHARED_DIR to the folder that holds data/conll2003")
    torch.set_num_threads(args.threads)
    tokenizer = ElmoTokenizer.from_pretrained(args.bilm)
    runs, began = [], time.perf_counter()
    for task in tasks:
        if task == "qa":
            data = (
                qa_examples(DATA / "train.txt", args.train_examples, args.max_words),
                qa_examples(DATA / "dev.txt", args.test_examples, args.max_words),
            )
            runner = run_qa
        else:
            data = (
                pair_examples(DATA / "train.txt", args.train_examples, args.data_seed, args.max_words),
                pair_examples(DATA / "dev.txt", args.test_examples, args.data_seed + 1, args.max_words),
            )
            runner = run_pairs
        vocab = word_vocabulary(tokenizer, [example[key] for example in data[0] for key in TEXTS[task]])
        check_vocabulary(tokenizer, vocab, data[0][0], task)
        for variant in variants:
            for seed in seeds:
                for result in runner(variant, seed, args, tokenizer, vocab, *data):
                    runs.append(
                        {"task": task, "variant": variant, "seed": seed, "train": len(data[0]), "test": len(data[1])}
                        | result
                    )
                    print(json.dumps(runs[-1]), flush=True)
    summary = summarise(runs)
    minutes = (time.perf_counter() - began) / 60
    print(f"\nbatches of {args.batch_size}; scored on held-out dev sentences; mean ± sd over seeds {seeds}\n")
    print("| task | steps | " + " | ".join(f"{LABELS[v]}: EM / acc. | F1" for v in variants) + " |")
    print("|---|---|" + "---|---|" * len(variants))
    for task in tasks:
        for steps in args.eval_steps:
            row = {r["variant"]: r for r in summary if r["task"] == task and r["steps"] == steps}
            cells = " | ".join(f"{spread(row[v], 'exact_match')} | {spread(row[v], 'f1')}" for v in variants)
            print(f"| {task} | {steps} | {cells} |")
    print(f"\n{minutes:.1f} min in all")
    if args.output_dir:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        report = {"args": vars(args), "minutes": minutes, "summary": summary, "runs": runs}
        (Path(args.output_dir) / "results.json").write_text(json.dumps(report, indent=2))
    return runs


if __name__ == "__main__":
    main()
