"""Tokenizer habits of transformers users (issue 42), each against the same call on a real fast BERT tokenizer.

The model habits are in tests/test_transformers_habits.py.
"""

from __future__ import annotations

import logging

import pytest
from transformers import BertTokenizerFast, DataCollatorWithPadding

from modeling_elmo import ElmoTokenizer
from modeling_elmo.characters import word_to_char_ids

WORDS = ["hi", "there", "the", "cat", "sat", "premise", "hypothesis", "."]


@pytest.fixture
def bert(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    return BertTokenizerFast(vocab=str(path), do_lower_case=False)


@pytest.mark.parametrize(
    "add",
    [
        lambda t: t.add_special_tokens({"additional_special_tokens": ["<ENT>"]}),
        lambda t: t.add_tokens(["<ENT>"], special_tokens=True),
    ],
    ids=["add_special_tokens", "add_tokens-special"],
)
@pytest.mark.parametrize("text", ["hi <ENT> there", "hi<ENT>there", "<ENT>.", "  <ENT>  "])
def test_an_added_special_token_is_one_word(bert, add, text):
    tok = ElmoTokenizer()
    assert add(tok) == add(bert) == 1
    words = bert.tokenize(text)
    assert "<ENT>" in words
    assert tok.tokenize(text) == words
    enc = tok(text, return_offsets_mapping=True)
    ref = bert(text, return_offsets_mapping=True, add_special_tokens=False)
    assert enc["offset_mapping"] == ref["offset_mapping"]
    assert enc.word_ids() == ref.word_ids()
    assert enc["input_ids"] == [word_to_char_ids(word) for word in words]


@pytest.mark.parametrize("split_special_tokens", [None, False])
def test_an_added_special_tokens_id_and_token_agree_as_in_bert(bert, split_special_tokens):
    """Issue 49: ``tokens()`` and ``vocab_ids`` gave ``<UNK>`` for an added special token that
    ``convert_ids_to_tokens`` knew; they give its own id and token, as BERT's ``tokens()`` and ``input_ids`` do."""
    tok = ElmoTokenizer()
    for t in (tok, bert):
        t.add_special_tokens({"additional_special_tokens": ["<ENT>"]})
    options = {} if split_special_tokens is None else {"split_special_tokens": split_special_tokens}
    enc = tok("hi <ENT> there", return_vocab_ids=True, **options)
    ref = bert("hi <ENT> there", add_special_tokens=False, **options)
    assert ref.tokens() == ["hi", "<ENT>", "there"] and ref["input_ids"][1] == len(bert) - 1
    assert enc.tokens() == ["<UNK>", "<ENT>", "<UNK>"]  # hi, there: not in the three-word default vocabulary
    assert enc["vocab_ids"] == [tok.unk_token_id, len(tok) - 1, tok.unk_token_id]
    assert tok.convert_ids_to_tokens(enc["vocab_ids"][1]) == "<ENT>"
    assert tok.tokenize("a <pad> b") == ["a", "<", "pad", ">", "b"]  # the tokenizer's own pad: still characters
    assert tok("hi there").tokens() == ["<UNK>", "<UNK>"] and len(tok.get_vocab()) == len(tok)


def test_added_special_tokens_stay_whole_after_a_reload_and_in_pairs(tmp_path):
    tok = ElmoTokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<ENT>", "[E2]"]})
    tok.save_pretrained(tmp_path)
    loaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert loaded.tokenize("<ENT> met [E2].") == ["<ENT>", "met", "[E2]", "."]
    enc = loaded("<ENT> sat", "[E2] ran")
    assert loaded.decode(enc["input_ids"]) == "<ENT> sat [E2] ran"
    assert enc["token_type_ids"] == [0, 0, 1, 1]
    # The tokenizer's own pad token is no word of the biLM's vocabulary: in text it stays characters.
    assert loaded.tokenize("a <pad> b") == ["a", "<", "pad", ">", "b"]


def test_padding_max_length_without_max_length_warns(bert, caplog):
    """transformers 5.24's own tokenizers leave the lists unpadded and say nothing; transformers 4 warned, and so
    does ElmoTokenizer (once per tokenizer), naming the fix. The output is BERT's: nothing padded."""
    tok = ElmoTokenizer()
    texts = ["hi there", "hi"]
    with caplog.at_level(logging.WARNING):
        ref = bert(texts, padding="max_length", add_special_tokens=False)
    assert not [r for r in caplog.records if "max_length" in r.getMessage()]
    with caplog.at_level(logging.WARNING):
        enc = tok(texts, padding="max_length")
    warnings = [r.getMessage() for r in caplog.records if "max_length" in r.getMessage()]
    assert len(warnings) == 1 and "pass max_length=N" in warnings[0]
    assert [len(ids) for ids in enc["input_ids"]] == [len(ids) for ids in ref["input_ids"]] == [2, 1]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        tok(texts, padding="max_length")  # once per tokenizer, as transformers 4 did
        tok(texts, padding="max_length", max_length=3)  # a length: no warning
    assert not [r for r in caplog.records if "max_length" in r.getMessage()]


def test_padding_max_length_in_a_collator_warns(bert, caplog):
    """A collator with padding="max_length" and no max_length: nothing is padded, so the tensors cannot be made,
    for BERT as for ELMo; ElmoTokenizer's warning says why before the error."""
    tok = ElmoTokenizer()
    with pytest.raises(ValueError, match="Unable to create tensor"):
        DataCollatorWithPadding(bert, padding="max_length")([dict(bert("hi there")), dict(bert("hi"))])
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="Unable to create tensor"):
        DataCollatorWithPadding(tok, padding="max_length")([dict(tok("hi there")), dict(tok("hi"))])
    assert any("pass max_length=N" in r.getMessage() for r in caplog.records)
    batch = DataCollatorWithPadding(tok, padding="max_length", max_length=3)([dict(tok("hi there")), dict(tok("hi"))])
    assert batch["input_ids"].shape == (2, 3, 50)


def test_a_batch_of_two_texts_is_a_pair_as_zero_shot_passes_it(bert):
    """The zero-shot pipeline passes [[premise, hypothesis]]: a pair, not words that lack is_split_into_words."""
    tok = ElmoTokenizer()
    enc, ref = tok([["premise", "hypothesis"]]), bert([["premise", "hypothesis"]])
    assert enc["token_type_ids"] == [[0, 1]]
    assert ref["token_type_ids"] == [[0, 0, 0, 1, 1]]  # [CLS] premise [SEP] hypothesis [SEP]
    assert enc.sequence_ids(0) == [s for s in ref.sequence_ids(0) if s is not None]
