"""ELMoForManyLangs (HIT-SCIR) models as ELMo models: their character ids, their sentence marks, their word input.

An ELMoForManyLangs model is the paper's biLM with three differences at its input (``config.char_vocabulary ==
"manylangs"``; the facts come from its released package, version 0.0.4):

- Characters are Unicode code points of a per-model vocabulary (its ``char.dic``), not UTF-8 bytes. Here row 0 of the
  character embedding means "no word" (as for ELMo), rows 1-6 hold its six marks, and its characters follow.
- A word is ``[<eow>, c_1 .. c_n, <bow>, <pad> ...]``: its begin and end marks are swapped (its frontend gives the
  begin position the id of ``<eow>``, in training too, so that is what the weights expect), words are cut to
  ``C - 2`` code points, and padding inside a word uses the ``<pad>`` row (a nonzero vector). The words ``<bos>`` and
  ``<eos>`` are the sentence marks, one character between the word marks.
- The token vector is ``W [e_w; x] + b``: a word embedding ``e_w`` (of the word cut to ``C - 2`` code points;
  ``<oov>`` when unknown) concatenated with the highway output ``x`` before the projection. That is
  ``(W_x x + b) + W_w e_w``: [`ElmoCharacterEncoder`] computes the first part, [`ElmoWordInput`] the second. The model
  reads the word ids (``vocab_ids``) as one more column of each word's character row (see [`append_word_ids`]).

Word ids follow its ``word.dic``: ``<oov>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<pad>`` 3, then the words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

# Character ids (rows of the character embedding) of a ManyLangs model.
MARKS = ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>")  # rows 1-6, in char.dic's order
BOS_CHAR, EOS_CHAR, OOV_CHAR, PAD_CHAR, BOW_CHAR, EOW_CHAR = range(1, 7)
FIRST_CHARACTER = 7
# Word ids of its word vocabulary.
WORD_MARKS = ("<oov>", "<bos>", "<eos>", "<pad>")
OOV_WORD, BOS_WORD, EOS_WORD, PAD_WORD = range(4)


def word_to_char_ids(word: str, characters: Mapping[str, int], max_chars: int) -> list[int]:
    """The ``max_chars`` character ids of ``word`` in a ManyLangs model with the character vocabulary ``characters``
    (code point -> id, ids from ``FIRST_CHARACTER``): ``[<eow>, c_1 .. c_n, <bow>, <pad> ...]``, the word cut to
    ``max_chars - 2`` code points, unknown ones ``<oov>``; the words ``<bos>``/``<eos>`` are the sentence marks."""
    word = word[: max_chars - 2]
    if word in ("<bos>", "<eos>"):
        inner = [BOS_CHAR if word == "<bos>" else EOS_CHAR]
    else:
        inner = [characters.get(char, OOV_CHAR) for char in word]
    row = [EOW_CHAR, *inner, BOW_CHAR]  # swapped, as the original frontend has them
    return row + [PAD_CHAR] * (max_chars - len(row))


def row_to_word(row: Sequence[int], characters: Sequence[str]) -> str | None:
    """The word of one row of [`word_to_char_ids`] (``characters[k]`` is the code point of id ``FIRST_CHARACTER +
    k``; ``<oov>`` reads as U+FFFD); None for a row of zeros (padding). ``ValueError`` if it is no such row."""
    if not any(row):
        return None
    if row[0] != EOW_CHAR or BOW_CHAR not in row:
        raise ValueError(f"not a row of ELMoForManyLangs character ids (no word marks): {list(row)}")
    end = list(row).index(BOW_CHAR)
    inner, rest = row[1:end], row[end + 1 :]
    if any(value != PAD_CHAR for value in rest):
        raise ValueError(f"not a row of ELMoForManyLangs character ids (ids after the end mark): {list(row)}")
    if list(inner) == [BOS_CHAR]:
        return "<bos>"
    if list(inner) == [EOS_CHAR]:
        return "<eos>"
    out = []
    for value in inner:
        if value == OOV_CHAR:
            out.append("\ufffd")
        elif FIRST_CHARACTER <= value < FIRST_CHARACTER + len(characters):
            out.append(characters[value - FIRST_CHARACTER])
        else:
            raise ValueError(f"not a row of ELMoForManyLangs character ids (id {value} inside the word): {list(row)}")
    return "".join(out)


def check_characters(characters: object) -> list[str]:
    """A character vocabulary (``char_vocab.json``: the six [`MARKS`], then one distinct code point per entry) as the
    list of its code points; ``ValueError``/``TypeError`` naming the problem."""
    if not isinstance(characters, list) or not all(isinstance(c, str) for c in characters):
        raise TypeError("a ManyLangs character vocabulary must be a list of str: its six marks, then code points")
    if tuple(characters[:6]) != MARKS:
        raise ValueError(f"a ManyLangs character vocabulary must start with its marks {list(MARKS)}")
    chars = characters[6:]
    bad = next((c for c in chars if len(c) != 1), None)
    if bad is not None:
        raise ValueError(f"a ManyLangs character vocabulary holds one code point per entry, got {bad[:20]!r}")
    if len(set(chars)) != len(chars):
        raise ValueError("a ManyLangs character vocabulary holds each code point once")
    return chars


def boundary_rows(config) -> list[list[int]]:
    """The rows ``ElmoModel`` puts around every sentence of a ManyLangs model: ``<bos>`` and ``<eos>``'s character
    ids, each followed by its word id if the model has a word input."""
    chars = config.max_characters_per_token
    rows = [word_to_char_ids(mark, {}, chars) for mark in ("<bos>", "<eos>")]
    if config.word_vocab_size:
        rows = [rows[0] + [BOS_WORD], rows[1] + [EOS_WORD]]
    return rows


class ElmoWordInput(nn.Module):
    """The word part of an ELMoForManyLangs token vector: ``W_w e_w`` ``(..., P)`` for word ids ``(...)``.

    ``embedding`` ``(V_w, E)`` is its word embedding; ``projection`` ``(P, E)`` the projection's columns that
    multiply it (its first ``E`` columns; the others are [`ElmoCharacterEncoder`]'s ``projection``).
    """

    def __init__(self, config):
        super().__init__()
        self.embedding = nn.Embedding(config.word_vocab_size, config.word_embedding_dim)
        self.projection = nn.Linear(config.word_embedding_dim, config.projection_dim, bias=False)

    def forward(self, word_ids: torch.Tensor) -> torch.Tensor:
        return self.projection(self.embedding(word_ids))


def append_word_ids(
    input_ids: torch.Tensor, vocab_ids: torch.Tensor | None, mask: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """``input_ids (B, W, C)`` with each word's id from ``vocab_ids (B, W)`` appended: ``(B, W, C + 1)``, the rows
    a model with a word input reads (zero at padded words, where ``vocab_ids`` may hold anything, e.g. -100).

    ``ValueError`` naming the problem for missing ``vocab_ids``, a wrong shape or dtype, or ids outside
    ``[0, vocab_size)`` at words.
    """
    if vocab_ids is None:
        raise ValueError(
            "this model has a word input (an ELMoForManyLangs model): pass vocab_ids, as its tokenizer returns them "
            "(model(**tokenizer(...)))"
        )
    if not isinstance(vocab_ids, torch.Tensor) or tuple(vocab_ids.shape) != tuple(mask.shape):
        shape = tuple(vocab_ids.shape) if isinstance(vocab_ids, torch.Tensor) else type(vocab_ids).__name__
        raise ValueError(f"vocab_ids must be a (batch, words) = {tuple(mask.shape)} tensor, got {shape}")
    if vocab_ids.is_floating_point() or vocab_ids.is_complex() or vocab_ids.dtype == torch.bool:
        raise ValueError(f"vocab_ids must hold integer word ids, got dtype {vocab_ids.dtype}")
    ids = vocab_ids.to(input_ids.dtype).masked_fill(~mask, 0)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"vocab_ids must be word ids in [0, {vocab_size}) at every word; use the tokenizer saved with this model"
        )
    return torch.cat([input_ids, ids.unsqueeze(-1)], dim=-1)


__all__ = ["ElmoWordInput", "append_word_ids", "boundary_rows", "check_characters", "row_to_word", "word_to_char_ids"]
