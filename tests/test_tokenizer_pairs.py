"""Sentence pairs in ElmoTokenizer (issue 45), each case against the same call on a real fast BERT tokenizer.

ELMo adds no special tokens: a pair is text A's words, then text B's words, one row of character ids each. So the
expected pattern is BERT's with its [CLS]/[SEP] positions left out: same token_type_ids, sequence_ids, word_ids,
offsets (into each text's own string), same number of overflow windows and the same sample mapping. The tiny BERT
vocabulary holds every word used here, so that one BERT token is one word.
"""

from __future__ import annotations

import numpy as np
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
        lambda t: t(text=["Who sat ?", "Where is it ?"], text_pair=["The cat sat .", "It is in the park ."], padding=True),
        lambda t: t([("Who sat ?", "The cat sat ."), ("Where is it ?", "It is in the park .")], padding=True),
        lambda t: t([["Who", "sat", "?"], ["Where", "is", "it", "?"]], [["The", "cat", "sat", "."], ["It", "is", "in", "the", "park", "."]], is_split_into_words=True, padding=True),  # noqa: E501
        lambda t: t([(["Who", "sat", "?"], ["The", "cat", "sat", "."]), (["Where", "is", "it", "?"], ["It", "is", "in", "the", "park", "."])], is_split_into_words=True, padding=True),  # noqa: E501
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
