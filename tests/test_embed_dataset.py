"""``embed_dataset`` and the Parquet shards of ``write_shards`` (issue 39), on the tiny random model.

The reference is [`embed_corpus`] on the same sentences: with the same chunks (the same batches) the vectors must
be equal bit for bit; with other chunks within ``BATCHING_ATOL``. Refusals and resume run on real files; the full
disk, the killed run and torchrun are in ``tests/test_embed_dataset_cli.py``.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BATCHING_ATOL, TINY

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.inference.embed_corpus import embed_corpus
from modeling_elmo.inference.embed_dataset import DatasetInputError, embed_dataset
from modeling_elmo.inference.parquet_shards import (
    METADATA_NAME,
    ShardFolderError,
    ShardPlan,
    process_rank_and_world,
    shard_info,
    split_name,
    write_shards,
)

datasets = pytest.importorskip("datasets")  # the [train] extra
pq = pytest.importorskip("pyarrow.parquet")  # installed with datasets

pytestmark = pytest.mark.usefixtures("one_thread")

TOKENIZER = ElmoTokenizer()
VOCAB = ["the", "cat", "sat", "on", "mat", ".", ",", "Ünïcode", "longerwordthanmost", "1999", "it's", "(x)"]


def tiny_model(seed: int = 0) -> ElmoModel:
    torch.manual_seed(seed)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    with torch.no_grad():  # a mix that is not the mean of the layers
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.5, -1.0, 1.0]))
    return model


def texts(count: int = 40, seed: int = 3) -> list[str]:
    """Lines of 0-25 words (raw text: the tokenizer splits punctuation), an empty and a blank one among them."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(VOCAB) for _ in range(rng.randint(0, 25))) for _ in range(count)]
    lines[2], lines[5] = "", "   "
    return lines


@pytest.fixture(scope="module")
def model() -> ElmoModel:
    return tiny_model()


def reference(model, sentences, output_type, chunk_size=4096, **kwargs) -> list[np.ndarray]:
    return [a for _, a in embed_corpus(model, TOKENIZER, sentences, output=output_type, chunk_size=chunk_size,
                                       progress=False, **kwargs)]  # fmt: skip


def stored(array: np.ndarray, output_type: str) -> np.ndarray:
    """A row of the ELMo column in embed_corpus's layout (``all`` is stored words first)."""
    return array.transpose(1, 0, 2) if output_type == "all" else array


# --------------------------------------------------------------------------------------------------
# embed_dataset


@pytest.mark.parametrize("output_type", ["all", "top", "average", "elmo", "sentence_mean"])
def test_embed_dataset_gives_embed_corpus_vectors(model, output_type):
    """One map batch of the whole dataset is one chunk of embed_corpus: the same batches, the same vectors, bit for
    bit; map batches of 7 rows give other batches, and vectors equal within the batching tolerance."""
    lines = texts()
    dataset = datasets.Dataset.from_dict({"text": lines, "id": list(range(len(lines)))}).with_format("numpy")
    want = reference(model, lines, output_type)
    whole = embed_dataset(model, TOKENIZER, dataset, output_type=output_type, chunk_size=len(lines), progress=False)
    pieces = embed_dataset(model, TOKENIZER, dataset, output_type=output_type, chunk_size=7, progress=False)
    assert whole.column_names == ["text", "id", "elmo"] and whole.format["type"] == "numpy"
    dim = 2 * model.config.projection_dim
    feature = whole.features["elmo"]
    assert (feature.feature.dtype if output_type == "sentence_mean" else feature.dtype) == "float32"
    for i, expected in enumerate(want):
        assert whole[i]["id"] == i and whole[i]["text"] == lines[i]
        got = stored(whole[i]["elmo"], output_type)
        assert got.shape == expected.shape and got.dtype == np.float32
        assert got.shape[-1] == dim
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_allclose(stored(pieces[i]["elmo"], output_type), expected, atol=BATCHING_ATOL, rtol=0)
    assert want[2].size == 0 or output_type == "sentence_mean"  # the empty line: zero words


def test_tokens_column_words_column_and_float16(model):
    """A tokens column is embedded as given (no splitting); a text column's words can be kept; float16 storage
    holds the float32 vectors cast to float16."""
    words = [["New", "York", "'s", "mayor"], [], ["a", "(x)", "b"]]
    dataset = datasets.Dataset.from_dict({"tokens": words, "label": [1, 0, 1]})
    got = embed_dataset(model, TOKENIZER, dataset, output_type="elmo", vector_dtype="float16", progress=False)
    want = reference(model, words, "elmo", is_split_into_words=True)
    assert got.features["elmo"].dtype == "float16"
    assert str(got.data.column("elmo").type.storage_type) == "list<item: list<item: halffloat>>"
    rows = got.with_format("numpy")  # datasets' numpy formatting gives float32 back
    for i, expected in enumerate(want):
        np.testing.assert_array_equal(rows[i]["elmo"], expected.astype(np.float16).astype(np.float32))
    text = datasets.Dataset.from_dict({"sentence": ["It's (x) here.", "Hi!"]})
    split = embed_dataset(model, TOKENIZER, text, text_column="sentence", words_column="words", progress=False)
    assert split["words"] == [TOKENIZER.tokenize("It's (x) here."), ["Hi", "!"]]
    assert [len(v) for v in split["elmo"]] == [len(w) for w in split["words"]]


def test_streaming_dataset_gives_the_same_rows(model):
    lines = texts(23)
    dataset = datasets.Dataset.from_dict({"text": lines})
    eager = embed_dataset(model, TOKENIZER, dataset, chunk_size=5, progress=False).with_format("numpy")
    lazy = embed_dataset(model, TOKENIZER, dataset.to_iterable_dataset(num_shards=2), chunk_size=5)
    assert isinstance(lazy, datasets.IterableDataset)
    rows = list(lazy.with_format("numpy"))
    assert len(rows) == len(lines)
    for i, row in enumerate(rows):
        assert row["text"] == lines[i]
        np.testing.assert_array_equal(row["elmo"], eager[i]["elmo"])


def test_bad_input_is_refused_with_what_to_do(model):
    dataset = datasets.Dataset.from_dict({"sentence": ["a b"], "n": [3], "ids": [[1, 2]]})
    with pytest.raises(DatasetInputError, match=r"no column 'text' or 'tokens'.*sentence, n, ids"):
        embed_dataset(model, TOKENIZER, dataset)
    with pytest.raises(DatasetInputError, match=r"no column 'txt'; its columns are: sentence, n, ids"):
        embed_dataset(model, TOKENIZER, dataset, text_column="txt")
    with pytest.raises(DatasetInputError, match=r"text column 'n' holds int64, not strings"):
        embed_dataset(model, TOKENIZER, dataset, text_column="n")
    with pytest.raises(DatasetInputError, match=r"tokens column 'ids' holds list<item: int64>.*not lists of strings"):
        embed_dataset(model, TOKENIZER, dataset, tokens_column="ids")
    with pytest.raises(DatasetInputError, match="not both"):
        embed_dataset(model, TOKENIZER, dataset, text_column="sentence", tokens_column="ids")
    with pytest.raises(DatasetInputError, match="no rows"):
        embed_dataset(model, TOKENIZER, dataset.select([]), text_column="sentence")
    with pytest.raises(DatasetInputError, match="already has a column 'n'"):
        embed_dataset(model, TOKENIZER, dataset, text_column="sentence", column="n")
    with pytest.raises(TypeError, match=r"pick a split"):
        embed_dataset(model, TOKENIZER, datasets.DatasetDict({"train": dataset}), text_column="sentence")
    holes = datasets.Dataset.from_dict({"text": ["a", "b", None]})
    with pytest.raises(DatasetInputError, match=r"row 2 has no 'text' \(None\)"):
        embed_dataset(model, TOKENIZER, holes, progress=False)
    with pytest.raises(DatasetInputError, match="text column 'sentence' holds int64"):  # a stream's types: per batch
        list(embed_dataset(model, TOKENIZER, dataset.to_iterable_dataset().map(lambda r: {"sentence": 5}),
                           text_column="sentence"))  # fmt: skip


# --------------------------------------------------------------------------------------------------
# write_shards: the folder, one process or several, resume, refusals


ALL_FEATURE = datasets.Array3D((None, 3, 16), "float32")  # the tiny model's "all": 2 layers + 1, 2P = 16


def shard_rows(folder: Path) -> datasets.Dataset:
    return datasets.Dataset.from_parquet(sorted(str(p) for p in folder.glob("*.parquet"))).with_format("numpy")


def write(model, dataset, folder, **kwargs):
    settings = dict(output_type="all", shard_size=8, chunk_size=4, progress=False, log=lambda line: None)
    return write_shards(model, TOKENIZER, dataset, str(folder), **{**settings, **kwargs})


def test_shards_read_back_with_datasets_and_hold_embed_corpus_vectors(model, tmp_path):
    """Shards of 8 rows, chunks of 4 counted from each shard's start: embed_corpus over the same chunks gives the
    same vectors bit for bit. The folder reads back with load_dataset("parquet", data_dir=...), Dataset.from_parquet
    and load_dataset(folder) (the card's YAML), rows in input order, the input's columns kept."""
    lines = texts(30)
    dataset = datasets.Dataset.from_dict({"text": lines, "id": list(range(30))})
    run = write(model, dataset, tmp_path / "out")
    assert run.written == [0, 1, 2, 3] and run.skipped == [] and run.complete and run.sentences == 30
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == ["README.md", METADATA_NAME] + [f"train-{i:05d}-of-00004.parquet" for i in range(4)]
    want = [a for start in range(0, 30, 4) for a in reference(model, lines[start : start + 4], "all")]
    cache = str(tmp_path / "cache")
    loaded = datasets.load_dataset("parquet", data_dir=str(tmp_path / "out"), cache_dir=cache)["train"]
    from_card = datasets.load_dataset(str(tmp_path / "out"), cache_dir=cache)["train"]
    for rows in (loaded.with_format("numpy"), shard_rows(tmp_path / "out"), from_card.with_format("numpy")):
        assert rows.features == datasets.Features(
            {"text": datasets.Value("string"), "id": datasets.Value("int64"), "elmo": ALL_FEATURE}
        )
        assert len(rows) == 30
        for i in range(30):
            assert rows[i]["id"] == i
            np.testing.assert_array_equal(stored(rows[i]["elmo"], "all"), want[i])
    metadata = json.loads((tmp_path / "out" / METADATA_NAME).read_text())
    assert metadata["output_type"] == "all" and metadata["shards"] == {
        "split": "train", "num_rows": 30, "shard_size": 8, "num_shards": 4
    }  # fmt: skip
    assert shard_info(str(tmp_path / "out" / "train-00003-of-00004.parquet"))["rows"] == [24, 30]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "num_examples: 30" in card and all(f"- train-{i:05d}-of-00004.parquet" in card for i in range(4))


def test_two_processes_write_disjoint_shards_that_equal_one(model, tmp_path):
    """Process 0 and 1 of 2 (RANK/WORLD_SIZE) each write every other shard, without talking; the folder equals a
    one-process run's, file for file. Whoever finds every shard there writes the card."""
    dataset = datasets.Dataset.from_dict({"text": texts(30)})
    first = write(model, dataset, tmp_path / "two", rank=0, world=2)
    assert first.written == [0, 2] and not first.complete
    assert "This folder is not complete yet" in (tmp_path / "two" / "README.md").read_text()
    second = write(model, dataset, tmp_path / "two", rank=1, world=2)
    assert second.written == [1, 3] and second.complete
    write(model, dataset, tmp_path / "one")
    assert sorted(os.listdir(tmp_path / "two")) == sorted(os.listdir(tmp_path / "one"))
    for name in os.listdir(tmp_path / "one"):
        if name.endswith(".parquet"):
            assert pq.read_table(tmp_path / "two" / name).equals(pq.read_table(tmp_path / "one" / name))
    for name in ("README.md", METADATA_NAME):
        assert (tmp_path / "two" / name).read_text() == (tmp_path / "one" / name).read_text()


def test_rerun_skips_complete_shards_and_redoes_the_rest(model, tmp_path):
    """A run that stopped after some shards (here: process 0 of 2 only, and a leftover temporary file of a killed
    writer) is finished by a rerun, which leaves the complete shards as they are (same inode, same mtime): hidden
    until the folder is complete, then under their names."""
    dataset = datasets.Dataset.from_dict({"text": texts(30)})
    folder = tmp_path / "out"
    write(model, dataset, folder, rank=0, world=2)
    done = {name: os.stat(folder / name) for name in os.listdir(folder) if name.endswith(".parquet")}
    assert sorted(done) == [".train-00000-of-00004.parquet", ".train-00002-of-00004.parquet"]
    (folder / ".train-00001-of-00004.parquet.tmp").write_bytes(b"half a shard")
    lines = []
    run = write(model, dataset, folder, log=lines.append)
    assert run.skipped == [0, 2] and run.written == [1, 3] and run.complete
    assert any("shard 0" in line and "skipped" in line for line in lines)
    for name, before in list(done.items()):
        after = os.stat(folder / name[1:])
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        done[name[1:]] = done.pop(name)
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]
    write(model, dataset, tmp_path / "clean")
    for name in done:
        assert pq.read_table(folder / name).equals(pq.read_table(tmp_path / "clean" / name))
    again = write(model, dataset, folder)
    assert again.written == [] and again.skipped == [0, 1, 2, 3] and again.complete


def test_a_folder_of_another_run_is_refused_naming_the_difference(model, tmp_path):
    dataset = datasets.Dataset.from_dict({"text": texts(20)})
    folder = tmp_path / "out"
    write(model, dataset, folder, rank=0, world=2)
    with pytest.raises(ShardFolderError, match=r"output_type: 'all' in the folder, 'elmo' in this run"):
        write(model, dataset, folder, output_type="elmo")
    with pytest.raises(ShardFolderError, match=r"model\.weights_sha256: '[0-9a-f]{64}' in the folder, '[0-9a-f]{64}'"):
        write(tiny_model(seed=1), dataset, folder)
    with pytest.raises(ShardFolderError, match=r"vector_dtype: 'float32' in the folder, 'float16' in this run"):
        write(model, dataset, folder, vector_dtype="float16")
    with pytest.raises(ShardFolderError, match=r"shards\.shard_size: 8 in the folder, 5 in this run"):
        write(model, dataset, folder, shard_size=5)
    with pytest.raises(ShardFolderError, match=r"shards\.num_rows: 20 in the folder, 19 in this run"):
        write(model, dataset.select(range(19)), folder)
    changed = datasets.Dataset.from_dict({"text": ["something else"] + texts(20)[1:]})
    with pytest.raises(ShardFolderError, match=r"train-00000-of-00003\.parquet was embedded from other input"):
        write(model, changed, folder)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    datasets.Dataset.from_dict({"a": [1]}).to_parquet(str(foreign / "data.parquet"))
    with pytest.raises(ShardFolderError, match=r"is not empty \(data.parquet\) and is not a folder of `elmo embed"):
        write(model, dataset, foreign)


def test_bad_input_to_write_shards(model, tmp_path):
    with pytest.raises(DatasetInputError, match="no rows"):
        write(model, datasets.Dataset.from_dict({"text": []}), tmp_path / "a")
    with pytest.raises(DatasetInputError, match="text column 'text' holds int64"):
        write(model, datasets.Dataset.from_dict({"text": [1, 2]}), tmp_path / "b")
    with pytest.raises(TypeError, match="with a length"):
        write(model, datasets.Dataset.from_dict({"text": ["a"]}).to_iterable_dataset(), tmp_path / "c")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_shard_being_written_is_not_written_twice(model, tmp_path):
    """Another process holding a shard's temporary file (its lock) stops this one, which leaves that file alone."""
    import fcntl

    dataset = datasets.Dataset.from_dict({"text": texts(10)})
    folder = tmp_path / "out"
    write(model, dataset, folder, rank=1, world=2)  # the folder is this run's; shard 0 is left to write
    temp = folder / ".train-00000-of-00002.parquet.tmp"
    with open(temp, "wb") as held:
        held.write(b"being written")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ShardFolderError, match="is being written by another process"):
            write(model, dataset, folder)
        assert temp.read_bytes() == b"being written"


def test_plan_names_and_environment():
    plan = ShardPlan("train", 10, 4)
    assert plan.num_shards == 3 and plan.rows(2) == range(8, 10) and plan.name(1) == "train-00001-of-00003.parquet"
    assert plan.owned_by(0, 2) == [0, 2] and plan.owned_by(1, 2) == [1] and plan.owned_by(3, 4) == []
    assert split_name("train[:10%]") == "train" and split_name("validation") == "validation"
    assert process_rank_and_world({"RANK": "3", "WORLD_SIZE": "4"}) == (3, 4)
    assert process_rank_and_world({}) == (0, 1)
    with pytest.raises(ValueError, match="RANK must be in"):
        process_rank_and_world({"RANK": "4", "WORLD_SIZE": "4"})
