"""Model cards built with huggingface_hub's ModelCard / ModelCardData / EvalResult (issue #16)."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import EvalResult, ModelCard

from modeling_elmo import ElmoConfig
from modeling_elmo.demo_models.model import DEMO_MODEL_DIR
from modeling_elmo.hub.model_card import GENERATED_MARKER, source_name, write_model_card

TINY = dict(lstm_dim=32, projection_dim=8, char_cnn_filters=[[1, 4], [2, 4]], n_highway=1, char_embedding_dim=4)
F1 = EvalResult(
    task_type="token-classification",
    dataset_type="conll2003",
    dataset_name="CoNLL-2003",
    dataset_split="validation",
    metric_type="f1",
    metric_name="F1 (seqeval)",
    metric_value=88.31,
)


def _tagger_config() -> ElmoConfig:
    config = ElmoConfig(**TINY, id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    config.architectures = ["ElmoForTokenClassification"]
    return config


def test_card_carries_hub_metadata_and_the_metric(tmp_path):
    path = write_model_card(
        tmp_path,
        _tagger_config(),
        how_made="Trained on CoNLL-2003.",
        eval_results=[F1],
        datasets=["conll2003"],
        base_model="someone/elmo-original",
        license="apache-2.0",
    )
    card = ModelCard.load(path)
    data = card.data
    assert data.license == "apache-2.0" and data.language == "en" and data.library_name == "transformers"
    assert data.pipeline_tag == "token-classification" and "elmo" in data.tags
    assert data.datasets == ["conll2003"] and data.base_model == "someone/elmo-original"
    (result,) = data.eval_results
    assert (result.metric_type, result.metric_value, result.dataset_type) == ("f1", 88.31, "conll2003")
    assert "model_size" not in data.to_dict()  # no non-standard keys
    assert GENERATED_MARKER in card.text and "88.31" in card.text


def test_regenerating_keeps_metadata_and_a_user_readme_is_left_alone(tmp_path):
    config = _tagger_config()
    write_model_card(tmp_path, config, eval_results=[F1], datasets=["conll2003"], license="apache-2.0")
    write_model_card(tmp_path, config)  # e.g. a later save_pretrained of the same folder
    data = ModelCard.load(tmp_path / "README.md").data
    assert data.license == "apache-2.0" and data.eval_results[0].metric_value == 88.31

    (tmp_path / "README.md").write_text("# my own card\n")
    assert write_model_card(tmp_path, config, license="mit") is None
    assert (tmp_path / "README.md").read_text() == "# my own card\n"


def test_unstated_license_is_other_and_said(tmp_path):
    config = ElmoConfig(**TINY)
    card = ModelCard.load(write_model_card(tmp_path, config))
    assert card.data.license == "other" and "license of these weights is not stated" in card.text
    assert card.data.eval_results is None


def test_demo_model_card_has_its_measured_perplexity():
    card = ModelCard.load(DEMO_MODEL_DIR / "README.md")
    results = json.loads((DEMO_MODEL_DIR / "eval_results.json").read_text())
    by_name = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert by_name["Perplexity (mean of both directions)"] == pytest.approx(results["eval_perplexity"], abs=0.01)
    assert card.data.datasets == ["Salesforce/wikitext"] and card.data.license == "cc-by-sa-3.0"


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("someone/elmo-original", "someone/elmo-original"),  # a Hub id
        ("small", "small"),  # a released model's name
        ("demo", "demo"),  # the bundled demo model
        ("/home/me/models/elmo-original", "elmo-original"),  # a local folder: its name only
        ("models/elmo-original/", "elmo-original"),
    ],
)
def test_source_name_is_never_a_local_path(given, named):
    assert source_name(given) == named


def test_tagger_card_names_its_bilm_without_the_local_path(tmp_path):
    """Issue 36.4: the card of a tagger trained with ``--bilm /an/absolute/folder`` embedded that path ("on the frozen
    biLM of `/tmp/.../bilm`"); a card travels with the model and records the source's name only."""
    pytest.importorskip("datasets")
    pytest.importorskip("seqeval")
    from modeling_elmo import ElmoModel, ElmoTokenizer
    from modeling_elmo.training.train_tagger import main

    bilm = tmp_path / "models" / "my-bilm"
    ElmoModel(ElmoConfig(**TINY)).save_pretrained(bilm)
    ElmoTokenizer().save_pretrained(bilm)
    conll = tmp_path / "data" / "train.txt"
    conll.parent.mkdir()
    conll.write_text("John B-PER\nlives O\nin O\nParis B-LOC\n\nMary B-PER\nsat O\n\n" * 4, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["--bilm", str(bilm.resolve()), "--train_file", str(conll), "--eval_file", str(conll), "--output_dir",
            str(out), "--max_steps", "1", "--hidden_size", "4", "--num_layers", "1", "--word_dim", "4",
            "--disable_tqdm", "--report_to", "none"]  # fmt: skip
    assert main(argv) == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "biLM of `my-bilm`" in card, card
    assert str(tmp_path.resolve()) not in card and str(tmp_path) not in card
    assert ModelCard(card).data.base_model is None  # a local folder is no Hub repository
