"""``embed_corpus``'s batching (issue 17): its defaults are ``elmo embed``'s, every split of a corpus into batches
gives each sentence the vectors it gets alone, and ``bench_inference.py``'s WikiText-2 reader and ``--embed_sweep``.

The reference is the model run on one sentence at a time (a batch of one: no padding, no length sorting), a path
independent of ``embed_corpus``'s bucketing, chunking and row bookkeeping."""

from __future__ import annotations

import inspect
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import shared_dir
from helpers import BATCHING_ATOL, TINY

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.inference.embed_corpus import _batches, embed_corpus
from modeling_elmo.inference.token_cache import build_token_cache, token_cache_size

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = ElmoTokenizer()
LONG = 70  # words of the long sentence: over the small word-slot limits below, so it runs alone


def tiny_model() -> ElmoModel:
    """The tiny biLM with clipping and large weights (the clips and the cell state act), eval mode."""
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**TINY)).eval()


def corpus(count: int = 150, seed: int = 5) -> list[list[str]]:
    """``count`` word lists of 0-30 words (an empty one included), plus one of ``LONG`` words in the middle."""
    rng = random.Random(seed)
    vocab = ["the", "cat", "sat", "on", "mat", ".", "Ünïcode", "longerwordthanmost", "x", "1999", ","]
    sentences = [[rng.choice(vocab) for _ in range(rng.randint(0, 30))] for _ in range(count)]
    sentences[3] = []
    sentences[count // 2] = [rng.choice(vocab) for _ in range(LONG)]
    return sentences


@torch.no_grad()
def alone(model: ElmoModel, words: list[str]) -> np.ndarray:
    """``(L + 1, words, 2P)``: the model's layers for ``words`` run as a batch of one sentence."""
    if not words:
        return np.zeros((model.config.n_layers + 1, 0, 2 * model.config.projection_dim), dtype=np.float32)
    out = model(**TOKENIZER([words], is_split_into_words=True, return_tensors="pt"), output_hidden_states=True)
    return torch.stack([h[0] for h in out.hidden_states]).numpy()


@pytest.fixture(scope="module")
def reference() -> tuple[ElmoModel, list[list[str]], list[np.ndarray]]:
    """The tiny model, the corpus, and each sentence's layers computed alone (once for the module)."""
    model, sentences = tiny_model(), corpus()
    return model, sentences, [alone(model, words) for words in sentences]


def test_embed_corpus_defaults_are_the_cli_defaults():
    """``embed_corpus(batch_size=64, max_batch_words=4096)``, as ``elmo embed``'s ``--batch_size`` and
    ``--max_batch_words`` (chosen with ``bench_inference.py --embed_sweep``; the function had 32/2048 before)."""
    defaults = {name: p.default for name, p in inspect.signature(embed_corpus).parameters.items()}
    args = cli.build_parser().parse_args(["embed", "corpus.txt"])
    assert (defaults["batch_size"], defaults["max_batch_words"]) == (args.batch_size, args.max_batch_words)
    assert (args.batch_size, args.max_batch_words) == (64, 4096)


@pytest.mark.parametrize(
    "settings",
    [
        {},  # the defaults: 150 sentences make 3 batches, cut by the 64-sentence limit
        {"batch_size": 7},  # many batches, cut by the sentence limit
        {"max_batch_words": 40},  # cut by the word slots: short sentences together, the long one alone
        {"batch_size": 5, "max_batch_words": 30, "chunk_size": 11},  # both limits, and chunks
        {"batch_size": 1, "chunk_size": 1},  # every sentence alone
    ],
    ids=["defaults", "sentence-limit", "word-slots", "both-and-chunks", "one-by-one"],
)
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_every_split_gives_each_sentence_its_vectors_alone(reference, settings, ordered):
    """Each index comes exactly once (in input order when ``ordered``), with the arrays the model gives the
    sentence alone, whatever the batches. The settings really split differently (checked on the batches)."""
    model, sentences, expected = reference
    lengths = [len(s) for s in sentences]
    batch_size, max_batch_words = settings.get("batch_size", 64), settings.get("max_batch_words", 4096)
    batches = list(_batches(lengths, batch_size, max_batch_words))
    if "max_batch_words" in settings:  # the long sentence is over the word slots: it runs alone
        assert [len(sentences) // 2] in batches
    if not settings:
        assert [len(b) for b in batches] == [64, 64, 22]

    got = list(embed_corpus(model, TOKENIZER, sentences, progress=False, ordered=ordered, **settings))
    indices = [i for i, _ in got]
    assert sorted(indices) == list(range(len(sentences)))  # each exactly once
    if ordered:
        assert indices == list(range(len(sentences)))
    for i, layers in got:
        assert layers.dtype == np.float32 and layers.shape == expected[i].shape, (i, layers.shape, expected[i].shape)
        np.testing.assert_allclose(layers, expected[i], rtol=0, atol=BATCHING_ATOL, err_msg=f"sentence {i}")


def _rows_through_the_character_encoder(model: ElmoModel) -> list[int]:
    """A list that gets the number of words of every call of ``model.char_cnn`` (a forward hook)."""
    calls: list[int] = []
    model.char_cnn.register_forward_hook(lambda module, args, output: calls.append(args[0].shape[0]))
    return calls


@pytest.mark.parametrize("chunk_size", [4096, 40], ids=["one-chunk", "chunks"])
def test_word_cache_runs_the_character_encoder_once_per_distinct_word_of_a_chunk(reference, chunk_size):
    """With the word cache (the default) the encoder sees each chunk's distinct words and ``<S>``, ``</S>`` once,
    in one call per chunk; without, once per batch (more words in all); the vectors are the sentences' own either
    way, and no cache is left on the model."""
    _, sentences, expected = reference
    model = tiny_model()
    calls = _rows_through_the_character_encoder(model)
    settings = {"batch_size": 8, "chunk_size": chunk_size, "progress": False}
    cached = list(embed_corpus(model, TOKENIZER, sentences, **settings))
    chunks = [sentences[i : i + chunk_size] for i in range(0, len(sentences), chunk_size)]
    assert calls == [len({w for s in chunk for w in s}) + 2 for chunk in chunks]
    assert token_cache_size(model) == 0
    calls.clear()
    plain = list(embed_corpus(model, TOKENIZER, sentences, word_cache=False, **settings))
    assert len(calls) == len(list(_batches([len(s) for s in sentences], 8, 4096)))
    assert sum(calls) > len({w for s in sentences for w in s}) + 2
    for (i, got), (j, without) in zip(cached, plain, strict=True):
        assert i == j
        np.testing.assert_allclose(got, expected[i], rtol=0, atol=BATCHING_ATOL, err_msg=f"sentence {i}")
        np.testing.assert_allclose(without, expected[i], rtol=0, atol=BATCHING_ATOL, err_msg=f"sentence {i}")


def test_word_cache_leaves_the_models_own_token_cache_alone(reference):
    """A model with a token cache of its own keeps it (the same words), and it is what the run uses: words outside
    it go through the encoder batch by batch."""
    _, sentences, expected = reference
    model = tiny_model()
    assert build_token_cache(model, ["the", "cat"], progress=False) == 2
    calls = _rows_through_the_character_encoder(model)
    got = list(embed_corpus(model, TOKENIZER, sentences, batch_size=8, progress=False))
    assert token_cache_size(model) == 2
    assert len(calls) > 1  # per batch, not one call for the chunk
    for i, layers in got:
        np.testing.assert_allclose(layers, expected[i], rtol=0, atol=BATCHING_ATOL, err_msg=f"sentence {i}")


def test_word_cache_is_dropped_when_the_caller_stops_early(reference):
    """A generator closed after its first sentence (a ``break`` in the caller's loop) drops the chunk's cache."""
    _, sentences, _ = reference
    model = tiny_model()
    results = embed_corpus(model, TOKENIZER, sentences, progress=False, ordered=False)
    next(results)  # after the first batch, in the middle of the chunk
    assert token_cache_size(model) == len({w for s in sentences for w in s}) + 2
    results.close()
    assert token_cache_size(model) == 0


def _chunks(sentences: list[list[str]], chunk_size: int) -> list[list[list[str]]]:
    return [sentences[k : k + chunk_size] for k in range(0, len(sentences), chunk_size)]


@pytest.mark.parametrize("ordered", [True, False])
def test_nothing_of_a_chunk_outlives_it(ordered):
    """Memory over a long corpus (issue 26, 17): while a chunk runs the token cache holds exactly its distinct
    words; an ordered chunk's outputs are dropped by the time its results are yielded; and when the next chunk is
    read, nothing of the previous one is alive (its cache, its outputs, which the caller dropped). Before, the
    whole previous chunk's outputs (ordered) and its cache lived on while the next chunk was read and tokenized."""
    import gc
    import weakref

    rng = random.Random(7)
    sentences = [[f"w{rng.randint(0, 400)}" for _ in range(rng.randint(1, 12))] for _ in range(60)]
    model = tiny_model()
    chunk_size = 16
    yielded: list[weakref.ref] = []
    checked = []

    def reader():
        for k, sentence in enumerate(sentences):
            if k and k % chunk_size == 0:  # the first sentence of the next chunk is being read
                gc.collect()
                checked.append(k)
                assert token_cache_size(model) == 0, "the previous chunk's token cache is still held"
                alive = [r for r in yielded if r() is not None]
                assert not alive, f"{len(alive)} outputs of the previous chunk are still held"
            yield sentence

    for index, array in embed_corpus(model, TOKENIZER, reader(), progress=False, chunk_size=chunk_size,
                                     batch_size=4, ordered=ordered):  # fmt: skip
        chunk = _chunks(sentences, chunk_size)[index // chunk_size]
        if ordered:
            assert token_cache_size(model) == 0  # dropped once the chunk's batches are done
        else:
            assert token_cache_size(model) == len({w for s in chunk for w in s}) + 2
        yielded.append(weakref.ref(array))
        del array
    assert checked == [16, 32, 48] and token_cache_size(model) == 0


def test_character_ids_share_their_int_objects():
    """The tokenizer caches 16,384 words' ids (65,536 before): ids above 256 made anew per word (``i + 1``) cost
    32 bytes each, ~1.2 KB more per cached word (issue 26, 17). Now every id is one shared object."""
    from modeling_elmo.characters import word_to_char_ids

    a, b = word_to_char_ids("cat"), word_to_char_ids("dog")
    assert a[-1] == b[-1] == 261 and a[-1] is b[-1]  # the padding id
    assert a[0] == 259 and a[0] is b[0]  # begin of word


@pytest.mark.slow  # issue 51: a long corpus
def test_word_cache_stays_bounded_over_a_long_corpus():
    """The tokenizer's cache of words' character ids (issue 26, 17) holds at most 16,384 words, ~9 MiB, whatever
    the corpus: 40,000 distinct words over 8 chunks leave less than 12 MiB held (9.9 MiB measured). Before, it
    grew to 65,536 words, 37 MiB, which a corpus with a large vocabulary filled over its first ~30k sentences: the
    most of what still crept up from chunk to chunk once the heap was trimmed (22.3 MiB held here)."""
    import gc
    import tracemalloc

    from modeling_elmo.tokenization_elmo import _cached_char_ids

    sentences = [[f"word{20 * k + i}" for i in range(20)] for k in range(2000)]  # 40,000 distinct words
    model = tiny_model()
    _cached_char_ids.cache_clear()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _, array in embed_corpus(model, TOKENIZER, sentences, progress=False, chunk_size=250, ordered=False):
            del array
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # ~590 bytes a word (its 50 ids, the word, the cache's entry): 9.2 MiB for 16,384 words, 22.5 MiB for 40,000
    assert held < 12 * 2**20, f"{held / 2**20:.1f} MiB held after the corpus"
    assert _cached_char_ids.cache_info().currsize == 1 << 14


def test_build_token_cache_takes_character_ids():
    """Character ids ``(N, C)`` (repeats allowed) cache the same vectors as the words; bad ids are refused."""
    by_words, by_ids = tiny_model(), tiny_model()
    words = ["the", "cat", "Ünïcode", "the"]
    ids = torch.tensor(TOKENIZER([words], is_split_into_words=True)["input_ids"][0])
    assert build_token_cache(by_words, words, progress=False) == build_token_cache(by_ids, ids, progress=False) == 3
    with torch.no_grad():
        np.testing.assert_array_equal(by_words.embed_words(ids).numpy(), by_ids.embed_words(ids).numpy())
    with pytest.raises(ValueError, match=r"character ids must be \(words, 50\), got shape \(4, 49\)"):
        build_token_cache(by_ids, ids[:, :49])
    with pytest.raises(ValueError, match=r"character ids must be in \[0, 262\)"):
        build_token_cache(by_ids, ids + 300)
    assert token_cache_size(by_ids) == 3  # a refused call keeps the old cache


@pytest.mark.parametrize("seed", range(20))
def test_batches_keep_both_limits_and_take_every_sentence_once(seed):
    """``_batches``: every index once, sorted by length across batches, at most ``batch_size`` sentences, and at
    most ``max_batch_words`` padded slots unless one sentence alone is longer."""
    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, 2, 5, 9, 17, 40, 120]) for _ in range(rng.randint(1, 300))]
    batch_size, max_batch_words = rng.randint(1, 70), rng.randint(1, 500)
    batches = list(_batches(lengths, batch_size, max_batch_words))
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)
    for b in batches:
        assert 1 <= len(b) <= batch_size
        assert len(b) == 1 or len(b) * max(max(lengths[i] for i in b), 1) <= max_batch_words
    for b, following in zip(batches, batches[1:], strict=False):  # a batch is cut only when the next one is needed
        newcomer = max(lengths[following[0]], 1)
        assert len(b) == batch_size or (len(b) + 1) * newcomer > max_batch_words


# ------------------------------------------------------------------- benchmarks/bench_inference.py's corpus


@pytest.fixture
def bench(monkeypatch, tmp_path):
    """``bench_inference`` reading a small WikiText-2 look-alike: test.txt (3 sentences), then valid.txt (2)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import bench_inference

    (tmp_path / "test.txt").write_text(
        " = Title = \n\n one two three . four five \n\n = = Section = = \n six seven eight nine \n", encoding="utf-8"
    )
    (tmp_path / "valid.txt").write_text(" ten eleven . twelve \n", encoding="utf-8")
    monkeypatch.setattr(bench_inference, "WIKITEXT_FILES", [tmp_path / "test.txt", tmp_path / "valid.txt"])
    return bench_inference


def test_wikitext_files_are_test_then_valid(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import bench_inference

    assert [p.name for p in bench_inference.WIKITEXT_FILES] == ["test.txt", "valid.txt"]
    assert {p.parent for p in bench_inference.WIKITEXT_FILES} == {shared_dir() / "data" / "wikitext-2"}


def test_wikitext_2_holds_17421_sentences(bench, monkeypatch, shared_data_dir, capsys):
    """All of test.txt (9,364 sentences), then all of valid.txt (8,057): the most the corpus rows can have."""
    folder = shared_data_dir / "wikitext-2"
    monkeypatch.setattr(bench, "WIKITEXT_FILES", [folder / "test.txt", folder / "valid.txt"])
    sentences = bench.wikitext_sentences(17_421, 1, 10_000)
    assert len(sentences) == 17_421 and capsys.readouterr().err == ""
    assert bench.wikitext_sentences(9_364, 1, 10_000)[-1] == sentences[9_363]
    assert len(bench.wikitext_sentences(17_422, 1, 10_000)) == 17_421
    assert "hold 17421 sentences of 1-10000 words, not 17422" in capsys.readouterr().err


def test_wikitext_sentences_reads_test_then_valid_and_says_when_short(bench, capsys):
    everything = [["one", "two", "three"], ["four", "five"], ["six", "seven", "eight", "nine"], ["ten", "eleven"]]
    everything.append(["twelve"])
    assert bench.wikitext_sentences(5, 1, 100) == everything
    assert capsys.readouterr().err == ""
    assert bench.wikitext_sentences(2, 2, 3, skip=1) == [["four", "five"], ["ten", "eleven"]]
    assert bench.wikitext_sentences(9, 1, 100) == everything  # fewer than asked: those, and a note
    err = capsys.readouterr().err
    assert err.startswith("note: WikiText-2's test.txt and valid.txt hold 5 sentences of 1-100 words, not 9"), err
    with pytest.raises(SystemExit, match="hold 0 sentences of 50-100 words"):
        bench.wikitext_sentences(1, 50, 100)
    bench.WIKITEXT_FILES[1].unlink()
    with pytest.raises(SystemExit, match=r"valid\.txt not found"):
        bench.wikitext_sentences(9, 1, 100)


def test_embed_sweep_prints_a_row_per_setting(bench, capsys):
    bench.main(["--embed_sweep", "4/16", "2/64", "2/64/nocache", "--sizes", "tiny", "--corpus_sentences", "5",
                "--repeats", "1", "--no-memory"])  # fmt: skip
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tiny |")]
    assert [row.split(" | ")[1:4] for row in rows] == [
        ["float32", "4 / 16", "2"],
        ["float32", "2 / 64", "3"],
        ["float32", "2 / 64 (no word cache)", "3"],
        ["bfloat16", "4 / 16", "2"],
        ["bfloat16", "2 / 64", "3"],
        ["bfloat16", "2 / 64 (no word cache)", "3"],
    ]
    with pytest.raises(SystemExit, match="BATCH/WORDS or BATCH/WORDS/nocache, got '2/64/x'"):
        bench.main(["--embed_sweep", "2/64/x", "--sizes", "tiny"])


@pytest.mark.slow  # issue 51: a benchmark run in a fresh interpreter
def test_bench_embed_memory_prints_rss_after_each_chunk(capsys):
    """``benchmarks/bench_embed_memory.py`` (issue 26, 17) on the tiny model: one JSON line per corpus size, with the
    peak and the RSS after each chunk (no threshold: RSS depends on the machine)."""
    import json
    import subprocess
    import sys

    command = [sys.executable, str(REPO / "benchmarks" / "bench_embed_memory.py"), "--size", "tiny",
               "--sentences", "20", "--chunk_size", "8", "--tracemalloc"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["sentences"] == 20 and len(result["rss_after_chunks_mib"]) == 3
    assert len(result["traced_mib_after_chunks"]) == 3 and result["peak_rss_mib"] > 0
