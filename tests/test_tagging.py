"""Tests of the ELMo tagger (ElmoForTokenClassification) and its training command, on tiny made-up data."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import (
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
)

from modeling_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from modeling_elmo.training.tagging_data import build_word_vocab, detect_scheme, iob1_to_bio, read_conll
from modeling_elmo.training.train_tagger import main, predict_sentences

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
NAMES = ["John Smith", "Mary", "Paul Jones"]
PLACES = ["Paris", "New York", "London"]
FILLER = ["lives", "in", "and", "went", "to", "the", "city", "with"]


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_bilm(**kwargs) -> dict:
    return dict(
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8]],
        n_highway=1,
        lstm_dim=32,
        projection_dim=8,
        n_layers=2,
        **kwargs,
    )


def make_corpus(n: int, seed: int = 0) -> tuple[list[list[str]], list[list[str]]]:
    """Sentences with BIO tags: persons and places between filler words."""
    rng = random.Random(seed)
    sentences, tags = [], []
    for _ in range(n):
        words, labels = [], []
        for _ in range(rng.randint(2, 7)):
            r = rng.random()
            if r < 0.4:
                kind, entity = ("PER", rng.choice(NAMES)) if r < 0.2 else ("LOC", rng.choice(PLACES))
                parts = entity.split()
                words += parts
                labels += [f"B-{kind}"] + [f"I-{kind}"] * (len(parts) - 1)
            else:
                words.append(rng.choice(FILLER))
                labels.append("O")
        sentences.append(words)
        tags.append(labels)
    return sentences, tags


def make_model(use_crf: bool = True, **kwargs) -> tuple[ElmoForTokenClassification, ElmoTokenizer]:
    """A tiny tagger with a word embedding over the corpus vocabulary, and its tokenizer."""
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer(vocab=build_word_vocab(make_corpus(200)[0]))
    settings = dict(
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        tagger_word_input="embedding",
        tagger_word_vocab_size=len(tokenizer),
        tagger_word_embedding_dim=8,
        tagger_hidden_size=16,
        tagger_num_layers=1,
        tagger_dropout=0.0,
        elmo_dropout=0.0,
        use_crf=use_crf,
    )
    settings.update(kwargs)
    return ElmoForTokenClassification(ElmoConfig(**tiny_bilm(), **settings)), tokenizer


def features(tokenizer, sentences, tags, label2id) -> list[dict]:
    """Unpadded features, one dict per sentence, as a datasets.map would give the collator."""
    out = []
    for words, labels in zip(sentences, tags, strict=True):
        enc = tokenizer(words, is_split_into_words=True, return_vocab_ids=True)
        out.append(
            {
                "input_ids": enc["input_ids"],
                "attention_mask": enc["attention_mask"],
                "vocab_ids": enc["vocab_ids"],
                "labels": [label2id[t] for t in labels],
            }
        )
    return out


def batch_of(model, tokenizer, n: int = 16, seed: int = 1) -> dict:
    sentences, tags = make_corpus(n, seed)
    return DataCollatorForTokenClassification(tokenizer)(features(tokenizer, sentences, tags, model.config.label2id))


def eval_loss(model, batch) -> float:
    model.eval()
    with torch.no_grad():
        return float(model(**batch).loss)


def bilm_state(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.elmo.state_dict().items() if k.startswith(("char_cnn.", "bilm."))}


@pytest.fixture(scope="module", params=["softmax", "crf"])
def trained(request, tmp_path_factory):
    """A tagger before and after 25 Trainer steps (module-scoped: several tests read it)."""
    use_crf = request.param == "crf"
    model, tokenizer = make_model(use_crf=use_crf, scalar_mix_l2_coef=0.01)
    sentences, tags = make_corpus(160)
    train_features = features(tokenizer, sentences, tags, model.config.label2id)
    batch = batch_of(model, tokenizer)
    before = eval_loss(model, batch)
    frozen_before = bilm_state(model)
    mix_before = model.elmo.scalar_mixes[0].scalar_parameters.detach().clone()
    args = TrainingArguments(
        output_dir=str(tmp_path_factory.mktemp("trainer")),
        per_device_train_batch_size=16,
        learning_rate=2e-2,
        max_steps=25,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        logging_strategy="no",
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_features,
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    trainer.train()
    return {
        "model": model,
        "tokenizer": tokenizer,
        "batch": batch,
        "loss_before": before,
        "loss_after": eval_loss(model, batch),
        "frozen_before": frozen_before,
        "mix_before": mix_before,
    }


# ---------------------------------------------------------------- training


def test_trainer_steps_lower_the_loss(trained):
    assert trained["loss_after"] < 0.7 * trained["loss_before"], (trained["loss_before"], trained["loss_after"])


def test_frozen_bilm_does_not_change_but_the_mix_does(trained):
    model = trained["model"]
    after = bilm_state(model)
    assert after.keys() == trained["frozen_before"].keys() and after
    for key, value in trained["frozen_before"].items():
        assert torch.equal(value, after[key]), key
    assert not any(p.requires_grad for p in model.elmo.bilm.parameters())
    assert not torch.equal(trained["mix_before"], model.elmo.scalar_mixes[0].scalar_parameters.detach())


def test_save_reload_same_predictions_and_label_names(trained, tmp_path):
    model, tokenizer, batch = trained["model"], trained["tokenizer"], trained["batch"]
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert type(loaded).__name__ == "ElmoForTokenClassification"
    assert loaded.config.id2label == dict(enumerate(LABELS))
    assert (loaded.crf is None) == (model.crf is None)
    assert not any(p.requires_grad for p in loaded.elmo.char_cnn.parameters())  # still frozen
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    assert loaded.predict(**inputs) == model.predict(**inputs)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    tagged = predict_sentences(loaded, reloaded_tokenizer, ["Mary went to New York"])
    assert [w for w, _ in tagged[0]] == ["Mary", "went", "to", "New", "York"]
    assert {t for _, t in tagged[0]} <= set(LABELS)


def test_crf_predictions_respect_bio_constraints(trained):
    model = trained["model"]
    if model.crf is None:
        pytest.skip("the softmax tagger has no CRF, so no BIO constraints: this checks the CRF tagger only")
    # Emissions that prefer an I- tag everywhere: Viterbi must still open every entity with B-.
    logits = torch.zeros(2, 4, len(LABELS))
    logits[..., LABELS.index("I-PER")] = 5.0
    for tags in model.decode(logits, torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])):
        names = [LABELS[t] for t in tags]
        assert detect_scheme([names]) == "BIO", names


# ---------------------------------------------------------------- the loss


def test_l2_penalty_of_the_mixes_is_in_the_loss():
    model, tokenizer = make_model(tagger_elmo_output=True)  # two mixes
    assert len(model.elmo.scalar_mixes) == 2
    with torch.no_grad():
        for mix in model.elmo.scalar_mixes:
            mix.scalar_parameters.copy_(torch.randn(mix.scalar_parameters.shape))
    batch = batch_of(model, tokenizer, n=4)
    model.config.scalar_mix_l2_coef = 0.0
    plain = eval_loss(model, batch)
    model.config.scalar_mix_l2_coef = 0.3
    penalised = eval_loss(model, batch)
    squared = sum(float((mix.scalar_parameters.detach() ** 2).sum()) for mix in model.elmo.scalar_mixes)
    assert penalised - plain == pytest.approx(0.3 * squared, rel=1e-5, abs=1e-6)


def test_collator_pads_words_and_labels():
    model, tokenizer = make_model()
    sentences, tags = (
        [["John", "Smith"], ["Mary", "went", "to", "New", "York"]],
        [["B-PER", "I-PER"], ["B-PER"] + ["O"] * 2 + ["B-LOC", "I-LOC"]],
    )
    batch = DataCollatorForTokenClassification(tokenizer)(features(tokenizer, sentences, tags, model.config.label2id))
    assert batch["input_ids"].shape == (2, 5, 50)
    assert batch["labels"][0].tolist() == [3, 4, -100, -100, -100]
    assert batch["vocab_ids"][0, 2:].tolist() == [-100] * 3
    out = model(**batch)
    assert out.logits.shape == (2, 5, len(LABELS)) and out.loss.ndim == 0


def test_bilm_layer0_as_word_input_and_unfrozen_bilm_trains():
    model, tokenizer = make_model(tagger_word_input="bilm", freeze_bilm=False)
    batch = batch_of(model, tokenizer, n=4)
    batch.pop("vocab_ids")
    model.train()
    model(**batch).loss.backward()
    assert all(p.grad is not None for p in model.elmo.bilm.parameters())
    assert model.elmo.char_cnn.projection.weight.grad is not None


def test_layer0_only_tagger_runs_the_character_encoder_only():
    """x_k = the biLM's layer 0 and no ELMo mix: the same features as layer 0 of the full biLM, without running it."""
    model, tokenizer = make_model(tagger_word_input="bilm", tagger_elmo_input=False)
    model.eval()
    batch = batch_of(model, tokenizer, n=4)
    batch.pop("vocab_ids")
    features = {}
    model.encoder.register_forward_hook(lambda module, args, output: features.update(x=args[0]))

    def fail(*args, **kwargs):
        raise AssertionError("the biLM's LSTMs ran")

    hook = model.elmo.bilm.register_forward_pre_hook(fail)
    assert torch.isfinite(model(**batch).logits).all()
    hook.remove()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    layer0 = model.elmo(**inputs, output_hidden_states=True).hidden_states[0][..., : model.config.projection_dim]
    torch.testing.assert_close(features["x"], layer0, atol=1e-6, rtol=0)


def test_no_elmo_baseline_does_not_run_the_bilm():
    model, tokenizer = make_model(tagger_elmo_input=False)
    assert len(model.elmo.scalar_mixes) == 0

    def fail(*args, **kwargs):
        raise AssertionError("the biLM ran")

    model.elmo.char_cnn.register_forward_pre_hook(fail)
    model.elmo.bilm.register_forward_pre_hook(fail)
    assert torch.isfinite(model(**batch_of(model, tokenizer, n=4)).loss)


def test_a_converted_bilm_folder_loads_into_the_tagger(tmp_path):
    bilm = ElmoModel(ElmoConfig(**tiny_bilm())).eval()
    bilm.save_pretrained(tmp_path)
    tagger = ElmoForTokenClassification.from_pretrained(
        tmp_path, id2label=dict(enumerate(LABELS)), label2id={v: i for i, v in enumerate(LABELS)}
    )
    for key, value in bilm.state_dict().items():
        if key.startswith(("char_cnn.", "bilm.")):
            assert torch.equal(tagger.elmo.state_dict()[key], value), key
    assert tagger.crf is not None and not bool(tagger.crf.constraint_mask.all())  # BIO constraints from the labels
    assert not any(p.requires_grad for p in tagger.elmo.bilm.parameters())


def test_clear_errors():
    model, tokenizer = make_model()
    batch = batch_of(model, tokenizer, n=2)
    with pytest.raises(ValueError, match="vocab_ids"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match="word-level"):
        model(**{**batch, "labels": batch["labels"][:, :1]})
    with pytest.raises(ValueError, match="tagger_word_vocab_size"):
        ElmoConfig(tagger_word_input="embedding")
    with pytest.raises(ValueError, match="not BIO labels"):
        ElmoForTokenClassification(ElmoConfig(**tiny_bilm(), id2label={0: "NN", 1: "VB"}, crf_constraints="BIO"))


# ---------------------------------------------------------------- the command


def test_conll_reading_and_tag_schemes(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\n\nPeter NNP I-PER\nBlack I-PER\n")
    sentences, tags = read_conll(path)
    assert sentences == [["EU", "rejects"], ["Peter", "Black"]]
    assert tags == [["I-ORG", "O"], ["I-PER", "I-PER"]]
    assert detect_scheme(tags) == "IOB1"
    assert iob1_to_bio(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert detect_scheme([["B-PER", "I-PER", "O"]]) == "BIO"
    assert detect_scheme([["NN", "VB"]]) == "other"
    (tmp_path / "bad.txt").write_text("word_without_tag\n")
    with pytest.raises(ValueError, match="bad.txt:1"):
        read_conll(tmp_path / "bad.txt")


def _write_conll(path, sentences, tags, iob1: bool = False) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("-DOCSTART- -X- -X- O\n\n")
        for words, labels in zip(sentences, tags, strict=True):
            if iob1:  # IOB1: entities open with I-
                labels = ["I-" + t[2:] if t.startswith("B-") else t for t in labels]
            for word, tag in zip(words, labels, strict=True):
                f.write(f"{word} NNP O {tag}\n")
            f.write("\n")


def test_command_end_to_end(tmp_path, capsys):
    bilm = tmp_path / "bilm"
    ElmoModel(ElmoConfig(**tiny_bilm())).save_pretrained(bilm)
    ElmoTokenizer().save_pretrained(bilm)
    _write_conll(tmp_path / "train.txt", *make_corpus(120, seed=3), iob1=True)
    _write_conll(tmp_path / "dev.txt", *make_corpus(30, seed=4), iob1=True)
    out = tmp_path / "ner"
    argv = [
        "--bilm", str(bilm), "--train_file", str(tmp_path / "train.txt"), "--eval_file", str(tmp_path / "dev.txt"),
        "--output_dir", str(out), "--max_steps", "12", "--per_device_train_batch_size", "16", "--learning_rate", "0.02",
        "--hidden_size", "16", "--num_layers", "1", "--word_dim", "8", "--min_word_freq", "1",
        "--eval_strategy", "no", "--save_steps", "6", "--disable_tqdm", "true", "--elmo_output",
    ]  # fmt: skip
    assert main(argv) == 0
    metrics = json.loads((out / "all_results.json").read_text())
    assert 0.0 <= metrics["eval_f1"] <= 1.0 and "eval_precision" in metrics
    assert metrics["tag_scheme"] == "IOB1" and metrics["train_steps"] == 12
    assert (out / "checkpoint-12").is_dir()
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "frozen biLM" in card and f"{100 * metrics['eval_f1']:.2f}" in card and "| labels |" in card
    index = {r.metric_type: r.metric_value for r in ModelCard.load(out / "README.md").data.eval_results}
    assert index["f1"] == pytest.approx(100 * metrics["eval_f1"], abs=0.01)  # the measured F1 in the model-index
    # The plot of the learned scalar-mix weights: a PNG in the output folder, shown by the card.
    plot = out / "scalar_mix_weights.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    matplotlib_image = pytest.importorskip("matplotlib.image")
    height, width, _ = matplotlib_image.imread(plot).shape  # decodes: a whole image, not a truncated file
    assert height > 100 and width > 100
    assert "![Learned scalar-mix weights per layer](scalar_mix_weights.png)" in card

    model = AutoModelForTokenClassification.from_pretrained(out)
    assert set(model.config.id2label.values()) == set(LABELS)  # IOB1 data, BIO model
    assert model.config.tagger_elmo_output and len(model.elmo.scalar_mixes) == 2

    # Resuming from the last checkpoint continues to max_steps.
    assert main([*argv, "--max_steps", "14", "--resume_from_checkpoint", "last"]) == 0
    assert json.loads((out / "all_results.json").read_text())["train_steps"] == 14

    capsys.readouterr()
    assert main(["--predict", str(out), "John Smith lives in Paris.", "Mary went to London"]) == 0
    printed = capsys.readouterr().out.strip().split("\n\n")
    first = [line.split("\t") for line in printed[0].splitlines()]
    assert [w for w, _ in first] == ["John", "Smith", "lives", "in", "Paris", "."]
    assert all(tag in LABELS for _, tag in first)
    assert len(printed) == 2


def test_names_moved_out_of_train_tagger_still_import_from_it_with_a_warning():
    """The CoNLL reading and tag schemes moved to ``modeling_elmo.training.tagging_data``, the Trainer's pieces and
    the metrics to ``modeling_elmo.training.tagger_trainer`` (issue 37.6): for one release the old path gives the
    same objects, with a FutureWarning that names the new module."""
    import importlib

    from modeling_elmo.training import train_tagger

    assert set(train_tagger.MOVED_NAMES.values()) == {
        "modeling_elmo.training.tagging_data",
        "modeling_elmo.training.tagger_trainer",
    }
    for name, module in train_tagger.MOVED_NAMES.items():
        with pytest.warns(FutureWarning, match=rf"`{module}`: import `{name}` from there") as caught:
            value = getattr(train_tagger, name)
        assert value is getattr(importlib.import_module(module), name)
        assert f"modeling_elmo.training.train_tagger.{name}" in str(caught[0].message)
    with pytest.warns(FutureWarning, match="modeling_elmo.training.tagging_data"):
        from modeling_elmo.training.train_tagger import read_conll as old_read_conll
    assert old_read_conll is read_conll
    with pytest.raises(AttributeError, match="no_such_name"):
        train_tagger.no_such_name  # noqa: B018


def _first_bash_block(page: Path) -> list[list[str]]:
    """The commands of a page's first bash block, continuation lines joined (as tests/test_docs.py reads them)."""
    code = re.search(r"^```bash\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M).group(1)
    return [shlex.split(line) for line in code.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.mark.slow
def test_the_training_docs_first_example_trains_a_tagger_with_an_f1_and_a_plot(tmp_path):
    """docs/training.md's first example, exactly as written (``--bilm demo`` on docs/data's sample), in full: the
    docs test (tests/test_docs.py) runs it with 2 steps. It ends with a saved model, a dev F1 and the scalar-mix plot,
    and the tagger then tags the held-out names of its example sentence."""
    pytest.importorskip("datasets")
    pytest.importorskip("seqeval")
    pytest.importorskip("matplotlib")
    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "docs" / "data", tmp_path / "docs" / "data")  # a checkout's docs/data, nothing else
    commands = _first_bash_block(repo / "docs" / "training.md")
    assert [argv[:3] for argv in commands] == [["python", "-m", "modeling_elmo.training.train_tagger"]] * 2
    assert commands[0][3:5] == ["--bilm", "demo"] and "--predict" in commands[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "TOKENIZERS_PARALLELISM": "false"}
    runs = [
        subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        for argv in commands
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / commands[0][commands[0].index("--output_dir") + 1]
    assert json.loads(runs[0].stdout)["eval_f1"] > 0.8  # the docs say 0.967
    assert json.loads((out / "all_results.json").read_text())["eval_f1"] > 0.8
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "scalar_mix_weights.png"} <= {
        p.name for p in out.iterdir()
    }
    assert (out / "scalar_mix_weights.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tags = dict(line.split("\t") for line in runs[1].stdout.split("\n\n")[0].splitlines())
    assert (tags["Julia"], tags["Stern"], tags["Vantage"], tags["Hamburg"]) == ("B-PER", "I-PER", "B-ORG", "B-LOC")


def test_command_no_elmo_baseline_and_errors(tmp_path, capsys):
    _write_conll(tmp_path / "train.txt", *make_corpus(60, seed=5))
    out = tmp_path / "base"
    argv = ["--no_elmo", "--train_file", str(tmp_path / "train.txt"), "--output_dir", str(out), "--max_steps", "3"]
    assert main([*argv, "--hidden_size", "8", "--num_layers", "1", "--no_crf", "--disable_tqdm", "true"]) == 0
    assert AutoModelForTokenClassification.from_pretrained(out).config.tagger_elmo_input is False
    capsys.readouterr()
    # Neither --bilm nor --no_elmo: refused in one line (exit 1), no usage block.
    assert main(["--train_file", str(tmp_path / "train.txt"), "--output_dir", str(tmp_path / "other")]) == 1
    err = capsys.readouterr().err
    assert "error: give --bilm" in err and "usage:" not in err
    assert main(["--no_elmo", "--train_file", str(tmp_path / "missing.txt"), "--output_dir", str(out)]) == 1
    assert "not found" in capsys.readouterr().err


# ---------------------------------------------------------------- requires_grad alone decides what trains


def _bilm_parameters(model) -> list[torch.nn.Parameter]:
    return [p for module in (model.elmo.char_cnn, model.elmo.bilm) for p in module.parameters()]


def test_requires_grad_alone_decides_what_trains():
    """A tagger built frozen (config.freeze_bilm) and then unfrozen with requires_grad_(True) trains its biLM."""
    model, tokenizer = make_model()
    assert model.config.freeze_bilm and not any(p.requires_grad for p in _bilm_parameters(model))
    model.requires_grad_(True)
    batch = batch_of(model, tokenizer, n=4)
    model.train()
    model(**batch).loss.backward()
    missing = [n for n, p in model.elmo.named_parameters() if n.startswith(("char_cnn.", "bilm.")) and p.grad is None]
    assert len(_bilm_parameters(model)) == 19 and not missing, missing
    # Frozen again: no gradient reaches the biLM, and it runs without autograd.
    model.zero_grad(set_to_none=True)
    model.freeze_bilm()
    model(**batch).loss.backward()
    assert all(p.grad is None for p in _bilm_parameters(model))
    assert all(p.grad is not None for p in model.elmo.scalar_mixes.parameters())


def test_gradient_checkpointing_of_the_bilm_runs_under_the_tagger():
    """A tagger saved frozen, unfrozen with requires_grad_(True): checkpointing its biLM layers keeps fewer
    activations for the backward pass and gives the same gradients."""

    def gradients(checkpointing: bool):
        model, tokenizer = make_model()
        model.requires_grad_(True)
        if checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            assert all(layer.gradient_checkpointing for layer in model.elmo.bilm.layers)
        batch = batch_of(model, tokenizer, n=4)
        model.train()
        kept = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
            loss = model(**batch).loss
        loss.backward()
        return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, sum(kept)

    (plain, plain_kept), (checkpointed, checkpointed_kept) = gradients(False), gradients(True)
    assert checkpointed_kept < 0.7 * plain_kept, (checkpointed_kept, plain_kept)
    assert plain.keys() == checkpointed.keys() and any(n.startswith("elmo.bilm.") for n in plain)
    for name in plain:
        torch.testing.assert_close(plain[name], checkpointed[name], atol=1e-6, rtol=1e-5)


def test_tagger_does_not_write_its_config():
    config = ElmoConfig(**tiny_bilm(), tagger_elmo_output=True, id2label=dict(enumerate(LABELS)))
    before = config.to_dict()
    model = ElmoForTokenClassification(config)
    model.freeze_bilm(False)
    assert len(model.elmo.scalar_mixes) == 2 and model.num_elmo_mixes == 2
    assert model.config.to_dict() == before


_FINE_TUNE_SCRIPT = """
import sys
import torch
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments
from modeling_elmo import ElmoForTokenClassification, ElmoTokenizer

folder, out = sys.argv[1], sys.argv[2]
model = ElmoForTokenClassification.from_pretrained(folder)
model.requires_grad_(True)  # unfreeze the biLM of a tagger saved frozen
tokenizer = ElmoTokenizer.from_pretrained(folder)
words = [["John", "lives", "in", "Paris"], ["Mary", "went", "to", "London"], ["the", "city"], ["Paul"]] * 4
features = []
for sentence in words:
    enc = tokenizer(sentence, is_split_into_words=True, return_vocab_ids=True)
    features.append({**enc, "labels": [0] * len(sentence)})
args = TrainingArguments(
    output_dir=out, per_device_train_batch_size=4, max_steps=2, learning_rate=0.05, optim="sgd",
    save_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True, ddp_backend="gloo",
    ddp_find_unused_parameters=False, logging_strategy="no", seed=0,
)
trainer = Trainer(model=model, args=args, train_dataset=features,
                  data_collator=DataCollatorForTokenClassification(tokenizer))
trainer.train()
trainer.save_model(out)
# An orderly exit, as the commands': the group ends here, not when the Trainer (its DDP reducer holding the group)
# is freed at the interpreter's shutdown, where gloo's threads abort ("terminate called without an active exception",
# once in CI) or deadlock on the GIL (issue 36).
from modeling_elmo.training.distributed import finish_distributed
finish_distributed(trainer)
"""


@pytest.mark.slow  # issue 51: a torchrun launch of 2 processes
def test_two_process_fine_tuning_of_a_saved_tagger_with_an_unfrozen_bilm(tmp_path):
    """2 gloo processes, DDP without find_unused_parameters: the unfrozen biLM's weights change."""
    import os

    from helpers import run_two_processes

    model, tokenizer = make_model()
    model.save_pretrained(tmp_path / "tagger")
    tokenizer.save_pretrained(tmp_path / "tagger")
    script = tmp_path / "fine_tune.py"
    script.write_text(_FINE_TUNE_SCRIPT, encoding="utf-8")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    done = run_two_processes([str(script), str(tmp_path / "tagger"), str(tmp_path / "tuned")], cwd=repo, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    before = bilm_state(model)
    after = bilm_state(ElmoForTokenClassification.from_pretrained(tmp_path / "tuned"))
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) == len(before), sorted(set(before) - set(changed))
