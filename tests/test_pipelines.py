"""Pipelines on ELMo models (issue 15 item 1, issue 13 item 19): a CRF tagger's pipeline decodes with Viterbi, as
``predict`` does, and scores each word by its CRF marginal; transformers' own ``token-classification`` task reaches
that pipeline for ELMo taggers (and only for them); batched pipelines equal one sentence at a time."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import BATCHING_ATOL, TINY_SIZES
from transformers import pipeline
from transformers.pipelines import TokenClassificationPipeline

from modeling_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from modeling_elmo.pipelines_elmo import ElmoTokenClassificationPipeline

pytestmark = pytest.mark.usefixtures("one_thread")

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCES = [
    "John Smith lives in New York .",
    "Mary went to Paris",
    "the cat sat",
    "Anna and Bob met in Rome today",
    "hi",
]
TOKENIZER = ElmoTokenizer()


def crf_tagger(seed: int = 0) -> ElmoForTokenClassification:
    """A tiny CRF tagger (BIO constraints) with random non-zero transitions, strong enough against the emissions
    that the Viterbi path differs from the per-word argmax of the emissions."""
    config = ElmoConfig(
        **TINY_SIZES,
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        tagger_hidden_size=8,
        tagger_num_layers=1,
        use_crf=True,
        crf_constraints="BIO",
    )
    torch.manual_seed(seed)
    model = ElmoForTokenClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 0.3)
        for parameter in (model.crf.transitions, model.crf.start_transitions, model.crf.end_transitions):
            parameter.normal_(0.0, 1.0)
    return model


@pytest.fixture(scope="module")
def tagger() -> ElmoForTokenClassification:
    return crf_tagger()


@pytest.fixture(scope="module")
def marginals(tagger) -> dict[str, torch.Tensor]:
    """Brute-force marginals of each sentence (computed once: 5^7 paths for the longest)."""
    return {sentence: brute_force_marginals(tagger, sentence) for sentence in SENTENCES}


def words_of(sentence: str) -> list[str]:
    return sentence.split()


def brute_force_marginals(model: ElmoForTokenClassification, sentence: str) -> torch.Tensor:
    """``(words, K)``: ``p(y_t = k)`` summed over every tag path of the sentence, each weighted by its CRF probability
    (``exp(log_likelihood)``), float64."""
    batch = TOKENIZER([sentence], return_tensors="pt")
    with torch.no_grad():
        emissions = model(**batch).logits.double()  # (1, n, K)
    crf = model.crf.double()
    n, k = emissions.shape[1], emissions.shape[2]
    paths = torch.tensor(list(itertools.product(range(k), repeat=n)))  # (K^n, n)
    with torch.no_grad():
        probabilities = crf.log_likelihood(emissions.expand(len(paths), -1, -1), paths).exp()  # (K^n,)
    crf.float()
    marginals = torch.zeros(n, k, dtype=torch.float64)
    for t in range(n):
        marginals[t].index_add_(0, paths[:, t], probabilities)
    return marginals


def bio_spans(words: list[str], tags: list[str]) -> list[tuple[str, str]]:
    """``(type, words)`` of the B-/I- spans of a tag sequence (a valid BIO sequence)."""
    spans: list[tuple[str, list[str]]] = []
    for word, tag in zip(words, tags, strict=True):
        if tag.startswith("B-") or (tag.startswith("I-") and (not spans or spans[-1][0] != tag[2:])):
            spans.append((tag[2:], [word]))
        elif tag.startswith("I-"):
            spans[-1][1].append(word)
        else:
            spans.append(("O", [word]))
    return [(kind, " ".join(group)) for kind, group in spans if kind != "O"]


# ---------------------------------------------------------------------------------------------
# Issue 15 item 1: CRF taggers decode with Viterbi in the pipeline, scored by marginals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["token-classification", "ner", "elmo-token-classification"])
@pytest.mark.parametrize("batch_size", [1, 2])
def test_crf_pipeline_tags_equal_predict_and_scores_are_marginals(tagger, marginals, task, batch_size):
    ner = pipeline(task, model=tagger, tokenizer=TOKENIZER, ignore_labels=[])
    assert type(ner) is ElmoTokenClassificationPipeline
    batch = TOKENIZER([words_of(s) for s in SENTENCES], is_split_into_words=True, padding=True, return_tensors="pt")
    predicted = tagger.predict(**batch)
    with torch.no_grad():
        argmax = tagger(**batch).logits.argmax(dim=-1)
    # The case the issue is about: the emissions' argmax (the stock pipeline's decoding) is not the CRF's path.
    differ = sum(
        tagger.config.id2label[int(a)] != p
        for row, tags in zip(argmax, predicted, strict=True)
        for a, p in zip(row, tags, strict=False)
    )
    assert differ >= 3, f"the test tagger's emissions agree with Viterbi ({differ} words differ)"

    results = ner(SENTENCES, batch_size=batch_size)
    for sentence, result, tags in zip(SENTENCES, results, predicted, strict=True):
        assert [e["word"] for e in result] == words_of(sentence)
        assert [e["entity"] for e in result] == tags
        for entity in result:
            assert sentence[entity["start"] : entity["end"]] == entity["word"]
        expected = marginals[sentence]  # (words, K)
        label_ids = [tagger.config.label2id[tag] for tag in tags]
        scores = torch.tensor([float(e["score"]) for e in result], dtype=torch.float64)
        torch.testing.assert_close(scores, expected[range(len(tags)), label_ids], atol=BATCHING_ATOL, rtol=0)
        assert all(0 < score <= 1 for score in scores.tolist())


def test_crf_pipeline_aggregation_gives_the_viterbi_spans(tagger):
    ner = pipeline("token-classification", model=tagger, tokenizer=TOKENIZER, aggregation_strategy="simple")
    batch = TOKENIZER([words_of(s) for s in SENTENCES], is_split_into_words=True, padding=True, return_tensors="pt")
    predicted = tagger.predict(**batch)
    spans_seen = 0
    for strategy in ("simple", "first", "average", "max"):
        results = ner(SENTENCES, batch_size=2, aggregation_strategy=strategy)
        for sentence, groups, tags in zip(SENTENCES, results, predicted, strict=True):
            expected = bio_spans(words_of(sentence), tags)
            assert [(g["entity_group"], g["word"]) for g in groups] == expected
            spans_seen += len(expected)
            for group in groups:
                assert sentence[group["start"] : group["end"]] == group["word"]
                assert 0 < float(group["score"]) <= 1
    assert spans_seen > 0
    # Pre-split words: the same spans, offsets into the joined words.
    (split,) = ner([words_of(SENTENCES[0])], is_split_into_words=True)
    assert [(g["entity_group"], g["word"]) for g in split] == bio_spans(words_of(SENTENCES[0]), predicted[0])


def test_crf_pipeline_on_a_saved_tagger_folder(tagger, tmp_path):
    """A saved folder, through the registered task (no remote code) and through its own copy of the pipeline
    (``trust_remote_code=True``, the way users without the package reach it): Viterbi tags in both."""
    tagger.save_pretrained(tmp_path)
    TOKENIZER.save_pretrained(tmp_path)
    expected = [e["entity"] for e in pipeline("token-classification", model=tagger, tokenizer=TOKENIZER)(SENTENCES[0])]
    for kwargs in ({"task": "elmo-token-classification"}, {"task": "token-classification", "trust_remote_code": True}):
        ner = pipeline(model=str(tmp_path), **kwargs)
        assert [e["entity"] for e in ner(SENTENCES[0])] == expected


def test_softmax_tagger_pipeline_keeps_argmax_and_softmax_scores():
    tagger = crf_tagger()
    tagger.crf = None  # the same head decoded by a per-word softmax
    ner = pipeline("token-classification", model=tagger, tokenizer=TOKENIZER, ignore_labels=[])
    (result,) = ner([SENTENCES[0]])
    with torch.no_grad():
        probabilities = tagger(**TOKENIZER(SENTENCES[0], return_tensors="pt")).logits[0].softmax(dim=-1)
    assert [e["entity"] for e in result] == [tagger.config.id2label[int(i)] for i in probabilities.argmax(dim=-1)]
    torch.testing.assert_close(
        torch.tensor([float(e["score"]) for e in result]), probabilities.max(dim=-1).values, atol=BATCHING_ATOL, rtol=0
    )


def test_other_models_keep_transformers_own_token_classification_pipeline():
    """The routing of "token-classification" to the ELMo pipeline touches ELMo taggers only."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForTokenClassification, PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "a": 2, "b": 3}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]")
    config = BertConfig(
        vocab_size=4, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, num_labels=2
    )
    ner = pipeline("token-classification", model=BertForTokenClassification(config).eval(), tokenizer=tokenizer)
    assert type(ner) is TokenClassificationPipeline
    assert [e["word"] for e in ner("a b", ignore_labels=[])] == ["a", "b"]


# ---------------------------------------------------------------------------------------------
# Issue 13 item 19: batched pipelines on sentences of different lengths
# ---------------------------------------------------------------------------------------------


def test_stock_feature_extraction_pipeline_with_a_stateful_model_and_two_mixes():
    """The stock pipeline splits ElmoModelOutput by sentence, also its LSTM state (stateful mode) and its mixes."""
    model = ElmoModel(ElmoConfig(**TINY_SIZES, stateful=True, num_output_representations=2)).eval()
    extract = pipeline("feature-extraction", model=model, tokenizer=TOKENIZER)
    vectors = extract(SENTENCES[:3], batch_size=2)
    assert [len(v[0]) for v in vectors] == [7, 7, 3]  # the stock pipeline keeps each batch's padding
    assert model.lstm_state.num_rows == 2  # rows carried, as stateful mode does
