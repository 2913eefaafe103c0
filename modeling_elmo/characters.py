"""Character ids of the original ELMo models.

A word becomes ``max_characters_per_token`` ids: its UTF-8 bytes (cut to leave room for the
word marks), wrapped in begin-of-word / end-of-word marks, padded with a padding mark. Every id
is then shifted by +1 so that 0 can mean "no word here" (a padded batch position).
"""

from __future__ import annotations

MAX_CHARACTERS_PER_TOKEN = 50

# Marks, before the +1 shift. Byte values 0-255 are the characters.
BEGIN_OF_SENTENCE_CHAR = 256
END_OF_SENTENCE_CHAR = 257
BEGIN_OF_WORD_CHAR = 258
END_OF_WORD_CHAR = 259
PADDING_CHAR = 260

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"

# Rows of the character embedding: 261 marks/bytes shifted by one, plus row 0 for padding.
NUM_CHARACTERS = 262


# The shifted ids as shared int objects: ``i + 1`` above 256 makes a new 32-byte int per id (Python caches only the
# small ones), which made each cached word ~1.7 KB instead of ~0.5 KB (issue 26, 17).
_SHIFTED = tuple(range(1, NUM_CHARACTERS))


def _wrap(ids: list[int], max_chars: int) -> list[int]:
    row = [BEGIN_OF_WORD_CHAR, *ids, END_OF_WORD_CHAR]
    row += [PADDING_CHAR] * (max_chars - len(row))
    return [_SHIFTED[i] for i in row]


def word_to_char_ids(word: str, max_chars: int = MAX_CHARACTERS_PER_TOKEN) -> list[int]:
    """Return the ``max_chars`` shifted character ids of ``word``.

    Bytes past ``max_chars - 2`` are dropped, even inside a multi-byte character, as the
    original does. Characters that cannot be encoded (lone surrogates) are dropped. The words
    ``<S>`` and ``</S>`` get the sentence-boundary ids, as in the original vocabulary files.
    """
    if not isinstance(word, str):
        raise TypeError(f"a word must be a str, got {type(word).__name__}: {word!r}")
    if word == BOS_TOKEN:
        return begin_of_sentence_ids(max_chars)
    if word == EOS_TOKEN:
        return end_of_sentence_ids(max_chars)
    data = word.encode("utf-8", errors="ignore")[: max_chars - 2]
    return _wrap(list(data), max_chars)


def begin_of_sentence_ids(max_chars: int = MAX_CHARACTERS_PER_TOKEN) -> list[int]:
    """Shifted character ids of the ``<S>`` token the model puts before every sentence."""
    return _wrap([BEGIN_OF_SENTENCE_CHAR], max_chars)


def end_of_sentence_ids(max_chars: int = MAX_CHARACTERS_PER_TOKEN) -> list[int]:
    """Shifted character ids of the ``</S>`` token the model puts after every sentence."""
    return _wrap([END_OF_SENTENCE_CHAR], max_chars)
