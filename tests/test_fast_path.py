"""The fast inference path against plain ones: the step-by-step reference biLM, a full-width
character CNN, the word-vector cache, the corpus streamer, and the benchmark script (smoke run)."""

from __future__ import annotations

import math
import random
import string
import sys
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import BATCHING_ATOL

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.characters import word_to_char_ids
from modeling_elmo.fast_path_elmo import length_split
from modeling_elmo.inference.embed_corpus import embed_corpus
from modeling_elmo.inference.token_cache import build_token_cache, token_cache_size
from modeling_elmo.reference import reference_forward

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = ElmoTokenizer()

SIZES = {
    "narrow": dict(lstm_dim=24, projection_dim=8, char_cnn_filters=[[1, 4], [2, 8]], n_highway=0),
    "wide-filters": dict(
        lstm_dim=48, projection_dim=12, char_cnn_filters=[[1, 4], [3, 8], [5, 8], [7, 16]], n_highway=2
    ),
    "three-layers": dict(lstm_dim=32, projection_dim=16, n_layers=3, char_cnn_filters=[[2, 6], [4, 6]], n_highway=1),
}


# Random weights at initializer_range 0.3 make the recurrence amplify rounding, more with each layer: the fused path
# vs the step-by-step reference measured up to 5.4e-6 (3 layers, up to 14 words, 27 random batches per setting,
# default, AVX2 and unvectorised kernels); a real bug (a skipped clip, a wrong direction) moves outputs by 1e-2 or more.
RECURRENT_ATOL = 5e-5


def random_words(rng: random.Random, n: int) -> list[str]:
    alphabet = string.ascii_letters + "éß中🙂.,'-"
    return ["".join(rng.choices(alphabet, k=rng.choice([1, 2, 5, 9, 30, 60]))) for _ in range(n)]


def make_model(size: str, seed: int = 0, **overrides) -> ElmoModel:
    torch.manual_seed(seed)
    kwargs = dict(SIZES[size], char_embedding_dim=4, initializer_range=0.3, cell_clip=1.0, proj_clip=0.5)
    kwargs.update(overrides)
    return ElmoModel(ElmoConfig(**kwargs)).eval()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize(
    "overrides",
    [{}, {"cell_clip": None, "proj_clip": None}, {"use_skip_connections": False}],
    ids=["clip", "noclip", "noskip"],
)
def test_fast_path_equals_step_by_step_reference(size, overrides):
    model = make_model(size, **overrides)
    # A fixed seed per case (str hashes change from run to run): the same batches on every run and CPU.
    rng = random.Random(zlib.crc32(repr((size, overrides)).encode()))
    sentences = [random_words(rng, rng.randint(1, 14)) for _ in range(7)]
    enc = TOKENIZER(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    enc = {k: F.pad(v, (0, 0, 0, 3) if k == "input_ids" else (0, 3)) for k, v in enc.items()}  # extra padding
    with torch.no_grad():
        layers = model(**enc, output_hidden_states=True).hidden_states
    for b, words in enumerate(sentences):
        expected, _ = reference_forward(model, enc["input_ids"][b, : len(words)])
        got = torch.stack([layer[b, : len(words)] for layer in layers])
        assert (got - expected).abs().max() <= RECURRENT_ATOL
        assert all(torch.all(layer[b, len(words) :] == 0) for layer in layers)


@pytest.mark.slow  # issue 51: the step-by-step reference on many batches
def test_cpu_inference_path_equals_step_by_step_reference(monkeypatch):
    """The CPU inference path of a wide LSTM: prepacked products, the directions run one after the other, and the
    cell's tanh through the sigmoid (used from 2^15 elements a call: 16 rows x D = 2048), against the reference."""
    from modeling_elmo.fast_path_elmo import PrepackedProducts, _PrepackedWeights
    from modeling_elmo.modeling_elmo import ElmoBiLstmLayer

    if not _PrepackedWeights.supported(torch.float32):
        pytest.skip("this torch build has no oneDNN: the CPU inference path is the plain one")
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_elements", 0)
    model = make_model("narrow", lstm_dim=2048, projection_dim=16, initializer_range=0.05)
    rng = random.Random(5)
    sentences = [random_words(rng, rng.randint(1, 9)) for _ in range(16)]
    enc = TOKENIZER(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        h = torch.zeros(2, 16, 16)
        assert all(PrepackedProducts.for_layer(layer, h).runs_directions_apart(h) for layer in model.bilm.layers)
        layers = model(**enc, output_hidden_states=True).hidden_states
    for b, words in enumerate(sentences):
        expected, _ = reference_forward(model, enc["input_ids"][b, : len(words)])
        got = torch.stack([layer[b, : len(words)] for layer in layers])
        assert (got - expected).abs().max() <= BATCHING_ATOL


def test_tanh_through_the_sigmoid_is_tanh():
    from modeling_elmo.fast_path_elmo import cpu_tanh as _tanh

    x = torch.cat([torch.linspace(-30, 30, 1 << 16), torch.logspace(-12, 1, 1 << 15), torch.tensor([0.0, -0.0])])
    exact = torch.tanh(x.double())
    # 2 sigmoid(2x) - 1 doubles the sigmoid's error near 1/2 (ulp 6e-8): measured 1.76e-7 with default, AVX2 and
    # unvectorised kernels (torch's tanh: 3.0e-8); 5e-7 allows a 4-ulp sigmoid; a wrong formula is off by 1e-1.
    assert (_tanh(x).double() - exact).abs().max() <= 5e-7
    assert (torch.tanh(x).double() - exact).abs().max() <= 2e-7  # what torch's own gives, for comparison
    small, wanted = x[:1000], x.clone().requires_grad_(True)
    assert torch.equal(_tanh(small), torch.tanh(small))  # below 2^15 elements: torch's tanh itself
    _tanh(wanted).sum().backward()  # with autograd: torch's tanh, whose gradient is 1 - tanh^2
    torch.testing.assert_close(wanted.grad, 1 - torch.tanh(x) ** 2)


def full_width_char_cnn(encoder, char_ids: torch.Tensor) -> torch.Tensor:
    """The character CNN as written: every convolution over all C positions."""
    x = encoder.char_embedding(char_ids).transpose(1, 2)
    x = torch.cat([encoder.activation(conv(x)).amax(dim=-1) for conv in encoder.convolutions], dim=-1)
    for highway in encoder.highways:
        x = highway(x)
    return encoder.projection(x)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_char_cnn_shortcut_equals_full_width_convolution(activation):
    model = make_model("wide-filters", char_cnn_activation=activation)
    rng = random.Random(1)
    words = random_words(rng, 40) + ["x" * 48, "y" * 47, "€" * 20, "a", "<S>", "</S>"]
    many = random_words(rng, 150) + ["q" * 45]  # enough words of different lengths to be convolved in groups
    many_ids = torch.tensor([word_to_char_ids(w) for w in many])
    assert length_split(many_ids.ne(model.char_cnn.padding_id).sum(dim=-1).sort().values) is not None
    for group in ([w for w in words if len(w) < 4], words, ["z" * 60], many):  # short-only, mixed, full-width
        ids = torch.tensor([word_to_char_ids(w) for w in group])
        with torch.no_grad():
            fast, plain = model.char_cnn(ids), full_width_char_cnn(model.char_cnn, ids)
        assert (fast - plain).abs().max() <= BATCHING_ATOL


def test_words_are_split_by_length_only_where_it_saves_work():
    assert length_split(torch.full((500,), 12)) is None  # all alike
    assert length_split(torch.tensor([3] * 30 + [40] * 2)) is None  # too few words to pay for the calls
    lengths = torch.tensor([5] * 90 + [7] * 60 + [30] * 10)
    assert length_split(lengths) == 150  # the short ones up to 7 positions, the rest up to 30
    assert length_split(torch.tensor([5] * 150 + [30] * 10)) == 150
    assert length_split(torch.tensor([5] * 100 + [6] * 60)) is None  # a saving of 1/6 only


@pytest.mark.parametrize("count", [3, 100], ids=["one-group", "split-by-length"])
def test_char_cnn_shortcut_passes_gradients_like_the_full_convolution(count):
    model = make_model("wide-filters")
    words = ["a", "bc", "def"] if count == 3 else random_words(random.Random(2), count)
    ids = torch.tensor([word_to_char_ids(w) for w in words])
    model.char_cnn(ids).sum().backward()
    fast = {n: p.grad.clone() for n, p in model.char_cnn.named_parameters()}
    model.zero_grad()
    full_width_char_cnn(model.char_cnn, ids).sum().backward()
    # Gradients sum over words and positions, in another order where the words are split by length: measured 2.6e-6
    # on values of 3.2 (3 words) and 1.0e-3 on values up to 192 (100 words: 5.3e-6 of the largest), float32
    # rounding; allowed 2e-5 of the largest. A wrong gradient is off by its own size.
    for name, param in model.char_cnn.named_parameters():
        assert (fast[name] - param.grad).abs().max() <= 2e-5 * param.grad.abs().max() + 1e-6, name


def test_token_cache_gives_the_same_outputs_and_falls_back_for_unknown_words():
    model = make_model("narrow")
    sentences = [["the", "cat", "sat"], ["an", "unknown", "word", "the"]]
    enc = TOKENIZER(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**enc, output_hidden_states=True).hidden_states
    assert build_token_cache(model, ["the", "cat", "sat", "an", "the"], progress=False) == 4
    with torch.no_grad():
        after = model(**enc, output_hidden_states=True).hidden_states
    for x, y in zip(before, after, strict=True):
        assert (x - y).abs().max() <= BATCHING_ATOL
    # A stale cache is never used while the character CNN trains.
    with torch.no_grad():
        model.token_cache.vectors.fill_(123.0)
        poisoned = model(**enc, output_hidden_states=True).hidden_states[0]
    assert poisoned.abs().max() >= 123.0  # the cache is really used in inference
    model.train()
    model.config.elmo_dropout = 0.0
    trained = model(**enc, output_hidden_states=True).hidden_states[0]
    assert (trained - before[0]).abs().max() <= 1e-6
    trained.sum().backward()
    assert model.char_cnn.projection.weight.grad is not None
    model.token_cache = None
    assert token_cache_size(model) == 0


def test_embed_corpus_matches_the_model_in_input_order():
    model = make_model("narrow")
    rng = random.Random(3)
    lines = [" ".join(random_words(rng, rng.randint(0, 12))) for _ in range(23)]
    enc = TOKENIZER(lines, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    got = list(embed_corpus(model, TOKENIZER, lines, batch_size=4, max_batch_words=20, chunk_size=7, progress=False))
    assert [i for i, _ in got] == list(range(len(lines)))
    for i, layers in got:
        n = int(enc["attention_mask"][i].sum())
        expected = torch.stack([h[i, :n] for h in out.hidden_states]).numpy()
        assert layers.shape == expected.shape
        np.testing.assert_allclose(layers, expected, atol=BATCHING_ATOL)
    means = dict(embed_corpus(model, TOKENIZER, lines, output="sentence_mean", progress=False))
    for i in range(len(lines)):
        n = int(enc["attention_mask"][i].sum())
        expected = out.elmo[i, :n].mean(0).numpy() if n else np.zeros(out.elmo.shape[-1])
        np.testing.assert_allclose(means[i], expected, atol=BATCHING_ATOL)


@pytest.mark.slow  # issue 51: a long corpus
def test_embed_corpus_holds_one_chunk_at_a_time():
    """Python-side memory for 4x the sentences stays about the same (nothing accumulates)."""
    model = make_model("narrow")

    def peak(n):
        lines = (f"sentence number {i % 50} has {i % 7} words" for i in range(n))  # a closed vocabulary
        tracemalloc.start()
        for _ in embed_corpus(model, TOKENIZER, lines, chunk_size=64, progress=False):
            pass
        result = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return result

    peak(200)  # warm-up: the tokenizer's word cache fills
    small, large = peak(200), peak(800)
    assert large < 1.5 * small


def test_embed_corpus_rejects_bad_arguments():
    model = make_model("narrow")
    with pytest.raises(ValueError, match="output must be one of"):
        list(embed_corpus(model, TOKENIZER, ["a"], output="everything"))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        list(embed_corpus(model, TOKENIZER, ["a"], batch_size=0))


@pytest.mark.slow  # issue 51: a benchmark run
def test_benchmark_script_smoke(capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_inference
    finally:
        sys.path.pop(0)
    bench_inference.main(["--smoke"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tiny")]
    assert [row.split("|")[3].strip() for row in rows] == ["common", "fast", "fast+cache", "plain"]
    for row in rows:
        assert float(row.split("|")[6]) <= 1e-5  # every path agrees with the fast one


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_cuda_matches_cpu():
    model = make_model("wide-filters")
    sentences = [["a", "cuda", "test"], ["shorter"], ["the", "longest", "one", "of", "them", "all"]]
    enc = TOKENIZER(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    # TF32 products (and cuDNN's convolutions) round to 10 bits of mantissa: off for this comparison, then restored.
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            cpu = model(**enc, output_hidden_states=True).hidden_states
            gpu = model.to("cuda")(**{k: v.cuda() for k, v in enc.items()}, output_hidden_states=True).hidden_states
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    for x, y in zip(cpu, gpu, strict=True):
        assert (x - y.cpu()).abs().max() <= 1e-5


@pytest.mark.slow  # issue 51: a benchmark run
def test_benchmark_ceiling_measures_every_kind_of_product():
    """``bench_inference.measure_ceiling`` (run by ``--allennlp_python``, which CI cannot run) at a tiny batch."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_inference
    finally:
        sys.path.pop(0)
    rates = bench_inference.measure_ceiling({"rows": [2, 1], "distinct": 3, "modes": ["float32", "int8"]})
    for mode in ("float32", "int8"):
        assert set(rates[mode]["shapes"]) == set(bench_inference.product_shapes([1], 1))
        assert all(rate > 0 for rate in rates[mode]["shapes"].values()) and rates[mode]["combined"] > 0


@pytest.mark.slow  # issue 51: a benchmark run
def test_benchmark_ceiling_times_the_step_products_in_the_models_order():
    """``measure_steps`` counts the same work as ``product_shapes`` for the per-step products, with every kernel."""
    from modeling_elmo.fast_path_elmo import _PrepackedWeights

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_inference
    finally:
        sys.path.pop(0)
    rows = [3, 3, 1]
    shapes = bench_inference.product_shapes(rows, 1)
    for mode, kernels in (("float32", {"plain", "prepacked"}), ("int8", {"int8"})):
        measured = bench_inference.measure_steps(mode, rows, repeats=1)
        assert set(measured) == set(bench_inference.STEP_PRODUCTS)
        for name, by_kernel in measured.items():
            expected = sum(2 * math.prod(shape) * calls for shape, calls, _ in shapes[name])
            if not _PrepackedWeights.supported(torch.float32):
                kernels.discard("prepacked")
            assert set(by_kernel) == kernels
            assert all(work == expected and seconds > 0 for work, seconds in by_kernel.values())


def test_benchmark_profile_sorts_all_the_time_into_its_groups():
    """``bench_profile.breakdown`` on a small model: every group present, shares summing to 1, the products and the
    character CNN found by their op names."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_profile
    finally:
        sys.path.pop(0)
    model = make_model("wide-filters")
    sentences = [["a", "profiled", "batch"], ["of", "two", "sentences", "here"]]
    inputs = [TOKENIZER(sentences, is_split_into_words=True, padding=True, return_tensors="pt")]
    found = bench_profile.breakdown(model, inputs, repeats=1, top=3)
    shares = found["shares"]
    assert set(shares) == {*bench_profile.GROUPS, "other ops"}
    assert abs(sum(shares.values()) - 1) < 1e-9 and all(share >= 0 for share in shares.values())
    assert shares["products"] > 0 and shares["character CNN"] > 0 and found["seconds"] > 0
    assert found["ops_over_wall"] > 0
    assert len(found["top"]) == 3


@pytest.mark.slow  # issue 51: two fresh interpreters
def test_bench_versions_compares_two_checkouts(capsys):
    """``benchmarks/bench_versions.py`` on this checkout against itself (CI cannot time anything; it must run)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_versions
    finally:
        sys.path.pop(0)
    args = [str(REPO), str(REPO), "--size", "medium", "--batch-size", "2", "--batches", "1", "--rounds", "1"]
    bench_versions.main([*args, "--repeats", "1", "--warmup", "0", "--threads", "1"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {REPO}")]
    assert len(rows) == 2 and all(float(row.split("|")[2]) > 0 for row in rows)
