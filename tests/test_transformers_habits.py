"""transformers users' habits on ELMo (issue 42): each case makes the same call on a tiny ELMo model and on a tiny
``BertConfig`` model (built from a config, nothing downloaded), and checks that ELMo answers as BERT does, or with
a clear refusal where the habit cannot apply to a character-level biLM.

Covered: ``Trainer.evaluate``/``predict`` give ``compute_metrics`` one logits array (``keys_to_ignore_at_inference``);
PEFT LoRA round trips for TOKEN_CLS, SEQ_CLS and FEATURE_EXTRACTION; ``resize_token_embeddings``; ``dummy_inputs``;
``labels=-100``; ``last_hidden_state``; the messages of ``pipeline("fill-mask")``, re-heading without
``ignore_mismatched_sizes``, ``output_attentions=True`` and ``zero-shot-classification``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from helpers import TINY_SIZES
from transformers import (
    AutoModelForMaskedLM,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    pipeline,
)

from modeling_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS = ["O", "B-X", "I-X"]
SENTENCES = [
    ["the", "cat", "sat"],
    ["a", "dog", "ran", "far", "away"],
    ["hello", "world"],
    ["the", "dog", "sat", "on", "a", "cat"],
    ["good"],
]
TAGS = [[0, 1, 2], [0, 1, 0, 0, 0], [1, 2], [0, 1, 2, 0, 0, 1], [0]]
WORDS = sorted({w for s in SENTENCES for w in s} | {"paris", "is", "of", "france", "love", "it", "bad"})
BERT_SIZES = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
LABEL_MAPS = dict(id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})


def elmo_config(**kwargs) -> ElmoConfig:
    settings = dict(TINY_SIZES, tagger_hidden_size=8, tagger_num_layers=1, classifier_hidden_size=8, lm_vocab_size=20)
    return ElmoConfig(**{**settings, **LABEL_MAPS, **kwargs})


def bert_tokenizer() -> BertTokenizer:
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return BertTokenizer(vocab={w: i for i, w in enumerate(special + WORDS)})


def bert_config(**kwargs) -> BertConfig:
    return BertConfig(vocab_size=len(bert_tokenizer()), **BERT_SIZES, **{**LABEL_MAPS, **kwargs})


def tokenizer_for(kind: str):
    return ElmoTokenizer() if kind == "elmo" else bert_tokenizer()


def build(kind: str, head: str, **kwargs):
    """A tiny random model of ``head`` ("token", "sequence", "base", "pretraining"), in eval mode."""
    torch.manual_seed(0)
    if kind == "elmo":
        classes = {
            "token": ElmoForTokenClassification,
            "sequence": ElmoForSequenceClassification,
            "base": ElmoModel,
            "pretraining": ElmoForPreTraining,
        }
        return classes[head](elmo_config(**kwargs)).eval()
    classes = {
        "token": BertForTokenClassification,
        "sequence": BertForSequenceClassification,
        "base": BertModel,
        "pretraining": BertForPreTraining,
    }
    return classes[head](bert_config(**kwargs)).eval()


def batch_of(kind: str, sentences=SENTENCES[:2]) -> dict[str, torch.Tensor]:
    return dict(tokenizer_for(kind)(sentences, is_split_into_words=True, padding=True, return_tensors="pt"))


def tagging_features(kind: str) -> Dataset:
    """Word-level tags, aligned to the tokens as run_ner does (first piece of a word; -100 elsewhere)."""
    tokenizer = tokenizer_for(kind)
    rows = []
    for words, tags in zip(SENTENCES, TAGS, strict=True):
        encoded = tokenizer(words, is_split_into_words=True)
        ids = encoded.word_ids()
        first = [i is not None and (k == 0 or ids[k - 1] != i) for k, i in enumerate(ids)]
        labels = [tags[i] if keep else -100 for i, keep in zip(ids, first, strict=True)]
        rows.append({**{k: encoded[k] for k in ("input_ids", "attention_mask")}, "labels": labels})
    return Dataset.from_list(rows)


def trainer_for(model, tmp_path, data_collator, compute_metrics=None, label_names=None) -> Trainer:
    args = TrainingArguments(
        label_names=label_names,
        output_dir=str(tmp_path / "out"),
        per_device_eval_batch_size=2,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    return Trainer(model=model, args=args, data_collator=data_collator, compute_metrics=compute_metrics)


# ---------------------------------------------------------------------------------------------------------------------
# Trainer: compute_metrics gets one logits array (config.keys_to_ignore_at_inference)
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bert", "elmo"])
def test_trainer_gives_the_tagger_metrics_one_logits_array(kind, tmp_path):
    """run_ner's compute_metrics: ``np.argmax(predictions, axis=2)`` then a zip with the labels, through evaluate()
    and predict(). The tagger also returns ``emissions``: without ``keys_to_ignore_at_inference`` the predictions
    were a tuple and run_ner crashed."""
    data = tagging_features(kind)
    seen = []

    def compute_metrics(prediction):
        seen.append(prediction.predictions)
        predicted = np.argmax(prediction.predictions, axis=2)
        gold = prediction.label_ids
        return {"accuracy": float(np.mean(predicted[gold != -100] == gold[gold != -100]))}

    model = build(kind, "token")
    trainer = trainer_for(model, tmp_path, DataCollatorForTokenClassification(tokenizer_for(kind)), compute_metrics)
    metrics = trainer.evaluate(data)
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0
    output = trainer.predict(data)
    assert isinstance(output.predictions, np.ndarray) and isinstance(seen[0], np.ndarray)
    assert output.predictions.shape[0] == len(data) and output.predictions.shape[2] == len(LABELS)
    # The predictions are the logits (for ELMo's CRF tagger: its max-marginals, whose argmax is the Viterbi path).
    first = batch_of(kind, SENTENCES[:2])
    with torch.no_grad():
        logits = model(**first).logits.numpy()
    np.testing.assert_allclose(output.predictions[:2, : logits.shape[1]], logits, atol=1e-6)
    if kind == "elmo":
        decoded = model.decode(model(**first).emissions, first["attention_mask"])
        best = np.argmax(logits, axis=2)
        assert [best[b, : len(tags)].tolist() for b, tags in enumerate(decoded)] == decoded


@pytest.mark.parametrize("kind", ["bert", "elmo"])
def test_trainer_gives_the_classifier_metrics_one_logits_array(kind, tmp_path):
    tokenizer = tokenizer_for(kind)
    rows = [{**tokenizer(" ".join(words)), "labels": i % 3} for i, words in enumerate(SENTENCES)]
    data = Dataset.from_list(rows)

    def compute_metrics(prediction):
        return {"accuracy": float(np.mean(np.argmax(prediction.predictions, axis=1) == prediction.label_ids))}

    trainer = trainer_for(build(kind, "sequence"), tmp_path, DataCollatorWithPadding(tokenizer), compute_metrics)
    assert 0.0 <= trainer.evaluate(data)["eval_accuracy"] <= 1.0
    predictions = trainer.predict(data).predictions
    assert isinstance(predictions, np.ndarray) and predictions.shape == (len(data), len(LABELS))


def test_trainer_predicts_elmo_models_mix(tmp_path):
    """ElmoModel in Trainer.predict: one array, the mix ``elmo`` (``outputs[0]``), padded across batches; its other
    fields (the mixes, the mask, the top layer) would make a tuple, and the mixes (B, M, W, 2P) of batches of
    different lengths cannot even be concatenated."""
    tokenizer = ElmoTokenizer()
    data = Dataset.from_list([dict(tokenizer(words, is_split_into_words=True)) for words in SENTENCES])
    model = build("elmo", "base")
    predictions = trainer_for(model, tmp_path, DataCollatorWithPadding(tokenizer)).predict(data).predictions
    assert isinstance(predictions, np.ndarray)
    assert predictions.shape == (len(SENTENCES), max(map(len, SENTENCES)), model.config.hidden_size)
    with torch.no_grad():
        expected = model(**batch_of("elmo", SENTENCES[2:4])).elmo.numpy()
    np.testing.assert_allclose(predictions[2:4, : expected.shape[1]], expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["bert", "elmo"])
def test_trainer_evaluates_the_language_model_head(kind, tmp_path):
    """Trainer.evaluate/predict on the LM head with labels, over several batches: the loss, as for BertForMaskedLM.
    ElmoForPreTraining's per-direction batch losses are left out of the predictions (they were a tuple of scalars)."""
    tokenizer = tokenizer_for(kind)
    rows = []
    for words in SENTENCES:
        encoded = tokenizer(words, is_split_into_words=True)
        length = len(encoded["input_ids"])
        rows.append({**encoded, "labels": [(3 * k + 1) % 20 for k in range(length)]})
    if kind == "elmo":
        model = build("elmo", "pretraining")
    else:
        torch.manual_seed(0)
        model = BertForMaskedLM(bert_config()).eval()
    # Trainer takes every forward argument named *label* for a label; ElmoForPreTraining also has boundary_labels
    # and backward_labels (stream training): name the one a batch holds, as docs/transformers-integration.md says.
    trainer = trainer_for(model, tmp_path, DataCollatorForTokenClassification(tokenizer), label_names=["labels"])
    data = Dataset.from_list(rows)
    assert np.isfinite(trainer.evaluate(data)["eval_loss"])
    output = trainer.predict(data)
    assert np.isfinite(output.metrics["test_loss"])
    if kind == "bert":
        assert isinstance(output.predictions, np.ndarray)
    else:  # with labels the LM head computes no logits (return_logits), and its scalar losses are not predictions
        assert output.predictions == ()


# ---------------------------------------------------------------------------------------------------------------------
# labels=-100, last_hidden_state, dummy_inputs, output_attentions
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bert", "elmo"])
@pytest.mark.parametrize("head", ["sequence", "token"])
def test_labels_of_minus_100_are_left_out_of_the_loss(kind, head):
    """-100 marks what has no label: the loss is the cross-entropy of the others, in every head."""
    model = build(kind, head, use_crf=False) if kind == "elmo" and head == "token" else build(kind, head)
    batch = batch_of(kind)
    with torch.no_grad():
        logits = model(**batch).logits
    if head == "sequence":
        labels = torch.tensor([2, -100])
    else:
        labels = torch.full(logits.shape[:2], -100)
        labels[0, 1], labels[1, 2] = 1, 2
    with torch.no_grad():
        loss = model(**batch, labels=labels).loss
    keep = labels.ne(-100)
    expected = F.cross_entropy(logits[keep], labels[keep])
    torch.testing.assert_close(loss, expected, atol=1e-6, rtol=1e-6)


def test_crf_tagger_and_language_model_also_leave_minus_100_out():
    """The CRF tagger takes -100 after a sentence's labelled words, and the LM head -100 anywhere."""
    batch = batch_of("elmo")
    tagger = build("elmo", "token")
    labels = torch.tensor([[0, 1, -100, -100, -100], [0, 1, 0, -100, -100]])
    assert torch.isfinite(tagger(**batch, labels=labels).loss)
    lm = build("elmo", "pretraining")
    words = torch.tensor([[3, 4, 5, -100, -100], [6, 7, 8, 9, 10]])  # row 0: padding after 3 words
    _, counts = lm.sentence_losses(**batch, labels=words)
    words[1, 2] = -100  # a middle word: one target fewer in each direction
    sums, fewer = lm.sentence_losses(**batch, labels=words)
    assert fewer[1].tolist() == (counts[1] - 1).tolist() and bool(torch.isfinite(sums).all())


def test_last_hidden_state_is_the_top_layer_and_outputs_0_stays_the_mix():
    model = build("elmo", "base")
    batch = batch_of("elmo")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        plain = model(**batch)
        as_tuple = model(**batch, return_dict=False)
    assert out.last_hidden_state.shape == (2, 5, model.config.hidden_size)
    torch.testing.assert_close(out.last_hidden_state, out.hidden_states[-1], rtol=0, atol=0)
    torch.testing.assert_close(plain.last_hidden_state, out.hidden_states[-1], rtol=0, atol=0)  # without asking
    assert out[0] is out.elmo and as_tuple[0].shape == out.elmo.shape
    torch.testing.assert_close(as_tuple[-1], out.last_hidden_state, rtol=0, atol=0)  # last in the tuple form
    bert = build("bert", "base")
    assert bert(**batch_of("bert")).last_hidden_state.shape[-1] == bert.config.hidden_size  # the same name


@pytest.mark.parametrize("kind", ["bert", "elmo"])
@pytest.mark.parametrize("head", ["base", "token", "sequence", "pretraining"])
def test_dummy_inputs_run_through_the_model(kind, head):
    model = build(kind, head)
    inputs = model.dummy_inputs
    if kind == "elmo":
        assert inputs["input_ids"].ndim == 3 and inputs["input_ids"].shape[-1] == model.config.max_characters_per_token
    with torch.no_grad():
        model(**inputs)


def test_dummy_inputs_of_a_manylangs_model_with_a_word_input():
    config = elmo_config(char_vocabulary="manylangs", n_characters=20, word_vocab_size=5, word_embedding_dim=3)
    model = ElmoModel(config).eval()
    inputs = model.dummy_inputs
    assert set(inputs) == {"input_ids", "vocab_ids"} and int(inputs["input_ids"].max()) < 20
    with torch.no_grad():
        assert model(**inputs).elmo.shape[:2] == inputs["vocab_ids"].shape


@pytest.mark.parametrize("head", ["base", "token", "sequence", "pretraining"])
def test_output_attentions_is_refused_by_name(head):
    """BERT returns attention weights; ELMo has none: a ValueError that names output_hidden_states (never a bare
    TypeError), and output_attentions=False/None, as generic code passes them, are accepted."""
    batch = batch_of("bert")
    assert build("bert", head)(**batch, output_attentions=True).attentions is not None
    model = build("elmo", head)
    batch = batch_of("elmo")
    with pytest.raises(ValueError, match="output_hidden_states"):
        model(**batch, output_attentions=True)
    with torch.no_grad():
        model(**batch, output_attentions=False, inputs_embeds=None, position_ids=None, head_mask=None)


# ---------------------------------------------------------------------------------------------------------------------
# resize_token_embeddings
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["base", "token", "sequence", "pretraining"])
def test_resize_token_embeddings_is_refused_and_the_character_table_stays(head, tmp_path):
    """``resize_token_embeddings(len(tokenizer))`` after adding tokens grows BERT's word embedding; ELMo's input
    embedding is its 262-row character table, which holds no words: a ValueError saying why, the table untouched,
    and the model still runs on the added token and saves a folder that loads. It used to grow the table silently."""
    bert, bert_tok = build("bert", head), bert_tokenizer()
    bert_tok.add_tokens(["<ent>"])
    assert bert.resize_token_embeddings() is bert.get_input_embeddings()
    bert.resize_token_embeddings(len(bert_tok))
    assert bert.get_input_embeddings().weight.shape[0] == len(bert_tok)

    model, tokenizer = build("elmo", head), ElmoTokenizer()
    tokenizer.add_tokens(["<ent>"])
    table = model.get_input_embeddings().weight.detach().clone()
    assert model.resize_token_embeddings() is model.get_input_embeddings()  # no size: the getter, as in transformers
    assert model.resize_token_embeddings(table.shape[0]) is model.get_input_embeddings()
    for size in (len(tokenizer), 10):
        with pytest.raises(ValueError, match="character table.*added tokens need no new rows") as error:
            model.resize_token_embeddings(size)
        if head == "pretraining":
            assert "lm_vocab_size" in str(error.value) and "ignore_mismatched_sizes=True" in str(error.value)
    with pytest.raises(ValueError, match="character table"):
        model.resize_token_embeddings(pad_to_multiple_of=64)
    assert torch.equal(model.get_input_embeddings().weight, table)
    with torch.no_grad():
        model(**tokenizer(["hi <ent> there"], return_tensors="pt"))
    model.save_pretrained(tmp_path / "saved")
    type(model).from_pretrained(tmp_path / "saved")


def test_lm_head_output_embeddings_get_and_set_as_bert():
    """get_output_embeddings/set_output_embeddings round trip (BertForPreTraining's too); ELMo's softmax is checked
    against lm_vocab_size. It used to raise AttributeError about lm_head."""
    bert = build("bert", "pretraining")
    bert.set_output_embeddings(bert.get_output_embeddings())
    model = build("elmo", "pretraining")
    softmax = model.get_output_embeddings()
    assert tuple(softmax.weight.shape) == (20, model.config.projection_dim)
    model.set_output_embeddings(softmax)
    assert model.softmax is softmax
    with pytest.raises(ValueError, match="lm_vocab_size=V, ignore_mismatched_sizes=True"):
        model.set_output_embeddings(torch.nn.Linear(model.config.projection_dim, 30))


def test_lm_head_loads_a_new_vocabulary_as_the_refusal_says(tmp_path):
    model = build("elmo", "pretraining")
    model.save_pretrained(tmp_path / "lm")
    again = ElmoForPreTraining.from_pretrained(tmp_path / "lm", lm_vocab_size=30, ignore_mismatched_sizes=True)
    assert again.get_output_embeddings().weight.shape[0] == 30
    torch.testing.assert_close(again.elmo.char_cnn.projection.weight, model.elmo.char_cnn.projection.weight)


# ---------------------------------------------------------------------------------------------------------------------
# Messages that name the fix
# ---------------------------------------------------------------------------------------------------------------------


def test_stock_fill_mask_names_the_elmo_fill_mask_task(tmp_path):
    """BERT fills [MASK] in the stock task; for an ELMo folder the error names "elmo-fill-mask" (it said only
    "Unrecognized configuration class ... AutoModelForMaskedLM")."""
    torch.manual_seed(0)
    filler = pipeline("fill-mask", model=BertForMaskedLM(bert_config()).eval(), tokenizer=bert_tokenizer())
    assert len(filler("paris is the [MASK] of france", top_k=2)) == 2
    build("elmo", "pretraining").save_pretrained(tmp_path / "lm")
    ElmoTokenizer().save_pretrained(tmp_path / "lm")
    with pytest.raises(ValueError, match="elmo-fill-mask"):
        pipeline("fill-mask", model=str(tmp_path / "lm"))
    with pytest.raises(ValueError, match="pipeline\\('elmo-fill-mask', model=FOLDER\\)"):
        AutoModelForMaskedLM.from_pretrained(tmp_path / "lm")


@pytest.mark.parametrize("kind", ["bert", "elmo"])
def test_reheading_a_trained_tagger_names_ignore_mismatched_sizes(kind, tmp_path):
    """Another num_labels on a saved tagger: both errors name ignore_mismatched_sizes=True, which then works."""
    model = build(kind, "token")
    model.save_pretrained(tmp_path / "tagger")
    cls = type(model)
    with pytest.raises((ValueError, RuntimeError), match="ignore_mismatched_sizes"):
        cls.from_pretrained(tmp_path / "tagger", num_labels=5)
    again = cls.from_pretrained(tmp_path / "tagger", num_labels=5, ignore_mismatched_sizes=True)
    assert again.classifier.weight.shape[0] == 5


def test_a_mismatched_bilm_does_not_suggest_ignore_mismatched_sizes(tmp_path):
    """ignore_mismatched_sizes=True would start biLM weights anew, i.e. a random biLM: not offered for those."""
    build("elmo", "base").save_pretrained(tmp_path / "bilm")
    with pytest.raises(ValueError, match="do not fit the config") as error:
        ElmoModel.from_pretrained(tmp_path / "bilm", projection_dim=12)
    assert "ignore_mismatched_sizes" not in str(error.value)


@pytest.mark.parametrize("kind", ["bert", "elmo"])
def test_zero_shot_classification_runs_on_a_classifier_folder(kind, tmp_path):
    """zero-shot-classification gives the tokenizer pairs of texts; it used to fail on ELMo blaming
    is_split_into_words. Both now rank the candidate labels (an untrained NLI head: any order)."""
    nli = {"id2label": {0: "entailment", 1: "neutral", 2: "contradiction"}}
    nli["label2id"] = {v: k for k, v in nli["id2label"].items()}
    model = build(kind, "sequence", **nli, **({"classifier_head": "pair"} if kind == "elmo" else {}))
    model.save_pretrained(tmp_path / "nli")
    tokenizer_for(kind).save_pretrained(tmp_path / "nli")
    classifier = pipeline("zero-shot-classification", model=str(tmp_path / "nli"))
    result = classifier("i love it", candidate_labels=["good", "bad"])
    assert sorted(result["labels"]) == ["bad", "good"] and abs(sum(result["scores"]) - 1) < 1e-5


# ---------------------------------------------------------------------------------------------------------------------
# PEFT (LoRA) round trips
# ---------------------------------------------------------------------------------------------------------------------

# What docs/training.md recommends: LoRA on the character CNN's Linears (the biLM's LSTM kernels are raw parameters,
# no nn.Linear), the head's new parts trained in full (PEFT adds "classifier" itself for TOKEN_CLS and SEQ_CLS).
LORA = {
    ("elmo", "token"): dict(target_modules=["carry", "transform", "projection"], modules_to_save=["encoder", "crf"]),
    ("elmo", "sequence"): dict(target_modules=["carry", "transform", "projection"], modules_to_save=["encoder"]),
    ("elmo", "base"): dict(target_modules=["carry", "transform", "projection"]),
    ("bert", "token"): dict(target_modules=["query", "value"]),
    ("bert", "sequence"): dict(target_modules=["query", "value"]),
    ("bert", "base"): dict(target_modules=["query", "value"]),
}
TASKS = {"token": "TOKEN_CLS", "sequence": "SEQ_CLS", "base": "FEATURE_EXTRACTION"}


def _output(model, batch, head) -> torch.Tensor:
    out = model(**batch)
    if head == "base":
        return out.elmo if hasattr(out, "elmo") else out.last_hidden_state
    return out.logits


@pytest.mark.parametrize("kind", ["bert", "elmo"])
@pytest.mark.parametrize("head", ["token", "sequence", "base"])
def test_peft_lora_trains_saves_and_reloads(kind, head, tmp_path):
    """get_peft_model with each task type: a few steps change the output; the saved adapter on a fresh base model
    gives the trained output again. ELMo's forward used to refuse PEFT's inputs_embeds keyword (TypeError)."""
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model

    base = build(kind, head)
    base.save_pretrained(tmp_path / "base")
    cls, batch = type(base), batch_of(kind)
    with torch.no_grad():
        before = _output(base, batch, head).clone()
    lora = LoraConfig(task_type=getattr(TaskType, TASKS[head]), r=4, lora_alpha=8, **LORA[kind, head])
    model = get_peft_model(base, lora)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert any("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    optimizer = torch.optim.AdamW(trainable, lr=1e-2)
    labels = {"token": torch.tensor([[0, 1, 2, -100, -100], [0, 1, 0, 0, 0]]), "sequence": torch.tensor([0, 2])}
    model.train()
    for _ in range(3):
        if head == "base":
            loss = _output(model, batch, head).pow(2).mean()
        else:
            token_labels = labels[head] if kind == "elmo" or head == "sequence" else None
            if token_labels is None:  # BERT's pieces: [CLS] w... [SEP]
                token_labels = torch.full(batch["input_ids"].shape, -100)
                token_labels[:, 1:3] = 1
            loss = model(**batch, labels=token_labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        trained = _output(model, batch, head).clone()
    # The smallest change measured (ELMo's mix after 3 steps) is 3e-4; float32 noise between two runs is < 1e-6.
    assert (trained - before).abs().max() > 1e-5
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(cls.from_pretrained(tmp_path / "base"), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(_output(reloaded, batch, head), trained, atol=1e-6, rtol=1e-6)
