"""What ElmoTokenizer is given, and how each word of the backend's output is found again: single texts, sentence
pairs (``tokenizer(a, b)``), raw text or words.

ELMo adds no special tokens, so a pair is text A's words, then text B's words: ``token_type_ids`` (0 for A, 1 for
B), ``sequence_ids()``, ``word_ids()`` and the offsets (into each text's own string) tell them apart, as in
transformers' fast tokenizers. The `tokenizers` backend does the pairing, truncation and overflow windows; this
module checks the input, turns it into the backend's input, and reads each word back from the caller's strings.
"""

from __future__ import annotations

import re
from typing import Any

from transformers.utils import logging

logger = logging.get_logger(__name__)

# transformers' bound above which `model_max_length` means "no limit" (tokenization_utils_base.LARGE_INTEGER).
NO_LIMIT = int(1e20)

# Lone surrogates cannot cross into Rust; they are replaced, one code point by one, before the
# backend sees the text, so that every offset still points into the caller's string.
_SURROGATES = re.compile("[\ud800-\udfff]")
REPLACEMENT_CHARACTER = "\ufffd"


def sanitize(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (same length, so offsets are unchanged)."""
    if text.isascii():
        return text
    return _SURROGATES.sub(REPLACEMENT_CHARACTER, text)


def _type_name(value: Any) -> str:
    return type(value).__name__


def _is_words(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _is_text_pair(item: Any) -> bool:
    """A pair of raw texts inside a batch, as transformers takes it: ``("premise", "hypothesis")``."""
    return _is_words(item) and len(item) == 2 and all(isinstance(part, str) for part in item)


def _is_words_pair(item: Any) -> bool:
    """A pair of word lists inside a batch of pre-split input: ``(["New", "York"], ["city"])``."""
    return _is_words(item) and len(item) == 2 and all(_is_words(part) for part in item)


def _check_words(words: Any, where: str) -> list[str]:
    for position, word in enumerate(words):
        if not isinstance(word, str):
            raise TypeError(f"every word must be a str; {where}word {position} is {_type_name(word)}: {word!r}")
    return list(words)


def _check_split_side(text: Any, name: str) -> tuple[list, bool]:
    """Pre-split ``text`` (or ``text_pair``): the words of a sentence, or a batch of them."""
    if isinstance(text, str) or not _is_words(text):
        raise TypeError(
            f"with is_split_into_words=True, give the words of a sentence (a list of str) or a batch of "
            f"sentences (a list of lists of str) as {name}, got {_type_name(text)}"
        )
    is_batched = len(text) > 0 and all(_is_words(item) for item in text)
    if not is_batched:
        return [_check_words(text, "")], False
    sentences = []
    for index, item in enumerate(text):
        if name == "text" and _is_words_pair(item):
            first, second = item
            where = f"pair {index}, "
            first, second = _check_words(first, where + "first text, "), _check_words(second, where + "second text, ")
            sentences.append((first, second))
        else:
            sentences.append(_check_words(item, f"sentence {index}, "))
    return sentences, True


def _check_raw_side(text: Any, name: str) -> tuple[list, bool]:
    """Raw ``text`` (or ``text_pair``): a str or a batch of them; in ``text``, batch items may be pairs of str."""
    if isinstance(text, str):
        return [text], False
    if not _is_words(text):
        raise TypeError(f"{name} must be a str or a list of str, got {_type_name(text)}: {text!r}")
    if len(text) == 0:
        raise ValueError(f"empty batch: {name} is an empty list (give at least one text; '' is an empty text)")
    for index, item in enumerate(text):
        if name == "text" and _is_text_pair(item):
            continue
        if _is_words(item):
            raise TypeError(
                f"{name}[{index}] is a {_type_name(item)} of {len(item)} item(s): a sentence pair in a batch is two "
                "str (text, text_pair); to give words instead of raw text, pass is_split_into_words=True"
            )
        if not isinstance(item, str):
            raise TypeError(f"every text must be a str; {name}[{index}] is {_type_name(item)}: {item!r}")
    return [tuple(item) if _is_words(item) else item for item in text], True


def check_batch(text: Any, text_pair: Any, is_split_into_words: bool) -> tuple[list, bool]:
    """Check what the tokenizer was given; return it as a batch, and whether it was one.

    Each item of the batch is one input row: a str (raw text), a list of str (words), or a ``(first, second)``
    tuple of them (a sentence pair). ``text_pair`` pairs item by item with ``text``; a batch of ``text`` may also
    hold pairs itself (``[("premise", "hypothesis"), ...]``, as the zero-shot pipeline passes them).
    """
    check = _check_split_side if is_split_into_words else _check_raw_side
    items, is_batched = check(text, "text")
    if text_pair is None:
        return items, is_batched
    seconds, pair_is_batched = check(text_pair, "text_pair")
    if is_batched != pair_is_batched:
        raise TypeError(
            "text and text_pair must both be one text or both be batches of the same length: got "
            f"{'a batch' if is_batched else 'one text'} and {'a batch' if pair_is_batched else 'one text'}"
        )
    if len(items) != len(seconds):
        raise ValueError(
            f"batch length of text ({len(items)}) does not match batch length of text_pair ({len(seconds)})"
        )
    pairs = [item for item in items if isinstance(item, tuple)]
    if pairs:
        raise TypeError(f"text already holds sentence pairs ({pairs[0]!r}); give text_pair, or pairs in text, not both")
    return list(zip(items, seconds, strict=True)), is_batched


def has_pairs(batch: list) -> bool:
    """Whether some item of a checked batch is a sentence pair."""
    return any(isinstance(item, tuple) for item in batch)


def backend_input(item: str | list[str] | tuple, is_split_into_words: bool) -> str | list[str] | tuple:
    """One item of a checked batch as the `tokenizers` backend takes it."""
    if isinstance(item, tuple):
        return tuple(backend_input(part, is_split_into_words) for part in item)
    if is_split_into_words:
        # An empty word would vanish in the backend: it stands in for it there (any non-empty word would do).
        return [sanitize(word) if word else REPLACEMENT_CHARACTER for word in item]
    return sanitize(item)


def words_of(encoding, source: str | list[str] | tuple, is_split_into_words: bool) -> list[str | None]:
    """The word at each position of ``encoding`` (None for padding), read from the caller's input ``source``
    (one item of a checked batch), not from the backend's tokens (which say ``<UNK>`` for unknown words).

    In a pair, ``encoding.sequence_ids`` says which text a word comes from; its offsets point into that text.
    """
    words: list[str | None] = []
    previous = None
    is_pair = isinstance(source, tuple)
    # A single text is sequence 0 throughout (the backend's sequence_ids are only read for pairs).
    sequence_ids = encoding.sequence_ids if is_pair else [0] * len(encoding)
    for mask, sequence, word_id, (start, end) in zip(
        encoding.attention_mask, sequence_ids, encoding.word_ids, encoding.offsets, strict=True
    ):
        if not mask:
            words.append(None)
            continue
        text = source[sequence or 0] if is_pair else source
        if is_split_into_words and word_id is not None:
            if (sequence, word_id) == previous:
                raise ValueError(
                    f"the word {text[word_id]!r} was split into several tokens by tokens added with add_tokens; "
                    "ElmoTokenizer keeps every given word whole: give it a vocabulary with the new words instead"
                )
            previous = (sequence, word_id)
            words.append(text[word_id])
        else:
            words.append(text[start:end] if isinstance(text, str) else text[word_id or 0][start:end])
    return words


def warn_without_max_length(tokenizer, padding: Any, max_length: Any, verbose: bool) -> None:
    """Warn once per tokenizer, in transformers 4's words, when ``padding="max_length"`` is asked for without
    ``max_length`` on a tokenizer with no ``model_max_length``: the lists are then silently left unpadded.

    transformers 5 dropped this warning (its own tokenizers are silent); issue 42 asks for it back. Truncation
    without ``max_length`` stays silent: the stock zero-shot pipeline asks for it on every call.
    """
    if max_length is not None or not verbose or tokenizer.model_max_length <= NO_LIMIT:
        return
    key = "Asking-to-pad-to-max_length"
    if str(getattr(padding, "value", padding)) == "max_length" and not tokenizer.deprecation_warnings.get(key):
        logger.warning(
            "Asking to pad to max_length but no maximum length is provided and the model has no predefined maximum "
            "length. Default to no padding: pass max_length=N (a number of words), or set tokenizer.model_max_length."
        )
        tokenizer.deprecation_warnings[key] = True


def backend_error(error: BaseException, truncation: str, max_length: int | None, stride: int) -> ValueError:
    """A clear ``ValueError`` for what the `tokenizers` backend raised (a plain ``Exception``, or a Rust panic)."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "Second sequence not provided" in message:
        return ValueError(
            f"truncation={truncation!r} needs sentence pairs (text_pair), and this input has one text: use "
            "truncation=True ('longest_first') for single texts"
        )
    if "too short to respect the provided max_length" in message:
        return ValueError(
            f"truncation={truncation!r} with max_length={max_length}: the text that is not truncated is "
            f"{max_length} words or longer, so the other one cannot fit; raise max_length or truncate the other text "
            f"({message})"  # the backend's words ("too short"): transformers' zero-shot pipeline retries on them
        )
    if "stride" in message:
        return ValueError(
            f"stride={stride} must be smaller than the words of each window that truncation={truncation!r} with "
            f"max_length={max_length} leaves for the truncated text; lower stride or raise max_length ({message})"
        )
    return ValueError(f"the tokenizers backend could not encode the input: {message}")


__all__ = ["backend_input", "check_batch", "has_pairs", "sanitize", "warn_without_max_length", "words_of"]
