"""transformers' word-vocabulary habits, answered for a model that reads characters: [`ElmoCharacterInputs`].

Recipes written for word-piece models call ``model.dummy_inputs`` (2-D token ids) and
``model.resize_token_embeddings(len(tokenizer))`` (grow the word embedding after adding tokens). ELMo's input is
``(B, W, C)`` character ids and its input embedding is a character table (262 rows: the UTF-8 bytes and ELMo's
marks; a ManyLangs model's own characters), which holds no words: the mixin gives 3-D dummy inputs, and refuses a
resize by name instead of growing the character table (which would save a folder that no longer loads).

Shapes: B sentences, W words, C characters per word (``config.max_characters_per_token``).
"""

from __future__ import annotations

import torch

from .characters import word_to_char_ids
from .manylangs import word_to_char_ids as manylangs_word_to_char_ids

# The dummy batch: two sentences, the second shorter (its last word is padding, a row of zeros).
_DUMMY_SENTENCES = (("Dummy", "inputs", "."), ("ELMo", "."))
_IGNORE_INDEX = -100


def dummy_char_ids(config) -> torch.Tensor:
    """``(2, 3, C)`` valid character ids of two short sentences for ``config`` (ELMo's or a ManyLangs character
    vocabulary), the second padded with a row of zeros."""
    chars = config.max_characters_per_token

    def spell(word: str) -> list[int]:
        if config.char_vocabulary == "manylangs":  # unknown characters read as <oov>: valid in any ManyLangs model
            return manylangs_word_to_char_ids(word, {}, chars)
        return word_to_char_ids(word, chars)

    width = max(len(sentence) for sentence in _DUMMY_SENTENCES)
    rows = [[spell(w) for w in sentence] + [[0] * chars] * (width - len(sentence)) for sentence in _DUMMY_SENTENCES]
    return torch.tensor(rows, dtype=torch.long)


class ElmoCharacterInputs:
    """Mixin of ``ElmoPreTrainedModel``: ``dummy_inputs`` and ``resize_token_embeddings`` for character ids."""

    @property
    def dummy_inputs(self) -> dict[str, torch.Tensor]:
        """``{"input_ids": (2, 3, C)}`` character ids that the model accepts (the second sentence padded), plus
        ``vocab_ids`` ``(2, 3)`` (``-100`` at padding) for a model that needs them (``needs_vocab_ids``)."""
        input_ids = dummy_char_ids(self.config)
        inputs = {"input_ids": input_ids}
        if getattr(self, "needs_vocab_ids", False):  # word id 0 exists in every word vocabulary (ManyLangs: <oov>)
            inputs["vocab_ids"] = torch.zeros(input_ids.shape[:2], dtype=torch.long).masked_fill(
                ~input_ids.ne(0).any(dim=-1), _IGNORE_INDEX
            )
        return inputs

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> torch.nn.Module:
        """The input embedding (the character table), unchanged; any resize of it is refused.

        ``resize_token_embeddings()`` (no size), or the table's own size, returns it as transformers does. Any other
        size raises ``ValueError``: the table has one row per character, not per word, so tokens added to the
        tokenizer (spelled in the same characters) need no new rows, and a resized table would no longer match the
        character ids the tokenizer gives (nor load back).
        """
        table = self.get_input_embeddings()
        rows = table.weight.shape[0]
        if new_num_tokens in (None, rows) and (not pad_to_multiple_of or rows % pad_to_multiple_of == 0):
            return table
        asked = new_num_tokens if new_num_tokens is not None else f"pad_to_multiple_of={pad_to_multiple_of}"
        message = (
            f"resize_token_embeddings({asked}) refused: ELMo reads each word as its characters, and its input "
            f"embedding is the {rows}-row character table, not a word vocabulary. Every word, tokens added to the "
            "tokenizer included, is spelled in those characters: added tokens need no new rows, so leave the model "
            "as it is and use it with the tokenizer (len(tokenizer) counts words, not characters)."
        )
        vocab_size = getattr(self.config, "lm_vocab_size", 0)
        if hasattr(self, "softmax") and vocab_size:
            message += (
                f" The LM softmax predicts config.lm_vocab_size={vocab_size} words: for another word vocabulary, "
                "load a new softmax with from_pretrained(folder, lm_vocab_size=V, ignore_mismatched_sizes=True)."
            )
        raise ValueError(message)


__all__ = ["ElmoCharacterInputs", "dummy_char_ids"]
