"""The ELMo biLM language-model head: one softmax over the word vocabulary, full and sampled.

The original biLM predicts the next word (forward direction) and the previous word (backward
direction) with one shared softmax over a word vocabulary sorted by descending frequency
(ids 0, 1, 2 are ``<S>``, ``</S>``, ``<UNK>``). It was trained with a sampled softmax: per batch,
S = 8192 negative ids drawn from the log-uniform (Zipfian) distribution over V = 793471 words

    P(k) = (log(k + 2) - log(k + 1)) / log(V + 1),     k = 0 .. V - 1,

and the logits of the true and the sampled classes corrected by ``- log(expected count)``
(Jean et al., 2015, "On Using Very Large Target Vocabulary for Neural Machine Translation";
Bengio and Senecal, 2008). The corrected logits make the sampled cross entropy a consistent
estimator of the full one: as S grows its gradient tends to the full softmax gradient.

Shapes: N rows (tokens), P = hidden (projection) size, V = vocabulary size, S = sampled ids.

Contents:
    ElmoSoftmax           the head: ``weight (V, P)``, ``bias (V,)``; full logits, full and sampled losses
    LogUniformSampler     draws S ids from P(k), unique (without replacement) or with replacement
    SampledCandidates     what ``LogUniformSampler.sample`` returns
    sampled_softmax_loss  the sampled cross entropy; memory O(N*S + (N+S)*P), never (N, V)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .graph_path_elmo import in_graph

IGNORE_INDEX = -100
_REDUCTIONS = ("mean", "sum", "none")


class SampledCandidates(NamedTuple):
    """One draw of a ``LogUniformSampler``.

    Attributes:
        ids: ``(S,)`` long, the sampled ids. Distinct when drawn with ``unique=True``.
        expected_counts: ``(S,)`` float64, the expected number of times each id is in a sample
            drawn the same way (see ``LogUniformSampler.expected_count``).
        num_tries: how many independent draws were made (``S`` with replacement; ``>= S``
            without); ``None`` in the "all ids" mode, where every id is taken exactly once.
        unique: whether the ids were drawn without replacement.
    """

    ids: torch.Tensor
    expected_counts: torch.Tensor
    num_tries: int | None
    unique: bool


def _check_num_samples(num_samples) -> int:
    if isinstance(num_samples, bool) or not isinstance(num_samples, int):
        raise TypeError(f"num_samples must be an int, got {type(num_samples).__name__}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    return num_samples


class LogUniformSampler:
    """Draws word ids from the log-uniform (Zipfian) distribution ``P(k) = log((k+2)/(k+1)) / log(V+1)``.

    ``P`` fits a vocabulary sorted by descending frequency (id 0 most frequent), as ELMo's is.
    Draws use the inverse CDF: ``F(k) = P(X <= k) = log(k+2) / log(V+1)``, so for ``u ~ U[0, 1)``
    ``k = floor(exp(u * log(V+1))) - 1`` has distribution ``P``.

    Args:
        vocab_size: V, the number of ids (``0 .. V-1``).
    """

    def __init__(self, vocab_size: int):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.vocab_size = vocab_size
        self._log_range = math.log(vocab_size + 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"

    def probs(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """``P(k)`` in float64 for ``ids`` (any shape, long), or ``(V,)`` for all ids when ``ids`` is None."""
        if ids is None:
            ids = torch.arange(self.vocab_size)
        k = ids.to(torch.float64)
        # log((k+2)/(k+1)) = log1p(1/(k+1)): exact also for large k, where the difference of logs cancels.
        return torch.log1p(1.0 / (k + 1.0)) / self._log_range

    def expected_count(self, ids: torch.Tensor, num_tries: int | None, unique: bool = True) -> torch.Tensor:
        """Expected number of times each of ``ids`` appears in a sample; float64, the shape of ``ids``.

        * ``unique=False`` (with replacement, ``num_tries = S`` independent draws): ``S * P(k)``.
        * ``unique=True`` (draws repeated until S distinct ids, ``num_tries`` draws in all):
          ``1 - (1 - P(k)) ** num_tries``, the probability that k comes up at least once in
          ``num_tries`` independent draws. This is the formula of TensorFlow's
          ``log_uniform_candidate_sampler`` (its ``expected_count`` with ``unique=True``); it treats
          ``num_tries`` as fixed although it is the (random) stopping time of the draws, which is a
          good approximation, exact as ``S / V -> 0`` and as ``S -> V``.
        * ``num_tries=None``: the "all ids" mode (``sample`` with ``num_samples >= V`` and
          ``unique=True``): every id is taken exactly once, so the count is 1.
        """
        if num_tries is None:
            return torch.ones(ids.shape, dtype=torch.float64, device=ids.device)
        p = self.probs(ids)
        if not unique:
            return num_tries * p
        # 1 - (1-p)^n computed as -expm1(n * log1p(-p)): no cancellation when n*p is tiny.
        return -torch.expm1(num_tries * torch.log1p(-p))

    def _draw(self, n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
        """``n`` independent ids from ``P``, long ``(n,)``."""
        u = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
        ids = torch.floor(torch.exp(u * self._log_range)).long() - 1
        # Rounding of exp at the ends of [0, 1) could step one past the range.
        return ids.clamp_(0, self.vocab_size - 1)

    def sample(
        self,
        num_samples: int,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        unique: bool = True,
    ) -> SampledCandidates:
        """Draw ``num_samples`` ids.

        Args:
            num_samples: S >= 1.
            generator: the random generator (on ``device``); None uses torch's default one.
            device: where the ids go; defaults to the generator's device, else the CPU.
            unique: True draws without replacement: independent draws from ``P`` repeated until S
                distinct ids have come up, keeping the first occurrence of each, in order (as
                TensorFlow's ``log_uniform_candidate_sampler(unique=True)`` does); ``num_tries`` is the
                number of draws that took. False: S independent draws, repeats allowed.

        With ``unique=True`` and ``num_samples >= V`` no draw is made: the ids are ``arange(V)``, each
        with expected count 1 and ``num_tries=None`` ("all ids" mode). With it the sampled softmax
        loss equals the full softmax loss, which makes it a test of the sampled loss.

        Returns:
            ``SampledCandidates(ids (S,), expected_counts (S,), num_tries, unique)``; S is ``min(S, V)``
            in the "all ids" mode.
        """
        num_samples = _check_num_samples(num_samples)
        if device is None:
            device = generator.device if generator is not None else torch.device("cpu")
        device = torch.device(device)
        if not unique:
            ids = self._draw(num_samples, generator, device)
            return SampledCandidates(ids, self.expected_count(ids, num_samples, unique=False), num_samples, False)
        if num_samples >= self.vocab_size:
            ids = torch.arange(self.vocab_size, device=device)
            return SampledCandidates(ids, self.expected_count(ids, None), None, True)
        ids, num_tries = self._draw_unique(num_samples, generator, device)
        return SampledCandidates(ids, self.expected_count(ids, num_tries, unique=True), num_tries, True)

    def _draw_unique(
        self, num_samples: int, generator: torch.Generator | None, device: torch.device
    ) -> tuple[torch.Tensor, int]:
        """The first ``num_samples`` distinct ids of a stream of independent draws, and the stream's length.

        The stream is drawn in vectorised rounds; within a round, a draw is new when its id was not
        seen in earlier rounds and this is its first position in the round. The result is the same
        as drawing one id at a time, so ``num_tries`` is the exact count of sequential draws.
        """
        seen = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        chunks: list[torch.Tensor] = []
        found = 0
        num_tries = 0
        rate = 1.0  # fraction of draws that were new in the last round; predicts how many more to draw
        while found < num_samples:
            missing = num_samples - found
            n = int(math.ceil(missing / max(rate, 1e-3) * 1.2)) + 16
            draws = self._draw(n, generator, device)
            values, inverse = torch.unique(draws, return_inverse=True)
            positions = torch.arange(n, device=device)
            first = torch.full((values.numel(),), n, dtype=torch.long, device=device)
            first.scatter_reduce_(0, inverse, positions, reduce="amin")
            is_new = (first[inverse] == positions) & ~seen[draws]
            cumulative = torch.cumsum(is_new, 0)
            new_in_round = int(cumulative[-1])
            if new_in_round >= missing:
                # Stop at the draw that brought the S-th distinct id; later draws never happened.
                last = int(torch.searchsorted(cumulative, missing))
                is_new = is_new[: last + 1]
                draws = draws[: last + 1]
                num_tries += last + 1
            else:
                num_tries += n
            new_ids = draws[is_new]
            seen[new_ids] = True
            chunks.append(new_ids)
            found += new_ids.numel()
            rate = new_in_round / n
        return torch.cat(chunks), num_tries


def _check_loss_inputs(hidden, targets, weight, bias, reduction) -> None:
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be (N, P), got shape {tuple(hidden.shape)}")
    if targets.dim() != 1 or targets.shape[0] != hidden.shape[0]:
        raise ValueError(f"targets must be (N,) with N = {hidden.shape[0]} (hidden's rows), got {tuple(targets.shape)}")
    if targets.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"targets must be integer ids, got {targets.dtype}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(
            f"weight must be (V, P) with P = {hidden.shape[1]} (hidden's width), got {tuple(weight.shape)}"
        )
    if bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must be (V,) with V = {weight.shape[0]} (weight's rows), got {tuple(bias.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    vocab_size = weight.shape[0]
    bad = ((targets < 0) & (targets != IGNORE_INDEX)) | (targets >= vocab_size)
    if in_graph():  # torch.compile / torch.export: checked when the graph runs (RuntimeError, no host read)
        torch._assert_async(bad.logical_not().all(), f"targets must be in [0, {vocab_size}) or {IGNORE_INDEX}")
    elif bool(bad.any()):
        raise ValueError(
            f"targets must be in [0, {vocab_size}) or {IGNORE_INDEX} (ignored); "
            f"got {targets[bad][:5].tolist()} at rows {bad.nonzero().flatten()[:5].tolist()}"
        )


def sampled_softmax_loss(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    num_samples: int,
    sampler: LogUniformSampler,
    remove_accidental_hits: bool = True,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
    unique: bool = True,
) -> torch.Tensor:
    """Sampled softmax cross entropy with S negatives shared by all N rows.

    Per row n with target t, over the classes ``[t, s_1 .. s_S]`` (true class at index 0):

        logit(c) = hidden[n] . weight[c] + bias[c] - log(expected_count(c))

    where the expected counts come from ``sampler`` (the true class gets its own, computed with the
    same number of draws). Sampled ids equal to ``t`` ("accidental hits") are masked out, else the
    true class would also count as its own negative. The loss is the cross entropy of these S + 1
    logits with label 0. Only the rows of ``weight``/``bias`` for the targets and the samples are
    gathered: memory O(N*S + (N+S)*P), never an (N, V) tensor.

    Args:
        hidden: ``(N, P)``.
        targets: ``(N,)`` ids in ``[0, V)``; rows with ``-100`` are ignored (dropped before anything else).
        weight: ``(V, P)``; bias: ``(V,)``.
        num_samples: S >= 1 (see ``LogUniformSampler.sample``: with ``unique=True`` and ``S >= V`` every id
            is taken once, and the loss equals the full softmax loss when ``remove_accidental_hits``).
        sampler: a ``LogUniformSampler`` with ``vocab_size == V``.
        remove_accidental_hits: mask sampled ids equal to a row's target.
        generator: random generator for the sampler (on hidden's device).
        reduction: ``"mean"`` (over non-ignored rows; NaN if there are none, as ``F.cross_entropy``),
            ``"sum"`` or ``"none"`` (``(N,)``, 0 at ignored rows).
        unique: draw the S ids without replacement (default, as the original) or with.

    Returns:
        A scalar, or ``(N,)`` for ``reduction="none"``.
    """
    _check_loss_inputs(hidden, targets, weight, bias, reduction)
    if sampler.vocab_size != weight.shape[0]:
        raise ValueError(f"sampler.vocab_size ({sampler.vocab_size}) != V ({weight.shape[0]}, weight's rows)")
    num_samples = _check_num_samples(num_samples)

    keep = targets != IGNORE_INDEX
    # In a graph (torch.compile, torch.export), shapes cannot depend on values: every row is scored (an ignored
    # one against id 0) and ignored rows are zeroed after; and the negatives are drawn with replacement (unique
    # draws repeat until S distinct ids have come up, a loop whose length is random), unless every id is taken.
    graph = in_graph()
    if graph:
        hidden_kept, targets_kept = hidden, targets.long().clamp(min=0)  # (N, P), (N,)
        unique = unique and num_samples >= sampler.vocab_size
    else:
        hidden_kept = hidden[keep]  # (M, P)
        targets_kept = targets[keep].long()  # (M,)

    candidates = sampler.sample(num_samples, generator=generator, device=hidden.device, unique=unique)
    sampled_ids = candidates.ids  # (S,)
    true_log_count = torch.log(sampler.expected_count(targets_kept, candidates.num_tries, unique=candidates.unique))
    sampled_log_count = torch.log(candidates.expected_counts)

    # True class: a row-wise dot product, (M, P) * (M, P) -> (M,).
    true_logits = (hidden_kept * weight[targets_kept]).sum(-1) + bias[targets_kept]
    true_logits = true_logits - true_log_count.to(true_logits.dtype)
    # Sampled classes, shared by every row: (M, P) @ (P, S) -> (M, S).
    sampled_logits = hidden_kept @ weight[sampled_ids].t() + bias[sampled_ids]
    sampled_logits = sampled_logits - sampled_log_count.to(sampled_logits.dtype)
    if remove_accidental_hits:
        hits = targets_kept.unsqueeze(1) == sampled_ids.unsqueeze(0)  # (M, S)
        # Most negative finite value: exp() of it is 0 in the softmax, yet no inf - inf NaNs.
        sampled_logits = sampled_logits.masked_fill(hits, torch.finfo(sampled_logits.dtype).min)

    logits = torch.cat([true_logits.unsqueeze(1), sampled_logits], dim=1)  # (M, 1 + S)
    labels = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    losses = F.cross_entropy(logits, labels, reduction="none")  # (M,)
    if graph:
        losses = losses.masked_fill(~keep, 0.0)  # (N,)
        if reduction == "none":
            return losses
        return losses.sum() if reduction == "sum" else losses.sum() / keep.sum()
    if reduction == "none":
        return losses.new_zeros(targets.shape[0]).masked_scatter(keep, losses)
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / keep.sum()  # mean over kept rows; 0/0 = NaN with none kept, as F.cross_entropy


class ElmoSoftmax(nn.Linear):
    """The biLM's softmax over the word vocabulary, shared by the forward and backward directions.

    A ``nn.Linear(P, V)`` (so transformers sees it as the output embedding) with the sampled-softmax loss on top.

    Args:
        vocab_size: V.
        hidden_size: P, the width of the LSTM's top layer output (its projection).

    Parameters: ``weight (V, P)``, ``bias (V,)``. Methods take ``hidden (..., P)`` and ``targets (...)``
    (leading dimensions are flattened; ``targets == -100`` is ignored).
    """

    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__(hidden_size, vocab_size)
        self.sampler = LogUniformSampler(vocab_size)

    @property
    def vocab_size(self) -> int:
        return self.out_features

    @property
    def hidden_size(self) -> int:
        return self.in_features

    def reset_parameters(self) -> None:
        # Weights N(0, 1/P): initial logits of unit variance for unit-variance inputs. Pretrained weights replace them.
        nn.init.normal_(self.weight, std=1.0 / math.sqrt(self.in_features))
        nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, hidden_size={self.hidden_size}"

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full logits: ``(..., P) -> (..., V)``."""
        return F.linear(hidden, self.weight, self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Same as ``logits``."""
        return self.logits(hidden)

    def _flatten(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if hidden.shape[:-1] != targets.shape:
            raise ValueError(
                f"hidden (..., P) and targets (...) must share leading dimensions, "
                f"got {tuple(hidden.shape)} and {tuple(targets.shape)}"
            )
        return hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)

    def full_loss(self, hidden: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Cross entropy of the full softmax (``ignore_index=-100``): a scalar, or ``targets``' shape for "none"."""
        flat_hidden, flat_targets = self._flatten(hidden, targets)
        _check_loss_inputs(flat_hidden, flat_targets, self.weight, self.bias, reduction)
        loss = F.cross_entropy(
            self.logits(flat_hidden), flat_targets.long(), ignore_index=IGNORE_INDEX, reduction=reduction
        )
        return loss.view(targets.shape) if reduction == "none" else loss

    def sampled_loss(
        self,
        hidden: torch.Tensor,
        targets: torch.Tensor,
        num_samples: int,
        generator: torch.Generator | None = None,
        reduction: str = "mean",
        remove_accidental_hits: bool = True,
        unique: bool = True,
    ) -> torch.Tensor:
        """``sampled_softmax_loss`` with this module's weight, bias and log-uniform sampler.

        A scalar, or ``targets``' shape for ``reduction="none"``. Meant for training; evaluate
        perplexity with ``full_loss``.
        """
        flat_hidden, flat_targets = self._flatten(hidden, targets)
        loss = sampled_softmax_loss(
            flat_hidden,
            flat_targets,
            self.weight,
            self.bias,
            num_samples,
            self.sampler,
            remove_accidental_hits=remove_accidental_hits,
            generator=generator,
            reduction=reduction,
            unique=unique,
        )
        return loss.view(targets.shape) if reduction == "none" else loss
