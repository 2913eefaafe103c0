"""Static word vectors: ELMo's context-independent layer 0 of a vocabulary, written in word2vec format.

Layer 0 is the character encoder's output (character CNN, highway layers and projection), the vector a word gets
before the biLSTMs see any context, so it is one vector per word and can stand in for word2vec or GloVe vectors in
tools that read that format (gensim's ``KeyedVectors.load_word2vec_format``, spaCy's ``init vectors``...).

    from modeling_elmo import ElmoModel, ElmoTokenizer
    from modeling_elmo.inference.static_vectors import export_word2vec, read_word_list

    words = read_word_list("vocab.txt")
    export_word2vec(model, tokenizer, words, "vectors.txt")          # text
    export_word2vec(model, tokenizer, words, "vectors.bin", binary=True)

The vectors have ``projection_dim`` (P) values: the model's ``hidden_states[0]`` is ``[x; x]`` (``2P``, the word
vector twice, to match the width of the LSTM layers); this writes ``x`` once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .new_files import create_new, is_plain_file

# float32 needs 9 significant digits to come back bit for bit from text (IEEE 754: ceil(1 + 24 log10 2) = 9).
_TEXT_FORMAT = "%.9g"


def read_word_list(path: str | os.PathLike) -> list[str]:
    """The words of a vocabulary file, one word per line (a bilm-tf ``vocab.txt`` or any word list).

    A byte-order mark, ``\\r\\n`` line ends and a final empty line are accepted. Raises ``ValueError`` naming the
    line for an empty line, a line holding whitespace (word2vec separates fields by spaces: such a word could not be
    read back), a repeated word, or no word at all.
    """
    path = os.fspath(path)
    with open(path, encoding="utf-8-sig", newline="") as handle:
        lines = handle.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    words: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        word = line[:-1] if line.endswith("\r") else line
        _check_word(word, f"{path}: line {number}")
        if word in seen:
            raise ValueError(f"{path}: line {number} repeats the word {word!r} of line {seen[word]}")
        seen[word] = number
        words.append(word)
    if not words:
        raise ValueError(f"{path} holds no words; give one word per line")
    return words


def _check_word(word: str, where: str) -> None:
    if not isinstance(word, str):
        raise TypeError(f"{where}: a word must be a str, got {type(word).__name__}: {word!r}")
    if not word:
        raise ValueError(f"{where} is empty; give one word per line")
    if len(word.split()) != 1 or word.strip() != word:
        raise ValueError(
            f"{where}: {word!r} holds whitespace; word2vec files separate fields by spaces, so such a word could "
            "not be read back"
        )


@torch.inference_mode()
def layer0_vectors(model, tokenizer, words: Sequence[str], batch_size: int = 1024) -> Iterator[np.ndarray]:
    """Yield layer 0 of ``words``, ``batch_size`` words at a time, as float32 arrays ``(n, P)``.

    Each word goes through the model's own ``forward`` as a one-word sentence with ``token_layer_only=True`` (only
    the character encoder runs), so the vectors are the model's ``hidden_states[0][..., :P]`` for that word in any
    sentence. The model should be in eval mode, on its device.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    width = model.config.projection_dim
    for start in range(0, len(words), batch_size):
        chunk = [[word] for word in words[start : start + batch_size]]
        encoded = tokenizer(chunk, is_split_into_words=True, padding=True, return_tensors="pt")
        if encoded["input_ids"].shape[1] != 1:  # the tokenizer split a word: its vector would not be the word's
            sizes = encoded["attention_mask"].sum(dim=1).tolist()
            bad = next(chunk[i][0] for i, n in enumerate(sizes) if n != 1)
            raise ValueError(f"the tokenizer does not keep {bad!r} as one word; it cannot have one vector")
        inputs = {key: value.to(model.device) for key, value in encoded.items()}
        out = model(**inputs, token_layer_only=True, output_hidden_states=True)
        yield out.hidden_states[0][:, 0, :width].float().cpu().numpy()


def export_word2vec(
    model,
    tokenizer,
    words: Sequence[str],
    output_file: str | os.PathLike,
    binary: bool = False,
    batch_size: int = 1024,
    progress: bool = True,
    overwrite: bool = False,
) -> int:
    """Write the layer-0 vectors of ``words`` to ``output_file`` in word2vec format; returns the number of words.

    The format is word2vec's (and gensim's): a header line ``"<words> <dim>"``, then one line per word, the word and
    its values separated by spaces. Text values have 9 significant digits, which give float32 back exactly; with
    ``binary`` each word is followed by a space, ``dim`` little-endian float32 values and a newline.

    Args:
        model: an [`ElmoModel`] in eval mode, on its device.
        tokenizer: its [`ElmoTokenizer`].
        words: distinct words without whitespace (e.g. from [`read_word_list`]); ``<S>`` and ``</S>`` get the
            sentence-boundary vectors, as in the original vocabulary files.
        output_file: the file to write. It appears complete or not at all (written under a temporary name next to
            it, then renamed).
        binary: write the binary format (``load_word2vec_format(..., binary=True)``).
        batch_size: words per forward pass of the character encoder.
        progress: show a progress bar (words).
        overwrite: replace an existing ``output_file``.
    """
    words = list(words)
    seen: set[str] = set()
    for index, word in enumerate(words):
        _check_word(word, f"word {index}")
        if word in seen:
            raise ValueError(f"word {index} ({word!r}) is repeated; word2vec files hold each word once")
        seen.add(word)
    if not words:
        raise ValueError("no words to export")
    output_file = os.fspath(output_file)
    if os.path.isdir(output_file):
        raise ValueError(f"{output_file} is a folder; give a file name such as vectors.txt")
    folder = os.path.dirname(os.path.abspath(output_file))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{output_file}: the folder {folder} does not exist")
    if os.path.exists(output_file) and not overwrite:
        raise FileExistsError(f"{output_file} exists; pass overwrite=True (--overwrite) to replace it")
    temp = os.path.join(folder, f".{os.path.basename(output_file)}.export-{os.getpid()}.tmp")
    bar = tqdm(total=len(words), unit="word", desc="Exporting vectors", disable=not progress)
    try:
        with create_new(temp) as out:  # a new file: never through a link planted at its name
            out.write(f"{len(words)} {model.config.projection_dim}\n".encode())
            start = 0
            for vectors in layer0_vectors(model, tokenizer, words, batch_size):
                for word, vector in zip(words[start : start + len(vectors)], vectors, strict=True):
                    if binary:
                        out.write(word.encode("utf-8") + b" " + vector.astype("<f4").tobytes() + b"\n")
                    else:
                        values = " ".join(_TEXT_FORMAT % value for value in vector.tolist())
                        out.write(f"{word} {values}\n".encode())
                start += len(vectors)
                bar.update(len(vectors))
        os.replace(temp, output_file)
    except FileExistsError:  # the temporary name was taken: not ours to remove
        raise FileExistsError(f"{temp}, the temporary name {output_file} is written under, is taken") from None
    except BaseException:
        if is_plain_file(temp):
            os.remove(temp)
        raise
    finally:
        bar.close()
    return len(words)


__all__ = ["export_word2vec", "layer0_vectors", "read_word_list"]
