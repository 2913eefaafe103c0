"""Pairs of texts (issue 45): the biLM reads each text of a pair on its own (pairs_elmo.py, in ElmoModel.forward), and
ElmoForSequenceClassification's ESIM pair head (esim_elmo.py) classifies pairs, with the stock Trainer too.

A pair is given as one row, the first text's words then the second's, with ``token_type_ids`` 0 and 1; the helpers
below build them from word lists, as ``tokenizer(a, b)`` gives them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import BATCHING_ATOL, TINY
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments, pipeline
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

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
    """A tiny pair classifier (``classifier_head="pair"``), unless ``kwargs`` say otherwise."""
    settings = dict(TINY, classifier_hidden_size=8, classifier_dropout=0.0, elmo_dropout=0.0, num_labels=3)
    settings.update({"classifier_head": "pair"} | kwargs)
    torch.manual_seed(0)
    return ElmoForSequenceClassification(ElmoConfig(**settings)).eval()


def test_pair_head_logits_do_not_depend_on_the_batch_and_come_from_its_output_layer():
    model = tiny_classifier()
    batch = encode_pairs(ElmoTokenizer(), PAIRS[:3])
    with torch.no_grad():
        paired = model(**batch).logits
        alone = torch.cat([model(**{k: v[i : i + 1] for k, v in batch.items()}).logits for i in range(3)])
        model.pair_head.output.bias.add_(1.0)
        shifted = model(**batch).logits
    assert paired.shape == (3, 3)
    torch.testing.assert_close(alone, paired, atol=BATCHING_ATOL, rtol=0)
    torch.testing.assert_close(shifted, paired + 1.0, atol=1e-5, rtol=0)


def _save_folder(folder: Path, config: ElmoConfig, state: dict[str, torch.Tensor], with_head_field: bool) -> None:
    """A classifier folder as ``save_pretrained`` writes it; ``with_head_field=False``: as saved before
    ``classifier_head`` existed (the field absent from config.json)."""
    from safetensors.torch import save_file

    config.save_pretrained(folder)
    if not with_head_field:
        settings = json.loads((folder / "config.json").read_text())
        del settings["classifier_head"]
        (folder / "config.json").write_text(json.dumps(settings))
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "model.safetensors")


def _load(folder: Path, **kwargs) -> tuple[ElmoForSequenceClassification, dict, str]:
    """The model, its loading info and what the classifier's logger said while loading it."""
    logger = logging.get_logger("modeling_elmo.modeling_elmo_classification")
    with CaptureLogger(logger) as said:
        model, info = ElmoForSequenceClassification.from_pretrained(folder, output_loading_info=True, **kwargs)
    return model.eval(), info, said.out


def test_folders_saved_with_both_heads_load_either_head_with_a_message(tmp_path):
    """Classifiers saved before ``classifier_head`` hold both heads (``classifier.*`` and ``pair_head.*``): each loads,
    the sentence head by default, the pair head with ``classifier_head="pair"``, each with a warning that names what
    the folder holds and how to load the other, and the same logits as the model that held that head."""
    sentence, pair = tiny_classifier(classifier_head="sentence"), tiny_classifier()
    shared = {k: v for k, v in sentence.state_dict().items() if not k.startswith("classifier.")}
    assert pair.load_state_dict(shared, strict=False).missing_keys == [k for k in pair.state_dict() if k not in shared]
    state = sentence.state_dict() | {k: v for k, v in pair.state_dict().items() if k.startswith("pair_head.")}
    _save_folder(tmp_path, sentence.config, state, with_head_field=False)
    singles = ElmoTokenizer()(["a b c", "d e"], padding=True, return_tensors="pt")
    pairs = encode_pairs(ElmoTokenizer(), PAIRS[:3])
    close = dict(atol=BATCHING_ATOL, rtol=0)  # a reloaded copy: the same weights, other prepacked products
    loaded, info, said = _load(tmp_path)
    assert loaded.head == "sentence" and not hasattr(loaded, "pair_head")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert "holds two heads" in said and "classifier_head='pair'" in said, said
    with torch.no_grad():
        torch.testing.assert_close(loaded(**singles).logits, sentence(**singles).logits, **close)
    loaded, info, said = _load(tmp_path, classifier_head="pair")
    assert loaded.head == "pair" and not hasattr(loaded, "classifier")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert "holds two heads" in said and "loaded ESIM's pair head" in said and "'sentence'" in said, said
    with torch.no_grad():
        torch.testing.assert_close(loaded(**pairs).logits, pair(**pairs).logits, **close)
    loaded.save_pretrained(tmp_path / "pair-only")  # saving keeps the loaded head alone
    again, info, said = _load(tmp_path / "pair-only")
    assert again.head == "pair" and said == "" and not info["missing_keys"], (said, info)


def test_a_pair_head_without_weights_is_reported_and_warns_once_when_used_untrained(tmp_path):
    """A sentence classifier's folder (saved before the pair head existed: no field, no pair_head.*) loads silently as
    the sentence head. Loaded with ``classifier_head="pair"`` its pair head is new: transformers' report lists it,
    the classifier says so, and its first evaluation call warns (once) that the head is untrained; fine-tuning (a
    training-mode call) ends the warnings."""
    sentence = tiny_classifier(classifier_head="sentence")
    _save_folder(tmp_path, sentence.config, sentence.state_dict(), with_head_field=False)
    loaded, info, said = _load(tmp_path)
    assert loaded.head == "sentence" and said == "" and not info["missing_keys"], (said, info)
    loaded, info, said = _load(tmp_path, classifier_head="pair")
    assert sorted(info["missing_keys"]) == sorted(k for k in tiny_classifier().state_dict() if k.startswith("pair_"))
    assert "holds the sentence head (classifier.*) only" in said and "untrained" in said, said
    pairs = encode_pairs(ElmoTokenizer(), PAIRS[:3])
    logger = logging.get_logger("modeling_elmo.modeling_elmo_classification")
    with CaptureLogger(logger) as first, torch.no_grad():
        loaded(**pairs)
    with CaptureLogger(logger) as second, torch.no_grad():
        loaded(**pairs)
    assert "pair head of this classifier is untrained" in first.out and str(tmp_path) in first.out, first.out
    assert second.out == ""
    fresh = ElmoForSequenceClassification.from_pretrained(tmp_path / ".", classifier_head="pair")
    fresh.train()(**pairs, labels=torch.tensor([0, 1, 2])).loss.backward()  # a fine-tuning step begins
    with CaptureLogger(logger) as after, torch.no_grad():
        fresh.eval()(**pairs)
    assert after.out == "" and fresh.untrained_pair_head is None


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
        classifier_head="pair",
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
        path, num_labels=1, classifier_head="pair", classifier_hidden_size=32, classifier_dropout=0.0, elmo_dropout=0.0
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


def test_run_glue_calls_train_the_pair_head_from_a_config_folder(tmp_path):
    """run_glue.py's calls on a pair task, the pair head chosen as docs/training.md says: ``--config_name`` names a
    folder with the biLM's config and ``classifier_head="pair"``. ``AutoConfig`` from it with ``num_labels``, the model
    from the biLM folder with that config, ``tokenizer(sentence1, sentence2, truncation=True)``, ``Trainer`` with the
    tokenizer (``DataCollatorWithPadding``). Without the config folder the sentence head refuses the pairs by name."""
    from transformers import AutoConfig, AutoTokenizer

    bilm = demo_model_path()
    ElmoConfig.from_pretrained(bilm, classifier_head="pair").save_pretrained(tmp_path / "pair-config")
    pairs, labels = entity_pairs(8, seed=4)
    tokenizer = AutoTokenizer.from_pretrained(bilm)
    encoded = tokenizer([a for a, _ in pairs], [b for _, b in pairs], max_length=128, truncation=True)
    features = [{k: v[i] for k, v in encoded.items()} | {"label": labels[i]} for i in range(len(pairs))]
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4, use_cpu=True, report_to=[]
    )
    for config_name, refused in ((bilm, True), (tmp_path / "pair-config", False)):
        config = AutoConfig.from_pretrained(config_name, num_labels=2, finetuning_task=None)
        model = AutoModelForSequenceClassification.from_pretrained(bilm, config=config)
        trainer = Trainer(model=model, args=args, train_dataset=features, processing_class=tokenizer)
        if refused:
            with pytest.raises(ValueError, match="--config_name FOLDER of a config with classifier_head='pair'"):
                trainer.train()
            continue
        assert model.head == "pair"
        before = model.pair_head.output.weight.detach().clone()
        trainer.train()
        assert not torch.equal(before, model.pair_head.output.weight)
