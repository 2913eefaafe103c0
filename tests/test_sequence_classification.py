"""Tests of the ELMo sentence classifier (ElmoForSequenceClassification, issue 18 item 4) on tiny made-up data:
Trainer fine-tuning, problem types, the frozen biLM, the Auto class, the text-classification pipeline and remote
code in a fresh process without the package."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import BATCHING_ATOL, TINY
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    TextClassificationPipeline,
    Trainer,
    TrainingArguments,
    pipeline,
)

from modeling_elmo import ElmoConfig, ElmoForSequenceClassification, ElmoModel, ElmoTokenizer
from modeling_elmo.hub.remote_code import save_with_remote_code
from modeling_elmo.modeling_elmo_classification import pool_words

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
LABELS = ["negative", "positive"]
FILLER = ["the", "film", "was", "a", "story", "of", "two", "people", "in", "town", "and", "it", "felt"]
CUE = {"negative": "dull", "positive": "great"}


def make_corpus(n: int, seed: int) -> tuple[list[str], list[int]]:
    """Sentences of filler words with one cue word ("great" or "dull") somewhere; the label is the cue's."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        label = rng.randrange(2)
        words = [rng.choice(FILLER) for _ in range(rng.randint(2, 7))]
        words.insert(rng.randint(0, len(words)), CUE[LABELS[label]])
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def tiny_config(**kwargs) -> ElmoConfig:
    settings = dict(
        TINY,
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        classifier_hidden_size=8,
        classifier_dropout=0.0,
        elmo_dropout=0.0,
    )
    settings.update(kwargs)
    return ElmoConfig(**settings)


def accuracy(model, tokenizer, texts: list[str], labels: list[int]) -> float:
    model.eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(dim=-1)
    return float((predicted == torch.tensor(labels)).float().mean())


def bilm_state(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.elmo.state_dict().items() if k.startswith(("char_cnn.", "bilm."))}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A classifier before and after Trainer fine-tuning on the cue-word task, and its saved folder."""
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer()
    # TINY with twice its width (character CNN 64 channels, projection 16): its random word vectors tell the cue
    # words apart from the filler well enough to learn the task in 240 steps, from any seed tried (0, 1, 2).
    wider = dict(char_cnn_filters=[[1, 16], [2, 16], [3, 32]], projection_dim=16, lstm_dim=32)
    model = ElmoForSequenceClassification(tiny_config(scalar_mix_l2_coef=0.01, **wider))
    texts, labels = make_corpus(192, seed=0)
    features = [{**tokenizer(text), "labels": label} for text, label in zip(texts, labels, strict=True)]
    test_texts, test_labels = make_corpus(100, seed=1)
    before = {"accuracy": accuracy(model, tokenizer, test_texts, test_labels), "bilm": bilm_state(model)}
    before["mix"] = model.elmo.scalar_mixes[0].scalar_parameters.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path_factory.mktemp("trainer")),
        per_device_train_batch_size=16,
        learning_rate=2e-2,
        lr_scheduler_type="constant",
        num_train_epochs=20,  # 240 steps: from seeds 0, 1 and 2 (120 steps failed seed 2)
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        logging_strategy="no",
        seed=0,
    )
    Trainer(model=model, args=args, train_dataset=features, data_collator=DataCollatorWithPadding(tokenizer)).train()
    folder = tmp_path_factory.mktemp("classifier") / "classifier"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "model": model.eval(),
        "tokenizer": tokenizer,
        "folder": folder,
        "before": before,
        "accuracy": accuracy(model, tokenizer, test_texts, test_labels),
        "test": (test_texts, test_labels),
    }


# ---------------------------------------------------------------- training


def test_trainer_learns_the_cue_word_task(trained):
    """Held-out accuracy well above chance (0.5) after a few seconds of Trainer fine-tuning."""
    assert trained["before"]["accuracy"] < 0.7
    assert trained["accuracy"] >= 0.85, trained["accuracy"]


def test_frozen_bilm_does_not_change_but_the_mix_does(trained):
    model = trained["model"]
    after = bilm_state(model)
    assert all(torch.equal(trained["before"]["bilm"][k], after[k]) for k in after)
    assert not torch.equal(trained["before"]["mix"], model.elmo.scalar_mixes[0].scalar_parameters)
    assert model.config.problem_type == "single_label_classification"  # recorded by the first labelled batch


@pytest.mark.parametrize("head", ["sentence", "pair"])
def test_requires_grad_alone_decides_what_trains(head):
    """Every weight the model holds but the frozen biLM gets a gradient from one valid batch (single sentences for the
    sentence head, pairs for the pair head): none is left unused, as DistributedDataParallel with gradient
    checkpointing needs (tests/test_ddp_heads.py); the model holds its one head only."""
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(classifier_head=head))
    assert hasattr(model, "classifier") == (head == "sentence") and hasattr(model, "pair_head") == (head == "pair")
    bilm = [p for module in (model.elmo.char_cnn, model.elmo.bilm) for p in module.parameters()]
    tokenizer = ElmoTokenizer()
    if head == "sentence":
        batch = tokenizer(["a great film", "dull"], padding=True, return_tensors="pt")
    else:
        batch = tokenizer(["a great film", "dull"], ["it was", "a story"], padding=True, return_tensors="pt")
    model(**batch, labels=torch.tensor([1, 0])).loss.backward()
    assert all(p.grad is None for p in bilm)
    head_parameters = [(n, p) for n, p in model.named_parameters() if not n.startswith(("elmo.char", "elmo.bilm"))]
    assert [n for n, p in head_parameters if p.grad is None] == []
    model.zero_grad(set_to_none=True)
    model.freeze_bilm(False)
    model(**batch, labels=torch.tensor([1, 0])).loss.backward()
    assert all(p.grad is not None for p in bilm)
    assert model.config.freeze_bilm  # only requires_grad changed


def test_each_head_refuses_the_other_kind_of_input_by_name():
    """The sentence head takes all-zero token_type_ids (single sentences) and refuses a second text; the pair head
    refuses rows without a second text and a batch without token_type_ids. Each error names the fix."""
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer()
    sentence = ElmoForSequenceClassification(tiny_config()).eval()
    single = tokenizer(["a great film", "dull"], padding=True, return_tensors="pt")
    pairs = tokenizer(["a great film", "dull"], ["it was", "a story"], padding=True, return_tensors="pt")
    zeros = torch.zeros_like(single["attention_mask"])
    with torch.no_grad():
        torch.testing.assert_close(sentence(**single, token_type_ids=zeros).logits, sentence(**single).logits)
        with pytest.raises(ValueError, match=r"classifier_head='pair'.*\(rows \[0, 1\]\)"):
            sentence(**pairs)
    pair = ElmoForSequenceClassification(tiny_config(classifier_head="pair")).eval()
    with torch.no_grad():
        assert pair(**pairs).logits.shape == (2, 2)
        with pytest.raises(ValueError, match="give token_type_ids marking the second text"):
            pair(**single)
        with pytest.raises(ValueError, match=r"a row has no second text.*classifier_head='sentence'.*\(rows \[1\]\)"):
            pair(**tokenizer(["a great film", "dull"], ["it was", ""], padding=True, return_tensors="pt"))
    with pytest.raises(TypeError, match="classifier_head must be one of 'sentence', 'pair', got str 'pairs'"):
        tiny_config(classifier_head="pairs")


def test_save_reload_same_logits_frozen_again(trained, tmp_path):
    model, tokenizer = trained["model"], trained["tokenizer"]
    batch = tokenizer(trained["test"][0][:5], padding=True, return_tensors="pt")
    loaded = AutoModelForSequenceClassification.from_pretrained(trained["folder"]).eval()
    assert isinstance(loaded, ElmoForSequenceClassification)
    assert not any(p.requires_grad for p in loaded.elmo.bilm.parameters())
    assert loaded.classifier.weight.requires_grad
    with torch.no_grad():  # the reloaded model is not bitwise the trained one here: 7.2e-7 seen
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, atol=BATCHING_ATOL, rtol=0)
    config = json.loads((trained["folder"] / "config.json").read_text())
    assert "auto_map" not in config and "custom_pipelines" not in config  # a plain folder (issue 27)
    assert not [f for f in os.listdir(trained["folder"]) if f.endswith(".py")]


def test_a_bilm_folder_loads_into_the_classifier_and_sizes_must_fit(tiny_dir, tmp_path):
    """A plain ElmoModel folder gives the classifier its biLM (the head is new); a classifier saved with other
    labels is a named error unless ignore_mismatched_sizes=True, as transformers' common test expects."""
    base = ElmoModel.from_pretrained(tiny_dir)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_dir, num_labels=3)
    assert isinstance(model, ElmoForSequenceClassification) and model.classifier.out_features == 3
    for key, value in base.state_dict().items():
        if key.startswith(("char_cnn.", "bilm.")):
            assert torch.equal(model.elmo.state_dict()[key], value), key
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"classifier\.weight: checkpoint \(3, 1200\), config \(5, 1200\)"):
        ElmoForSequenceClassification.from_pretrained(tmp_path, num_labels=5)
    wider = ElmoForSequenceClassification.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert wider.classifier.out_features == 5


# ---------------------------------------------------------------- problem types


@pytest.mark.parametrize(
    ("num_labels", "labels", "expected_type"),
    [
        (1, torch.tensor([0.5, -1.0, 2.0]), "regression"),
        (3, torch.tensor([2, 0, 1]), "single_label_classification"),
        (3, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "multi_label_classification"),
    ],
)
def test_problem_types_losses_as_transformers(num_labels, labels, expected_type):
    """problem_type None: decided from num_labels and the labels' dtype, and recorded (as BERT does); the loss is
    MSE, cross-entropy or BCE-with-logits on the logits, plus the mix's L2 penalty."""
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(num_labels=num_labels, scalar_mix_l2_coef=0.1)).eval()
    with torch.no_grad():
        model.elmo.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.5, -1.0, 1.0]))
    batch = ElmoTokenizer()(["a great film", "dull", "it felt dull and long ."], padding=True, return_tensors="pt")
    assert model.config.problem_type is None
    out = model(**batch, labels=labels)
    assert model.config.problem_type == expected_type
    logits = out.logits
    assert logits.shape == (3, num_labels)
    expected = {
        "regression": lambda: F.mse_loss(logits.squeeze(-1), labels),
        "single_label_classification": lambda: F.cross_entropy(logits, labels),
        "multi_label_classification": lambda: F.binary_cross_entropy_with_logits(logits, labels),
    }[expected_type]() + 0.1 * (0.25 + 1.0 + 1.0)
    torch.testing.assert_close(out.loss, expected)
    # A problem type set in the config is used as it is: integer 0/1 targets for multi-label become floats.
    model.config.problem_type = "multi_label_classification" if num_labels > 1 else "regression"
    if num_labels > 1:
        targets = torch.tensor([[1, 0, 1], [0, 0, 0], [0, 1, 0]])
        loss = model(**batch, labels=targets).loss
        torch.testing.assert_close(loss, F.binary_cross_entropy_with_logits(logits, targets.float()) + 0.225)


def test_label_errors_name_the_problem():
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(num_labels=3, problem_type="single_label_classification"))
    batch = ElmoTokenizer()(["a great film", "dull"], padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\), got \[0, 3\]"):
        model(**batch, labels=torch.tensor([3, 0]))
    with pytest.raises(ValueError, match=r"must be \(2,\) integer class ids, got \(2, 3\)"):
        model(**batch, labels=torch.zeros(2, 3, dtype=torch.long))
    model.config.problem_type = "multi_label_classification"
    with pytest.raises(ValueError, match=r"must be \(2, 3\) targets in \[0, 1\], got \(2,\)"):
        model(**batch, labels=torch.tensor([1.0, 0.0]))
    model.config.problem_type = "regression"
    with pytest.raises(ValueError, match=r"one number per output: shape \(2,\) or \(2, 3\) for num_labels=3"):
        model(**batch, labels=torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="stateless biLM"):
        ElmoForSequenceClassification(tiny_config(stateful=True))


@pytest.mark.slow  # a compile of the classifier: about 12 s on 2 CPUs
@pytest.mark.parametrize("head", ["pair"])
def test_a_compiled_labelled_call_records_the_problem_type(head):
    """problem_type None: one torch.compile'd labelled call records it in the config, as an eager call does (it used
    to be lost: torch drops a config change made after the recurrences' scan in the graph), with the eager loss."""
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(classifier_head=head)).eval()
    tokenizer = ElmoTokenizer()
    if head == "sentence":
        batch = tokenizer(["a great film", "it felt dull"], padding=True, return_tensors="pt")
    else:
        batch = tokenizer(["a great film", "dull"], ["it was", "a story"], padding=True, return_tensors="pt")
    labels = torch.tensor([1, 0])
    assert model.config.problem_type is None
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        loss = compiled(**batch, labels=labels).loss
    assert model.config.problem_type == "single_label_classification"
    model.config.problem_type = None
    with torch.no_grad():
        torch.testing.assert_close(loss, model(**batch, labels=labels).loss, atol=BATCHING_ATOL, rtol=0)
    assert model.config.problem_type == "single_label_classification"


# ---------------------------------------------------------------- pooling and padding


@pytest.mark.parametrize("pooling", ["max_mean", "max", "mean"])
def test_pooling_and_padding_independence(pooling):
    """``pool_words`` is the max/mean over each sentence's words (0 without words); a sentence's logits do not depend
    on the batch it is in or on its padding."""
    states = torch.randn(3, 4, 2)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    pooled = pool_words(states, mask, pooling)
    for b, n in enumerate(mask.sum(dim=1).tolist()):
        words = states[b, :n]
        parts = {"max": words.amax(0) if n else torch.zeros(2), "mean": words.mean(0) if n else torch.zeros(2)}
        expected = torch.cat([parts["max"], parts["mean"]]) if pooling == "max_mean" else parts[pooling]
        torch.testing.assert_close(pooled[b], expected)

    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(classifier_pooling=pooling, num_labels=3)).eval()
    assert model.classifier.in_features == (32 if pooling == "max_mean" else 16)
    tokenizer = ElmoTokenizer()
    texts = ["it felt dull and long , the story of two people .", "great", "a film"]
    with torch.no_grad():
        together = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
        alone = torch.cat([model(**tokenizer([t], return_tensors="pt")).logits for t in texts])
    torch.testing.assert_close(together, alone, atol=BATCHING_ATOL, rtol=0)


def test_config_fields_are_validated_and_counted():
    with pytest.raises(ValueError, match="classifier_hidden_size must be a positive integer, got 0"):
        tiny_config(classifier_hidden_size=0)
    with pytest.raises(ValueError, match="classifier_hidden_size must be at most 8192"):
        tiny_config(classifier_hidden_size=8193)
    with pytest.raises(ValueError, match=r"classifier_dropout must be in \[0, 1\), got 1.0"):
        tiny_config(classifier_dropout=1.0)
    with pytest.raises(TypeError, match="classifier_pooling must be one of 'max_mean', 'max', 'mean', got str 'sum'"):
        tiny_config(classifier_pooling="sum")
    for pooling, head in (("max_mean", "sentence"), ("mean", "sentence"), ("max_mean", "pair")):
        config = tiny_config(classifier_hidden_size=5, classifier_pooling=pooling, num_labels=4, classifier_head=head)
        counts = config.parameter_counts()
        bilm = sum(v for k, v in counts.items() if not k.startswith(("lm_", "tagger_", "num_labels", "classifier_")))
        head = sum(v for k, v in counts.items() if k.startswith("classifier_"))
        model = ElmoForSequenceClassification(config)
        assert sum(p.numel() for n, p in model.named_parameters() if "scalar_mix" not in n) == bilm + head


# ---------------------------------------------------------------- pipeline


def test_text_classification_pipeline_labels_and_scores(trained):
    """Raw text in, ``{"label", "score"}`` out, the scores the model's softmax, also batched (the collation pads
    the ids with the <pad> word's id, 10003 for this vocabulary: not a character id) and with ``top_k=None``."""
    folder = trained["folder"]
    classify = pipeline("text-classification", model=str(folder))  # the stock pipeline, no remote code
    assert type(classify) is TextClassificationPipeline
    texts = ["the film was great", "it felt dull and the story of two people in town was long"]
    results = classify(texts, batch_size=2)
    assert [r["label"] for r in results] == ["positive", "negative"]
    model, tokenizer = trained["model"], trained["tokenizer"]
    with torch.no_grad():
        probabilities = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits.softmax(dim=-1)
    np.testing.assert_allclose(
        [r["score"] for r in results], probabilities.max(dim=-1).values.numpy(), atol=BATCHING_ATOL
    )
    every = classify("a great story", top_k=None)
    assert [e["label"] for e in every] == ["positive", "negative"] and abs(sum(e["score"] for e in every) - 1) < 1e-6

    words = ["<S>", "</S>", "<UNK>", *(f"w{i}" for i in range(10000))]
    big = ElmoTokenizer(vocab={word: i for i, word in enumerate(words)})
    assert big.pad_token_id == 10003
    # Batched, the stock pipeline pads the ids with the <pad> word's id, which the model ignores there.
    stock = pipeline("text-classification", model=model, tokenizer=big)
    for batch_size in (1, 2):
        got = stock(texts, batch_size=batch_size)
        assert [r["label"] for r in got] == ["positive", "negative"]
        np.testing.assert_allclose(
            [r["score"] for r in got], probabilities.max(dim=-1).values.numpy(), atol=BATCHING_ATOL
        )


# ---------------------------------------------------------------- remote code

# Runs with `python -I` (no current folder, no PYTHONPATH): a finder placed first on sys.meta_path refuses the
# package (installed in editable mode) and this repository's top-level modules.
REMOTE_SCRIPT = textwrap.dedent(
    r"""
    import importlib.abc, json, sys
    from pathlib import Path

    repo, folder, out = Path(sys.argv[1]).resolve(), sys.argv[2], Path(sys.argv[3])

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"modeling_elmo", "configuration_elmo", "convert_original_weights"}:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked for this test)", name=name)

    sys.meta_path.insert(0, Blocker())
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != repo]
    try:
        import modeling_elmo  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit("modeling_elmo is importable: the isolation failed")

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    classify = pipeline("text-classification", model=folder, trust_remote_code=True)
    report = {
        "logits": logits.tolist(),
        "classes": [type(o).__module__ + "." + type(o).__name__ for o in (model, classify)],
        "frozen": not any(p.requires_grad for p in model.elmo.bilm.parameters()),
        "results": classify(TEXTS, batch_size=2),
        "from_repo": sorted(n for n, m in list(sys.modules.items())
                            if str(getattr(m, "__file__", None) or "").startswith(str(repo) + "/modeling_elmo")),
    }
    (out / "report.json").write_text(json.dumps(report))
    """
)


def test_remote_code_loads_without_the_package(trained, tmp_path):
    texts = ["the film was great", "it felt dull"]
    env = {
        **os.environ,
        "HF_MODULES_CACHE": str(tmp_path / "modules"),  # a fresh copy of the remote code
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    env.pop("PYTHONPATH", None)
    script = f"TEXTS = {texts!r}\n{REMOTE_SCRIPT}"
    folder = tmp_path / "with-code"
    save_with_remote_code(trained["model"], trained["tokenizer"], folder)  # remote code on request
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(REPO), str(folder), str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["from_repo"] == []
    assert report["classes"][0].startswith("transformers_modules.")
    assert report["classes"][0].endswith("modeling_elmo_classification.ElmoForSequenceClassification")
    assert report["classes"][1] == "transformers.pipelines.text_classification.TextClassificationPipeline"
    assert report["frozen"]
    model, tokenizer = trained["model"], trained["tokenizer"]
    with torch.no_grad():
        expected = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    # The labels of the model in this process (its own predictions, whatever training taught it).
    assert [r["label"] for r in report["results"]] == [model.config.id2label[int(k)] for k in expected.argmax(-1)]
    np.testing.assert_allclose(report["logits"], expected.numpy(), atol=BATCHING_ATOL)
