"""Pairs of texts (issue 45): the biLM reads each text of a pair on its own (pairs_elmo.py, in ElmoModel.forward), and
ElmoForSequenceClassification's ESIM pair head (esim_elmo.py) classifies pairs, with the stock Trainer too.

A pair is given as one row, the first text's words then the second's, with ``token_type_ids`` 0 and 1; the helpers
below build them from word lists, as ``tokenizer(a, b)`` gives them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from helpers import BATCHING_ATOL, TINY
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments, pipeline

from modeling_elmo import ElmoConfig, ElmoForSequenceClassification, ElmoModel, ElmoTokenizer, demo_model_path
from modeling_elmo.pairs_elmo import merge_pairs, pair_layout, split_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [
    ("The cat sat on the mat .", "A dog barked loudly"),
    ("Paris is in France", "Where is Paris ?"),
    ("Hi", "there was a rather long second sentence here , indeed"),
    ("Only one text here", ""),
]


def encode_pairs(tokenizer, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """The batch ``tokenizer(a, b)`` gives: each row a's words then b's, ``token_type_ids`` 0 then 1, right-padded."""
    words = [(a.split(), b.split()) for a, b in pairs]
    batch = dict(tokenizer([a + b for a, b in words], is_split_into_words=True, padding=True, return_tensors="pt"))
    width = batch["input_ids"].shape[1]
    batch["token_type_ids"] = torch.tensor(
        [[0] * len(a) + [1] * len(b) + [0] * (width - len(a) - len(b)) for a, b in words]
    )
    return batch


def texts_of(pairs: list[tuple[str, str]]) -> list[list[str]]:
    """All texts of the pairs as single sentences: the first texts, then the second texts (the split's order)."""
    return [a.split() for a, _ in pairs] + [b.split() for _, b in pairs]


@pytest.fixture(scope="module")
def demo():
    path = demo_model_path()
    return ElmoTokenizer.from_pretrained(path), ElmoModel.from_pretrained(path).eval()


def test_split_and_merge_are_inverse_and_left_align():
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    types = torch.tensor([[0, 1, 1, 1, 7], [0, 0, 0, 1, 1], [0, 0, 0, 0, 0]])  # 7 at padding: ignored
    layout = pair_layout(types, mask)
    values = torch.arange(1, 16, dtype=torch.float).reshape(3, 5, 1) * mask.unsqueeze(-1)
    split = split_pairs(values, layout).squeeze(-1)
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [6, 7, 8, 0, 0], [11, 0, 0, 0, 0], [2, 3, 4, 0, 0], [9, 10, 0, 0, 0], [0, 0, 0, 0, 0]],
        dtype=torch.float,
    )
    assert torch.equal(split, expected)
    assert torch.equal(layout.split_mask, expected.ne(0))
    assert torch.equal(merge_pairs(split_pairs(values, layout), layout), values)


@pytest.mark.parametrize(
    ("types", "message"),
    [
        (torch.tensor([[0, 1, 0]]), "first text's words"),
        (torch.tensor([[0, 2, 2]]), "must be 0"),
        (torch.tensor([[0, 1]]), "like attention_mask"),
    ],
)
def test_bad_token_type_ids_are_refused(demo, types, message):
    tokenizer, model = demo
    batch = tokenizer(["a b c"], return_tensors="pt")
    with pytest.raises(ValueError, match=message):
        model(**batch, token_type_ids=types)


def test_pairs_refuse_carried_lstm_state(demo):
    tokenizer, model = demo
    batch = tokenizer(["a b c"], return_tensors="pt")
    with pytest.raises(ValueError, match="fresh LSTM states"):
        model(**batch, token_type_ids=torch.tensor([[0, 1, 1]]), return_lstm_state=True)


def test_each_text_of_a_pair_gets_the_vectors_it_gets_alone(demo):
    """Layers and mix of every word of a pair equal those of its text encoded as a single sentence: exactly (to
    1e-6) against the batch of all the texts as single sentences, which is the computation the split runs, and to
    the batching tolerance against each text encoded in a batch of its own."""
    tokenizer, model = demo
    batch = encode_pairs(tokenizer, PAIRS)
    singles = tokenizer(texts_of(PAIRS), is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        paired = model(**batch, output_hidden_states=True)
        joint = model(**{k: v for k, v in batch.items() if k != "token_type_ids"}, output_hidden_states=True)
        alone = model(**singles, output_hidden_states=True)
    n = len(PAIRS)
    worst_batch, worst_alone = 0.0, 0.0
    for row, (a, b) in enumerate(PAIRS):
        for text, (single_row, start) in enumerate(((row, 0), (n + row, len(a.split())))):
            length = len((a, b)[text].split())
            got = [layer[row, start : start + length] for layer in (*paired.hidden_states, paired.elmo)]
            ref = [layer[single_row, :length] for layer in (*alone.hidden_states, alone.elmo)]
            if length:
                worst_batch = max([worst_batch] + [float((x - y).abs().max()) for x, y in zip(got, ref, strict=True)])
            if length:
                one = tokenizer([(a, b)[text].split()], is_split_into_words=True, return_tensors="pt")
                with torch.no_grad():
                    solo = model(**one, output_hidden_states=True)
                own = [layer[0] for layer in (*solo.hidden_states, solo.elmo)]
                worst_alone = max([worst_alone] + [float((x - y).abs().max()) for x, y in zip(got, own, strict=True)])
    assert worst_batch <= 1e-6, worst_batch
    assert worst_alone <= BATCHING_ATOL, worst_alone
    # Without token_type_ids the biLM reads across the boundary: the second text's vectors change (the test can fail).
    assert float((joint.hidden_states[2] - paired.hidden_states[2]).abs().max()) > 1e-2
    assert torch.equal(paired.hidden_states[0], joint.hidden_states[0])  # layer 0 is context-free
    assert torch.equal(paired.mask, joint.mask)


def test_batch_normalised_mix_sees_the_same_words():
    """With ``scalar_mix_layer_norm="batch"`` the mix normalises by the statistics of all words of the batch, which
    are the same words whether they come as pairs or as the batch of their texts: equal to 1e-6 to the latter (a
    text in a batch of its own gets other statistics, as any batch-normalised mix does)."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY, scalar_mix_layer_norm="batch", elmo_dropout=0.0)).eval()
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.3, -0.2, 0.5]))
    tokenizer = ElmoTokenizer()
    batch = encode_pairs(tokenizer, PAIRS)
    singles = tokenizer(texts_of(PAIRS), is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        paired, alone = model(**batch).elmo, model(**singles).elmo
        first_alone = model(**tokenizer([PAIRS[0][0].split()], is_split_into_words=True, return_tensors="pt")).elmo
    n, worst = len(PAIRS), 0.0
    for row, (a, b) in enumerate(PAIRS):
        la, lb = len(a.split()), len(b.split())
        worst = max(worst, float((paired[row, :la] - alone[row, :la]).abs().max()))
        if lb:
            worst = max(worst, float((paired[row, la : la + lb] - alone[n + row, :lb]).abs().max()))
    assert worst <= 1e-6, worst
    assert float((first_alone[0] - paired[0, : len(PAIRS[0][0].split())]).abs().max()) > 1e-3


def test_single_sentences_are_unchanged_by_all_zero_token_type_ids(demo):
    tokenizer, model = demo
    batch = tokenizer(["the cat sat", "a dog barked at the postman"], padding=True, return_tensors="pt")
    zeros = torch.zeros(batch["attention_mask"].shape, dtype=torch.long)
    with torch.no_grad():
        plain, typed = (
            model(**batch, output_hidden_states=True),
            model(**batch, token_type_ids=zeros, output_hidden_states=True),
        )
    assert all(torch.equal(x, y) for x, y in zip(plain.hidden_states, typed.hidden_states, strict=True))
    assert torch.equal(plain.elmo, typed.elmo)


# ---------------------------------------------------------------------------------------------------------------
# The ESIM pair head of ElmoForSequenceClassification
# ---------------------------------------------------------------------------------------------------------------


def tiny_classifier(**kwargs) -> ElmoForSequenceClassification:
    settings = dict(TINY, classifier_hidden_size=8, classifier_dropout=0.0, elmo_dropout=0.0, num_labels=3)
    settings.update(kwargs)
    torch.manual_seed(0)
    return ElmoForSequenceClassification(ElmoConfig(**settings)).eval()


def test_single_sentence_head_is_unchanged_and_pairs_take_the_pair_head():
    model = tiny_classifier()
    tokenizer = ElmoTokenizer()
    batch = encode_pairs(tokenizer, PAIRS)
    joined = {k: v for k, v in batch.items() if k != "token_type_ids"}
    with torch.no_grad():
        single = model(**joined).logits
        zeros = model(**joined, token_type_ids=torch.zeros_like(batch["token_type_ids"])).logits
        paired = model(**batch).logits
        pair_alone = model(**{k: v[:1] for k, v in batch.items()}).logits
        changed_pair_head = paired.clone()
        model.pair_head.output.bias.add_(1.0)
        changed_pair_head = model(**batch).logits
    assert torch.equal(single, zeros)
    # The last row has no second text: the sentence head, exactly; the pair rows: the pair head.
    assert torch.equal(paired[3], single[3])
    assert float((paired[:3] - single[:3]).abs().max()) > 1e-3
    torch.testing.assert_close(pair_alone[0], paired[0], atol=BATCHING_ATOL, rtol=0)
    assert torch.allclose(changed_pair_head[:3], paired[:3] + 1.0, atol=1e-5)
    assert torch.equal(changed_pair_head[3], paired[3])


def test_pair_head_weights_are_optional_at_load(tmp_path):
    """A sentence classifier saved before the pair head existed loads silently and gives the same outputs."""
    model = tiny_classifier()
    model.save_pretrained(tmp_path / "new")
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("pair_head.")}
    old = ElmoForSequenceClassification.from_pretrained(None, config=model.config, state_dict=state)
    from safetensors.torch import save_file

    (tmp_path / "old").mkdir()
    model.config.save_pretrained(tmp_path / "old")
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "old" / "model.safetensors")
    loaded, info = ElmoForSequenceClassification.from_pretrained(tmp_path / "old", output_loading_info=True)
    assert not info["missing_keys"], info
    batch = ElmoTokenizer()(["a b c", "d e"], padding=True, return_tensors="pt")
    close = dict(atol=BATCHING_ATOL, rtol=0)  # a reloaded copy: the same weights, other prepacked products
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(**batch).logits, model(**batch).logits, **close)
        torch.testing.assert_close(old.eval()(**batch).logits, model(**batch).logits, **close)
    reloaded = ElmoForSequenceClassification.from_pretrained(tmp_path / "new").eval()
    pairs = encode_pairs(ElmoTokenizer(), PAIRS)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**pairs).logits, model(**pairs).logits, **close)


ENTITIES = ["Paris", "London", "Berlin", "Smith", "Jones", "Nokia", "Fiat", "Rome", "Oslo", "Brown"]
FILLER = ["the", "report", "said", "that", "on", "monday", "in", "a", "visit", "to", "was", "seen"]


def entity_pairs(n: int, seed: int) -> tuple[list[tuple[str, str]], list[int]]:
    """Pairs of filler sentences with one entity each: label 1 when the second names the first's entity."""
    rng = random.Random(seed)
    pairs, labels = [], []
    for _ in range(n):
        first, same = rng.choice(ENTITIES), rng.randrange(2)
        second = first if same else rng.choice([e for e in ENTITIES if e != first])
        texts = []
        for entity in (first, second):
            words = [rng.choice(FILLER) for _ in range(rng.randint(2, 5))]
            words.insert(rng.randint(0, len(words)), entity)
            texts.append(" ".join(words))
        pairs.append((texts[0], texts[1]))
        labels.append(same)
    return pairs, labels


class PairDataset(torch.utils.data.Dataset):
    def __init__(self, tokenizer, pairs, labels):
        self.items = []
        for (a, b), label in zip(pairs, labels, strict=True):
            enc = encode_pairs(tokenizer, [(a, b)])
            self.items.append({k: v[0] for k, v in enc.items()} | {"labels": label})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(items):
    width = max(len(item["input_ids"]) for item in items)

    def pad(x):
        return torch.nn.functional.pad(x, (0, 0) * (x.dim() - 1) + (0, width - x.shape[0]))

    batch = {
        k: torch.stack([pad(item[k]) for item in items]) for k in ("input_ids", "attention_mask", "token_type_ids")
    }
    return batch | {"labels": torch.tensor([item["labels"] for item in items])}


LABELS = {0: "contradiction", 1: "entailment"}  # "entailment" is the label zero-shot-classification looks for


@pytest.fixture(scope="module")
def trained_pair_folder(tmp_path_factory) -> Path:
    """The demo biLM with the pair head trained by the stock Trainer on "does the second sentence name the first's
    entity?" (1: entailment), saved with its tokenizer."""
    path = demo_model_path()
    tokenizer = ElmoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        path,
        id2label=LABELS,
        label2id={v: k for k, v in LABELS.items()},
        classifier_hidden_size=32,
        classifier_dropout=0.0,
        elmo_dropout=0.0,
    )
    folder = tmp_path_factory.mktemp("pairs")
    args = TrainingArguments(
        output_dir=str(folder / "run"),
        per_device_train_batch_size=16,
        num_train_epochs=6,
        learning_rate=3e-3,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
    )
    dataset = PairDataset(tokenizer, *entity_pairs(256, seed=1))
    Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate).train()
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return folder / "model"


@pytest.mark.slow  # the shared fixture trains the pair head for 96 steps
def test_trainer_learns_a_pair_task_with_the_demo_bilm(trained_pair_folder):
    """The pair head learns a question no single text answers; held-out accuracy after reloading the folder."""
    model = AutoModelForSequenceClassification.from_pretrained(trained_pair_folder).eval()
    tokenizer = ElmoTokenizer.from_pretrained(trained_pair_folder)
    test_pairs, test_labels = entity_pairs(64, seed=2)
    with torch.no_grad():
        logits = model(
            **tokenizer([a for a, _ in test_pairs], [b for _, b in test_pairs], padding=True, return_tensors="pt")
        ).logits
        by_hand = model(**encode_pairs(tokenizer, test_pairs)).logits
    torch.testing.assert_close(logits, by_hand)  # tokenizer(a, b) is the layout the tests build by hand
    accuracy = float((logits.argmax(-1) == torch.tensor(test_labels)).float().mean())
    assert accuracy >= 0.8, accuracy
    assert model.config.problem_type == "single_label_classification"


@pytest.mark.slow  # the shared fixture trains the pair head for 96 steps
def test_text_classification_pipeline_takes_text_pair(trained_pair_folder):
    classify = pipeline("text-classification", model=str(trained_pair_folder))
    test_pairs, test_labels = entity_pairs(16, seed=3)
    answers = classify([{"text": a, "text_pair": b} for a, b in test_pairs])
    model, tokenizer = classify.model, classify.tokenizer
    with torch.no_grad():
        expected = model(
            **tokenizer([a for a, _ in test_pairs], [b for _, b in test_pairs], padding=True, return_tensors="pt")
        ).logits
    assert [a["label"] for a in answers] == [LABELS[int(i)] for i in expected.argmax(-1)]
    assert all(0.5 <= a["score"] <= 1 for a in answers)
    assert sum(a["label"] == LABELS[t] for a, t in zip(answers, test_labels, strict=True)) >= 12


@pytest.mark.slow  # the shared fixture trains the pair head for 96 steps
def test_zero_shot_classification_on_the_entailment_folder(trained_pair_folder):
    """zero-shot-classification pairs the sequence with one hypothesis per candidate and ranks their entailment: the
    trained folder picks the entity the sequence names."""
    zero_shot = pipeline("zero-shot-classification", model=str(trained_pair_folder))
    right = 0
    for sequence, entity in [("the report said that Paris was seen", "Paris"), ("a visit to Oslo on monday", "Oslo")]:
        out = zero_shot(sequence, candidate_labels=["Berlin", entity, "Smith"], hypothesis_template="in {} said")
        assert sorted(out["labels"]) == sorted(["Berlin", entity, "Smith"])
        assert abs(sum(out["scores"]) - 1) < 1e-5
        right += out["labels"][0] == entity
    assert right == 2


def test_pair_regression_fits_scores():
    """num_labels=1 (STS-B's form): the pair head's loss is the MSE of its one output, and it fits 0/1 scores."""
    path = demo_model_path()
    tokenizer = ElmoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = ElmoForSequenceClassification.from_pretrained(
        path, num_labels=1, classifier_hidden_size=32, classifier_dropout=0.0, elmo_dropout=0.0
    )
    pairs, labels = entity_pairs(64, seed=1)
    batch, scores = encode_pairs(tokenizer, pairs), torch.tensor(labels, dtype=torch.float)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    first = None
    for _ in range(30):
        out = model(**batch, labels=scores)
        first = out.loss.detach() if first is None else first
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert model.config.problem_type == "regression"
    with torch.no_grad():
        out = model.eval()(**batch, labels=scores)
    torch.testing.assert_close(out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(-1), scores))
    assert out.logits.shape == (64, 1)
    assert float(out.loss) < 0.05 < float(first), (float(first), float(out.loss))
