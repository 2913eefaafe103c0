"""ELMo tokenizer: text or words in, per-word character ids out.

ELMo reads characters, not word ids: every word becomes ``max_characters_per_token`` character ids
(see :mod:`.characters`). The tokenizer still keeps a word vocabulary (the bilm-tf vocabulary
file), whose ids are the language-model labels.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers
from transformers.tokenization_utils_base import BatchEncoding, TruncationStrategy
from transformers.tokenization_utils_tokenizers import TokenizersBackend
from transformers.utils import PaddingStrategy, TensorType, logging, to_py_obj

from .characters import (
    BEGIN_OF_SENTENCE_CHAR,
    BEGIN_OF_WORD_CHAR,
    BOS_TOKEN,
    END_OF_SENTENCE_CHAR,
    END_OF_WORD_CHAR,
    EOS_TOKEN,
    MAX_CHARACTERS_PER_TOKEN,
    NUM_CHARACTERS,
    PADDING_CHAR,
    word_to_char_ids,
)
from .configuration_elmo import SIZE_LIMITS, check_model_name
from .manylangs import EOW_CHAR as MANYLANGS_EOW
from .manylangs import FIRST_CHARACTER as MANYLANGS_FIRST_CHARACTER
from .manylangs import MARKS as MANYLANGS_MARKS
from .manylangs import check_characters, row_to_word
from .manylangs import word_to_char_ids as manylangs_char_ids
from .tokenization_pairs_elmo import (
    backend_error,
    backend_input,
    check_batch,
    has_pairs,
    sanitize,
    warn_without_max_length,
    words_of,
)

logger = logging.get_logger(__name__)

VOCAB_FILES_NAMES = {
    "vocab_file": "vocab.txt",
    "tokenizer_file": "tokenizer.json",
    "char_vocab_file": "char_vocab.json",  # ELMoForManyLangs models only
}

UNK_TOKEN = "<UNK>"
PAD_TOKEN = "<pad>"
# The special words every bilm-tf vocabulary file holds (found by name; files written here put them first).
BILM_SPECIAL_WORDS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)

# Value of `vocab_ids` at padded positions (ignored by PyTorch's cross-entropy).
VOCAB_IDS_PAD = -100

# ---------------------------------------------------------------------------------------------
# Pre-tokenizer (Oniguruma regular expressions, run by the `tokenizers` library so that the
# character offsets of every word are kept).
# ---------------------------------------------------------------------------------------------

# Invisible characters that separate words like whitespace does (they are dropped): control
# characters, zero-width space, byte-order mark, Arabic letter mark, bidirectional controls.
_SEPARATORS = r"\p{Cc}\x{200B}\x{FEFF}\x{061C}\x{200E}\x{200F}\x{202A}-\x{202E}\x{2066}-\x{2069}"
_SPACE = r"\p{White_Space}"
# Characters of a word: letters, digits, combining marks, the ASCII hyphen (never split, as in
# the Moses tokenizer), soft hyphen, zero-width (non-)joiners, word joiner, and U+FFFD (which
# stands in for a lone surrogate, so "a\ud800b" stays one word).
_WORD_CLASS = r"\p{L}\p{N}\p{M}\-\x{00AD}\x{200C}\x{200D}\x{2060}\x{FFFD}"
_W = rf"[{_WORD_CLASS}]"
# Anything else that is visible: punctuation and symbols, one token each.
_P = rf"[^{_WORD_CLASS}{_SPACE}{_SEPARATORS}]"
# Abbreviations that keep their period (Moses' "non-breaking prefixes", English), plus any single
# capital letter (initials).
_ABBREVIATIONS = (
    "Mr|Mrs|Ms|Messrs|Mme|Mlle|Dr|Drs|Prof|Rev|Hon|Gen|Col|Lt|Maj|Capt|Cmdr|Sgt|Cpl|Pvt|Adm|Gov|Sen|Rep|Reps"
    "|Pres|Supt|Insp|Sr|Jr|St|Mt|Ft|Inc|Corp|Co|Ltd|Bros|Assn|Dept|vs|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept"
    r"|Oct|Nov|Dec|\p{Lu}"
)
# Abbreviations that keep their period only before a number ("No. 5").
_NUMERIC_ABBREVIATIONS = "No|Nos|Nr|Art|pp"

_TOKEN_ALTERNATIVES = (
    # The boundary and unknown words of the vocabulary stay whole, and so does WikiText's and others' "<unk>".
    r"</?S>|<(?i:unk)>",
    # A flag: two regional-indicator symbols.
    r"[\x{1F1E6}-\x{1F1FF}]{2}",
    # "Mr." "Inc." "J." keep their period.
    rf"(?<!{_W})(?:{_ABBREVIATIONS})\.(?!{_W})",
    rf"(?<!{_W})(?:{_NUMERIC_ABBREVIATIONS})\.(?={_SPACE}+\p{{N}})",
    # The Penn Treebank's negation already split off ("do n't", as CoNLL-2003 writes it) stays whole.
    rf"(?<!{_W})[nN]['\x{{2019}}][tT](?!{_W})",
    # A word with inner periods and a letter keeps its final period: "U.S." "e.g." "Ph.D.".
    rf"(?=[{_WORD_CLASS}.]*\p{{L}}){_W}+(?:\.{_W}+)+\.(?!{_W})",
    # A word: inner periods ("3.5", "U.S"), commas between digits ("1,000"), hyphens ("e-mail").
    rf"(?:\.(?=\p{{N}}))?{_W}+(?:(?:\.|(?<=\p{{N}}),(?=\p{{N}})){_W}+)*",
    # Clitics after a letter: "don't" -> "don" "'t", "it's" -> "it" "'s" (Moses' English rule).
    rf"(?<=[\p{{L}}\p{{M}}])['\x{{2019}}]\p{{L}}{_W}*",
    rf"(?<=\p{{N}})['\x{{2019}}][sS](?!{_W})",
    # A clitic already split off, as in tokenized text ("Don 't", "Murray 's"): kept whole.
    rf"(?<!{_W})['\x{{2019}}](?:[sStTdDmM]|re|ve|ll|RE|VE|LL)(?!{_W})",
    # An ellipsis stays one token.
    r"\.{2,}",
    # Any other visible character on its own, with its combining marks, emoji modifiers and
    # zero-width-joiner sequences.
    rf"{_P}(?:[\p{{M}}\x{{1F3FB}}-\x{{1F3FF}}\x{{E0020}}-\x{{E007F}}]|\x{{200D}}{_P})*",
)
PUNCTUATION_SPLIT_PATTERN = "|".join(f"(?:{alternative})" for alternative in _TOKEN_ALTERNATIVES)
WHITESPACE_SPLIT_PATTERN = rf"[^{_SPACE}{_SEPARATORS}]+"


def build_pre_tokenizer(
    split_punctuation: bool = True, keep_whole: tuple[str, ...] = ()
) -> pre_tokenizers.PreTokenizer:
    """The `tokenizers` pre-tokenizer that splits raw text into words.

    The pattern describes the words themselves (``invert=True``); what it does not match
    (whitespace and the invisible separators) is dropped. Each string of ``keep_whole`` (the special tokens a
    user added) is one word wherever it stands: it is cut out first, then matched whole.
    """
    pattern = PUNCTUATION_SPLIT_PATTERN if split_punctuation else WHITESPACE_SPLIT_PATTERN
    if not keep_whole:
        return pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
    # Longest first, each character as \x{...} so that no token is read as regular-expression syntax.
    tokens = sorted(keep_whole, key=len, reverse=True)
    whole = "|".join("".join(f"\\x{{{ord(char):X}}}" for char in token) for token in tokens)
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(whole), behavior="isolated"),
            pre_tokenizers.Split(Regex(f"(?:{whole})|{pattern}"), behavior="removed", invert=True),
        ]
    )


# Building one compiles the whole pattern (~6 ms): a tokenizer with added special tokens reuses its own.
_cached_pre_tokenizer = functools.lru_cache(maxsize=16)(build_pre_tokenizer)


# ~590 bytes a word: 16,384 words hold ~9 MiB (65,536 held 37 MiB, which a large vocabulary filled over a long
# corpus, issue 26, 17); Zipf-distributed text still hits it for ~80% of its words.
@functools.lru_cache(maxsize=1 << 14)
def _cached_char_ids(word: str, max_chars: int) -> tuple[int, ...]:
    return tuple(word_to_char_ids(word, max_chars))


def _type_name(value: Any) -> str:
    return type(value).__name__


def load_bilm_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """Read a bilm-tf vocabulary file: one word per line, holding ``<S>``, ``</S>`` and ``<UNK>``.

    The id of a word is its line number, starting at 0. A final empty line is ignored. The special words are
    found by name, as bilm-tf does: vocabularies written by this package have them first, bilm-tf's own test
    vocabulary has them on lines 21, 225 and 118.
    """
    path = os.fspath(vocab_file)
    with open(path, encoding="utf-8-sig", newline="") as handle:  # a byte-order mark is ignored
        words = handle.read().split("\n")
    if words and words[-1] == "":
        words.pop()
    words = [word[:-1] if word.endswith("\r") else word for word in words]
    vocab: dict[str, int] = {}
    for index, word in enumerate(words):
        if word in vocab:
            raise ValueError(f"{path}: line {index + 1} repeats the word {word!r} of line {vocab[word] + 1}")
        vocab[word] = index
    missing = [word for word in BILM_SPECIAL_WORDS if word not in vocab]
    if missing:
        raise ValueError(
            f"{path}: no line holds {', '.join(missing)}; a bilm-tf vocabulary file has the words "
            f"{', '.join(BILM_SPECIAL_WORDS)}, one per line ({len(words)} line(s) here)"
        )
    return vocab


def _check_vocab(vocab: Any, unk_token: str) -> dict[str, int]:
    if not isinstance(vocab, Mapping):
        raise TypeError(f"vocab must be a dict mapping words to ids, got {_type_name(vocab)}")
    checked: dict[str, int] = {}
    for word, index in vocab.items():
        if not isinstance(word, str) or isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"vocab must map str to int, got {word!r}: {index!r}")
        checked[word] = int(index)
    if sorted(checked.values()) != list(range(len(checked))):
        raise ValueError(f"vocab ids must be 0, 1, ..., {len(checked) - 1}, each used once")
    if unk_token not in checked:
        raise ValueError(f"the unknown word {unk_token!r} is not in the vocabulary")
    return checked


def _vocab_of_backend(backend: Tokenizer, source: str) -> tuple[dict[str, int], dict[int, AddedToken]]:
    if not isinstance(backend.model, models.WordLevel):
        raise ValueError(f"{source} holds a {_type_name(backend.model)} model; ElmoTokenizer needs a WordLevel one")
    return backend.get_vocab(with_added_tokens=False), backend.get_added_tokens_decoder()


def _check_max_chars(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"max_characters_per_token must be an int, got {_type_name(value)}")
    if value < 3:
        raise ValueError(f"max_characters_per_token must be at least 3 (two word marks and one byte), got {value}")
    limit = SIZE_LIMITS["max_characters_per_token"]  # the config's bound: every word is that many ids
    if value > limit:
        raise ValueError(f"max_characters_per_token must be at most {limit}, got {value}")
    return int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


class ElmoTokenizer(TokenizersBackend):
    r"""Tokenizer of ELMo: words to character ids.

    ELMo's input is characters: each word is ``max_characters_per_token`` (50) character ids, its
    UTF-8 bytes (cut to 48) between begin-of-word and end-of-word marks, padded with a padding
    mark, every id shifted by +1 so that 0 means "no word" (see :mod:`modeling_elmo.characters`).
    The words ``<S>`` and ``</S>`` get the sentence-boundary rows. The tokenizer adds no
    boundary words itself: the model puts ``<S>``/``</S>`` around every sentence, so
    ``add_special_tokens`` has no effect.

    Outputs of ``tokenizer(...)`` (``B`` sentences, ``W`` words after padding, ``C =
    max_characters_per_token``):

    - ``input_ids``: ``(B, W, C)`` character ids (a list of ``W`` lists of ``C`` ints per
      sentence; a tensor with ``return_tensors``). Padded words are rows of zeros.
    - ``attention_mask``: ``(B, W)``, 1 for words, 0 for padding.
    - ``vocab_ids`` (with ``return_vocab_ids=True``): ``(B, W)`` word-vocabulary ids (``<UNK>``
      for unknown words), -100 for padding: the language-model labels.
    - ``offset_mapping``, ``special_tokens_mask``, ``token_type_ids``, ``length``,
      ``overflowing`` words and ``overflow_to_sample_mapping`` as usual; ``word_ids()``,
      ``char_to_word()`` etc. work, as the real ``tokenizers.Encoding`` objects are kept (one
      token per word; their ``ids`` are the vocabulary ids, their ``tokens`` the vocabulary words,
      so ``<UNK>`` for an unknown word: :meth:`tokenize` returns the words themselves).

    Inputs: raw text (``str`` or a list of them), split into words by the pre-tokenizer, or
    words (``is_split_into_words=True``, a list of ``str`` or a list of such lists), each of which
    stays exactly one word, whatever it contains (``"U.S."``, ``"(x)"``, ``"a b"``, ``""``).
    Sentence pairs as in transformers (``tokenizer(a, b)``, ``text_pair=``, batches of either, or
    ``[(a, b), ...]``): text A's words, then text B's (no special tokens), with ``token_type_ids`` (0 for
    A, 1 for B; returned with every pair, never for a single text), ``sequence_ids()`` and offsets into
    each text's own string; ``truncation="only_first"``/``"only_second"``/``"longest_first"`` and the
    overflow windows (``stride``) count words. Special tokens added with ``add_special_tokens`` stay one
    word in raw text, with their own id and token (``vocab_ids``, ``tokens()``); the tokenizer's own ``<pad>``
    there is characters (``split_special_tokens=False`` makes it a word too).

    Splitting raw text, close to the Moses tokenization of the 1B Word Benchmark the released
    models were trained on (``split_punctuation=True``): split on whitespace, then split off
    punctuation (``"sat."`` -> ``sat .``, ``"(hello)"`` -> ``( hello )``, ``"Hi!?"`` -> ``Hi ! ?``),
    keeping word-internal punctuation (``U.S.``, ``e-mail``, ``3.5``, ``1,000``), the period of
    abbreviations (``Mr.``, ``Inc.``, single capitals, words with inner periods, ``No.`` before a number) and an
    ellipsis (``...``). Apostrophes follow the benchmark, which writes ``Don 't`` and ``it 's``
    (Moses), not the Penn Treebank's ``do n't``: ``"don't"`` -> ``don 't``; a clitic already split
    off (``Don 't``, or the Penn Treebank's ``do n't``) stays whole, so tokenized text comes out
    unchanged. Known differences from Moses: a final period is split off before a lowercase word
    too (Moses keeps it, e.g. ``etc. and``); the ASCII hyphen is never split, but other dashes are;
    ``’`` is treated like ``'``; a run of emoji is split into one token per emoji. With ``split_punctuation=False``,
    text is split on whitespace only. In both modes control characters, zero-width space, the
    byte-order mark and bidirectional controls separate words like whitespace and are dropped;
    ``word_ids()`` and offsets always point into the given text (``text[start:end]`` is the word).

    Lone surrogates (``"\ud800"``) cannot be passed to the Rust backend: they are replaced by
    U+FFFD for splitting and vocabulary lookup (same length, so offsets are unchanged), and the
    character ids are computed from the original word, where :func:`word_to_char_ids` drops them.

    Decoding: :meth:`decode` and :meth:`convert_ids_to_tokens` accept character ids (a ``(W, C)``
    sentence, or ``(B, W, C)``) and turn each row back into its word (bytes between the word marks;
    a word cut inside a multi-byte character ends in U+FFFD), skipping padding rows:
    ``tokenizer.decode(enc["input_ids"][0]) == "The cat sat ."``. Given vocabulary ids they behave as
    usual (ids < 0 are dropped).

    Not thread-safe: a call with ``is_split_into_words=True`` (or added special tokens) switches the backend's
    pre-tokenizer while it runs (as every `tokenizers`-backed tokenizer switches padding on and off).

    Args:
        vocab: word -> id (ids 0..n-1). Default: ``{"<S>": 0, "</S>": 1, "<UNK>": 2}``.
        vocab_file: a bilm-tf vocabulary file, used when ``vocab`` is not given.
        tokenizer_file: a ``tokenizer.json`` with a WordLevel model, used when ``vocab`` is not
            given (its vocabulary and added tokens are used, its pre-tokenizer is rebuilt from
            ``split_punctuation``).
        max_characters_per_token: character ids per word (50 in the released models).
        split_punctuation: split punctuation off words in raw text (see above).
        bos_token, eos_token, unk_token: the bilm-tf boundary and unknown words.
        pad_token: ``<pad>``, added after the vocabulary so the bilm-tf ids stay unchanged.
        char_vocab / char_vocab_file: an ELMoForManyLangs model's own characters (a list, or ``char_vocab.json``:
            its six marks, then one code point per entry; see ``manylangs.py``). The character ids are then
            that model's (``[<eow>, c_1 .. c_n, <bow>, <pad> ...]``, unknown code points ``<oov>``, words cut to
            ``C - 2`` code points), and a word's vocabulary id is that of the word so cut. A model with a word
            input also needs ``vocab_ids``: its tokenizer is saved with ``model_input_names`` that name them, so
            that they are returned by default.

    Example:

    ```python
    >>> tok = ElmoTokenizer()
    >>> enc = tok(["The cat sat.", "Hi!"], padding=True, return_tensors="pt")
    >>> enc["input_ids"].shape, enc["attention_mask"].tolist()
    (torch.Size([2, 4, 50]), [[1, 1, 1, 1], [1, 1, 0, 0]])
    >>> tok.decode(enc["input_ids"][0])
    'The cat sat .'
    >>> tok(["New", "York"], is_split_into_words=True).word_ids()
    [0, 1]

    ```
    """

    vocab_files_names = VOCAB_FILES_NAMES
    # token_type_ids come with sentence pairs only (single texts encode without them).
    model_input_names = ["input_ids", "attention_mask", "token_type_ids"]
    padding_side = "right"

    def __init__(
        self,
        vocab: dict[str, int] | str | os.PathLike | None = None,
        vocab_file: str | os.PathLike | None = None,
        max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
        split_punctuation: bool = True,
        bos_token: str | AddedToken = BOS_TOKEN,
        eos_token: str | AddedToken = EOS_TOKEN,
        unk_token: str | AddedToken = UNK_TOKEN,
        pad_token: str | AddedToken = PAD_TOKEN,
        **kwargs,
    ):
        # Taken out of kwargs so that the base class does not replace the backend built here.
        tokenizer_file = kwargs.pop("tokenizer_file", None)
        tokenizer_object = kwargs.pop("tokenizer_object", None)
        # A ManyLangs model's characters: saved as their own file (char_vocab.json), not in tokenizer_config.json.
        char_vocab, char_vocab_file = kwargs.pop("char_vocab", None), kwargs.pop("char_vocab_file", None)
        for key in ("add_bos_token", "add_eos_token"):
            if kwargs.pop(key, False):
                logger.warning(f"ElmoTokenizer ignores {key}=True: the model adds <S> and </S> itself.")
        max_chars = _check_max_chars(max_characters_per_token)
        if not isinstance(split_punctuation, bool):
            raise TypeError(f"split_punctuation must be a bool, got {_type_name(split_punctuation)}")
        unk = str(unk_token)

        if isinstance(vocab, (str, os.PathLike)):
            vocab, vocab_file = None, vocab
        added_tokens: dict[int, AddedToken] = {}
        if vocab is None and tokenizer_object is not None:
            vocab, added_tokens = _vocab_of_backend(tokenizer_object, "tokenizer_object")
        if vocab is None and tokenizer_file is not None:
            if not os.path.isfile(tokenizer_file):
                raise ValueError(f"tokenizer_file {os.fspath(tokenizer_file)!r} is not a file")
            vocab, added_tokens = _vocab_of_backend(Tokenizer.from_file(os.fspath(tokenizer_file)), tokenizer_file)
        if vocab is None and vocab_file is not None:
            vocab = load_bilm_vocab(vocab_file)
            self.vocab_file = os.fspath(vocab_file)
        if vocab is None:
            vocab = {word: index for index, word in enumerate(BILM_SPECIAL_WORDS)}
        vocab = _check_vocab(vocab, unk)
        if added_tokens and not kwargs.get("added_tokens_decoder"):
            kwargs["added_tokens_decoder"] = added_tokens

        backend = Tokenizer(models.WordLevel(vocab, unk_token=unk))
        backend.pre_tokenizer = build_pre_tokenizer(split_punctuation)
        self._tokenizer = backend
        self.max_characters_per_token = max_chars
        self.split_punctuation = split_punctuation
        # ELMoForManyLangs: the model's own characters (None: ELMo's UTF-8 bytes).
        if char_vocab is None and char_vocab_file is not None:
            with open(char_vocab_file, encoding="utf-8") as handle:
                char_vocab = json.load(handle)
        self.char_vocab = None if char_vocab is None else check_characters(char_vocab)
        self._char_ids = (
            None
            if self.char_vocab is None
            else {char: i for i, char in enumerate(self.char_vocab, MANYLANGS_FIRST_CHARACTER)}
        )
        # Special tokens are never looked for inside the text: `<pad>` in a text is just characters.
        kwargs.setdefault("split_special_tokens", True)
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            max_characters_per_token=max_chars,
            split_punctuation=split_punctuation,
            **kwargs,
        )
        if "token_type_ids" not in self.model_input_names:  # pairs always have them: pipelines pass these names on
            self.model_input_names = [*self.model_input_names, "token_type_ids"]

    @classmethod
    def from_vocab_file(cls, vocab_file: str | os.PathLike, **kwargs) -> ElmoTokenizer:
        """A tokenizer with the vocabulary of a bilm-tf vocabulary file."""
        return cls(vocab_file=vocab_file, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs) -> ElmoTokenizer:
        """As transformers' ``from_pretrained``; a name that is no path and no ``owner/name`` Hub id (such as a
        released model's short name) fails at once, as the models' ``from_pretrained`` does (``check_model_name``)."""
        check_model_name(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def _from_pretrained(cls, resolved_vocab_files, pretrained_model_name_or_path, *args, **kwargs):
        # A folder without the vocabulary or the tokenizer settings would otherwise load silently as the default
        # three-word tokenizer (issue #8): it is an error naming the missing file.
        if not (
            isinstance(pretrained_model_name_or_path, (str, os.PathLike))
            and os.path.isfile(pretrained_model_name_or_path)
        ):
            missing = []
            if resolved_vocab_files.get("tokenizer_config_file") is None:
                missing.append("tokenizer_config.json")
            if resolved_vocab_files.get("tokenizer_file") is None and resolved_vocab_files.get("vocab_file") is None:
                missing.append("tokenizer.json (or vocab.txt)")
            if missing:
                raise OSError(
                    f"cannot load an ElmoTokenizer from {os.fspath(pretrained_model_name_or_path)}: missing "
                    f"{' and '.join(missing)} (save the tokenizer with save_pretrained, or build one with "
                    "ElmoTokenizer() / ElmoTokenizer.from_vocab_file(...))"
                )
        return super()._from_pretrained(resolved_vocab_files, pretrained_model_name_or_path, *args, **kwargs)

    # -----------------------------------------------------------------------------------------
    # Saving
    # -----------------------------------------------------------------------------------------

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """Write the word vocabulary as a bilm-tf vocabulary file (one word per line, by id)."""
        if not os.path.isdir(save_directory):
            raise ValueError(f"{save_directory!r} is not a directory")
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        words = sorted(vocab, key=vocab.__getitem__)
        if any("\n" in word or "\r" in word for word in words):
            logger.warning("vocab.txt not written: a vocabulary word contains a line break (tokenizer.json has it).")
            return ()
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "vocab.txt")
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write("".join(word + "\n" for word in words))
        if self.char_vocab is None:
            return (path,)
        chars = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "char_vocab.json")
        with open(chars, "w", encoding="utf-8") as handle:
            json.dump([*MANYLANGS_MARKS, *self.char_vocab], handle, ensure_ascii=True)
        return (path, chars)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        file_names = super()._save_pretrained(
            save_directory, file_names, legacy_format=legacy_format, filename_prefix=filename_prefix
        )
        return file_names + self.save_vocabulary(str(save_directory), filename_prefix=filename_prefix)

    # -----------------------------------------------------------------------------------------
    # Encoding
    # -----------------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs) -> BatchEncoding:
        """As transformers' ``__call__`` (text, ``text_pair``, batches of either, ``is_split_into_words``); warns
        when ``padding="max_length"`` comes without ``max_length`` (no padding is then done)."""
        options = {**(kwargs.get("tokenizer_kwargs") or {}), **kwargs}
        warn_without_max_length(
            self, options.get("padding", False), options.get("max_length"), options.get("verbose", True)
        )
        return super().__call__(*args, **kwargs)

    def encode(self, text, text_pair=None, *args, **kwargs) -> list:
        """Character ids of one text or pair (rows of ``max_characters_per_token`` ints), as ``__call__`` gives
        them."""
        warn_without_max_length(self, kwargs.get("padding", False), kwargs.get("max_length"), True)
        return super().encode(text, text_pair, *args, **kwargs)

    def _kept_whole(self) -> tuple[str, ...]:
        """The special tokens a user added (``add_special_tokens``): one word each in raw text. The tokenizer's own
        pad token stays characters there (its id is no word of the biLM's vocabulary); ``<S>``, ``</S>`` and
        ``<UNK>`` are whole words of the pre-tokenizer already."""
        decoder = self._tokenizer.get_added_tokens_decoder()
        if len(decoder) <= 4:  # only the tokenizer's own four (the common case: skip the attribute lookups)
            return ()
        own = {str(self.pad_token), str(self.bos_token), str(self.eos_token), str(self.unk_token)}
        return tuple(sorted(token.content for token in decoder.values() if token.special and token.content not in own))

    def _model_with(self, keep_whole: tuple[str, ...]) -> models.WordLevel:
        """The backend's words plus the added special tokens ``keep_whole``, so that such a token gets its own id and
        token (``tokens()``, ``vocab_ids``), not ``<UNK>``, as in a stock tokenizer. Built once per set of tokens."""
        cached = self.__dict__.get("_whole_model")
        if cached is None or cached[0] != keep_whole:
            vocab = self._tokenizer.get_vocab(with_added_tokens=False)
            vocab.update({token: self._tokenizer.token_to_id(token) for token in keep_whole})
            cached = (keep_whole, models.WordLevel(vocab, unk_token=str(self.unk_token)))
            self.__dict__["_whole_model"] = cached
        return cached[1]

    def _run_backend(
        self,
        batch: list,
        is_split_into_words: bool,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy | str = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        split_special_tokens: bool | None = None,
        return_overflowing_tokens: bool = False,
    ) -> list[tuple[Any, list[str | None], int]]:
        """Encode a checked batch (see ``check_batch``); one ``(encoding, words, sample index)`` per output row.

        ``words[k]`` is the word at position ``k`` (``None`` for padding), read from the caller's
        input, not from the backend's tokens (which say ``<UNK>`` for unknown words).
        """
        if split_special_tokens is None:
            split_special_tokens = self.split_special_tokens
        truncation = TruncationStrategy(truncation_strategy)
        if truncation != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be at least 1 word to truncate to, got max_length={max_length}")
        if truncation != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None and stride >= max_length:
            raise ValueError(f"stride={stride} must be smaller than max_length={max_length} (the words of a window)")
        rust_inputs = [backend_input(item, is_split_into_words) for item in batch]
        backend = self._tokenizer
        pre_tokenizer, model = backend.pre_tokenizer, backend.model
        encode_special_tokens = backend.encode_special_tokens
        keep_whole = () if is_split_into_words else self._kept_whole()
        try:
            self.set_truncation_and_padding(
                padding_strategy=padding_strategy,
                truncation_strategy=truncation,
                max_length=max_length,
                stride=stride,
                pad_to_multiple_of=pad_to_multiple_of,
                padding_side=padding_side,
            )
            if is_split_into_words:
                backend.pre_tokenizer = None
                backend.encode_special_tokens = True
            else:
                backend.encode_special_tokens = bool(split_special_tokens)
                if keep_whole:
                    backend.pre_tokenizer = _cached_pre_tokenizer(self.split_punctuation, keep_whole)
                    if split_special_tokens:  # the backend does not look them up then: its vocabulary must
                        backend.model = self._model_with(keep_whole)
            encodings = backend.encode_batch(rust_inputs, add_special_tokens=False, is_pretokenized=is_split_into_words)
        except (TypeError, ValueError):
            raise
        except Exception as error:  # the Rust side raises plain Exceptions
            raise backend_error(error, truncation.value, max_length, stride) from error
        except BaseException as error:  # a Rust panic (pyo3's PanicException), e.g. a stride too large for a window
            if type(error).__name__ != "PanicException":
                raise
            raise backend_error(error, truncation.value, max_length, stride) from None
        finally:
            backend.pre_tokenizer, backend.model = pre_tokenizer, model
            backend.encode_special_tokens = encode_special_tokens
            backend.no_padding()
            backend.no_truncation()

        rows = []
        for sample, encoding in enumerate(encodings):
            group = [encoding, *encoding.overflowing] if return_overflowing_tokens else [encoding]
            for item in group:
                rows.append((item, words_of(item, batch[sample], is_split_into_words), sample))
        return rows

    def _encode_plus(
        self,
        text,
        text_pair=None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy | str = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | TensorType | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        split_special_tokens: bool | None = None,
        return_vocab_ids: bool | None = None,
        **kwargs,
    ) -> BatchEncoding:
        """Encode text or words into character ids (see the class docstring for the outputs).

        ``add_special_tokens`` has no effect: the model adds ``<S>``/``</S>`` itself.
        """
        unexpected = sorted(set(kwargs) - {"sanitize_control_tokens"})
        if unexpected:
            logger.warning(f"ElmoTokenizer ignores the keyword arguments {unexpected}")
        batch, is_batched = check_batch(text, text_pair, is_split_into_words)
        rows = self._run_backend(
            batch,
            is_split_into_words,
            padding_strategy=padding_strategy,
            truncation_strategy=truncation_strategy,
            max_length=max_length,
            stride=stride,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            split_special_tokens=split_special_tokens,
            return_overflowing_tokens=return_overflowing_tokens,
        )
        if return_token_type_ids is None:  # a pair's words are told apart by them only: given with every pair
            return_token_type_ids = has_pairs(batch)
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        if return_vocab_ids is None:
            return_vocab_ids = "vocab_ids" in self.model_input_names

        max_chars = self.max_characters_per_token
        empty_word_id = self._tokenizer.token_to_id("")
        if empty_word_id is None:
            empty_word_id = self.unk_token_id
        data: dict[str, list] = {"input_ids": []}
        for key, wanted in (
            ("token_type_ids", return_token_type_ids),
            ("attention_mask", return_attention_mask),
            ("vocab_ids", return_vocab_ids),
            ("special_tokens_mask", return_special_tokens_mask),
            ("offset_mapping", return_offsets_mapping),
            ("length", return_length),
        ):
            if wanted:
                data[key] = []
        # Every distinct word once: input_ids are rows of this table (row 0: padding).
        table_index: dict[str, int] = {}
        for encoding, words, _ in rows:
            data["input_ids"].append(
                [0 if word is None else table_index.setdefault(word, len(table_index) + 1) for word in words]
            )
            if return_token_type_ids:
                data["token_type_ids"].append(encoding.type_ids)
            if return_attention_mask:
                data["attention_mask"].append(encoding.attention_mask)
            if return_vocab_ids:
                data["vocab_ids"].append(
                    [
                        VOCAB_IDS_PAD if word is None else (empty_word_id if word == "" else index)
                        for word, index in zip(words, encoding.ids, strict=True)
                    ]
                )
                if self.char_vocab is not None:  # ELMoForManyLangs looks up the word cut to C - 2 code points
                    data["vocab_ids"][-1] = [
                        self._cut_word_id(word) if word is not None and len(word) > max_chars - 2 else index
                        for word, index in zip(words, data["vocab_ids"][-1], strict=True)
                    ]
            if return_special_tokens_mask:
                data["special_tokens_mask"].append(encoding.special_tokens_mask)
            if return_offsets_mapping:
                offsets = encoding.offsets
                if is_split_into_words:  # an empty word has no characters (the backend saw a stand-in)
                    offsets = [(0, 0) if word == "" else span for word, span in zip(words, offsets, strict=True)]
                data["offset_mapping"].append(offsets)
            if return_length:
                data["length"].append(len(encoding.ids))
            self._eventual_warn_about_too_long_sequence(encoding.ids, max_length, verbose)
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = [sample for _, _, sample in rows]
        encodings = [encoding for encoding, _, _ in rows]
        table = [(0,) * max_chars] + [self._word_char_ids(word) for word in table_index]

        ragged = len({len(sentence) for sentence in data["input_ids"]}) > 1
        if return_tensors is not None and not (ragged and TensorType(return_tensors) == TensorType.NUMPY):
            self._stack_ragged_fields(data, table, return_tensors)
            return BatchEncoding(data, encodings, tensor_type=return_tensors)
        data["input_ids"] = [[list(table[index]) for index in sentence] for sentence in data["input_ids"]]
        if return_tensors is not None:  # ragged NumPy: an object array of (W_i, C) arrays, as transformers makes it
            return BatchEncoding(data, encodings, tensor_type=return_tensors)
        if not is_batched and not return_overflowing_tokens:
            return BatchEncoding({key: value[0] for key, value in data.items()}, encodings)
        return BatchEncoding(data, encodings)

    def _word_char_ids(self, word: str) -> tuple[int, ...]:
        """The ``max_characters_per_token`` character ids of ``word`` (ELMo's bytes, or a ManyLangs model's own)."""
        if self._char_ids is None:
            return _cached_char_ids(word, self.max_characters_per_token)
        return tuple(manylangs_char_ids(word, self._char_ids, self.max_characters_per_token))

    def _cut_word_id(self, word: str) -> int:
        """The vocabulary id of ``word`` cut to ``max_characters_per_token - 2`` code points (ELMoForManyLangs)."""
        index = self._tokenizer.token_to_id(sanitize(word[: self.max_characters_per_token - 2]))
        return self.unk_token_id if index is None else index

    def _stack_ragged_fields(
        self, data: dict[str, Any], table: list[tuple[int, ...]], return_tensors: str | TensorType
    ) -> None:
        """Make the arrays of a batch, also when a dimension is 0.

        ``data["input_ids"]`` holds, per word, its row of ``table``.
        """
        lengths = sorted({len(sentence) for sentence in data["input_ids"]})
        if len(lengths) > 1:
            raise ValueError(
                f"cannot make a tensor of sentences of different numbers of words ({lengths[0]} to {lengths[-1]}): "
                "pass padding=True (or padding='max_length' with max_length)"
            )
        words = lengths[0] if lengths else 0
        batch = len(data["input_ids"])
        index = np.asarray(data["input_ids"], dtype=np.int64).reshape(batch, words)
        data["input_ids"] = np.asarray(table, dtype=np.int64)[index]
        if "offset_mapping" in data:
            data["offset_mapping"] = np.asarray(data["offset_mapping"], dtype=np.int64).reshape(batch, words, 2)
        tensor_type = TensorType(return_tensors)
        for key in ("input_ids", "offset_mapping"):
            if key not in data:
                continue
            if tensor_type == TensorType.PYTORCH:
                import torch

                data[key] = torch.from_numpy(data[key])
            elif tensor_type != TensorType.NUMPY:
                data[key] = data[key].tolist()  # let BatchEncoding convert it

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs) -> list[str]:
        """The words of ``text`` (then of ``pair``) as the pre-tokenizer splits them (the words themselves, not
        ``<UNK>``).

        ``split_special_tokens`` overrides the tokenizer's setting for this call, as in ``__call__``.
        """
        is_split_into_words = kwargs.pop("is_split_into_words", False)
        split_special_tokens = kwargs.pop("split_special_tokens", None)
        for given in (text, pair):
            if not is_split_into_words and given is not None and not isinstance(given, str):
                raise TypeError(f"tokenize() takes one str (and one str as pair), got {_type_name(given)}")
        batch, is_batched = check_batch(text, pair, is_split_into_words)
        if is_batched:
            raise TypeError("tokenize() takes one sentence")
        ((_, words, _),) = self._run_backend(batch, is_split_into_words, split_special_tokens=split_special_tokens)
        return [word for word in words if word is not None]

    # -----------------------------------------------------------------------------------------
    # Padding
    # -----------------------------------------------------------------------------------------

    def pad(
        self,
        encoded_inputs,
        padding=True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | TensorType | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Pad character ids (rows of zeros), ``attention_mask`` (0) and ``vocab_ids`` (-100).

        Takes what the base class takes (a batch as a dict of lists or a list of dicts, as data
        collators give it), and also one unbatched sentence (``input_ids`` of shape ``(W, C)``).
        """
        if (
            isinstance(encoded_inputs, (list, tuple))
            and len(encoded_inputs) > 0
            and isinstance(encoded_inputs[0], Mapping)
        ):
            encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in encoded_inputs[0].keys()}
        elif isinstance(encoded_inputs, Mapping):
            encoded_inputs = dict(encoded_inputs)
        warn_without_max_length(self, padding, max_length, verbose)
        options = {
            "padding": padding,
            "max_length": max_length,
            "pad_to_multiple_of": pad_to_multiple_of,
            "padding_side": padding_side,
            "return_attention_mask": return_attention_mask,
            "return_tensors": return_tensors,
            "verbose": verbose,
        }
        layout = self._layout(encoded_inputs.get("input_ids")) if isinstance(encoded_inputs, dict) else None
        if layout == "flat":
            raise ValueError(
                "ElmoTokenizer pads character ids: input_ids must hold, per word, a list of "
                f"{self.max_characters_per_token} ints (shape (words, {self.max_characters_per_token}) per sentence, "
                f"(batch, words, {self.max_characters_per_token}) per batch), not one int per word"
            )
        if layout == "single":
            padded = super().pad({key: [value] for key, value in encoded_inputs.items()}, **options)
            return BatchEncoding({key: value[0] for key, value in padded.items()})
        padded = super().pad(encoded_inputs, **options)
        self._fix_empty_shape(padded)
        return padded

    def _layout(self, input_ids: Any) -> str | None:
        """``"batch"`` for (B, W, C) ids, ``"single"`` for (W, C), ``"flat"`` for anything that is not
        character ids ((W,) or (B, W) ints); None if unknown (left to the base class)."""
        if input_ids is None:
            return None
        width = self.max_characters_per_token
        shape = getattr(input_ids, "shape", None)
        if shape is not None:
            if len(shape) not in (2, 3) or shape[-1] != width:
                return "flat"
            return "single" if len(shape) == 2 else "batch"
        if not isinstance(input_ids, (list, tuple)) or len(input_ids) == 0:
            return None
        first = next((item for item in input_ids if not (isinstance(item, (list, tuple)) and len(item) == 0)), None)
        if first is None:  # only empty sentences
            return "batch"
        if _is_int(first):
            return "flat"
        shape = getattr(first, "shape", None)
        if shape is not None:
            if len(shape) not in (1, 2) or shape[-1] != width:
                return "flat"
            return "single" if len(shape) == 1 else "batch"
        if isinstance(first, (list, tuple)):
            inner = next((item for item in first if not (isinstance(item, (list, tuple)) and len(item) == 0)), None)
            if inner is None or not _is_int(inner):
                return "batch"
            return "single" if len(first) == width else "flat"
        return None

    def _fix_empty_shape(self, padded: BatchEncoding) -> None:
        """A batch of empty sentences becomes (B, 0) in the base class; make it (B, 0, C)."""
        ids = padded.get("input_ids")
        if getattr(ids, "ndim", None) == 2 and ids.shape[1] == 0:
            padded["input_ids"] = ids.reshape(ids.shape[0], 0, self.max_characters_per_token)

    def _pad(
        self,
        encoded_inputs: dict[str, Any] | BatchEncoding,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict:
        """Pad one sentence: ``input_ids`` with rows of zeros, the per-word fields to match."""
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        rows = encoded_inputs["input_ids"]
        width = self.max_characters_per_token
        if rows and (_is_int(rows[0]) or len(rows[0]) != width):
            raise ValueError(
                f"ElmoTokenizer pads character ids: input_ids must hold, per word, a list of {width} ints, "
                f"got {rows[0]!r} for a word"
            )
        words = len(rows)
        if padding_strategy == PaddingStrategy.LONGEST:
            max_length = words
        if max_length is not None and pad_to_multiple_of is not None and max_length % pad_to_multiple_of != 0:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        if return_attention_mask and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1 if any(row) else 0 for row in rows]
        if padding_strategy == PaddingStrategy.DO_NOT_PAD or max_length is None or words >= max_length:
            return encoded_inputs

        missing = max_length - words
        fillers = {
            "input_ids": [0] * width,
            "attention_mask": 0,
            "vocab_ids": VOCAB_IDS_PAD,
            "token_type_ids": self.pad_token_type_id,
            "special_tokens_mask": 1,
            "offset_mapping": (0, 0),
        }
        side = padding_side if padding_side is not None else self.padding_side
        if side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {side!r}")
        for key, filler in fillers.items():
            if key not in encoded_inputs or (key == "attention_mask" and not return_attention_mask):
                continue
            values = list(encoded_inputs[key])
            if len(values) != words:
                continue  # not a per-word field
            pad = [list(filler) if isinstance(filler, list) else filler for _ in range(missing)]
            encoded_inputs[key] = values + pad if side == "right" else pad + values
        return encoded_inputs

    # -----------------------------------------------------------------------------------------
    # Decoding
    # -----------------------------------------------------------------------------------------

    def _is_char_sentence(self, ids: Any) -> bool:
        """Whether ``ids`` is one sentence of character ids: rows of ``C`` ints, word or padding rows."""
        if not isinstance(ids, list) or len(ids) == 0:
            return False
        for row in ids:
            if not isinstance(row, list) or len(row) != self.max_characters_per_token:
                return False
            if not all(_is_int(value) for value in row):
                return False
            if row[0] != (BEGIN_OF_WORD_CHAR + 1 if self.char_vocab is None else MANYLANGS_EOW) and any(row):
                return False
        return True

    def _row_to_word(self, row: list[int]) -> str | None:
        """The word of one row of character ids; None for a padding row."""
        if self.char_vocab is not None:
            return row_to_word(row, self.char_vocab)
        if not any(row):
            return None
        if any(not 0 < value < NUM_CHARACTERS for value in row):
            raise ValueError(f"not a row of character ids (ids must be 1..{NUM_CHARACTERS - 1}): {row}")
        raw = [value - 1 for value in row]
        if END_OF_WORD_CHAR not in raw:
            raise ValueError(f"not a row of character ids (no end-of-word mark): {row}")
        content = raw[1 : raw.index(END_OF_WORD_CHAR)]
        if content == [BEGIN_OF_SENTENCE_CHAR]:
            return BOS_TOKEN
        if content == [END_OF_SENTENCE_CHAR]:
            return EOS_TOKEN
        if any(value > 255 for value in content) or any(value != PADDING_CHAR for value in raw[len(content) + 2 :]):
            raise ValueError(f"not a row of character ids (marks inside the word): {row}")
        return bytes(content).decode("utf-8", errors="replace")

    def _rows_to_words(self, rows: list[list[int]], skip_special_tokens: bool) -> list[str | None]:
        words = [self._row_to_word(row) for row in rows]
        if skip_special_tokens:
            marks = (BOS_TOKEN, EOS_TOKEN) if self.char_vocab is None else ("<bos>", "<eos>")
            words = [word for word in words if word not in marks]
        return words

    def decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str | list[str]:
        """Decode character ids (``(W, C)`` or ``(B, W, C)``) back to words joined by spaces.

        Padding rows are skipped; ``skip_special_tokens`` also skips ``<S>``/``</S>``. Anything
        else is decoded as vocabulary ids (ids < 0, the padding of ``vocab_ids``, are dropped).
        """
        if isinstance(token_ids, Mapping):
            token_ids = token_ids["input_ids"]
        ids = to_py_obj(token_ids)
        if self._is_char_sentence(ids):
            return " ".join(word for word in self._rows_to_words(ids, skip_special_tokens) if word is not None)
        if (
            isinstance(ids, list)
            and ids
            and all(isinstance(sentence, list) for sentence in ids)
            and any(sentence for sentence in ids)
            and all(sentence == [] or self._is_char_sentence(sentence) for sentence in ids)
        ):
            return [self.decode(sentence, skip_special_tokens=skip_special_tokens) for sentence in ids]
        return super().decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def _decode(self, token_ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces=None, **kwargs):
        if _is_int(token_ids):
            token_ids = [token_ids]
        if isinstance(token_ids, list):
            token_ids = [int(index) for index in token_ids if not _is_int(index) or index >= 0]
            # The Rust tokenizer takes u32 ids: a larger one is an OverflowError there, not a clear error.
            too_large = [index for index in token_ids if index >= len(self)]
            if too_large:
                raise ValueError(
                    f"decode: token id {too_large[0]} is not in the vocabulary (ids are in [0, {len(self)}), "
                    "or negative for padding)"
                )
        return super()._decode(
            token_ids,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
            **kwargs,
        )

    def _check_vocab_id_range(self, ids: list) -> None:
        """``ValueError`` naming the first id past the vocabulary: the Rust tokenizer answers None for it, or an
        ``OverflowError`` past 2**32."""
        size = len(self)
        too_large = next((index for index in ids if _is_int(index) and index >= size), None)
        if too_large is not None:
            raise ValueError(
                f"convert_ids_to_tokens: token id {too_large} is not in the vocabulary (ids are in [0, {size}), "
                "or negative for padding)"
            )

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        """Vocabulary ids to words (None for ids < 0), or character rows ``(W, C)`` to their words.

        A padding row becomes the pad token (or is skipped with ``skip_special_tokens``). An id past the
        vocabulary is a ``ValueError`` naming it.
        """
        ids = to_py_obj(ids)
        if isinstance(ids, list) and ids and all(isinstance(row, list) for row in ids):
            if not self._is_char_sentence(ids):
                raise ValueError(
                    "convert_ids_to_tokens takes vocabulary ids, or one sentence of character ids (rows of "
                    f"{self.max_characters_per_token} ints)"
                )
            words = self._rows_to_words(ids, skip_special_tokens)
            if skip_special_tokens:
                return [word for word in words if word is not None]
            return [self.pad_token if word is None else word for word in words]
        if _is_int(ids):
            self._check_vocab_id_range([ids])
            return None if ids < 0 else super().convert_ids_to_tokens(int(ids))
        if isinstance(ids, list):
            self._check_vocab_id_range(ids)
            if skip_special_tokens:
                return super().convert_ids_to_tokens([index for index in ids if index >= 0], skip_special_tokens=True)
            return [None if index < 0 else self._tokenizer.id_to_token(int(index)) for index in ids]
        return super().convert_ids_to_tokens(ids, skip_special_tokens=skip_special_tokens)


__all__ = ["ElmoTokenizer", "build_pre_tokenizer", "load_bilm_vocab"]
