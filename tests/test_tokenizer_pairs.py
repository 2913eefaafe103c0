"""Sentence pairs in ElmoTokenizer (issue 45), each case against the same call on a real fast BERT tokenizer.

ELMo adds no special tokens: a pair is text A's words, then text B's words, one row of character ids each. So the
expected pattern is BERT's with its [CLS]/[SEP] positions left out: same token_type_ids, sequence_ids, word_ids,
offsets (into each text's own string), same number of overflow windows and the same sample mapping. The tiny BERT
vocabulary holds every word used here, so that one BERT token is one word.
"""

from __future__ import annotations

import pytest
import torch
from transformers import BertTokenizerFast

from modeling_elmo import ElmoTokenizer
from modeling_elmo.characters import word_to_char_ids

C = 50
WORDS = (
    "who what sat where is the cat on mat a dog ran in park today and then home it was sunny . ? , "
    "new york city lives did"
).split()

QUESTION = "Who sat ?"
CONTEXT = "The cat sat on the mat today , and then the dog ran in the park . It was sunny ."


@pytest.fixture(scope="module")
def tok():
    return ElmoTokenizer()


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert") / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(path))
    assert tokenizer.unk_token_id not in tokenizer(QUESTION, CONTEXT)["input_ids"]  # one token per word
    return tokenizer


CLS, SEP = 2, 3  # BERT's special token ids in the vocabulary above


def without_specials(bert_encoding, index: int, key: str) -> list:
    """BERT's values of ``key`` in row ``index`` with its special tokens ([CLS], [SEP]) left out (padding stays)."""
    batched = isinstance(bert_encoding["input_ids"][0], list)
    ids = bert_encoding["input_ids"][index] if batched else bert_encoding["input_ids"]
    values = bert_encoding[key][index] if batched else bert_encoding[key]
    return [value for token, value in zip(ids, values, strict=True) if token not in (CLS, SEP)]


def rows(words: list[str]) -> list[list[int]]:
    return [word_to_char_ids(word) for word in words]


def test_a_pair_is_the_first_texts_words_then_the_seconds(tok, bert):
    enc = tok(QUESTION, CONTEXT, return_offsets_mapping=True)
    ref = bert(QUESTION, CONTEXT, return_offsets_mapping=True)
    first, second = QUESTION.split(), CONTEXT.split()
    assert enc["input_ids"] == rows(first + second)
    assert enc["token_type_ids"] == [0] * len(first) + [1] * len(second)
    assert enc["attention_mask"] == [1] * (len(first) + len(second))
    assert enc["token_type_ids"] == without_specials(ref, 0, "token_type_ids")
    assert enc.sequence_ids() == [s for s in ref.sequence_ids() if s is not None]
    assert enc.word_ids() == [w for w in ref.word_ids() if w is not None]
    assert enc["offset_mapping"] == without_specials(ref, 0, "offset_mapping")
    # Offsets point into each text's own string.
    texts = (QUESTION, CONTEXT)
    spans = [texts[s][a:b] for s, (a, b) in zip(enc.sequence_ids(), enc["offset_mapping"], strict=True)]
    assert spans == first + second
    assert enc.char_to_word(CONTEXT.index("mat"), sequence_index=1) == 5
    assert enc.word_to_chars(5, sequence_index=1) == ref.word_to_chars(5, sequence_index=1)
    assert tok.decode(enc["input_ids"]) == f"{QUESTION} {CONTEXT}"


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t(["Who sat ?", "Where is it ?"], ["The cat sat .", "It is in the park ."], padding=True),
        lambda t: t(
            text=["Who sat ?", "Where is it ?"], text_pair=["The cat sat .", "It is in the park ."], padding=True
        ),
        lambda t: t([("Who sat ?", "The cat sat ."), ("Where is it ?", "It is in the park .")], padding=True),
        lambda t: t(
            [["Who", "sat", "?"], ["Where", "is", "it", "?"]],
            [["The", "cat", "sat", "."], ["It", "is", "in", "the", "park", "."]],
            is_split_into_words=True,
            padding=True,
        ),  # noqa: E501
        lambda t: t(
            [
                (["Who", "sat", "?"], ["The", "cat", "sat", "."]),
                (["Where", "is", "it", "?"], ["It", "is", "in", "the", "park", "."]),
            ],
            is_split_into_words=True,
            padding=True,
        ),  # noqa: E501
    ],
    ids=["positional", "keywords", "pairs-in-text", "split-words", "split-pairs-in-text"],
)
def test_batches_of_pairs_match_bert(tok, bert, call):
    enc, ref = call(tok), call(bert)
    assert len(enc["input_ids"]) == len(ref["input_ids"]) == 2
    for index in range(2):
        assert enc["token_type_ids"][index] == without_specials(ref, index, "token_type_ids")
        assert enc["attention_mask"][index] == without_specials(ref, index, "attention_mask")
        assert enc.sequence_ids(index) == [s for s in ref.sequence_ids(index) if s is not None] + [None] * (
            len(enc["input_ids"][index]) - len([s for s in ref.sequence_ids(index) if s is not None])
        )
    assert tok.decode(enc["input_ids"]) == ["Who sat ? The cat sat .", "Where is it ? It is in the park ."]
    tensors = call(lambda *a, **k: tok(*a, **k, return_tensors="pt"))
    assert tensors["input_ids"].shape == (2, 10, C) and tensors["token_type_ids"].tolist() == enc["token_type_ids"]


def test_single_texts_are_unchanged_by_pairs(tok):
    single = tok(["The cat sat .", "Hi"], padding=True, return_offsets_mapping=True)
    assert set(single) == {"input_ids", "attention_mask", "offset_mapping"}  # no token_type_ids
    assert single.sequence_ids(0) == [0, 0, 0, 0]
    assert tok("The cat sat .", return_token_type_ids=True)["token_type_ids"] == [0, 0, 0, 0]
    assert "token_type_ids" not in tok("a", "b", return_token_type_ids=False)


# ---------------------------------------------------------------------------------------------
# Truncation and overflow windows: BERT's max_length counts its 3 special tokens, ELMo's counts words only.
# ---------------------------------------------------------------------------------------------

SPECIALS_IN_A_PAIR = 3  # [CLS] A [SEP] B [SEP]


def assert_windows_match(enc, ref):
    """Same windows (count, sample mapping, which text each word is from, word ids, offsets) minus BERT's specials."""
    assert len(enc["input_ids"]) == len(ref["input_ids"])
    if "overflow_to_sample_mapping" in ref:
        assert list(enc["overflow_to_sample_mapping"]) == list(ref["overflow_to_sample_mapping"])
    for index in range(len(ref["input_ids"])):
        keep = [token not in (CLS, SEP) for token in ref["input_ids"][index]]
        sequence_ids = [s for s, k in zip(ref.sequence_ids(index), keep, strict=True) if k]
        word_ids = [w for w, k in zip(ref.word_ids(index), keep, strict=True) if k]
        assert enc.sequence_ids(index) == sequence_ids
        assert enc.word_ids(index) == word_ids
        assert enc["token_type_ids"][index] == without_specials(ref, index, "token_type_ids")
        if "offset_mapping" in ref:
            assert [tuple(span) for span in enc["offset_mapping"][index]] == [
                tuple(span) for span in without_specials(ref, index, "offset_mapping")
            ]


@pytest.mark.parametrize(
    ("texts", "truncation"),
    [
        ((QUESTION, CONTEXT), "only_second"),
        ((CONTEXT, QUESTION), "only_first"),
        ((CONTEXT, CONTEXT.lower()), "longest_first"),
        ((QUESTION, CONTEXT), True),
    ],
)
@pytest.mark.parametrize("max_length", [8, 12])
def test_truncation_strategies_match_bert(tok, bert, texts, truncation, max_length):
    enc = tok(*texts, truncation=truncation, max_length=max_length, return_offsets_mapping=True)
    ref = bert(*texts, truncation=truncation, max_length=max_length + SPECIALS_IN_A_PAIR, return_offsets_mapping=True)
    assert len(enc["input_ids"]) == max_length
    assert_windows_match(BatchLike(enc), BatchLike(ref))


class BatchLike:
    """An unbatched encoding seen as a batch of one (so one comparison serves both)."""

    def __init__(self, encoding):
        self.encoding = encoding

    def __getitem__(self, key):
        return [self.encoding[key]]

    def __contains__(self, key):
        return key in self.encoding

    def sequence_ids(self, index):
        return self.encoding.sequence_ids(index)

    def word_ids(self, index):
        return self.encoding.word_ids(index)


@pytest.mark.parametrize(("truncation", "question_first"), [("only_second", True), ("only_first", False)])
@pytest.mark.parametrize(("max_length", "stride"), [(9, 2), (12, 4), (7, 0)])
def test_overflow_windows_with_stride_match_bert(tok, bert, truncation, question_first, max_length, stride):
    questions = ["Who sat ?", "Where is the dog ?", "What was sunny ?"]
    contexts = [CONTEXT, "The dog ran in the park .", "It was sunny ."]
    first, second = (questions, contexts) if question_first else (contexts, questions)
    options = {"truncation": truncation, "stride": stride, "return_overflowing_tokens": True}
    enc = tok(first, second, max_length=max_length, return_offsets_mapping=True, **options)
    ref = bert(first, second, max_length=max_length + SPECIALS_IN_A_PAIR, return_offsets_mapping=True, **options)
    assert len(enc["input_ids"]) > 3  # the first context gave several windows
    assert_windows_match(enc, ref)
    # Consecutive windows of one context share `stride` words.
    context_index = 1 if question_first else 0
    windows = [
        [w for w, s in zip(enc.word_ids(i), enc.sequence_ids(i), strict=True) if s == context_index]
        for i, sample in enumerate(enc["overflow_to_sample_mapping"])
        if sample == 0
    ]
    for left, right in zip(windows, windows[1:], strict=False):
        assert left[-stride:] == right[:stride] if stride else left[-1] + 1 == right[0]


def test_overflow_of_pre_split_pairs_matches_bert(tok, bert):
    question, context = QUESTION.split(), CONTEXT.split()
    options = {"truncation": "only_second", "stride": 2, "return_overflowing_tokens": True, "is_split_into_words": True}
    enc = tok([question], [context], max_length=8, **options)
    ref = bert([question], [context], max_length=8 + SPECIALS_IN_A_PAIR, **options)
    assert_windows_match(enc, ref)
    for index in range(len(enc["input_ids"])):
        words = [(question, context)[s][w] for s, w in zip(enc.sequence_ids(index), enc.word_ids(index), strict=True)]
        assert tok.decode(enc["input_ids"][index]) == " ".join(words)


def test_padding_of_overflow_windows_matches_bert(tok, bert):
    options = {"truncation": "only_second", "stride": 1, "return_overflowing_tokens": True}
    enc = tok(QUESTION, CONTEXT, max_length=10, padding="max_length", return_tensors="pt", **options)
    ref = bert(
        QUESTION, CONTEXT, max_length=10 + SPECIALS_IN_A_PAIR, padding="max_length", return_tensors="pt", **options
    )
    assert enc["input_ids"].shape == (ref["input_ids"].shape[0], 10, C)
    assert enc["token_type_ids"].shape == enc["attention_mask"].shape == (ref["input_ids"].shape[0], 10)
    last = enc["attention_mask"][-1].tolist()
    assert last == without_specials(
        {"input_ids": [ref["input_ids"][-1].tolist()], "a": [ref["attention_mask"][-1].tolist()]}, 0, "a"
    )
    assert enc["input_ids"][-1][torch.tensor(last) == 0].abs().sum() == 0  # padded words are rows of zeros
    # Ragged windows in NumPy: an object array of per-window arrays, as transformers makes them for BERT.
    ragged = tok(QUESTION, CONTEXT, max_length=10, return_tensors="np", **options)
    ref = bert(QUESTION, CONTEXT, max_length=10 + SPECIALS_IN_A_PAIR, return_tensors="np", **options)
    assert ragged["input_ids"].dtype == ref["input_ids"].dtype == object
    assert [window.shape for window in ragged["input_ids"]] == [
        (len(w) - SPECIALS_IN_A_PAIR, C) for w in ref["input_ids"]
    ]
    with pytest.raises(ValueError, match="padding=True"):
        tok(QUESTION, CONTEXT, max_length=10, return_tensors="pt", **options)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t("a b c", truncation="only_second", max_length=2), "needs sentence pairs"),
        (lambda t: t("a b c d", "e", truncation="only_second", max_length=3), "cannot fit"),
        (lambda t: t("a b", "c d e f g", truncation="only_second", max_length=4, stride=2), "stride=2"),
        (lambda t: t("a b c", truncation=True, max_length=2, stride=2), "stride=2 must be smaller"),
        (lambda t: t("a b", "c d", truncation="only_second", max_length=0), r"max_length must be at least 1 .*=0"),
        (lambda t: t("a b", "c d", truncation="longest_first", max_length=-1), r"max_length must be .*=-1"),
        (lambda t: t("a b", truncation=True, max_length=0), r"max_length must be at least 1 .*=0"),
        (lambda t: t("a b c", "d", truncation="only_second", max_length=3), "too short"),  # the backend's words
        (lambda t: t(["a", "b"], ["c"]), "batch length"),
        (lambda t: t(["a", "b"], "c"), "both be batches"),
        (lambda t: t([("a", "b")], ["c"]), "not both"),
        (lambda t: t(["a"], [["c"]]), r"text_pair\[0\] is a list"),
        (lambda t: t([(["a"], ["b"])], [["c"]], is_split_into_words=True), "not both"),
        (lambda t: t([(["a"], [None])], is_split_into_words=True), "pair 0, second text, word 0 is NoneType"),
    ],
)
def test_bad_pairs_give_a_clear_error(tok, call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call(tok)


# ---------------------------------------------------------------------------------------------
# The stock recipes' tokenizer calls, in our own words
# ---------------------------------------------------------------------------------------------

SQUAD = {
    "question": ["Who sat on the mat ?", "Where did the dog run ?", "What was sunny ?"],
    "context": [CONTEXT, CONTEXT, "It was sunny ."],
    "answers": [
        {"text": ["The cat"], "answer_start": [0]},
        {"text": ["the park"], "answer_start": [CONTEXT.index("the park")]},
        {"text": ["It"], "answer_start": [0]},
    ],
}


def label_answers(tokenizer, examples, max_length: int, stride: int, padding):
    """run_qa.py's training features: question and context as a pair (order from ``padding_side``), overflow windows
    with a stride, and the answer's first and last token found from ``sequence_ids`` and the offsets."""
    pad_on_right = tokenizer.padding_side == "right"
    features = tokenizer(
        examples["question" if pad_on_right else "context"],
        examples["context" if pad_on_right else "question"],
        truncation="only_second" if pad_on_right else "only_first",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=padding,
    )
    sample_mapping = features.pop("overflow_to_sample_mapping")
    offset_mapping = features.pop("offset_mapping")
    context_index = 1 if pad_on_right else 0
    positions = []
    for i, offsets in enumerate(offset_mapping):
        input_ids = features["input_ids"][i]
        # The "no answer" position: the [CLS] token, or 0 where there is none (ELMo).
        cls_index = input_ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in input_ids else 0
        sequence_ids = features.sequence_ids(i)
        answer = examples["answers"][sample_mapping[i]]
        start_char = answer["answer_start"][0]
        end_char = start_char + len(answer["text"][0])
        first = sequence_ids.index(context_index)
        last = len(sequence_ids) - 1 - sequence_ids[::-1].index(context_index)
        if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
            positions.append((cls_index, cls_index))
            continue
        start = next(k for k in range(first, last + 1) if offsets[k][1] > start_char)
        end = next(k for k in range(last, first - 1, -1) if offsets[k][0] < end_char)
        positions.append((start, end))
    return features, sample_mapping, positions


@pytest.mark.parametrize("padding", [False, "max_length"])
def test_run_qa_features_match_bert(tok, bert, padding):
    enc, enc_samples, enc_positions = label_answers(tok, SQUAD, max_length=10, stride=3, padding=padding)
    ref, ref_samples, ref_positions = label_answers(bert, SQUAD, max_length=13, stride=3, padding=padding)
    assert list(enc_samples) == list(ref_samples)
    assert len(enc_positions) > len(SQUAD["question"])  # the long contexts overflowed
    for index, ((start, end), (ref_start, ref_end)) in enumerate(zip(enc_positions, ref_positions, strict=True)):
        if ref_start == 0:  # BERT's [CLS]: the answer is not in this window
            assert (start, end) == (0, 0)
            continue
        # The same words: BERT's positions less its [CLS] and first [SEP] before the context.
        assert (start, end) == (ref_start - 2, ref_end - 2)
        answer = SQUAD["answers"][enc_samples[index]]["text"][0]
        assert tok.decode(enc["input_ids"][index][start : end + 1]) == answer
    if padding == "max_length":
        assert {len(ids) for ids in enc["input_ids"]} == {10}
        assert {len(mask) for mask in enc["token_type_ids"]} == {10}


def test_question_answering_pipeline_call(tok, bert):
    """The call of transformers 4's question-answering pipeline (removed in 5.x, where run_qa.py remains): one example,
    NumPy, overflow windows, then p_mask from sequence_ids and the answer's characters from each window's encoding."""
    question, context = "Where did the dog run ?", CONTEXT
    results = {}
    for name, tokenizer, max_length in (("elmo", tok, 10), ("bert", bert, 13)):
        question_first = tokenizer.padding_side == "right"
        encoded = tokenizer(
            text=question if question_first else context,
            text_pair=context if question_first else question,
            padding="do_not_pad",
            truncation="only_second" if question_first else "only_first",
            max_length=max_length,
            stride=3,
            return_tensors="np",
            return_token_type_ids=True,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )
        spans = len(encoded["input_ids"])
        p_mask = [[token != 1 for token in encoded.sequence_ids(span)] for span in range(spans)]
        fw_args = [
            {k: torch.tensor(encoded[k][span]).unsqueeze(0) for k in tokenizer.model_input_names}
            for span in range(spans)
        ]
        # Each window's answer: the context's words "the park", found back through the window's encoding.
        answers = []
        for span in range(spans):
            enc = encoded[span]
            words = [enc.token_to_word(t) for t, is_question in enumerate(p_mask[span]) if not is_question]
            if context.index("park") in [enc.word_to_chars(w, sequence_index=1)[0] for w in words if w is not None]:
                chars = enc.word_to_chars(context.split().index("park"), sequence_index=1)
                answers.append(context[chars[0] : chars[1]])
        results[name] = (spans, answers, fw_args)
    assert results["elmo"][0] == results["bert"][0] > 1
    assert results["elmo"][1] == results["bert"][1] == ["park"] * len(results["bert"][1])
    first = results["elmo"][2][0]
    assert first["input_ids"].shape[-1] == C and first["token_type_ids"].shape == first["attention_mask"].shape


@pytest.fixture(scope="module")
def pair_classifier():
    from modeling_elmo import ElmoConfig, ElmoForSequenceClassification

    config = ElmoConfig(
        lstm_dim=16,
        projection_dim=8,
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 4]],
        num_labels=3,
        id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
        label2id={"entailment": 0, "neutral": 1, "contradiction": 2},
        classifier_head="pair",  # ESIM's pair head: the pipelines below give it pairs
    )
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(config).eval()
    seen = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(dict(kwargs)), with_kwargs=True)
    return model, seen


def test_zero_shot_pipeline_gives_the_model_pairs(tok, pair_classifier):
    from transformers import pipeline

    model, seen = pair_classifier
    seen.clear()
    classify = pipeline("zero-shot-classification", model=model, tokenizer=tok)
    result = classify("The cat sat on the mat .", candidate_labels=["animals", "finance"])
    assert sorted(result["labels"]) == ["animals", "finance"] and abs(sum(result["scores"]) - 1) < 1e-6
    assert len(seen) == 2
    for call, label in zip(seen, ["animals", "finance"], strict=True):
        hypothesis = tok.tokenize(f"This example is {label}.")
        assert call["token_type_ids"].tolist() == [[0] * 7 + [1] * len(hypothesis)]
        assert call["input_ids"].shape == (1, 7 + len(hypothesis), C)


def test_zero_shot_pipeline_retries_without_truncation_when_the_label_is_too_long(pair_classifier):
    """Issue 49: with ``model_max_length`` set and a hypothesis of that many words, the zero-shot pipeline's
    ``truncation="only_first"`` fails and it retries without truncation when the error says "too short" (its
    test); the tokenizer's message keeps those words, so the pipeline answers, as with a stock tokenizer."""
    from transformers import pipeline

    tok = ElmoTokenizer(model_max_length=8)
    model, seen = pair_classifier
    seen.clear()
    classify = pipeline("zero-shot-classification", model=model, tokenizer=tok)
    label = "a very long label of many words"
    result = classify("The cat sat on the mat .", candidate_labels=[label, "finance"])
    assert sorted(result["labels"]) == sorted([label, "finance"])
    hypothesis = tok.tokenize(f"This example is {label}.")
    # The long label's pair whole (the retry), the short one's premise cut to fit 8 words.
    assert len(hypothesis) >= 8 and [call["input_ids"].shape[1] for call in seen] == [7 + len(hypothesis), 8]


def test_text_classification_pipeline_with_text_pair(tok, pair_classifier):
    from transformers import pipeline

    model, seen = pair_classifier
    seen.clear()
    classify = pipeline("text-classification", model=model, tokenizer=tok)
    result = classify({"text": "The cat sat .", "text_pair": "A cat sat on the mat ."})
    assert result["label"] in model.config.label2id
    assert seen[0]["token_type_ids"].tolist() == [[0] * 4 + [1] * 7]


def test_run_glue_pair_features_and_collators(tok):
    """run_glue.py on a pair task: Dataset.map of tokenizer(sentence1, sentence2, padding, max_length, truncation=True),
    then default_data_collator (padded to max_length) or DataCollatorWithPadding (padded per batch)."""
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast, default_data_collator

    assert isinstance(tok, PreTrainedTokenizerFast)  # what run_qa.py and run_glue.py check
    data = Dataset.from_dict(
        {
            "sentence1": ["The cat sat on the mat .", "It was sunny ."],
            "sentence2": ["A cat sat .", "The dog ran in the park today ."],
            "label": [1, 0],
        }
    )
    for padding, collator in (("max_length", default_data_collator), (False, DataCollatorWithPadding(tok))):

        def preprocess(examples, padding=padding):
            return tok(examples["sentence1"], examples["sentence2"], padding=padding, max_length=9, truncation=True)

        features = data.map(preprocess, batched=True, remove_columns=["sentence1", "sentence2"])
        batch = collator([features[i] for i in range(len(features))])
        assert batch["input_ids"].shape == (2, 9, C)  # both pairs were cut to 9 words: the longer text first
        assert batch["token_type_ids"].tolist() == [[0] * 5 + [1] * 4, [0] * 4 + [1] * 5]
        assert batch["labels"].tolist() == [1, 0]
    assert tok.encode("It was sunny .", "A cat sat .") == rows("It was sunny . A cat sat .".split())
    pad = tok.pad([dict(tok("a b", "c")), dict(tok("d", "e"))], return_tensors="pt")
    assert pad["token_type_ids"].tolist() == [[0, 0, 1], [0, 1, 0]]
    assert pad["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
