"""Tests of the ELMo tokenizer: words to (batch, words, 50) character ids."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForTokenClassification, DataCollatorWithPadding

import modeling_elmo
from modeling_elmo.characters import word_to_char_ids
from modeling_elmo.tokenization_elmo import ElmoTokenizer

C = 50
CAT = [259, 100, 98, 117, 260] + [261] * 45  # [258, 'c', 'a', 't', 259, 260...] + 1
BOS_ROW = [259, 257, 260] + [261] * 47  # [258, 256, 259, 260...] + 1
EOS_ROW = [259, 258, 260] + [261] * 47  # [258, 257, 259, 260...] + 1
ZERO_ROW = [0] * C


def row(word: str, max_chars: int = C) -> list[int]:
    """Expected row, by hand: UTF-8 bytes cut to max_chars - 2, word marks, padding marks, +1."""
    data = list(word.encode("utf-8", errors="ignore"))[: max_chars - 2]
    ids = [258, *data, 259] + [260] * (max_chars - 2 - len(data))
    return [i + 1 for i in ids]


@pytest.fixture(scope="module")
def tok():
    return ElmoTokenizer()


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("<S>\n</S>\n<UNK>\nthe\n.\ncat\nsat\n,\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def vtok(vocab_file):
    return ElmoTokenizer.from_vocab_file(vocab_file)


# ---------------------------------------------------------------------------------------------
# Character ids
# ---------------------------------------------------------------------------------------------


def test_char_ids_of_a_known_word(tok):
    assert row("cat") == CAT
    enc = tok("cat")
    assert enc["input_ids"] == [CAT]
    assert enc["attention_mask"] == [1]
    assert word_to_char_ids("cat") == CAT


def test_char_ids_of_a_sentence_with_tensors(tok):
    enc = tok("The cat sat.", return_tensors="pt")
    assert enc["input_ids"].shape == (1, 4, C)
    assert enc["input_ids"].dtype == torch.int64
    assert enc["input_ids"][0].tolist() == [row("The"), CAT, row("sat"), row(".")]
    assert enc["attention_mask"].tolist() == [[1, 1, 1, 1]]


def test_sentence_boundary_words_get_sentence_rows(tok):
    enc = tok(["<S>", "cat", "</S>"], is_split_into_words=True)
    assert enc["input_ids"] == [BOS_ROW, CAT, EOS_ROW]
    # In raw text too, the pre-tokenizer keeps them whole.
    enc = tok("<S> cat </S>")
    assert enc["input_ids"] == [BOS_ROW, CAT, EOS_ROW]


def test_no_boundary_words_are_added(tok):
    with_special = tok("the cat", add_special_tokens=True)
    without = tok("the cat", add_special_tokens=False)
    assert with_special["input_ids"] == without["input_ids"] == [row("the"), CAT]


def test_long_words_are_cut_to_48_bytes(tok):
    enc = tok("x" * 10_000, return_tensors="pt")
    assert enc["input_ids"].shape == (1, 1, C)
    assert enc["input_ids"][0, 0].tolist() == [259] + [121] * 48 + [260]
    # A cut inside a two-byte character keeps its first byte (as the original does).
    word = "a" + "é" * 30
    assert tok([word], is_split_into_words=True)["input_ids"] == [row(word)]
    assert row(word)[48] == 0xC3 + 1 and row(word)[49] == 260


def test_max_characters_per_token(tmp_path):
    small = ElmoTokenizer(max_characters_per_token=10)
    enc = small("cat abcdefghijkl", return_tensors="pt")
    assert enc["input_ids"].shape == (1, 2, 10)
    assert enc["input_ids"][0].tolist() == [row("cat", 10), row("abcdefghijkl", 10)]


# ---------------------------------------------------------------------------------------------
# Splitting raw text
# ---------------------------------------------------------------------------------------------

SPLITS = [
    ("The cat sat.", ["The", "cat", "sat", "."]),
    ("(hello)", ["(", "hello", ")"]),
    ("Hi!?", ["Hi", "!", "?"]),
    ("U.S. e-mail 3.5 1,000", ["U.S.", "e-mail", "3.5", "1,000"]),
    ("Don't! It's", ["Don", "'t", "!", "It", "'s"]),  # the 1B Word Benchmark writes "Don 't !"
    # Negations as the released models' corpora write them (Moses): "can 't", "won 't", also WikiText-2's.
    ("I don't know. I can't, won't", ["I", "don", "'t", "know", ".", "I", "can", "'t", ",", "won", "'t"]),
    ("I'm John's", ["I", "'m", "John", "'s"]),
    # The Penn Treebank's "n't", already split off (CoNLL-2003 writes it so), stays whole: not "n" "'t".
    ("I do n't know . Ca n't , N'T", ["I", "do", "n't", "know", ".", "Ca", "n't", ",", "N'T"]),
    ("dogs' 1990's rock'n'roll", ["dogs", "'", "1990", "'s", "rock", "'n", "'roll"]),
    ("Don 't ! Murray 's 'tis 'hello'", ["Don", "'t", "!", "Murray", "'s", "'", "tis", "'", "hello", "'"]),
    ("Mr. Smith met Dr. Who in the U.S.A.", ["Mr.", "Smith", "met", "Dr.", "Who", "in", "the", "U.S.A."]),
    ("J. R. R. Tolkien, Ph.D.", ["J.", "R.", "R.", "Tolkien", ",", "Ph.D."]),
    ("No. 5 is No.", ["No.", "5", "is", "No", "."]),
    ("wait... what?!", ["wait", "...", "what", "?", "!"]),
    ('He said "yes," then $5 (5%).', ["He", "said", '"', "yes", ",", '"', "then", "$", "5", "(", "5", "%", ")", "."]),
    ("1,000, a,b 3.5. .5", ["1,000", ",", "a", ",", "b", "3.5", ".", ".5"]),
    ("AT&T and/or foo_bar -- well-known", ["AT", "&", "T", "and", "/", "or", "foo", "_", "bar", "--", "well-known"]),
    ("mail john@example.com.", ["mail", "john", "@", "example.com."]),
    ("  spaced\tout\n\nwords  ", ["spaced", "out", "words"]),
]


@pytest.mark.parametrize(("text", "words"), SPLITS)
def test_raw_text_splitting(tok, text, words):
    assert tok.tokenize(text) == words
    enc = tok(text, return_offsets_mapping=True)
    assert [text[s:e] for s, e in enc["offset_mapping"]] == words
    assert enc.word_ids() == list(range(len(words)))
    assert enc["input_ids"] == [row(word) for word in words]


def test_1b_word_benchmark_sentences_keep_their_tokenization(tok, fixture_dir):
    """Sentences of the 1B Word Benchmark (already tokenized) come out with the same words."""
    with open(fixture_dir / "sentences.json", encoding="utf-8") as handle:
        sentences = [sentence for group in json.load(handle) for sentence in group]
    assert len(sentences) == 30
    for sentence in sentences:
        assert tok.tokenize(sentence) == sentence.split(" ")


def test_negations_come_out_as_the_1b_word_benchmark_writes_them(tok, fixture_dir):
    """Issue 44 F4, checked against the corpus itself: the benchmark's sentences with a clitic, written back as raw
    text ("Don 't !" -> "Don't!"), split into the benchmark's own words, with offsets into the raw text."""
    with open(fixture_dir / "sentences.json", encoding="utf-8") as handle:
        sentences = [sentence for group in json.load(handle) for sentence in group if " '" in sentence]
    assert any("n 't" in sentence for sentence in sentences)  # "Don 't", "wasn 't": Moses, not "do n't"
    for sentence in sentences:
        raw = sentence.replace(" '", "'").replace(" !", "!").replace(" .", ".")
        assert raw != sentence
        enc = tok(raw, return_offsets_mapping=True)
        assert [raw[start:end] for start, end in enc["offset_mapping"]] == sentence.split(" ")


def test_split_punctuation_false_splits_on_whitespace_only():
    plain = ElmoTokenizer(split_punctuation=False)
    text = "The cat sat. (hello) Hi!? don't"
    assert plain.tokenize(text) == ["The", "cat", "sat.", "(hello)", "Hi!?", "don't"]
    enc = plain(text, return_offsets_mapping=True)
    assert [text[s:e] for s, e in enc["offset_mapping"]] == text.split()


UNUSUAL_TEXTS = [
    ("", []),
    ("   ", []),
    ("\t\n \u3000\u00a0", []),
    ("a\x00b \x07bell", ["a", "b", "bell"]),  # control characters separate words
    ("zero\u200bwidth \ufeffbom", ["zero", "width", "bom"]),
    ("\u200f\u05e9\u05dc\u05d5\u05dd, \u05e2\u05d5\u05dc\u05dd!", ["שלום", ",", "עולם", "!"]),  # RTL, with a mark
    ("مرحبا بالعالم.", ["مرحبا", "بالعالم", "."]),
    ("e\u0301te\u0301 cafe\u0301.", ["e\u0301te\u0301", "cafe\u0301", "."]),  # combining marks stay on the word
    ("👍🏽 a😀b 🇫🇷", ["👍🏽", "a", "😀", "b", "🇫🇷"]),
    ("日本語のテキスト。", ["日本語のテキスト", "。"]),
]


@pytest.mark.parametrize(("text", "words"), UNUSUAL_TEXTS)
def test_unusual_text_is_well_defined(tok, text, words):
    assert tok.tokenize(text) == words
    enc = tok(text, return_offsets_mapping=True, return_tensors="pt")
    assert enc["input_ids"].shape == (1, len(words), C)
    assert enc["attention_mask"].shape == (1, len(words))
    assert [text[s:e] for s, e in enc["offset_mapping"][0].tolist()] == words
    assert enc["input_ids"][0].tolist() == [row(word) for word in words]


def test_split_special_tokens_per_call_in_tokenize_as_in_call(tok):
    # Special tokens in raw text are characters by default (split_special_tokens=True); a call may say otherwise,
    # and tokenize() must follow it as __call__ does (it ignored the argument).
    assert tok.tokenize("a <pad> b") == ["a", "<", "pad", ">", "b"]
    assert tok.decode(tok("a <pad> b", split_special_tokens=False)["input_ids"]) == "a <pad> b"
    assert tok.tokenize("a <pad> b", split_special_tokens=False) == ["a", "<pad>", "b"]


def test_empty_text_gives_zero_words(tok):
    assert tok("")["input_ids"] == []
    assert tok("")["attention_mask"] == []
    assert tok("", return_tensors="pt")["input_ids"].shape == (1, 0, C)
    assert tok("", return_tensors="np")["input_ids"].shape == (1, 0, C)
    assert tok(["", ""], return_tensors="pt")["input_ids"].shape == (2, 0, C)
    enc = tok(["", "the cat", "   "], padding=True, return_tensors="pt")
    assert enc["input_ids"].shape == (3, 2, C)
    assert enc["attention_mask"].tolist() == [[0, 0], [1, 1], [0, 0]]
    assert enc["input_ids"][0].abs().sum() == 0


def test_lone_surrogates_do_not_crash(tok):
    text = "a\ud800b \ud800 ok \udfff"
    enc = tok(text, return_offsets_mapping=True)
    words = [text[s:e] for s, e in enc["offset_mapping"]]
    assert words == ["a\ud800b", "\ud800", "ok", "\udfff"]
    # The character ids come from the given word; word_to_char_ids drops what UTF-8 cannot encode.
    assert enc["input_ids"] == [row("ab"), row(""), row("ok"), row("")]
    assert enc["input_ids"] == [word_to_char_ids(word) for word in words]
    split = tok(["x\ud800y", "\udc00"], is_split_into_words=True)
    assert split["input_ids"] == [row("xy"), row("")]


def test_random_text_offsets_and_ids_agree(tok):
    pool = list("abcXYZ019 .,;:!?'\"()-/&$%…—’") + [
        "é",
        "e\u0301",
        "\u200b",
        "\x00",
        "\ud800",
        "😀",
        "👍🏽",
        "ש",
        "中",
        "\n",
    ]
    rng = random.Random(0)
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    enc = tok(texts, return_offsets_mapping=True, padding=True, return_vocab_ids=True)
    for index, text in enumerate(texts):
        mask = enc["attention_mask"][index]
        spans = [span for span, m in zip(enc["offset_mapping"][index], mask, strict=True) if m]
        words = [text[s:e] for s, e in spans]
        assert all(words), (text, words)
        assert [r for r, m in zip(enc["input_ids"][index], mask, strict=True) if m] == [
            word_to_char_ids(w) for w in words
        ]
        assert words == tok.tokenize(text)
        # Words never overlap and never contain whitespace.
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False))
        assert not any(ch.isspace() for word in words for ch in word)


# ---------------------------------------------------------------------------------------------
# Pre-split words
# ---------------------------------------------------------------------------------------------


def test_is_split_into_words_keeps_every_word_whole(tok):
    words = ["U.S.", ".", "(x)", "a b", "don't", "", "<pad>", "e-mail,", "\x00"]
    enc = tok(words, is_split_into_words=True, return_offsets_mapping=True, return_vocab_ids=True)
    assert enc["input_ids"] == [row(word) for word in words]
    assert enc.word_ids() == list(range(len(words)))
    assert enc["attention_mask"] == [1] * len(words)
    assert enc["offset_mapping"] == [(0, len(word)) for word in words]
    assert enc["vocab_ids"] == [tok.unk_token_id] * len(words)
    # And the pre-tokenizer is back on afterwards.
    assert tok.tokenize("(x)") == ["(", "x", ")"]


def test_is_split_into_words_batch_and_word_ids(tok):
    batch = [["New", "York", "."], ["Hi"]]
    enc = tok(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    assert enc["input_ids"].shape == (2, 3, C)
    assert enc.word_ids(0) == [0, 1, 2]
    assert enc.word_ids(1) == [0, None, None]
    assert enc["input_ids"][1, 1:].abs().sum() == 0
    assert enc["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_word_ids_and_char_to_word_on_raw_text(tok):
    text = "I saw (them)."
    enc = tok(text)
    assert enc.word_ids() == [0, 1, 2, 3, 4, 5]
    assert enc.char_to_word(text.index("them")) == 3
    assert enc.word_to_chars(3) == (7, 11)
    assert len(enc.encodings) == 1


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------


def test_default_vocabulary(tok):
    assert tok.get_vocab() == {"<S>": 0, "</S>": 1, "<UNK>": 2, "<pad>": 3}
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id, tok.pad_token_id) == (0, 1, 2, 3)
    # token_type_ids come with sentence pairs only (tests/test_tokenizer_pairs.py); single texts have none.
    assert tok.model_input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert "token_type_ids" not in tok("the cat")


def test_vocab_file_and_vocab_ids(vtok, vocab_file):
    assert vtok.get_vocab() == {
        "<S>": 0, "</S>": 1, "<UNK>": 2, "the": 3, ".": 4, "cat": 5, "sat": 6, ",": 7, "<pad>": 8
    }  # fmt: skip
    assert vtok.vocab_size == 8 and len(vtok) == 9
    enc = vtok(["the cat sat.", "the dog"], padding=True, return_vocab_ids=True, return_tensors="pt")
    assert enc["vocab_ids"].tolist() == [[3, 5, 6, 4], [3, 2, -100, -100]]
    assert enc["input_ids"][1, 1].tolist() == row("dog")
    assert enc.tokens(1) == ["the", "<UNK>", "<pad>", "<pad>"]
    assert vtok.tokenize("the dog") == ["the", "dog"]
    assert vtok(["<S>", "</S>", "<UNK>"], is_split_into_words=True, return_vocab_ids=True)["vocab_ids"] == [0, 1, 2]
    assert "vocab_ids" not in vtok("the cat")
    # vocab= (a dict) and the path given as vocab give the same tokenizer.
    same = ElmoTokenizer(vocab={w: i for i, w in enumerate(["<S>", "</S>", "<UNK>", "the", ".", "cat", "sat", ","])})
    assert same.get_vocab() == vtok.get_vocab()
    assert ElmoTokenizer(vocab=vocab_file).get_vocab() == vtok.get_vocab()


def test_vocab_file_with_crlf_and_no_final_newline(tmp_path):
    path = tmp_path / "v.txt"
    path.write_bytes(b"<S>\r\n</S>\r\n<UNK>\r\nword")
    assert ElmoTokenizer(vocab_file=str(path)).get_vocab() == {"<S>": 0, "</S>": 1, "<UNK>": 2, "word": 3, "<pad>": 4}


def test_special_words_are_found_by_name_wherever_they_are(tmp_path):
    # bilm-tf's own test vocabulary has <S>, </S>, <UNK> on lines 21, 225 and 118; bilm-tf finds them by name.
    words = [f"w{i}" for i in range(230)]
    words[20], words[224], words[117] = "<S>", "</S>", "<UNK>"
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    vocab = ElmoTokenizer(vocab_file=str(path)).get_vocab()
    assert (vocab["<S>"], vocab["</S>"], vocab["<UNK>"], vocab["w0"], vocab["w229"]) == (20, 224, 117, 0, 229)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("<S>\n</S>\nx\n", r"no line holds <UNK>"),
        ("the\n</S>\nx\n", r"no line holds <S>, <UNK>"),
        ("", r"no line holds <S>, </S>, <UNK>.*\(0 line"),
        ("<S>\n</S>\n<UNK>\na\nb\na\n", r"line 6 repeats the word 'a' of line 4"),
    ],
)
def test_bad_vocab_files_are_rejected(tmp_path, content, message):
    path = tmp_path / "bad_vocab.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        ElmoTokenizer(vocab_file=str(path))
    assert "bad_vocab.txt" in str(info.value)


def test_bad_vocab_dicts_are_rejected():
    with pytest.raises(ValueError, match="<UNK>"):
        ElmoTokenizer(vocab={"a": 0, "b": 1})
    with pytest.raises(ValueError, match="ids must be"):
        ElmoTokenizer(vocab={"<UNK>": 0, "b": 5})
    with pytest.raises(TypeError, match="str to int"):
        ElmoTokenizer(vocab={"<UNK>": 0, "b": "1"})
    with pytest.raises(ValueError, match="at least 3"):
        ElmoTokenizer(max_characters_per_token=2)
    with pytest.raises(TypeError, match="split_punctuation"):
        ElmoTokenizer(split_punctuation="yes")


# ---------------------------------------------------------------------------------------------
# Saving and loading
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split_punctuation", [True, False])
def test_save_and_load_round_trip(tmp_path, vocab_file, split_punctuation):
    original = ElmoTokenizer(vocab_file=vocab_file, split_punctuation=split_punctuation, max_characters_per_token=20)
    original.save_pretrained(tmp_path)
    assert (tmp_path / "tokenizer.json").is_file()
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n") == [
        "<S>", "</S>", "<UNK>", "the", ".", "cat", "sat", ",", ""
    ]  # fmt: skip
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["split_punctuation"] is split_punctuation
    assert config["max_characters_per_token"] == 20
    assert config["tokenizer_class"] == "ElmoTokenizer"

    text = "the cat sat. (the dog)"
    expected_words = (
        ["the", "cat", "sat", ".", "(", "the", "dog", ")"]
        if split_punctuation
        else ["the", "cat", "sat.", "(the", "dog)"]
    )
    # Local load (vocab= from tokenizer.json) and remote-code-style load (tokenizer_file=).
    for loaded in (
        ElmoTokenizer.from_pretrained(tmp_path),
        ElmoTokenizer.from_pretrained(tmp_path, trust_remote_code=True),
        ElmoTokenizer(tokenizer_file=str(tmp_path / "tokenizer.json"), split_punctuation=split_punctuation),
        ElmoTokenizer(vocab_file=str(tmp_path / "vocab.txt"), split_punctuation=split_punctuation),
    ):
        assert type(loaded) is ElmoTokenizer
        assert loaded.get_vocab() == original.get_vocab()
        assert loaded.split_punctuation is split_punctuation
        assert loaded.tokenize(text) == expected_words
        assert loaded.pad_token_id == original.pad_token_id == 8
    reloaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert reloaded.max_characters_per_token == 20
    assert reloaded(text, return_vocab_ids=True).data == original(text, return_vocab_ids=True).data


def test_saved_tokenizer_has_no_padding_state(tmp_path, tok):
    tok(["a", "b c"], padding="max_length", max_length=4, truncation=True)
    tok.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["padding"] is None and saved["truncation"] is None


def test_auto_tokenizer_loads_an_elmo_tokenizer(tmp_path):
    if getattr(modeling_elmo, "__file__", None) is None:
        pytest.skip("modeling_elmo has no __init__.py yet")
    ElmoTokenizer(split_punctuation=False, max_characters_per_token=30).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(loaded, ElmoTokenizer)
    assert loaded.split_punctuation is False
    assert loaded.max_characters_per_token == 30


# ---------------------------------------------------------------------------------------------
# Padding and truncation
# ---------------------------------------------------------------------------------------------

TEXTS = ["the cat sat .", "hi", "", "a b c d e f g"]


@pytest.mark.parametrize(
    ("options", "width"),
    [
        ({"padding": True}, 7),
        ({"padding": "longest", "pad_to_multiple_of": 4}, 8),
        ({"padding": "max_length", "max_length": 9}, 9),
        ({"padding": True, "padding_side": "left"}, 7),
    ],
)
def test_padding_in_call_matches_pad(tok, options, width):
    enc = tok(TEXTS, return_vocab_ids=True, **options)
    lengths = [4, 1, 0, 7]
    left = options.get("padding_side") == "left"
    for index, n in enumerate(lengths):
        ids, mask, vids = enc["input_ids"][index], enc["attention_mask"][index], enc["vocab_ids"][index]
        assert len(ids) == len(mask) == len(vids) == width
        real = slice(width - n, width) if left else slice(0, n)
        pads = slice(0, width - n) if left else slice(n, width)
        assert ids[real] == [row(w) for w in TEXTS[index].split()]
        assert ids[pads] == [ZERO_ROW] * (width - n)
        assert mask[real] == [1] * n and mask[pads] == [0] * (width - n)
        assert vids[pads] == [-100] * (width - n)
        assert enc.word_ids(index)[pads] == [None] * (width - n)
    # tokenizer.pad on unpadded encodings gives the same values.
    padded = tok.pad([tok(text, return_vocab_ids=True) for text in TEXTS], **options)
    assert padded.data == {key: enc[key] for key in ("input_ids", "attention_mask", "vocab_ids")}


def test_pad_returns_tensors_and_handles_a_single_sentence(tok):
    batch = tok.pad([tok("a b c"), tok("d")], return_tensors="pt")
    assert batch["input_ids"].shape == (2, 3, C)
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    single = tok.pad(tok("a b"), padding="max_length", max_length=4)
    assert single["input_ids"] == [row("a"), row("b"), ZERO_ROW, ZERO_ROW]
    assert single["attention_mask"] == [1, 1, 0, 0]
    empty = tok.pad({"input_ids": [[], []], "attention_mask": [[], []]}, return_tensors="pt")
    assert empty["input_ids"].shape == (2, 0, C)
    # Features as tensors, as a Dataset with format "torch" gives them.
    features = [{k: torch.tensor(v) for k, v in tok(text).items()} for text in ("a b", "c")]
    assert tok.pad(features)["input_ids"].shape == (2, 2, C)
    # An already padded batch of tensors.
    batch = tok(["a b", "c"], padding=True, return_tensors="pt")
    padded = tok.pad(dict(batch), padding="max_length", max_length=4)
    assert padded["input_ids"].shape == (2, 4, C) and padded["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]


def test_data_collator_with_padding(tok):
    features = [dict(tok(text, return_vocab_ids=True)) for text in ["the cat sat", "hi", ""]]
    batch = DataCollatorWithPadding(tok)(features)
    assert batch["input_ids"].shape == (3, 3, C)
    assert batch["input_ids"].dtype == torch.int64
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
    assert batch["vocab_ids"].tolist() == [[2, 2, 2], [2, -100, -100], [-100, -100, -100]]
    assert batch["input_ids"][1, 1:].abs().sum() == 0
    batch = DataCollatorWithPadding(tok, pad_to_multiple_of=8)(features)
    assert batch["input_ids"].shape == (3, 8, C)
    batch = DataCollatorWithPadding(tok, return_tensors="np")(features)
    assert isinstance(batch["input_ids"], np.ndarray) and batch["input_ids"].shape == (3, 3, C)


def test_data_collator_for_token_classification(tok):
    sentences = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["."]]
    labels = [[3, 0, 7, 0], [1, 2], [0]]
    features = []
    for words, tags in zip(sentences, labels, strict=True):
        features.append({**tok(words, is_split_into_words=True), "labels": tags})
    assert set(features[0]) == {"input_ids", "attention_mask", "labels"}
    batch = DataCollatorForTokenClassification(tok)(features)
    assert batch["input_ids"].shape == (3, 4, C)
    assert batch["attention_mask"].shape == (3, 4)
    assert batch["labels"].tolist() == [[3, 0, 7, 0], [1, 2, -100, -100], [0, -100, -100, -100]]
    assert batch["input_ids"][2, 0].tolist() == row(".")
    assert batch["input_ids"][2, 1:].abs().sum() == 0
    batch = DataCollatorForTokenClassification(tok, pad_to_multiple_of=8)(features)
    assert batch["input_ids"].shape == (3, 8, C) and batch["labels"].shape == (3, 8)


def test_truncation_cuts_words(tok):
    enc = tok(["a b c d e", "x"], truncation=True, max_length=3)
    assert [len(ids) for ids in enc["input_ids"]] == [3, 1]
    assert enc["input_ids"][0] == [row("a"), row("b"), row("c")]
    enc = tok(["a b c d e"], truncation=True, max_length=2, padding="max_length", return_tensors="pt")
    assert enc["input_ids"].shape == (1, 2, C)
    words = ["w1", "w2", "w3", "w4"]
    enc = tok(words, is_split_into_words=True, truncation=True, max_length=2)
    assert enc["input_ids"] == [row("w1"), row("w2")] and enc.word_ids() == [0, 1]


def test_overflowing_words(tok):
    enc = tok(["a b c d e", "x"], truncation=True, max_length=3, stride=1, return_overflowing_tokens=True, padding=True)
    assert enc["overflow_to_sample_mapping"] == [0, 0, 1]
    assert tok.decode(enc["input_ids"]) == ["a b c", "c d e", "x"]
    assert enc["attention_mask"] == [[1, 1, 1], [1, 1, 1], [1, 0, 0]]


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def test_decode_character_ids(tok):
    enc = tok(["The cat sat.", "Hi!"], padding=True, return_tensors="pt")
    assert tok.decode(enc["input_ids"][0]) == "The cat sat ."
    assert tok.decode(enc["input_ids"][1]) == "Hi !"
    assert tok.decode(enc["input_ids"]) == ["The cat sat .", "Hi !"]
    assert tok.batch_decode(enc["input_ids"]) == ["The cat sat .", "Hi !"]
    assert tok.decode(tok(["<S>", "x", "</S>"], is_split_into_words=True)["input_ids"]) == "<S> x </S>"
    assert tok.decode(tok(["<S>", "x", "</S>"], is_split_into_words=True)["input_ids"], skip_special_tokens=True) == "x"
    assert tok.convert_ids_to_tokens(enc["input_ids"][1]) == ["Hi", "!", "<pad>", "<pad>"]
    assert tok.decode([row("a" + "é" * 30)]) == "a" + "é" * 23 + "\ufffd"  # cut inside a character
    assert tok.decode(tok("The cat sat.")) == "The cat sat ."
    assert tok.decode(tok.encode("Hi there!")) == "Hi there !"
    assert tok.decode([]) == ""


def test_decode_vocab_ids(vtok):
    enc = vtok(["the cat sat .", "the"], padding=True, return_vocab_ids=True)
    assert vtok.decode(enc["vocab_ids"][0]) == "the cat sat ."
    assert vtok.decode(enc["vocab_ids"][1]) == "the"  # -100 padding is dropped
    assert vtok.convert_ids_to_tokens(enc["vocab_ids"][1]) == ["the", None, None, None]
    assert vtok.convert_ids_to_tokens(5) == "cat"


def test_decode_rejects_rows_that_are_not_character_ids(tok):
    bad = [[259, 300] + [261] * 48]
    with pytest.raises(ValueError, match="character ids"):
        tok.decode(bad)
    with pytest.raises(ValueError, match="character ids"):
        tok.convert_ids_to_tokens([[1, 2, 3]])


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

BAD_INPUTS = [
    ("non-str texts", lambda t: t([1, 2]), TypeError, r"text\[0\] is int"),
    ("None among texts", lambda t: t(["a", None]), TypeError, r"text\[1\] is NoneType"),
    ("int text", lambda t: t(123), TypeError, r"str or a list of str"),
    ("bytes text", lambda t: t(b"abc"), TypeError, r"got bytes"),
    ("None word", lambda t: t([["a", None]], is_split_into_words=True), TypeError, r"sentence 0, word 1 is NoneType"),
    ("int word", lambda t: t(["a", 3], is_split_into_words=True), TypeError, r"word 1 is int"),
    ("empty batch", lambda t: t([]), ValueError, r"empty batch"),
    ("no text", lambda t: t(None), ValueError, r"text"),
    ("str with split words", lambda t: t("a b", is_split_into_words=True), TypeError, r"list of str"),
    # A batch item of two str is a sentence pair (as zero-shot passes them); three are words without the flag.
    ("words without the flag", lambda t: t([["a", "b", "c"]]), TypeError, r"is_split_into_words=True"),
    ("ragged tensors", lambda t: t(["a b", "c"], return_tensors="pt"), ValueError, r"padding=True"),
    ("vocab ids to pad", lambda t: t.pad({"input_ids": [[1, 2, 3]]}), ValueError, r"character ids"),
    ("flat ids to pad", lambda t: t.pad({"input_ids": [1, 2, 3]}), ValueError, r"character ids"),
    ("tokenize a list", lambda t: t.tokenize(["a"]), TypeError, r"one str"),
]


@pytest.mark.parametrize(("name", "call", "error", "message"), BAD_INPUTS, ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_gives_a_clear_error(tok, name, call, error, message):
    with pytest.raises(error, match=message):
        call(tok)


def test_pre_split_empty_list_is_one_empty_sentence(tok):
    assert tok([], is_split_into_words=True)["input_ids"] == []
    assert tok([[]], is_split_into_words=True, return_tensors="pt")["input_ids"].shape == (1, 0, C)


def test_added_tokens_cannot_split_given_words():
    local = ElmoTokenizer()
    local.add_tokens(["foo"])
    with pytest.raises(ValueError, match="split into several tokens"):
        local(["xfooy"], is_split_into_words=True)
    assert local(["foo"], is_split_into_words=True)["input_ids"] == [row("foo")]


def test_unknown_word_markers_stay_whole():
    # WikiText writes "<unk>" for rare words and bilm-tf "<UNK>": splitting them into "<", "unk", ">" put three
    # bogus words among the most frequent ones of a vocabulary built from such text.
    tokenizer = ElmoTokenizer()
    text = "The <unk> sat on the <UNK> mat, a<unk>. <b>"
    offsets = tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
    words = [text[start:end] for start, end in offsets]
    assert words == ["The", "<unk>", "sat", "on", "the", "<UNK>", "mat", ",", "a", "<unk>", ".", "<", "b", ">"]


def test_a_save_is_plain_unless_remote_code_is_asked_for(tmp_path):
    """Issue 27: a saved tokenizer holds no code and no auto_map; inside ``remote_code`` (transformers'
    register_for_auto_class) it names its code and copies it, and afterwards saves are plain again."""
    from modeling_elmo import ElmoConfig, ElmoModel
    from modeling_elmo.hub.remote_code import remote_code

    ElmoTokenizer().save_pretrained(tmp_path / "plain")
    assert "auto_map" not in json.loads((tmp_path / "plain" / "tokenizer_config.json").read_text())
    assert not (tmp_path / "plain" / "tokenization_elmo.py").exists()
    model = ElmoModel(ElmoConfig(lstm_dim=16, projection_dim=8, char_embedding_dim=4, char_cnn_filters=[[1, 4]]))
    with remote_code(model, ElmoTokenizer()):
        ElmoTokenizer().save_pretrained(tmp_path / "code")
    config = json.loads((tmp_path / "code" / "tokenizer_config.json").read_text())
    assert config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    assert (tmp_path / "code" / "tokenization_elmo.py").is_file()
    assert (tmp_path / "code" / "tokenization_pairs_elmo.py").is_file()  # imported by it: sentence pairs
    ElmoTokenizer().save_pretrained(tmp_path / "again")
    assert "auto_map" not in json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
