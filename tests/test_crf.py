"""Tests of the linear-chain CRF: brute-force enumeration, constraints, batching, gradients, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_elmo.crf import FORBIDDEN_SCORE, ConditionalRandomField, bio_allowed_transitions

BIO3 = ["O", "B-PER", "I-PER"]
BIO5 = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
# The float64 CRF vs brute-force enumeration of every path in float64: measured at most 1.8e-15; a wrong transition
# or a missed start/end score is off by 1e-2 or more.
FLOAT64_ATOL = 1e-9


# ---------------------------------------------------------------- helpers


def make_crf(num_tags: int, seed: int = 0, allowed=None, include_start_end: bool = True) -> ConditionalRandomField:
    """A float64 CRF with random (non-zero) scores, so that every term of the score matters."""
    crf = ConditionalRandomField(num_tags, allowed, include_start_end).double()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return crf


def make_batch(lengths: list[int], num_tags: int, seed: int = 0, steps: int | None = None):
    """Random float64 emissions, random tags (-100 on padding) and a right-padded bool mask."""
    steps = max(lengths, default=0) if steps is None else steps
    generator = torch.Generator().manual_seed(seed)
    emissions = torch.randn(len(lengths), steps, num_tags, generator=generator, dtype=torch.float64)
    tags = torch.randint(0, num_tags, (len(lengths), steps), generator=generator)
    mask = torch.arange(steps).unsqueeze(0) < torch.tensor(lengths, dtype=torch.long).unsqueeze(1)
    return emissions, tags.masked_fill(~mask, -100), mask


def python_path_score(crf: ConditionalRandomField, emissions_row: list[list[float]], path: tuple[int, ...]) -> float:
    """The score of one path by a plain loop over the raw parameters (no constraint handling)."""
    transitions = crf.transitions.tolist()
    score = 0.0
    for t, tag in enumerate(path):
        score += emissions_row[t][tag]
        if t > 0:
            score += transitions[path[t - 1]][tag]
    if path and crf.include_start_end:
        score += crf.start_transitions.tolist()[path[0]] + crf.end_transitions.tolist()[path[-1]]
    return score


def is_allowed(path: tuple[int, ...], allowed: set[tuple[int, int]], num_tags: int) -> bool:
    if not path:
        return True
    start, end = num_tags, num_tags + 1
    steps = [(start, path[0])] + list(itertools.pairwise(path)) + [(path[-1], end)]
    return all(step in allowed for step in steps)


def enumerate_paths(crf, emissions_row, length, allowed=None) -> dict[tuple[int, ...], float]:
    """Every path of ``length`` tags (only allowed ones when ``allowed`` is given) -> its score."""
    row = emissions_row.tolist()
    paths = itertools.product(range(crf.num_tags), repeat=length)
    return {
        path: python_path_score(crf, row, path)
        for path in paths
        if allowed is None or is_allowed(path, allowed, crf.num_tags)
    }


def logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


# ---------------------------------------------------------------- brute force, unconstrained


@pytest.mark.parametrize("include_start_end", [True, False])
def test_likelihood_and_partition_match_enumeration(include_start_end):
    lengths = [4, 3, 1, 0, 2]
    crf = make_crf(3, seed=1, include_start_end=include_start_end)
    emissions, tags, mask = make_batch(lengths, 3, seed=2)
    log_z = crf.log_partition(emissions, mask)
    log_likelihood = crf.log_likelihood(emissions, tags, mask)
    gold = crf.path_score(emissions, tags, mask)
    for b, length in enumerate(lengths):
        scores = enumerate_paths(crf, emissions[b], length)
        assert len(scores) == 3**length
        expected_z = logsumexp(list(scores.values())) if length else 0.0
        path = tuple(tags[b, :length].tolist())
        expected_gold = scores[path]
        assert log_z[b].item() == pytest.approx(expected_z, abs=FLOAT64_ATOL)
        assert gold[b].item() == pytest.approx(expected_gold, abs=FLOAT64_ATOL)
        assert log_likelihood[b].item() == pytest.approx(expected_gold - expected_z, abs=FLOAT64_ATOL)
    assert log_likelihood[3].item() == 0.0  # the empty sequence


@pytest.mark.parametrize("include_start_end", [True, False])
def test_viterbi_matches_enumeration(include_start_end):
    lengths = [4, 3, 1, 0, 2]
    crf = make_crf(3, seed=3, include_start_end=include_start_end)
    emissions, _, mask = make_batch(lengths, 3, seed=4)
    decoded = crf.viterbi_decode(emissions, mask)
    tags, best_scores = crf.viterbi_tags(emissions, mask, return_scores=True)
    assert tags.shape == mask.shape and tags.dtype == torch.long
    assert (tags[~mask] == ConditionalRandomField.PAD_TAG).all()
    for b, length in enumerate(lengths):
        assert len(decoded[b]) == length
        assert tags[b, :length].tolist() == decoded[b]
        if length == 0:
            assert best_scores[b].item() == 0.0
            continue
        scores = enumerate_paths(crf, emissions[b], length)
        best_path = max(scores, key=scores.get)
        assert tuple(decoded[b]) == best_path
        assert best_scores[b].item() == pytest.approx(scores[best_path], abs=FLOAT64_ATOL)


def test_probabilities_sum_to_one_over_all_paths():
    crf = make_crf(3, seed=5)
    for length in range(1, 5):
        emissions, _, mask = make_batch([length], 3, seed=length)
        paths = torch.tensor(list(itertools.product(range(3), repeat=length)))
        expanded = emissions.expand(len(paths), -1, -1)
        log_likelihood = crf.log_likelihood(expanded, paths, mask.expand(len(paths), -1))
        assert log_likelihood.exp().sum().item() == pytest.approx(1.0, abs=1e-9)


# ---------------------------------------------------------------- marginals (forward-backward)


def enumerated_marginals(crf, emissions_row, length, num_tags, allowed=None) -> torch.Tensor:
    """``(length, K)`` tag marginals by summing ``exp(score - log Z)`` over every (allowed) path."""
    scores = enumerate_paths(crf, emissions_row, length, allowed)
    log_z = logsumexp(list(scores.values()))
    marginals = torch.zeros(length, num_tags, dtype=torch.float64)
    for path, score in scores.items():
        for t, tag in enumerate(path):
            marginals[t, tag] += math.exp(score - log_z)
    return marginals


@pytest.mark.parametrize("include_start_end", [True, False])
def test_marginals_match_enumeration(include_start_end):
    lengths = [4, 3, 1, 0, 2]
    crf = make_crf(3, seed=21, include_start_end=include_start_end)
    emissions, _, mask = make_batch(lengths, 3, seed=22, steps=5)  # one step of padding even for the longest
    emissions[~mask] = float("nan")  # masked emissions are ignored
    marginals = crf.marginals(emissions, mask)
    assert marginals.shape == emissions.shape and marginals.dtype == torch.float64
    assert (marginals[~mask] == 0).all()
    for b, length in enumerate(lengths):
        expected = enumerated_marginals(crf, emissions[b], length, 3)
        torch.testing.assert_close(marginals[b, :length], expected, atol=1e-9, rtol=0)


@pytest.mark.parametrize("labels, max_length", [(BIO3, 4), (BIO5, 3)])
def test_constrained_marginals_match_enumeration_over_allowed_paths(labels, max_length):
    num_tags = len(labels)
    allowed = bio_allowed_transitions(labels)
    crf = make_crf(num_tags, seed=23, allowed=allowed)
    lengths = [max_length, max_length - 1, 1, 0]
    emissions, _, mask = make_batch(lengths, num_tags, seed=24)
    marginals = crf.marginals(emissions, mask)
    for b, length in enumerate(lengths):
        expected = enumerated_marginals(crf, emissions[b], length, num_tags, set(allowed))
        torch.testing.assert_close(marginals[b, :length], expected, atol=1e-9, rtol=0)
    # A forbidden tag (I- at the start, I-PER after O) gets probability 0 (exp(-1e4) underflows).
    assert (marginals[:, 0, labels.index("I-PER")] == 0).all()


def test_marginals_are_the_gradient_of_log_z_and_handle_empty_inputs():
    """d log Z / d emissions = the marginals (an independent check, by autograd); float32 stays float32."""
    crf = make_crf(5, seed=25, allowed=bio_allowed_transitions(BIO5))
    emissions, _, mask = make_batch([6, 2, 0, 5], 5, seed=26)
    emissions.requires_grad_(True)
    crf.log_partition(emissions, mask).sum().backward()
    marginals = crf.marginals(emissions.detach(), mask)
    torch.testing.assert_close(marginals, emissions.grad, atol=1e-9, rtol=0)
    sums = marginals.sum(dim=2)
    torch.testing.assert_close(sums, mask.double(), atol=1e-9, rtol=0)
    single = crf.float().marginals(emissions.detach().float(), mask.long())  # float32, integer mask
    assert single.dtype == torch.float32
    torch.testing.assert_close(single.double(), marginals, atol=1e-5, rtol=0)  # float32: measured 2.3e-7
    for shape in [(2, 0, 5), (0, 4, 5), (2, 3, 5)]:  # no steps, no rows, only empty rows
        empty = torch.zeros(shape)
        result = crf.marginals(empty, torch.zeros(shape[:2], dtype=torch.bool))
        assert result.shape == shape and not result.any()


# ---------------------------------------------------------------- constraints


def test_bio_allowed_transitions_three_labels():
    allowed = set(bio_allowed_transitions(BIO3))
    start, end = 3, 4
    o, b, i = 0, 1, 2
    expected = {
        (start, o),
        (start, b),
        (o, o),
        (o, b),
        (b, o),
        (b, b),
        (b, i),
        (i, o),
        (i, b),
        (i, i),
        (o, end),
        (b, end),
        (i, end),
    }
    assert allowed == expected
    assert (start, i) not in allowed and (o, i) not in allowed


def test_bio_allowed_transitions_types_and_id2label():
    id2label = {str(i): label for i, label in enumerate(BIO5)}  # JSON configs have string keys
    allowed = set(bio_allowed_transitions(id2label, scheme="IOB2"))
    assert allowed == set(bio_allowed_transitions(BIO5))
    assert (1, 2) in allowed and (2, 2) in allowed  # B-PER -> I-PER, I-PER -> I-PER
    assert (1, 4) not in allowed and (4, 2) not in allowed  # no switching type inside an entity
    assert (5, 4) not in allowed and (5, 3) in allowed  # START -> I-LOC forbidden, START -> B-LOC allowed


@pytest.mark.parametrize(
    "labels, scheme, message",
    [
        (["O", "B-PER", "X-PER"], "BIO", "not a BIO label"),
        (["O", "B-"], "BIO", "not a BIO label"),
        (BIO3, "BIOES", "unsupported tagging scheme"),
        ({0: "O", 2: "B-PER"}, "BIO", "label ids must be exactly"),
        ("O", "BIO", "not a single string"),
    ],
)
def test_bio_allowed_transitions_errors(labels, scheme, message):
    with pytest.raises(ValueError, match=message):
        bio_allowed_transitions(labels, scheme)


@pytest.mark.parametrize("labels, max_length", [(BIO3, 4), (BIO5, 3)])
def test_constrained_crf_matches_enumeration_over_allowed_paths(labels, max_length):
    num_tags = len(labels)
    allowed = bio_allowed_transitions(labels)
    allowed_set = set(allowed)
    crf = make_crf(num_tags, seed=6, allowed=allowed)
    lengths = [max_length, max_length - 1, 1, 0]
    emissions, _, mask = make_batch(lengths, num_tags, seed=7)
    log_z = crf.log_partition(emissions, mask)
    decoded, best_scores = crf.viterbi_tags(emissions, mask, return_scores=True)
    for b, length in enumerate(lengths):
        scores = enumerate_paths(crf, emissions[b], length, allowed_set)
        assert len(scores) < num_tags**length or length == 0
        if length == 0:
            assert log_z[b].item() == 0.0
            continue
        assert log_z[b].item() == pytest.approx(logsumexp(list(scores.values())), abs=FLOAT64_ATOL)
        best_path = max(scores, key=scores.get)
        assert tuple(decoded[b, :length].tolist()) == best_path
        assert best_scores[b].item() == pytest.approx(scores[best_path], abs=FLOAT64_ATOL)

        # The likelihood of every allowed path is its score minus log Z; together they sum to 1.
        paths = torch.tensor(list(scores))
        rows = len(paths)
        padded = torch.cat([paths, torch.full((rows, emissions.shape[1] - length), -100)], dim=1)
        log_likelihood = crf.log_likelihood(emissions[b].expand(rows, -1, -1), padded, mask[b].expand(rows, -1))
        expected = torch.tensor(list(scores.values()), dtype=torch.float64) - logsumexp(list(scores.values()))
        torch.testing.assert_close(log_likelihood, expected, atol=FLOAT64_ATOL, rtol=0)
        assert log_likelihood.exp().sum().item() == pytest.approx(1.0, abs=1e-9)


def test_forbidden_path_gets_the_penalty():
    crf = make_crf(3, seed=8, allowed=bio_allowed_transitions(BIO3))
    emissions, _, mask = make_batch([3], 3, seed=9)
    forbidden = torch.tensor([[2, 2, 0]])  # starts with I-PER
    log_likelihood = crf.log_likelihood(emissions, forbidden, mask).item()
    assert log_likelihood < FORBIDDEN_SCORE / 2
    assert math.isfinite(log_likelihood)


def test_viterbi_never_outputs_forbidden_paths():
    allowed = bio_allowed_transitions(BIO5)
    allowed_set = set(allowed)
    crf = make_crf(5, seed=10, allowed=allowed)
    lengths = [6, 5, 1, 3, 0]
    generator = torch.Generator().manual_seed(11)
    for _ in range(20):
        emissions = 5.0 * torch.randn(len(lengths), 6, 5, generator=generator, dtype=torch.float64)
        emissions[..., 2] += 20.0  # I-PER everywhere is by far the best unconstrained path
        emissions[..., 4] += 10.0
        _, _, mask = make_batch(lengths, 5)
        for path in crf.viterbi_decode(emissions, mask):
            assert is_allowed(tuple(path), allowed_set, 5), path


def test_start_end_constraints_apply_without_start_end_parameters():
    crf = make_crf(3, seed=12, allowed=bio_allowed_transitions(BIO3), include_start_end=False)
    assert crf.start_transitions is None and crf.end_transitions is None
    emissions = torch.zeros(1, 1, 3, dtype=torch.float64)
    emissions[0, 0, 1] = 1.0
    emissions[0, 0, 2] = 50.0  # a lone I-PER would win without the START constraint
    assert crf.viterbi_decode(emissions) == [[1]]


# ---------------------------------------------------------------- batching and padding (property tests)


@st.composite
def batches(draw):
    num_tags = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
    extra = draw(st.integers(0, 2))
    seed = draw(st.integers(0, 2**31 - 1))
    constrained = draw(st.booleans()) and num_tags == 3
    include_start_end = draw(st.booleans())
    return num_tags, lengths, extra, seed, constrained, include_start_end


@settings(max_examples=60, deadline=None)
@given(batches())
def test_batched_equals_single_and_padding_is_ignored(case):
    num_tags, lengths, extra, seed, constrained, include_start_end = case
    allowed = bio_allowed_transitions(BIO3) if constrained else None
    crf = make_crf(num_tags, seed=seed, allowed=allowed, include_start_end=include_start_end)
    steps = max(lengths) + extra
    emissions, tags, mask = make_batch(lengths, num_tags, seed=seed + 1, steps=steps)

    log_likelihood = crf.log_likelihood(emissions, tags, mask)
    log_z = crf.log_partition(emissions, mask)
    decoded = crf.viterbi_decode(emissions, mask)
    assert torch.isfinite(log_likelihood).all() and torch.isfinite(log_z).all()
    assert (log_likelihood <= 1e-9).all()

    # Each row alone, cut to its own length, gives the same results.
    for b, length in enumerate(lengths):
        row_emissions, row_tags = emissions[b : b + 1, :length], tags[b : b + 1, :length]
        single = crf.log_likelihood(row_emissions, row_tags, mask[b : b + 1, :length])
        torch.testing.assert_close(single, log_likelihood[b : b + 1], atol=1e-9, rtol=1e-9)
        assert crf.viterbi_decode(row_emissions) == [decoded[b]]

    # Garbage (huge values, NaN) and other tags past the mask change nothing, gradients included.
    generator = torch.Generator().manual_seed(seed + 2)
    garbage = torch.randn(emissions.shape, generator=generator, dtype=torch.float64) * 1e6
    garbage[..., 0] = float("nan")
    noisy_emissions = torch.where(mask.unsqueeze(2), emissions, garbage)
    noisy_tags = torch.where(mask, tags, torch.randint(-100, 100, tags.shape, generator=generator))
    clean = emissions.clone().requires_grad_(True)
    noisy = noisy_emissions.clone().requires_grad_(True)
    crf.log_likelihood(clean, tags, mask).sum().backward()
    noisy_log_likelihood = crf.log_likelihood(noisy, noisy_tags, mask)
    noisy_log_likelihood.sum().backward()
    torch.testing.assert_close(noisy_log_likelihood, log_likelihood, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(noisy.grad, clean.grad, atol=1e-9, rtol=1e-9)
    assert (noisy.grad[~mask] == 0).all()
    assert crf.viterbi_decode(noisy_emissions, mask) == decoded


# ---------------------------------------------------------------- empty sequences, losses, gradients


def test_empty_sequences_give_zero_and_no_nan():
    crf = make_crf(3, seed=13, allowed=bio_allowed_transitions(BIO3))
    emissions = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    tags = torch.full((2, 3), -100)
    log_likelihood = crf.log_likelihood(emissions, tags, mask)
    assert log_likelihood.tolist() == [0.0, 0.0]
    loss = crf(emissions, tags, mask)
    assert loss.item() == 0.0
    loss.backward()
    assert (emissions.grad == 0).all()
    assert all(torch.isfinite(p.grad).all() for p in crf.parameters())
    assert crf.viterbi_decode(emissions, mask) == [[], []]
    assert (crf.viterbi_tags(emissions, mask) == -100).all()

    # No time steps at all, and an empty batch.
    for shape in [(2, 0, 3), (0, 4, 3)]:
        empty = torch.zeros(shape, dtype=torch.float64)
        tags = torch.zeros(shape[:2], dtype=torch.long)
        assert crf.log_likelihood(empty, tags).shape == (shape[0],)
        assert crf.viterbi_tags(empty).shape == shape[:2]
        assert crf.viterbi_decode(empty) == [[] for _ in range(shape[0])]


def test_reductions():
    crf = make_crf(3, seed=14)
    lengths = [3, 0, 2]
    emissions, tags, mask = make_batch(lengths, 3, seed=15)
    nll = -crf.log_likelihood(emissions, tags, mask)
    torch.testing.assert_close(crf(emissions, tags, mask, reduction="none"), nll)
    torch.testing.assert_close(crf(emissions, tags, mask, reduction="sum"), nll.sum())
    torch.testing.assert_close(crf(emissions, tags, mask), nll.sum() / 2)  # mean over the 2 non-empty rows
    assert (nll >= 0).all()


def test_gradients_are_finite_with_constraints():
    crf = make_crf(5, seed=16, allowed=bio_allowed_transitions(BIO5))
    emissions, tags, mask = make_batch([5, 2, 0, 1], 5, seed=17)
    emissions.requires_grad_(True)
    tags[0, :2] = torch.tensor([2, 4])  # a forbidden gold path: huge loss, still finite gradients
    loss = crf(emissions, tags, mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(emissions.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in crf.parameters())


def test_emission_gradient_is_marginal_minus_gold():
    """d log p / d emissions = one-hot(gold) - marginals, so each real position's gradient sums to 0."""
    crf = make_crf(3, seed=18)
    emissions, tags, mask = make_batch([4, 2], 3, seed=19)
    emissions.requires_grad_(True)
    crf.log_likelihood(emissions, tags, mask).sum().backward()
    sums = emissions.grad.sum(dim=2)
    torch.testing.assert_close(sums, torch.zeros_like(sums), atol=1e-9, rtol=0)


def test_training_decreases_loss_and_learns_the_tags():
    torch.manual_seed(0)
    allowed = bio_allowed_transitions(BIO3)
    crf = ConditionalRandomField(3, allowed).double()
    gold = torch.tensor([[1, 2, 2, 0, 1], [0, 1, 2, 0, -100], [1, 0, -100, -100, -100]])
    mask = gold != -100
    emissions = torch.nn.Parameter(0.1 * torch.randn(3, 5, 3, dtype=torch.float64))
    optimizer = torch.optim.SGD([emissions, *crf.parameters()], lr=0.5)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = crf(emissions, gold, mask)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 5
    assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(losses))
    expected = [row[row != -100].tolist() for row in gold]
    assert crf.viterbi_decode(emissions.detach(), mask) == expected


def test_integer_mask_and_float32():
    crf = make_crf(3, seed=20)
    emissions, tags, mask = make_batch([3, 1], 3, seed=21)
    expected = crf.log_likelihood(emissions, tags, mask)
    torch.testing.assert_close(crf.log_likelihood(emissions, tags, mask.long()), expected)
    crf32 = crf.float()
    result = crf32.log_likelihood(emissions.float(), tags, mask)
    assert result.dtype == torch.float32
    torch.testing.assert_close(result.double(), expected, atol=1e-4, rtol=1e-4)  # float32: measured 5.4e-7


# ---------------------------------------------------------------- state dict and meta-device loading


def test_state_dict_carries_constraints_and_loads_on_meta_device():
    crf = make_crf(3, seed=22, allowed=bio_allowed_transitions(BIO3))
    state = crf.state_dict()
    assert set(state) == {"transitions", "start_transitions", "end_transitions", "constraint_mask"}
    assert state["constraint_mask"].dtype == torch.bool and state["constraint_mask"].shape == (5, 5)

    # As from_pretrained does: build on the meta device (unconstrained here), then load real tensors.
    with torch.device("meta"):
        loaded = ConditionalRandomField(3)
    loaded.load_state_dict(state, assign=True)
    emissions = torch.zeros(1, 2, 3, dtype=torch.float64)
    emissions[0, :, 2] = 50.0
    assert loaded.viterbi_decode(emissions) == crf.viterbi_decode(emissions)
    assert loaded.viterbi_decode(emissions)[0][0] != 2  # the loaded mask forbids I-PER at the start
    torch.testing.assert_close(loaded.constraint_mask, crf.build_constraint_mask())

    without = ConditionalRandomField(3, include_start_end=False)
    assert set(without.state_dict()) == {"transitions", "constraint_mask"}


# ---------------------------------------------------------------- errors


@pytest.fixture
def crf3():
    return make_crf(3)


def test_errors_on_shapes_and_dtypes(crf3):
    emissions, tags, mask = make_batch([3, 2], 3)
    with pytest.raises(ValueError, match=r"\(batch, time, num_tags\)"):
        crf3.log_likelihood(emissions[0], tags, mask)
    with pytest.raises(ValueError, match="the CRF has 3"):
        crf3.log_likelihood(emissions[..., :2], tags, mask)
    with pytest.raises(ValueError, match="floating-point"):
        crf3.viterbi_decode(emissions.long(), mask)
    with pytest.raises(ValueError, match="mask must have shape"):
        crf3.log_likelihood(emissions, tags, mask[:, :2])
    with pytest.raises(ValueError, match="mask must be bool"):
        crf3.log_likelihood(emissions, tags, mask.double())
    with pytest.raises(ValueError, match="only 0 and 1"):
        crf3.log_likelihood(emissions, tags, mask.long() * 2)
    with pytest.raises(ValueError, match="tags must have shape"):
        crf3.log_likelihood(emissions, tags[:, :2], mask)
    with pytest.raises(ValueError, match="integer tensor"):
        crf3.log_likelihood(emissions, tags.double(), mask)
    with pytest.raises(ValueError, match="reduction"):
        crf3(emissions, tags, mask, reduction="max")


def test_error_on_non_prefix_mask(crf3):
    emissions, tags, _ = make_batch([3, 3], 3)
    mask = torch.tensor([[True, True, True], [False, True, True]])  # left-padded
    for call in (
        lambda: crf3.log_likelihood(emissions, tags, mask),
        lambda: crf3.viterbi_decode(emissions, mask),
        lambda: crf3(emissions, tags, mask),
    ):
        with pytest.raises(ValueError, match=r"right-padded.*rows \[1\]"):
            call()
    with pytest.raises(ValueError, match="right-padded"):
        crf3.log_partition(emissions, torch.tensor([[True, False, True], [True, True, True]]))


def test_error_on_tags_out_of_range(crf3):
    emissions, tags, mask = make_batch([3, 2], 3)
    bad = tags.clone()
    bad[1, 1] = 3
    with pytest.raises(ValueError, match=r"\[0, 3\).*found 3 at \(batch, time\) = \(1, 1\)"):
        crf3.log_likelihood(emissions, bad, mask)
    bad[1, 1] = -100
    with pytest.raises(ValueError, match="found -100"):
        crf3(emissions, bad, mask)
    fine = tags.clone()
    fine[1, 2] = 12345  # masked position: ignored
    assert torch.isfinite(crf3.log_likelihood(emissions, fine, mask)).all()


def test_errors_on_bad_constraints():
    with pytest.raises(ValueError, match="out of range"):
        ConditionalRandomField(3, [(0, 5)])
    with pytest.raises(ValueError, match="out of range"):
        ConditionalRandomField(3, [(4, 0)])  # END cannot be a 'from'
    with pytest.raises(ValueError, match="no tag after START"):
        ConditionalRandomField(3, [(0, 1), (1, 4)])
    with pytest.raises(ValueError, match="no tag before END"):
        ConditionalRandomField(3, [(3, 0), (0, 1)])
    with pytest.raises(ValueError, match="num_tags"):
        ConditionalRandomField(0)
