"""Pipelines on ELMo models (issues 15, 13 and 27): a CRF tagger's ``logits`` are its max-marginals, so transformers'
stock ``token-classification`` pipeline (the generalised class registered for it) gives the Viterbi tags, also on a
tagger trained by ``elmo train-tagger`` and saved as a plain folder; the generalised class is the stock class for
every other model; the stock ``text-classification`` and ``feature-extraction`` pipelines serve ELMo folders."""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from helpers import BATCHING_ATOL, TINY_SIZES
from transformers import pipeline
from transformers.pipelines import TokenClassificationPipeline

from modeling_elmo import (
    ElmoConfig,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
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


def words_of(sentence: str) -> list[str]:
    return sentence.split()


def brute_force_max_marginals(model: ElmoForTokenClassification, sentence: str) -> torch.Tensor:
    """``(words, K)``: per word and tag, the best score (``crf.path_score``) of all tag paths through that tag,
    over every path of the sentence (5^7 for the longest), float64."""
    batch = TOKENIZER([sentence], return_tensors="pt")
    with torch.no_grad():
        emissions = model(**batch).emissions.double()  # (1, n, K)
    crf = model.crf.double()
    n, k = emissions.shape[1], emissions.shape[2]
    paths = torch.tensor(list(itertools.product(range(k), repeat=n)))  # (K^n, n)
    with torch.no_grad():
        scores = crf.path_score(emissions.expand(len(paths), -1, -1), paths)  # (K^n,)
    crf.float()
    best = torch.full((n, k), float("-inf"), dtype=torch.float64)
    for t in range(n):
        best[t].scatter_reduce_(0, paths[:, t], scores, reduce="amax")
    return best


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
# CRF logits are max-marginals: their argmax is the Viterbi path
# ---------------------------------------------------------------------------------------------


def test_crf_logits_are_the_max_marginals_and_their_argmax_is_viterbi(tagger):
    for sentence in SENTENCES:
        batch = TOKENIZER([sentence], return_tensors="pt")
        with torch.no_grad():
            out = tagger(**batch)
        # float32 recursion against float64 enumeration: sums of ~10 terms of size ~3 (measured <= 1e-5); tags only
        # forbidden paths reach score ~-1e4 (FORBIDDEN_SCORE), where float32's step is ~1e-3 (measured 4e-8 relative)
        expected = brute_force_max_marginals(tagger, sentence)
        torch.testing.assert_close(out.logits[0].double(), expected, atol=1e-4, rtol=1e-6)
        viterbi = tagger.crf.viterbi_tags(out.emissions)[0]
        assert torch.equal(out.logits[0].argmax(dim=-1), viterbi)


def test_crf_pipeline_gives_the_viterbi_tags_where_the_emissions_argmax_does_not(tagger):
    batch = TOKENIZER([words_of(s) for s in SENTENCES], is_split_into_words=True, padding=True, return_tensors="pt")
    predicted = tagger.predict(**batch)
    with torch.no_grad():
        out = tagger(**batch)
    # The case that matters: the emissions' argmax (what the stock pipeline would give on emissions) is not the path.
    differ = sum(
        tagger.config.id2label[int(a)] != p
        for row, tags in zip(out.emissions.argmax(dim=-1), predicted, strict=True)
        for a, p in zip(row, tags, strict=False)
    )
    assert differ >= 3, f"the test tagger's emissions agree with Viterbi ({differ} words differ)"
    for task in ("token-classification", "ner"):
        ner = pipeline(task, model=tagger, tokenizer=TOKENIZER, ignore_labels=[])
        assert type(ner) is ElmoTokenClassificationPipeline
        for batch_size in (1, 2):
            results = ner(SENTENCES, batch_size=batch_size)
            for row, (sentence, result, tags) in enumerate(zip(SENTENCES, results, predicted, strict=True)):
                assert [e["word"] for e in result] == words_of(sentence)
                assert [e["entity"] for e in result] == tags
                for entity in result:
                    assert sentence[entity["start"] : entity["end"]] == entity["word"]
                # The stock score: the softmax of the logits (here max-marginals) at the chosen tag.
                n = len(tags)
                expected = out.logits[row, :n].softmax(dim=-1).max(dim=-1).values
                got = torch.tensor([float(e["score"]) for e in result])
                torch.testing.assert_close(got, expected, atol=BATCHING_ATOL, rtol=0)


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


# ---------------------------------------------------------------------------------------------
# A tagger trained by `elmo train-tagger`, saved as a plain folder: the stock task, no remote code
# ---------------------------------------------------------------------------------------------


def _conll_sentences(path, count: int) -> list[list[str]]:
    sentences, words = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-DOCSTART-"):
            continue
        if not line.strip():
            if words:
                sentences.append(words)
                words = []
            if len(sentences) == count:
                break
            continue
        words.append(line.split()[0])
    return sentences


@pytest.fixture(scope="module")
def trained_tagger(shared_data_dir, tmp_path_factory):
    pytest.importorskip("datasets")
    pytest.importorskip("seqeval")
    from modeling_elmo.demo_models.model import demo_model_path
    from modeling_elmo.training import train_tagger

    out = tmp_path_factory.mktemp("trained") / "tagger"
    args = (
        f"--bilm {demo_model_path()} --train_file {shared_data_dir / 'conll2003' / 'train.txt'} "
        f"--max_train_sentences 800 --output_dir {out} --max_steps 100 --per_device_train_batch_size 16 "
        "--learning_rate 0.01 --hidden_size 16 --num_layers 1 --word_dim 8 "
        "--eval_strategy no --disable_tqdm true --use_cpu --seed 0"
    ).split()
    assert train_tagger.main(args) == 0
    return out


def test_stock_pipeline_on_a_trained_crf_tagger_folder_gives_viterbi_on_every_dev_word(trained_tagger, shared_data_dir):
    """The issue's "done when": `import modeling_elmo`, then `pipeline("token-classification", model=FOLDER)` on a
    CRF tagger written by `elmo train-tagger`, without trust_remote_code, on CoNLL dev sentences."""
    files = sorted(os.listdir(trained_tagger))
    assert not [f for f in files if f.endswith(".py")], files
    config = ElmoConfig.from_pretrained(trained_tagger)
    assert not getattr(config, "custom_pipelines", None) and not getattr(config, "auto_map", None)
    assert config.use_crf

    sentences = _conll_sentences(shared_data_dir / "conll2003" / "dev.txt", 120)
    ner = pipeline("token-classification", model=str(trained_tagger), ignore_labels=[])
    model, tokenizer = ner.model, ner.tokenizer
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", return_vocab_ids=True)
    viterbi = model.predict(**batch)
    with torch.no_grad():
        out = model(**batch)
    mask = batch["attention_mask"].bool()
    # argmax of the logits == the Viterbi path, word by word (ties: see docs/transformers-integration.md)
    assert torch.equal(out.logits.argmax(dim=-1)[mask], model.crf.viterbi_tags(out.emissions, mask)[mask])
    results = ner(sentences, is_split_into_words=True, batch_size=8)  # CoNLL's words, as the tagger was trained
    words_seen = 0
    for words, result, tags in zip(sentences, results, viterbi, strict=True):
        assert [e["word"] for e in result] == words
        assert [e["entity"] for e in result] == tags
        words_seen += len(words)
    assert words_seen > 1500
    assert len({tag for tags in viterbi for tag in tags}) > 2  # a tagger that tags, not all "O"


# ---------------------------------------------------------------------------------------------
# The generalised class is the stock class for every other model (side by side)
# ---------------------------------------------------------------------------------------------


def _small_bert(vocab: dict[str, int], wordpiece: bool):
    """A small BERT token classifier built from a config (random weights, no download) and a local tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertForTokenClassification, PreTrainedTokenizerFast

    model = models.WordPiece(vocab, unk_token="[UNK]") if wordpiece else models.WordLevel(vocab, unk_token="[UNK]")
    words = Tokenizer(model)
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]")
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        id2label={0: "O", 1: "B-X", 2: "I-X"},
        label2id={"O": 0, "B-X": 1, "I-X": 2},
    )
    torch.manual_seed(3)
    return BertForTokenClassification(config).eval(), tokenizer


@pytest.mark.parametrize("wordpiece", [False, True])
def test_other_models_get_the_same_results_as_from_the_stock_class(wordpiece):
    vocab = {"[UNK]": 0, "[PAD]": 1, "a": 2, "b": 3, "##a": 4, "##b": 5, "c": 6}
    model, tokenizer = _small_bert(vocab, wordpiece)
    registered = pipeline("token-classification", model=model, tokenizer=tokenizer)
    assert type(registered) is ElmoTokenClassificationPipeline and isinstance(registered, TokenClassificationPipeline)
    stock = TokenClassificationPipeline(model=model, tokenizer=tokenizer)
    texts = ["a b ab", "ba c a", "zz a"]
    for strategy in ("none", "simple", "first", "average", "max"):
        for batch_size in (1, 2):
            kwargs = {"aggregation_strategy": strategy, "ignore_labels": [], "batch_size": batch_size}
            assert registered(texts, **kwargs) == stock(texts, **kwargs), strategy
    words = [["a", "b"], ["ab", "c"]]
    kwargs = {"is_split_into_words": True, "ignore_labels": []}
    assert registered(words, **kwargs) == stock(words, **kwargs)


# ---------------------------------------------------------------------------------------------
# The stock text-classification and feature-extraction pipelines on ELMo folders
# ---------------------------------------------------------------------------------------------


def test_stock_text_classification_pipeline_on_a_saved_classifier_folder(tmp_path):
    config = ElmoConfig(**TINY_SIZES, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(config).eval()
    model.save_pretrained(tmp_path)
    TOKENIZER.save_pretrained(tmp_path)
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".py")]
    classify = pipeline("text-classification", model=str(tmp_path))
    texts = ["the cat sat on the mat .", "hi", "Paris is big"]
    with torch.no_grad():
        probabilities = [model(**TOKENIZER(t, return_tensors="pt")).logits[0].softmax(-1) for t in texts]
    for batch_size in (1, 2):
        results = classify(texts, batch_size=batch_size)
        for result, p in zip(results, probabilities, strict=True):
            assert result["label"] == config.id2label[int(p.argmax())]
            assert abs(result["score"] - float(p.max())) < 1e-5


def test_stock_feature_extraction_pipeline_with_a_stateful_model_and_two_mixes():
    """The stock pipeline splits ElmoModelOutput by sentence, also its LSTM state (stateful mode) and its mixes."""
    model = ElmoModel(ElmoConfig(**TINY_SIZES, stateful=True, num_output_representations=2)).eval()
    extract = pipeline("feature-extraction", model=model, tokenizer=TOKENIZER)
    vectors = extract(SENTENCES[:3], batch_size=2)
    assert [len(v[0]) for v in vectors] == [7, 7, 3]  # the stock pipeline keeps each batch's padding
    assert model.lstm_state.num_rows == 2  # rows carried, as stateful mode does


def test_stock_fill_mask_with_an_elmo_model_instance_names_elmo_fill_mask(tmp_path):
    """Issue 49: ``pipeline("fill-mask", model=<ELMo instance>)`` said only "The tokenizer does not define a
    `mask_token`"; it names "elmo-fill-mask" as a folder does. A BERT instance still fills the mask (stock class)."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    from modeling_elmo import ElmoForPreTraining

    for model in (ElmoModel(ElmoConfig(**TINY_SIZES)), ElmoForPreTraining(ElmoConfig(**TINY_SIZES, lm_vocab_size=5))):
        with pytest.raises(ValueError, match=r"pipeline\('elmo-fill-mask', model=FOLDER\)"):
            pipeline("fill-mask", model=model.eval(), tokenizer=TOKENIZER)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]) + "\n")
    torch.manual_seed(0)
    bert = BertForMaskedLM(
        BertConfig(vocab_size=8, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    ).eval()
    filled = pipeline("fill-mask", model=bert, tokenizer=BertTokenizerFast(vocab_file=str(vocab)))("the [MASK] sat")
    assert len(filled) == 5 and all("token_str" in answer for answer in filled)
