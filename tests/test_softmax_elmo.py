"""Tests of the ELMo softmax head: full and sampled softmax losses, and the log-uniform sampler."""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import sys
import types
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(REPO_ROOT, "modeling_elmo")

try:
    from modeling_elmo import softmax_elmo
except Exception:  # the package's other files may not import; this module needs only torch
    _stub = types.ModuleType("_elmo_softmax_under_test")
    _stub.__path__ = [PACKAGE_DIR]
    sys.modules[_stub.__name__] = _stub
    softmax_elmo = importlib.import_module(f"{_stub.__name__}.softmax_elmo")

ElmoSoftmax = softmax_elmo.ElmoSoftmax
LogUniformSampler = softmax_elmo.LogUniformSampler
sampled_softmax_loss = softmax_elmo.sampled_softmax_loss

ELMO_VOCAB = 793471  # the original biLM's vocabulary
ELMO_SAMPLES = 8192  # its negatives per batch


@contextlib.contextmanager
def _one_thread():
    """Run on one intra-op thread: the tests using it loop over tiny tensors, where thread hand-offs cost
    far more than they save (on a loaded machine, very much more)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    with _one_thread():
        yield


def _head(vocab_size: int, hidden_size: int, seed: int = 0, dtype=torch.float64) -> ElmoSoftmax:
    torch.manual_seed(seed)
    head = ElmoSoftmax(vocab_size, hidden_size).to(dtype)
    with torch.no_grad():
        head.bias.normal_()  # a non-zero bias, so that its handling is tested too
    return head


def _grads(head: ElmoSoftmax, hidden: torch.Tensor, loss_fn) -> torch.Tensor:
    """All gradients (hidden, weight, bias) of ``loss_fn(hidden)``, flattened into one vector."""
    head.zero_grad()
    hidden = hidden.detach().clone().requires_grad_()
    loss_fn(hidden).backward()
    return torch.cat([hidden.grad.flatten(), head.weight.grad.flatten(), head.bias.grad.flatten()])


# --------------------------------------------------------------------------------------------------
# The sampled loss with every id as a sample is the full loss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("extra", [0, 5])
def test_all_ids_mode_equals_full_softmax(reduction, extra):
    V, P, N = 11, 6, 9
    head = _head(V, P)
    hidden = torch.randn(N, P, dtype=torch.float64)
    targets = torch.randint(0, V, (N,))
    targets[[2, 5]] = -100  # ignored rows

    full = head.full_loss(hidden, targets, reduction=reduction)
    sampled = head.sampled_loss(hidden, targets, num_samples=V + extra, reduction=reduction)
    torch.testing.assert_close(sampled, full, rtol=1e-5, atol=1e-5)

    full_grads = _grads(head, hidden, lambda h: head.full_loss(h, targets, reduction=reduction).sum())
    sampled_grads = _grads(head, hidden, lambda h: head.sampled_loss(h, targets, V + extra, reduction=reduction).sum())
    torch.testing.assert_close(sampled_grads, full_grads, rtol=1e-5, atol=1e-5)


def test_all_ids_mode_returns_every_id_once_with_count_one():
    sampler = LogUniformSampler(13)
    for num_samples in (13, 14, 100):
        ids, counts, num_tries, unique = sampler.sample(num_samples)
        assert ids.tolist() == list(range(13))
        assert torch.equal(counts, torch.ones(13, dtype=torch.float64))
        assert num_tries is None and unique


def test_all_ids_mode_float32_and_module_shapes():
    V, P = 17, 8
    head = _head(V, P, dtype=torch.float32)
    hidden = torch.randn(3, 4, P)
    targets = torch.randint(0, V, (3, 4))
    targets[0, 0] = -100
    torch.testing.assert_close(head.sampled_loss(hidden, targets, V), head.full_loss(hidden, targets))
    per_token = head.sampled_loss(hidden, targets, V, reduction="none")
    assert per_token.shape == (3, 4) and per_token[0, 0] == 0
    torch.testing.assert_close(per_token, head.full_loss(hidden, targets, reduction="none"))
    assert head.logits(hidden).shape == (3, 4, V)
    torch.testing.assert_close(head(hidden), hidden @ head.weight.t() + head.bias)


def test_accidental_hits_are_what_the_mask_removes():
    # Without the mask, in the all-ids mode the true class is also its own negative: the normaliser
    # holds exp(true logit) twice.
    V, P, N = 9, 5, 7
    head = _head(V, P)
    hidden = torch.randn(N, P, dtype=torch.float64)
    targets = torch.randint(0, V, (N,))
    logits = head.logits(hidden)
    true = logits.gather(1, targets[:, None]).squeeze(1)
    expected = torch.logaddexp(torch.logsumexp(logits, 1), true) - true
    got = head.sampled_loss(hidden, targets, V, reduction="none", remove_accidental_hits=False)
    torch.testing.assert_close(got, expected)


@settings(max_examples=25, deadline=None)
@given(
    vocab_size=st.integers(1, 30),
    hidden_size=st.integers(1, 8),
    rows=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_all_ids_mode_equals_full_softmax_property(vocab_size, hidden_size, rows, seed):
    with _one_thread():
        _check_all_ids_mode(vocab_size, hidden_size, rows, seed)


def _check_all_ids_mode(vocab_size, hidden_size, rows, seed):
    head = _head(vocab_size, hidden_size, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, hidden_size, dtype=torch.float64, generator=generator)
    targets = torch.randint(0, vocab_size, (rows,), generator=generator)
    targets[torch.rand(rows, generator=generator) < 0.2] = -100
    if (targets == -100).all():
        targets[0] = 0
    for reduction in ("sum", "mean"):
        torch.testing.assert_close(
            head.sampled_loss(hidden, targets, vocab_size, reduction=reduction),
            head.full_loss(hidden, targets, reduction=reduction),
            rtol=1e-5,
            atol=1e-5,
        )


def test_all_targets_ignored_behaves_like_cross_entropy():
    head = _head(10, 4)
    hidden = torch.randn(3, 4, dtype=torch.float64)
    targets = torch.full((3,), -100)
    assert torch.isnan(head.sampled_loss(hidden, targets, 5)) and torch.isnan(head.full_loss(hidden, targets))
    assert head.sampled_loss(hidden, targets, 5, reduction="sum") == 0
    assert torch.equal(head.sampled_loss(hidden, targets, 5, reduction="none"), torch.zeros(3, dtype=torch.float64))


# --------------------------------------------------------------------------------------------------
# The sampler and its expected counts


def test_probabilities_sum_to_one_and_match_the_cdf():
    for V in (1, 2, 20, 1000, ELMO_VOCAB):
        p = LogUniformSampler(V).probs()
        assert p.shape == (V,) and p.dtype == torch.float64 and (p > 0).all()
        assert abs(p.sum().item() - 1.0) < 1e-12
        assert (p[1:] <= p[:-1]).all()  # descending: the vocabulary is sorted by frequency
    p = LogUniformSampler(20).probs()
    k = torch.arange(20, dtype=torch.float64)
    torch.testing.assert_close(p, (torch.log(k + 2) - torch.log(k + 1)) / math.log(21))


def test_with_replacement_frequencies_match_expected_counts(one_thread):
    V, S, runs = 20, 7, 20000
    sampler = LogUniformSampler(V)
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(V, dtype=torch.float64)
    for _ in range(runs // 100):  # draws are independent, so 100 samples of S are one of 100*S...
        ids, expected, num_tries, unique = sampler.sample(S * 100, generator=generator, unique=False)
        assert num_tries == S * 100 and not unique
        counts += torch.bincount(ids, minlength=V).double()
    # ...whose expected counts are 100 times those of a sample of S.
    expected = sampler.expected_count(torch.arange(V), S, unique=False)
    torch.testing.assert_close(expected, S * sampler.probs())
    mean = counts / runs
    p = sampler.probs()
    standard_error = torch.sqrt(S * p * (1 - p) / runs)  # the count of id k in one sample is Binomial(S, p_k)
    assert ((mean - expected).abs() < 5 * standard_error).all(), (mean, expected)


def _exact_inclusion(p: list[float], num_samples: int) -> torch.Tensor:
    """P(k is among the first ``num_samples`` distinct draws of i.i.d. draws from p), by a DP over subsets."""
    vocab_size = len(p)
    reached = {0: 1.0}  # bit mask of the distinct ids so far -> probability
    inclusion = [0.0] * vocab_size
    for _ in range(num_samples):
        following = defaultdict(float)
        for mask, probability in reached.items():
            remaining = 1.0 - sum(p[i] for i in range(vocab_size) if mask >> i & 1)
            for k in range(vocab_size):
                if not mask >> k & 1:
                    # The next new id is k with probability p_k / (mass not yet drawn).
                    step = probability * p[k] / remaining
                    following[mask | 1 << k] += step
                    inclusion[k] += step
        reached = following
    return torch.tensor(inclusion, dtype=torch.float64)


def test_unique_sampler_inclusion_frequencies(one_thread):
    V, S, runs = 20, 5, 4000
    sampler = LogUniformSampler(V)
    generator = torch.Generator().manual_seed(1)
    included = torch.zeros(V, dtype=torch.float64)
    tries = []
    for run in range(runs):
        ids, expected, num_tries, unique = sampler.sample(S, generator=generator)
        if run < 20:
            assert unique and ids.numel() == S and ids.unique().numel() == S and num_tries >= S
            torch.testing.assert_close(expected, -torch.expm1(num_tries * torch.log1p(-sampler.probs(ids))))
        included[ids] += 1
        tries.append(num_tries)
    frequency = included / runs
    tf_expected = sampler.expected_count(torch.arange(V).expand(runs, V), torch.tensor(tries)[:, None]).mean(0)

    # The sampler draws exactly "the first S distinct ids of an i.i.d. stream from P".
    exact = _exact_inclusion(sampler.probs().tolist(), S)
    assert abs(exact.sum().item() - S) < 1e-9
    standard_error = torch.sqrt(exact * (1 - exact) / runs)
    assert ((frequency - exact).abs() < 5 * standard_error + 1e-9).all(), (frequency, exact)

    # TensorFlow's expected count 1 - (1 - p)^num_tries, averaged over draws, approximates the inclusion
    # probability; it treats the random num_tries as fixed, so at S/V = 1/4 it is close, not exact.
    assert (tf_expected - exact).abs().max() < 0.03
    assert (tf_expected - frequency).abs().max() < 0.03


def test_expected_count_formulas():
    sampler = LogUniformSampler(50)
    ids = torch.tensor([0, 1, 7, 49])
    p = sampler.probs(ids)
    torch.testing.assert_close(sampler.expected_count(ids, 30, unique=False), 30 * p)
    torch.testing.assert_close(sampler.expected_count(ids, 30, unique=True), 1 - (1 - p) ** 30)
    torch.testing.assert_close(sampler.expected_count(ids, None), torch.ones(4, dtype=torch.float64))
    # Far in the tail of a big vocabulary, 1 - (1-p)^n must not cancel to 0 (its log would be -inf).
    big = LogUniformSampler(ELMO_VOCAB)
    tail = big.expected_count(torch.tensor([ELMO_VOCAB - 1]), 1)
    assert tail.item() > 0 and math.isclose(tail.item(), big.probs(torch.tensor([ELMO_VOCAB - 1])).item(), rel_tol=1e-9)


def test_sampler_is_reproducible_with_a_generator():
    sampler = LogUniformSampler(1000)
    first = sampler.sample(100, generator=torch.Generator().manual_seed(3))
    second = sampler.sample(100, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first.ids, second.ids) and first.num_tries == second.num_tries


def test_sampler_runs_at_elmo_size():
    # Sanity (no timing asserts): V = 793471, S = 8192, as the original training.
    sampler = LogUniformSampler(ELMO_VOCAB)
    generator = torch.Generator().manual_seed(0)
    ids, expected, num_tries, _ = sampler.sample(ELMO_SAMPLES, generator=generator)
    assert ids.shape == (ELMO_SAMPLES,) and ids.dtype == torch.long
    assert ids.unique().numel() == ELMO_SAMPLES
    assert 0 <= ids.min() and ids.max() < ELMO_VOCAB
    assert num_tries >= ELMO_SAMPLES
    assert ((expected > 0) & (expected <= 1)).all()
    ids, expected, num_tries, _ = sampler.sample(ELMO_SAMPLES, generator=generator, unique=False)
    assert ids.shape == (ELMO_SAMPLES,) and num_tries == ELMO_SAMPLES
    assert 0 <= ids.min() and ids.max() < ELMO_VOCAB


# --------------------------------------------------------------------------------------------------
# Gradients and training


def test_sampled_gradients_approach_full_gradients(one_thread):
    # Sampled softmax is consistent, not unbiased: averaged over draws its gradient tends to the full
    # one as S grows (exactly equal at S = V). Check the averaged gradient is close for S near V and
    # that the error shrinks with S.
    V, P, N, draws = 50, 8, 32, 150
    head = _head(V, P)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(N, P, dtype=torch.float64, generator=generator)
    targets = torch.multinomial(head.sampler.probs(), N, replacement=True, generator=generator)
    full = _grads(head, hidden, lambda h: head.full_loss(h, targets))

    errors = {}
    for num_samples in (10, 45):
        mean = sum(
            _grads(head, hidden, lambda h, s=num_samples: head.sampled_loss(h, targets, s, generator=generator))
            for _ in range(draws)
        )
        mean = mean / draws
        errors[num_samples] = ((mean - full).norm() / full.norm()).item()
        if num_samples == 45:
            assert F.cosine_similarity(mean, full, dim=0) > 0.98
    assert errors[45] < 0.05 and errors[45] < errors[10] / 4, errors


def test_training_with_sampled_loss_lowers_full_perplexity(one_thread):
    V, P, train_size, test_size = 200, 32, 20000, 5000
    generator = torch.Generator().manual_seed(0)
    # Zipfian unigram (ids by descending frequency), reshaped per previous word by a fixed random table.
    zipf_log = -torch.log(torch.arange(1, V + 1, dtype=torch.float32))
    bigram = torch.softmax(zipf_log + 2.0 * torch.randn(V, V, generator=generator), dim=1)
    unigram = torch.softmax(zipf_log, 0)

    def pairs(n):
        previous = torch.multinomial(unigram, n, replacement=True, generator=generator)
        following = torch.multinomial(bigram[previous], 1, generator=generator).squeeze(1)
        return previous, following

    train_previous, train_next = pairs(train_size)
    test_previous, test_next = pairs(test_size)

    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Embedding(V, P), nn.Linear(P, P), nn.Tanh())
    head = ElmoSoftmax(V, P)
    optimizer = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=1e-2)

    def test_perplexity():
        with torch.no_grad():
            return math.exp(head.full_loss(encoder(test_previous), test_next).item())

    before = test_perplexity()
    for _epoch in range(3):
        order = torch.randperm(train_size, generator=generator)
        for start in range(0, train_size, 500):
            batch = order[start : start + 500]
            loss = head.sampled_loss(encoder(train_previous[batch]), train_next[batch], 20, generator=generator)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    after = test_perplexity()
    assert after < 0.7 * before, (before, after)


# --------------------------------------------------------------------------------------------------
# Memory at ELMo's size


def test_sampled_loss_at_elmo_size_never_needs_n_by_v():
    V, P, N, S = ELMO_VOCAB, 16, 64, ELMO_SAMPLES
    generator = torch.Generator().manual_seed(0)
    weight = (0.1 * torch.randn(V, P, generator=generator)).requires_grad_()
    bias = torch.zeros(V, requires_grad=True)
    hidden = torch.randn(N, P, generator=generator, requires_grad=True)
    targets = torch.multinomial(LogUniformSampler(V).probs().float(), N, replacement=True, generator=generator)

    largest_saved = 0

    def pack(tensor):
        nonlocal largest_saved
        largest_saved = max(largest_saved, tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = sampled_softmax_loss(hidden, targets, weight, bias, S, LogUniformSampler(V), generator=generator)
    loss.backward()

    assert torch.isfinite(loss)
    assert largest_saved < N * V and largest_saved <= N * (S + 1) + (N + S) * P
    assert torch.isfinite(hidden.grad).all()
    # Only the gathered rows (targets and samples) get gradient.
    touched = (weight.grad != 0).any(1) | (bias.grad != 0)
    assert touched.sum() <= N + S


# --------------------------------------------------------------------------------------------------
# Errors


def test_bad_arguments_raise_clear_errors():
    V, P, N = 10, 4, 3
    head = _head(V, P, dtype=torch.float32)
    hidden = torch.randn(N, P)
    targets = torch.tensor([0, 1, 2])
    sampler = LogUniformSampler(V)

    for bad in (0, -3):
        with pytest.raises(ValueError, match="num_samples must be >= 1"):
            head.sampled_loss(hidden, targets, bad)
        with pytest.raises(ValueError, match="num_samples must be >= 1"):
            sampler.sample(bad)
    with pytest.raises(TypeError, match="num_samples must be an int"):
        sampler.sample(2.5)
    with pytest.raises(ValueError, match="vocab_size must be >= 1"):
        LogUniformSampler(0)

    for bad_target in (V, -1, -5):
        with pytest.raises(ValueError, match=r"targets must be in \[0, 10\) or -100"):
            head.sampled_loss(hidden, torch.tensor([0, bad_target, 1]), 4)
        with pytest.raises(ValueError, match=r"targets must be in \[0, 10\) or -100"):
            head.full_loss(hidden, torch.tensor([0, bad_target, 1]))
    with pytest.raises(TypeError, match="targets must be integer ids"):
        sampled_softmax_loss(hidden, targets.float(), head.weight, head.bias, 4, sampler)

    with pytest.raises(ValueError, match="share leading dimensions"):
        head.sampled_loss(hidden, torch.tensor([0, 1]), 4)
    with pytest.raises(ValueError, match="targets must be \\(N,\\)"):
        sampled_softmax_loss(hidden, torch.tensor([0, 1]), head.weight, head.bias, 4, sampler)
    with pytest.raises(ValueError, match="hidden must be \\(N, P\\)"):
        sampled_softmax_loss(hidden[None], targets, head.weight, head.bias, 4, sampler)
    with pytest.raises(ValueError, match="weight must be \\(V, P\\) with P = 5"):
        sampled_softmax_loss(torch.randn(N, P + 1), targets, head.weight, head.bias, 4, sampler)
    with pytest.raises(ValueError, match="bias must be \\(V,\\)"):
        sampled_softmax_loss(hidden, targets, head.weight, head.bias[:-1], 4, sampler)
    with pytest.raises(ValueError, match="sampler.vocab_size"):
        sampled_softmax_loss(hidden, targets, head.weight, head.bias, 4, LogUniformSampler(V + 1))
    with pytest.raises(ValueError, match="reduction must be one of"):
        head.sampled_loss(hidden, targets, 4, reduction="average")
