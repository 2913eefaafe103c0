"""The bundled demo model's language model: its shipped softmax, ``elmo score --model demo``, the fill-mask pipeline."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

import modeling_elmo  # noqa: F401  (registers the pipelines)
from modeling_elmo import ElmoModel
from modeling_elmo.demo_models import language_model as demo_lm
from modeling_elmo.demo_models.language_model import demo_language_model_path, load_demo_language_model
from modeling_elmo.demo_models.model import DEMO_MODEL_DIR
from modeling_elmo.scoring_elmo import (
    ElmoSentenceScorer,
    folder_has_softmax,
    score_sentences,
    top_layer_with_boundaries,
)

# WikiText-2 style (tokenized, lower and upper case, "@-@" joins): what the demo biLM was trained on.
SENTENCES = [
    "The game was released in Japan in 2010 .",
    "He was born in the city of New York .",
]


@pytest.fixture(scope="module")
def demo():
    return load_demo_language_model()


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory):
    return demo_language_model_path(tmp_path_factory.mktemp("cache"))


def test_the_demo_elmo_model_folder_stays_a_plain_quiet_elmo_model():
    """The embedding commands' folder is untouched: no softmax in it, and it loads with nothing missing or extra."""
    assert not folder_has_softmax(DEMO_MODEL_DIR)
    _, info = ElmoModel.from_pretrained(DEMO_MODEL_DIR, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info


def test_the_language_model_is_the_demo_bilm_under_the_shipped_softmax(demo):
    model, tokenizer = demo
    bilm = ElmoModel.from_pretrained(DEMO_MODEL_DIR).state_dict()
    for name, tensor in model.elmo.state_dict().items():
        assert torch.equal(tensor, bilm[name]), name
    shipped = load_file(demo_lm.DEMO_SOFTMAX_FILE)
    assert torch.equal(model.softmax.weight, shipped["softmax.weight"].float())
    assert torch.equal(model.softmax.bias, shipped["softmax.bias"])
    assert model.config.lm_vocab_size == len(tokenizer.get_vocab()) - 1 == 10_000


def test_without_the_softmax_file_the_error_says_how_to_get_one(tmp_path, monkeypatch):
    from elmo_cli import main

    monkeypatch.setattr(demo_lm, "DEMO_SOFTMAX_FILE", tmp_path / "absent.safetensors")
    assert not demo_lm.has_demo_language_model()
    with pytest.raises(FileNotFoundError, match="fit_demo_softmax.py"):
        load_demo_language_model()
    text = tmp_path / "in.txt"
    text.write_text("a b\n", encoding="utf-8")
    assert main(["score", "--model", "demo", "--disable_tqdm", str(text)]) == 1


def test_the_softmax_ships_paired_with_the_demo_bilm():
    assert demo_lm.has_demo_language_model()
    tensors = load_file(demo_lm.DEMO_SOFTMAX_FILE)
    assert tensors["softmax.weight"].dtype == torch.float16 and tuple(tensors["softmax.weight"].shape) == (10_000, 64)
    assert tensors["softmax.bias"].dtype == torch.float32 and tuple(tensors["softmax.bias"].shape) == (10_000,)


def test_a_softmax_of_another_biLM_is_refused(tmp_path, monkeypatch):
    tensors = load_file(demo_lm.DEMO_SOFTMAX_FILE)
    other = tmp_path / "softmax.safetensors"
    save_file(tensors, other, metadata={"bilm_sha256": "0" * 64})
    monkeypatch.setattr(demo_lm, "DEMO_SOFTMAX_FILE", other)
    with pytest.raises(ValueError, match="not trained with the biLM"):
        load_demo_language_model()


def test_the_cached_folder_is_an_ordinary_lm_folder(demo, demo_folder, tmp_path):
    from modeling_elmo import ElmoForPreTraining

    assert demo_language_model_path(demo_folder.parent) == demo_folder  # written once, then found
    assert folder_has_softmax(demo_folder)
    assert [p.name for p in demo_folder.parent.iterdir()] == [demo_folder.name]  # no staging folder left
    loaded, info = ElmoForPreTraining.from_pretrained(demo_folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    for name, tensor in demo[0].state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def _step_by_step_logprobs(model, tokenizer, sentence: str) -> tuple[float, float]:
    """Forward and backward log-probabilities of ``sentence``, one position at a time, in float64 with the full
    softmax (no blocks, no batching): the reference for ``elmo score``."""
    words = tokenizer.tokenize(sentence)
    enc = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        top, _ = top_layer_with_boundaries(model.elmo, enc["input_ids"], enc["attention_mask"])
    forward, backward = top[0].double().chunk(2, dim=-1)  # (n + 2, P) each
    weight, bias = model.softmax.weight.double(), model.softmax.bias.double()
    vocab = tokenizer.get_vocab()
    ids = [0] + [vocab.get(word, vocab["<UNK>"]) for word in words] + [1]  # <S> w_1 .. w_n </S>
    f = sum(torch.log_softmax(weight @ forward[t] + bias, -1)[ids[t + 1]].item() for t in range(len(ids) - 1))
    b = sum(torch.log_softmax(weight @ backward[t] + bias, -1)[ids[t - 1]].item() for t in range(1, len(ids)))
    return f, b


def test_elmo_score_demo(demo, tmp_path, capsys):
    from elmo_cli import main

    text = tmp_path / "in.txt"
    shuffled = "in . Japan The released 2010 was game in"
    text.write_text("\n".join([*SENTENCES, shuffled]) + "\n", encoding="utf-8")
    assert main(["score", "--model", "demo", "--disable_tqdm", "--batch_size", "2", str(text)]) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["tokens"][0] for r in results] == ["The", "He", "in"]
    for sentence, result in zip(SENTENCES, results, strict=False):
        f, b = _step_by_step_logprobs(*demo, sentence)
        # float32 products and chunked log-sum-exp against float64 step by step: measured < 1e-4 per sentence.
        assert result["forward_logprob"] == pytest.approx(f, abs=2e-4)
        assert result["backward_logprob"] == pytest.approx(b, abs=2e-4)
        n = len(result["tokens"])
        assert result["perplexity"] == pytest.approx(math.exp(-(f + b) / (2 * (n + 1))), rel=1e-4)
    direct = score_sentences(demo[0], SENTENCES[:1], tokenizer=demo[1])[0]
    assert direct["tokens"] == results[0]["tokens"]
    # alone, not padded in a batch of two: float32 rounding only (measured 1e-6)
    assert direct["forward_logprob"] == pytest.approx(results[0]["forward_logprob"], abs=1e-4)


def test_one_sentence_alone_is_refused_not_scored_character_by_character(demo, demo_folder):
    """Issue 36: a bare string is iterable, and was scored as 13 one-character sentences."""
    model, tokenizer = demo
    sentence = "the cat sat ."
    with pytest.raises(TypeError, match=r"got a single str: wrap one sentence in a list"):
        score_sentences(model, sentence, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="single str"):
        score_sentences(demo_folder, sentence)  # refused before the folder loads
    with pytest.raises(TypeError, match="single bytes"):
        score_sentences(model, sentence.encode(), tokenizer=tokenizer)
    scorer = ElmoSentenceScorer(model, tokenizer)
    with pytest.raises(TypeError, match="single str"):
        scorer.score(sentence)  # at the call, not at the first result
    with pytest.raises(TypeError, match="single str"):
        scorer.score_batch(sentence)
    (result,) = score_sentences(model, [sentence], tokenizer=tokenizer)
    assert result["tokens"] == ["the", "cat", "sat", "."]
    assert len(score_sentences(model, [["the", "cat"], "sat ."], tokenizer=tokenizer, tokenized=True)) == 2


def test_fill_mask_on_the_demo_folder(demo, demo_folder):
    from transformers import pipeline

    fill = pipeline("elmo-fill-mask", model=str(demo_folder))
    text = "He was born in the city of [MASK] ."
    best = fill(text, top_k=5)
    model, tokenizer = demo
    # The scores by hand: the mean of the forward log-probabilities after "of" and the backward ones before ".",
    # soft-maxed over the vocabulary.
    words = tokenizer.tokenize("He was born in the city of x .")
    enc = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        top, _ = top_layer_with_boundaries(model.elmo, enc["input_ids"], enc["attention_mask"])
    forward, backward = top[0].double().chunk(2, dim=-1)
    weight, bias = model.softmax.weight.double(), model.softmax.bias.double()
    mask = words.index("x") + 1  # its position after <S>
    mean = (
        torch.log_softmax(weight @ forward[mask - 1] + bias, -1)
        + torch.log_softmax(weight @ backward[mask + 1] + bias, -1)
    ) / 2
    probs = torch.softmax(mean, -1)
    values, ids = probs.topk(5)
    assert [item["token"] for item in best] == ids.tolist()
    # float32 pipeline against this float64 computation: measured below 1e-7.
    assert [item["score"] for item in best] == pytest.approx(values.tolist(), abs=1e-6)
    assert best[0]["sequence"] == text.replace("[MASK]", best[0]["token_str"])


def test_elmo_demo_fills_blanks_with_the_demo_lm_head(demo, tmp_path, monkeypatch):
    """Without --model, ``elmo demo``'s fill-in-the-blank view uses the demo biLM's softmax where it ships, and
    says the view is unavailable where it does not."""
    from modeling_elmo.commands.demo import DemoModels

    models = DemoModels.load()
    assert models.lm is not None
    assert torch.equal(models.lm.softmax.weight, demo[0].softmax.weight)
    best = models.fill_blank("He was born in the city of ___ .", top_k=5)
    assert len(best) == 5 and list(best.values()) == sorted(best.values(), reverse=True)
    monkeypatch.setattr(demo_lm, "DEMO_SOFTMAX_FILE", tmp_path / "absent.safetensors")
    assert DemoModels.load().lm is None


MONTHS = "January February March April May June July August September October November December".split()


def test_the_fitted_softmax_guesses_plausible_words(demo_folder):
    """The shipped softmax is a real LM head: in a WikiText-like sentence the top 5 are words, mostly months, and a
    month (seen before years in training) ranks far above rare words of the vocabulary's tail."""
    from transformers import pipeline

    fill = pipeline("elmo-fill-mask", model=str(demo_folder))
    text = "The game was released in [MASK] 2010 ."
    best = [item["token_str"] for item in fill(text, top_k=5)]
    assert all(word.isalpha() for word in best), best  # no <UNK>, <unk>, </S> or punctuation
    assert sum(word in MONTHS for word in best) >= 3, best  # measured: the November December September January
    scores = {item["token_str"]: item["score"] for item in fill(text, targets=["January", "Hutchinson", "Illusion"])}
    # measured: January 0.044; the rare words (among the vocabulary's last 30) are far below
    assert scores["January"] > 100 * max(scores["Hutchinson"], scores["Illusion"]), scores


def test_the_fitted_softmax_uses_the_context(demo):
    """With W set to 0 only the bias is left, the unigram distribution: the fitted head must beat it on WikiText
    sentences in both directions (it would not if a direction predicted the wrong neighbour)."""
    model, tokenizer = demo
    fitted = score_sentences(model, SENTENCES, tokenizer=tokenizer)
    weight = model.softmax.weight.detach().clone()
    try:
        with torch.no_grad():
            model.softmax.weight.zero_()
        unigram = score_sentences(model, SENTENCES, tokenizer=tokenizer)
    finally:
        with torch.no_grad():
            model.softmax.weight.copy_(weight)
    for with_context, alone in zip(fitted, unigram, strict=True):
        assert with_context["forward_logprob"] > alone["forward_logprob"] + 5, (with_context, alone)
        assert with_context["backward_logprob"] > alone["backward_logprob"] + 5, (with_context, alone)
