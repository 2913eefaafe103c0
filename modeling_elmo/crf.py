"""A linear-chain conditional random field (CRF) for sequence tagging heads.

The CRF scores a tag sequence ``y_1..y_n`` for emissions ``e`` (one score per position and tag,
usually the output of a linear layer over ELMo vectors) as::

    score(y) = start[y_1] + sum_t e[t, y_t] + sum_{t>1} transitions[y_{t-1}, y_t] + end[y_n]

and defines ``log p(y | e) = score(y) - logsumexp_{y'} score(y')``. The normaliser is computed
with the forward algorithm, the best path with Viterbi and the per-position tag marginals with
forward-backward, all vectorised over the batch and the tags, with a Python loop over time only.

Constraints (for example the BIO rule "``I-X`` only after ``B-X`` or ``I-X``") are given as a
list of allowed ``(from, to)`` pairs over ``num_tags + 2`` indices, where index ``num_tags``
stands for START and ``num_tags + 1`` for END (see [`bio_allowed_transitions`]). A forbidden
transition gets the finite score [`FORBIDDEN_SCORE`] (-1e4) instead of its learned value, in the
likelihood and in Viterbi alike: a finite value keeps every logsumexp and every gradient finite,
even for an input where all paths are forbidden, while making a forbidden path ``exp(-1e4)``
(zero in float32 and float64) times less likely than an allowed one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from .compiled_ops_elmo import call, crf_alphas
from .graph_path_elmo import compiling, crf_log_partition, crf_through_each_tag, in_graph

__all__ = ["FORBIDDEN_SCORE", "ConditionalRandomField", "bio_allowed_transitions"]

FORBIDDEN_SCORE = -1e4
"""The score a forbidden transition gets (finite, so gradients stay finite; fits in float16)."""


def bio_allowed_transitions(labels: Mapping[int, str] | Sequence[str], scheme: str = "BIO") -> list[tuple[int, int]]:
    """The transitions a BIO (IOB2) tagging allows, as ``(from, to)`` pairs for [`ConditionalRandomField`].

    Args:
        labels: the tag names, as a list (index = tag id) or as an ``id2label`` mapping whose keys
            are exactly ``0..K-1`` (integer-like strings, as in a JSON config, are accepted). Names
            are ``"O"``, ``"B-TYPE"`` or ``"I-TYPE"``.
        scheme: ``"BIO"`` or its other name ``"IOB2"``.

    Returns:
        A sorted list of allowed pairs ``(i, j)``; with ``K = len(labels)``, ``i`` is a tag id or
        ``K`` (START) and ``j`` is a tag id or ``K + 1`` (END). Every pair not in the list is
        forbidden. For BIO:

        * START -> ``O`` and START -> ``B-X``; START -> ``I-X`` is forbidden;
        * any tag -> ``O``, any tag -> ``B-X``, and ``B-X``/``I-X`` -> ``I-X`` (same ``X`` only);
        * any tag -> END (an entity may end the sentence).

    Raises:
        ValueError: for an unknown scheme, a label that is not ``O``/``B-X``/``I-X``, or a mapping
            whose keys are not ``0..K-1``.
    """
    if scheme.upper() not in ("BIO", "IOB2"):
        raise ValueError(f"unsupported tagging scheme {scheme!r}; supported: 'BIO' (also called 'IOB2')")
    names = _label_list(labels)
    num_tags = len(names)
    start, end = num_tags, num_tags + 1

    # (prefix, entity type) per tag: ("O", None), ("B", "PER"), ("I", "PER").
    parsed: list[tuple[str, str | None]] = []
    for name in names:
        if name == "O":
            parsed.append(("O", None))
        elif len(name) > 2 and name[0] in "BI" and name[1] == "-":
            parsed.append((name[0], name[2:]))
        else:
            raise ValueError(f"label {name!r} is not a {scheme} label: expected 'O', 'B-<type>' or 'I-<type>'")

    allowed: list[tuple[int, int]] = []
    for j, (prefix_j, type_j) in enumerate(parsed):
        # START may be followed by O or B-X; an I-X needs an opening B-X (or I-X) before it.
        if prefix_j != "I":
            allowed.append((start, j))
        for i, (prefix_i, type_i) in enumerate(parsed):
            if prefix_j != "I" or (prefix_i in ("B", "I") and type_i == type_j):
                allowed.append((i, j))
    # Every tag may close the sentence.
    allowed.extend((i, end) for i in range(num_tags))
    return sorted(allowed)


def _label_list(labels: Mapping[int, str] | Sequence[str]) -> list[str]:
    if isinstance(labels, Mapping):
        by_id = {int(key): value for key, value in labels.items()}
        if sorted(by_id) != list(range(len(by_id))):
            raise ValueError(f"label ids must be exactly 0..{len(by_id) - 1}, got {sorted(by_id)}")
        return [by_id[i] for i in range(len(by_id))]
    if isinstance(labels, str):
        raise ValueError("labels must be a list of tag names or an id2label mapping, not a single string")
    return list(labels)


class ConditionalRandomField(nn.Module):
    """A linear-chain CRF over ``num_tags`` tags, with optional hard transition constraints.

    Args:
        num_tags: the number of tags ``K``.
        allowed_transitions: allowed ``(from, to)`` pairs over ``K + 2`` indices, where ``K`` is
            START and ``K + 1`` is END (as returned by [`bio_allowed_transitions`]); every pair not
            listed is forbidden, START and END ones included. ``None`` (default) allows everything.
        include_start_end: learn ``start_transitions``/``end_transitions`` scores. When ``False``
            those parameters are ``None`` and score 0, but START/END *constraints* still apply.

    Parameters and buffers (all in the state dict):
        transitions: ``(K, K)``, ``transitions[i, j]`` = score of tag ``i`` followed by tag ``j``.
        start_transitions: ``(K,)``, score of a sequence starting with each tag (or ``None``).
        end_transitions: ``(K,)``, score of a sequence ending with each tag (or ``None``).
        constraint_mask: bool ``(K + 2, K + 2)``, ``True`` where ``(from, to)`` is allowed. It is a
            persistent buffer so that a model built on the meta device (``from_pretrained``) gets it
            from the checkpoint; [`build_constraint_mask`] recomputes it for an ``_init_weights``.

    Shapes used by the methods: ``B`` batch, ``T`` time, ``K`` tags. Masks are ``(B, T)`` bool
    (0/1 integer masks such as an ``attention_mask`` are accepted) and must be right-padded: each
    row is ``True`` on a prefix and ``False`` after it. A row with no ``True`` is an empty sequence.
    Emissions and tags at masked positions are ignored entirely (they may hold any value, NaN and
    ``-100`` included).
    """

    PAD_TAG = -100
    """The value [`viterbi_tags`] puts at masked positions (the usual ignore index of HF labels)."""

    def __init__(
        self,
        num_tags: int,
        allowed_transitions: Sequence[tuple[int, int]] | None = None,
        include_start_end: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(num_tags, int) or num_tags < 1:
            raise ValueError(f"num_tags must be a positive int, got {num_tags!r}")
        self.num_tags = num_tags
        self.include_start_end = include_start_end
        self._allowed_transitions = None if allowed_transitions is None else [tuple(p) for p in allowed_transitions]

        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        if include_start_end:
            self.start_transitions = nn.Parameter(torch.empty(num_tags))
            self.end_transitions = nn.Parameter(torch.empty(num_tags))
        else:
            self.register_parameter("start_transitions", None)
            self.register_parameter("end_transitions", None)
        self.register_buffer("constraint_mask", self.build_constraint_mask(), persistent=True)
        self.reset_parameters()

    @property
    def start_index(self) -> int:
        """The index that stands for START in ``allowed_transitions`` and ``constraint_mask``."""
        return self.num_tags

    @property
    def end_index(self) -> int:
        """The index that stands for END in ``allowed_transitions`` and ``constraint_mask``."""
        return self.num_tags + 1

    def build_constraint_mask(self, device: torch.device | str | None = None) -> torch.Tensor:
        """The bool ``(K + 2, K + 2)`` mask of allowed transitions, from the constructor's pairs.

        Raises:
            ValueError: for a pair out of range, or constraints under which no sequence is allowed
                (no tag may follow START, or none may precede END).
        """
        size = self.num_tags + 2
        if self._allowed_transitions is None:
            return torch.ones(size, size, dtype=torch.bool, device=device)
        mask = torch.zeros(size, size, dtype=torch.bool, device=device)
        for pair in self._allowed_transitions:
            if len(pair) != 2:
                raise ValueError(f"allowed transitions must be (from, to) pairs, got {pair!r}")
            i, j = (int(x) for x in pair)
            # A transition leaves a tag or START, and enters a tag or END.
            if not (0 <= i <= self.start_index) or not (0 <= j < self.num_tags or j == self.end_index):
                raise ValueError(
                    f"allowed transition {pair!r} out of range: 'from' must be a tag id or {self.start_index} (START), "
                    f"'to' a tag id or {self.end_index} (END), with num_tags={self.num_tags}"
                )
            mask[i, j] = True
        if not mask[self.start_index, : self.num_tags].any():
            raise ValueError(f"allowed_transitions allow no tag after START (index {self.start_index})")
        if not mask[: self.num_tags, self.end_index].any():
            raise ValueError(f"allowed_transitions allow no tag before END (index {self.end_index})")
        return mask

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Zero all scores, so an untrained CRF adds nothing to the emissions but its constraints.

        Zero is a neutral start (the log-likelihood is concave in these scores) and needs no random
        state. A Hugging Face head's ``_init_weights`` can call this (``torch.nn.init`` is guarded
        there) and ``init.copy_(crf.constraint_mask, crf.build_constraint_mask())``.
        """
        nn.init.zeros_(self.transitions)
        if self.include_start_end:
            nn.init.zeros_(self.start_transitions)
            nn.init.zeros_(self.end_transitions)

    def extra_repr(self) -> str:
        # Read the buffer (it may come from a checkpoint), unless it has no data yet (meta device).
        mask = self.constraint_mask
        constrained = self._allowed_transitions is not None if mask.is_meta else not bool(mask.all())
        return f"num_tags={self.num_tags}, include_start_end={self.include_start_end}, constrained={constrained}"

    # ------------------------------------------------------------------ public API

    def forward(
        self,
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """The negative log-likelihood of ``tags``: a loss to minimise.

        Args:
            emissions: float ``(B, T, K)``.
            tags: integer ``(B, T)``; values at masked positions are ignored (``-100`` is fine).
            mask: ``(B, T)`` right-padded; ``None`` means every position is real.
            reduction: ``"none"`` gives ``(B,)``; ``"sum"`` the sum over the batch; ``"mean"`` the
                sum divided by the number of non-empty sequences (empty ones contribute 0 and are
                not counted; a batch of only empty sequences gives 0).

        Returns:
            ``(B,)`` for ``"none"``, else a scalar.
        """
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        tags = self._check_tags(tags, emissions, mask)
        nll = self._log_partition(emissions, mask) - self._path_score(emissions, tags, mask)
        if reduction == "none":
            return nll
        if reduction == "sum":
            return nll.sum()
        nonempty = mask.any(dim=1).sum().clamp(min=1)
        return nll.sum() / nonempty

    def log_likelihood(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``log p(tags | emissions)`` per sequence.

        Args:
            emissions: float ``(B, T, K)``.
            tags: integer ``(B, T)``, in ``[0, K)`` at unmasked positions.
            mask: ``(B, T)`` right-padded, or ``None`` for all positions.

        Returns:
            float ``(B,)``; 0 for an empty sequence.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        tags = self._check_tags(tags, emissions, mask)
        return self._path_score(emissions, tags, mask) - self._log_partition(emissions, mask)

    def path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The unnormalised score of ``tags`` (constraints included), per sequence.

        Args and shapes as in [`log_likelihood`]. Returns float ``(B,)``; 0 for an empty sequence.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        return self._path_score(emissions, self._check_tags(tags, emissions, mask), mask)

    def _path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        transitions, start, end = self._effective_scores(emissions.dtype)
        if emissions.shape[1] == 0:
            return self._empty_scores(emissions)
        # Masked tags may be -100 or anything: replace them by 0 before any indexing.
        safe_tags = tags.masked_fill(~mask, 0)
        emitted = emissions.gather(2, safe_tags.unsqueeze(2)).squeeze(2)  # (B, T)
        score = emitted.masked_fill(~mask, 0.0).sum(dim=1)
        if emissions.shape[1] > 1:
            # The step t-1 -> t exists iff position t is real (the mask is a prefix).
            pair_scores = transitions[safe_tags[:, :-1], safe_tags[:, 1:]]  # (B, T-1)
            score = score + pair_scores.masked_fill(~mask[:, 1:], 0.0).sum(dim=1)
        lengths = mask.sum(dim=1)
        last_tags = safe_tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # (B,)
        boundary = start[safe_tags[:, 0]] + end[last_tags]
        return score + torch.where(lengths > 0, boundary, torch.zeros_like(boundary))

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``log Z = logsumexp`` of the scores of all paths of each sequence (forward algorithm).

        Args:
            emissions: float ``(B, T, K)``.
            mask: ``(B, T)`` right-padded, or ``None``.

        Returns:
            float ``(B,)``; 0 for an empty sequence.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        return self._log_partition(emissions, mask)

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        transitions, start, end = self._effective_scores(emissions.dtype)
        if emissions.shape[1] == 0:
            return self._empty_scores(emissions)
        if compiling():  # torch.compile: the loop over all steps as one operator (no host read of the lengths)
            return call("crf_log_partition", [emissions, mask, transitions, start, end])
        if in_graph():  # torch.export: a scan over all steps
            return crf_log_partition(emissions, mask, transitions, start, end)
        # alpha[b, j] = log-sum of the scores of all prefixes ending in tag j at the current step; past a sequence's
        # end, carried unchanged so END is added to its last real step.
        alpha = crf_alphas(emissions, mask, transitions, start, torch.logsumexp, self._max_length(mask))
        log_z = torch.logsumexp(alpha + end.unsqueeze(0), dim=1)
        return torch.where(mask[:, 0], log_z, torch.zeros_like(log_z))

    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Per-position tag marginals ``p(y_t = k | emissions)`` (forward-backward, in log space).

        The probability, summed over every path (forbidden ones with their [`FORBIDDEN_SCORE`]), that position
        ``t`` has tag ``k``: what a tagger's per-word confidence means under a CRF, where a softmax over the
        emissions of one position would ignore the transitions.

        Args:
            emissions: float ``(B, T, K)``.
            mask: ``(B, T)`` right-padded, or ``None``.

        Returns:
            float ``(B, T, K)``: at each real position a distribution over the tags (sums to 1); 0 at masked ones.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        # alpha + beta at t is the log-sum of the full paths through each tag at t; normalising per position
        # divides by Z (the same for every t), and keeps each distribution summing to 1 to rounding.
        return self._through_each_tag(emissions, mask, torch.logsumexp, lambda scores: torch.softmax(scores, dim=-1))

    def max_marginals(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Per position and tag, the score of the best whole path through that tag (max-product forward-backward).

        ``max_k`` at any real position is the Viterbi path's score, reached at the Viterbi tag: the per-position
        argmax is the Viterbi path wherever the best path is unique. When several paths tie for the best score,
        each position's maximum is shared by the tags those paths take there, and an argmax picks the lowest such
        tag id, which may mix the tied paths (with float32 scores of a trained tagger this is rare).

        Args:
            emissions: float ``(B, T, K)``.
            mask: ``(B, T)`` right-padded, or ``None``.

        Returns:
            float ``(B, T, K)``: path scores at real positions (``FORBIDDEN_SCORE``-sized for tags no allowed path
            takes); 0 at masked ones.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        return self._through_each_tag(emissions, mask, torch.amax, lambda scores: scores)

    def _through_each_tag(self, emissions: torch.Tensor, mask: torch.Tensor, reduce, finish) -> torch.Tensor:
        """Forward-backward with ``reduce`` over the neighbouring tag (``logsumexp``: sums of path scores in log
        space; ``amax``: best path scores): per position and tag, ``finish(alpha + beta)`` ``(B, T, K)`` over all
        the paths through that tag, 0 at masked positions."""
        transitions, start, end = self._effective_scores(emissions.dtype)
        batch, steps, num_tags = emissions.shape
        if in_graph():
            if steps == 0:
                return emissions.new_zeros(batch, 0, num_tags)
            if compiling():  # one operator: the loops over all steps (masked steps are zeroed below)
                tensors = [emissions, mask, transitions, start, end]
                scores = finish(call("crf_through_each_tag", tensors, [reduce is torch.amax]))
            else:  # torch.export: scans
                scores = finish(crf_through_each_tag(emissions, mask, transitions, start, end, reduce))
            return scores.masked_fill(~mask.unsqueeze(2), 0.0)
        length = self._max_length(mask)
        if length == 0:
            return emissions.new_zeros(batch, steps, num_tags)
        # alpha[t][b, j]: the prefixes ending in tag j at t (emission at t included).
        alphas = [start.unsqueeze(0) + emissions[:, 0]]  # (B, K)
        for t in range(1, length):
            alphas.append(reduce(alphas[-1].unsqueeze(2) + transitions, dim=1) + emissions[:, t])
        # beta[t][b, i]: the suffixes after t given tag i at t (END included); END alone at a sequence's last
        # position (the next one is masked).
        final = end.unsqueeze(0).expand(batch, num_tags)
        betas = [final]
        for t in range(length - 2, -1, -1):
            after = (emissions[:, t + 1] + betas[-1]).unsqueeze(1)  # (B, 1, K_next)
            step = reduce(transitions.unsqueeze(0) + after, dim=2)  # (B, K)
            betas.append(torch.where(mask[:, t + 1].unsqueeze(1), step, final))
        betas.reverse()
        scores = finish(torch.stack(alphas, dim=1) + torch.stack(betas, dim=1))  # (B, length, K)
        scores = scores.masked_fill(~mask[:, :length].unsqueeze(2), 0.0)
        if length < steps:
            scores = torch.cat([scores, scores.new_zeros(batch, steps - length, num_tags)], 1)
        return scores

    def viterbi_tags(
        self, emissions: torch.Tensor, mask: torch.Tensor | None = None, return_scores: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The best tag sequence per row, as a padded tensor.

        Args:
            emissions: float ``(B, T, K)``.
            mask: ``(B, T)`` right-padded, or ``None``.
            return_scores: also return each best path's score.

        Returns:
            long ``(B, T)`` with the best tags on real positions and ``-100``
            ([`PAD_TAG`], the HF ignore index) on masked ones; with ``return_scores``, also
            float ``(B,)`` path scores (0 for an empty sequence), equal to [`path_score`] of the path.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        return self._viterbi(emissions, mask, return_scores)

    def _viterbi(
        self, emissions: torch.Tensor, mask: torch.Tensor, return_scores: bool
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        batch, steps, num_tags = emissions.shape
        transitions, start, end = self._effective_scores(emissions.dtype)
        if steps == 0:
            empty = torch.empty(batch, 0, dtype=torch.long, device=emissions.device)
            return (empty, self._empty_scores(emissions)) if return_scores else empty

        max_length = max(self._max_length(mask), 1)  # at least one step, even if every row is empty
        # Identity back-pointers for padded steps, so backtracking walks through them unchanged.
        identity = torch.arange(num_tags, device=emissions.device).expand(batch, num_tags)
        score = start.unsqueeze(0) + emissions[:, 0]  # (B, K): best prefix score ending in each tag
        backpointers: list[torch.Tensor] = []
        for t in range(1, max_length):
            candidates = score.unsqueeze(2) + transitions  # (B, K_prev, K_next)
            # argmax + gather rather than max(dim=...): the (values, indices) reduction is far slower on CPU.
            best_prev = candidates.argmax(dim=1)  # (B, K_next)
            best = candidates.gather(1, best_prev.unsqueeze(1)).squeeze(1)
            real = mask[:, t].unsqueeze(1)
            score = torch.where(real, best + emissions[:, t], score)
            backpointers.append(torch.where(real, best_prev, identity))
        final = score + end.unsqueeze(0)
        current = final.argmax(dim=1)  # (B,) best last tag
        best_score = final.gather(1, current.unsqueeze(1)).squeeze(1)

        path = [current]
        for pointers in reversed(backpointers):
            current = pointers.gather(1, current.unsqueeze(1)).squeeze(1)
            path.append(current)
        path.reverse()
        tags = torch.full((batch, steps), self.PAD_TAG, dtype=torch.long, device=emissions.device)
        tags[:, :max_length] = torch.stack(path, dim=1)
        tags = tags.masked_fill(~mask, self.PAD_TAG)
        if not return_scores:
            return tags
        return tags, torch.where(mask[:, 0], best_score, torch.zeros_like(best_score))

    def viterbi_decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
        """The best tag sequence per row, as lists of length ``mask[b].sum()``.

        Args:
            emissions: float ``(B, T, K)``.
            mask: ``(B, T)`` right-padded, or ``None``.
        """
        emissions, mask = self._check_emissions_and_mask(emissions, mask)
        tags = self._viterbi(emissions, mask, return_scores=False).tolist()
        return [row[:length] for row, length in zip(tags, mask.sum(dim=1).tolist(), strict=True)]

    # ------------------------------------------------------------------ helpers

    def _effective_scores(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(K, K)`` transitions and ``(K,)`` start/end scores with forbidden entries replaced."""
        k, allowed = self.num_tags, self.constraint_mask
        # Compute in the wider of the parameter and emission dtypes (float64 tests, bf16 emissions).
        dtype = torch.promote_types(dtype, self.transitions.dtype)
        transitions = self.transitions.to(dtype)
        if self.include_start_end:
            start, end = self.start_transitions.to(dtype), self.end_transitions.to(dtype)
        else:
            start = end = transitions.new_zeros(k)
        # masked_fill (not adding the penalty) keeps a forbidden score at exactly FORBIDDEN_SCORE,
        # whatever the learned value, so the gap to allowed paths cannot be trained away.
        transitions = transitions.masked_fill(~allowed[:k, :k], FORBIDDEN_SCORE)
        start = start.masked_fill(~allowed[self.start_index, :k], FORBIDDEN_SCORE)
        end = end.masked_fill(~allowed[:k, self.end_index], FORBIDDEN_SCORE)
        return transitions, start, end

    @staticmethod
    def _empty_scores(emissions: torch.Tensor) -> torch.Tensor:
        # (B,) zeros for inputs with no time steps, still attached to the graph so backward() works.
        return emissions.sum(dim=(1, 2))

    @staticmethod
    def _max_length(mask: torch.Tensor) -> int:
        # Steps past the longest sequence change nothing; skipping them saves time on padded batches.
        return int(mask.sum(dim=1).max()) if mask.numel() else 0

    def _check_emissions_and_mask(
        self, emissions: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate; return emissions (zero where masked) in the compute dtype and a bool mask."""
        if not isinstance(emissions, torch.Tensor) or emissions.dim() != 3:
            shape = tuple(emissions.shape) if isinstance(emissions, torch.Tensor) else type(emissions).__name__
            raise ValueError(f"emissions must be a (batch, time, num_tags) tensor, got {shape}")
        if not emissions.is_floating_point():
            raise ValueError(f"emissions must be a floating-point tensor, got dtype {emissions.dtype}")
        if emissions.shape[2] != self.num_tags:
            raise ValueError(
                f"emissions have {emissions.shape[2]} tags in their last dimension, the CRF has {self.num_tags}"
            )
        batch, steps, _ = emissions.shape
        if mask is None:
            mask = torch.ones(batch, steps, dtype=torch.bool, device=emissions.device)
        else:
            if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (batch, steps):
                shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise ValueError(f"mask must have shape (batch, time) = {(batch, steps)}, got {shape}")
            if mask.dtype != torch.bool:
                if mask.is_floating_point() or mask.is_complex():
                    raise ValueError(f"mask must be bool (or 0/1 integers), got dtype {mask.dtype}")
                binary = ((mask == 0) | (mask == 1)).all()
                if in_graph():  # no host read in a graph: checked when it runs (RuntimeError, same message)
                    torch._assert_async(binary, "an integer mask must hold only 0 and 1")
                elif not binary:
                    raise ValueError("an integer mask must hold only 0 and 1")
                mask = mask.bool()
            if in_graph():  # a prefix test, not neighbours (whose W - 1 slices torch.export cannot size)
                prefix = torch.arange(steps, device=mask.device) < mask.sum(dim=1, keepdim=True)
                torch._assert_async(mask.eq(prefix).all(), "mask must be right-padded (True on a prefix)")
            elif steps > 1 and (mask[:, 1:] & ~mask[:, :-1]).any():
                rows = torch.nonzero((mask[:, 1:] & ~mask[:, :-1]).any(dim=1)).flatten().tolist()
                raise ValueError(
                    f"mask must be right-padded (True on a prefix, then False), but rows {rows} have a True after a "
                    "False; left-padded or gapped masks are not supported"
                )
        emissions = emissions.to(torch.promote_types(emissions.dtype, self.transitions.dtype))
        # Zero the padding so that NaN/inf there cannot reach any result or gradient.
        emissions = emissions.masked_fill(~mask.unsqueeze(2), 0.0)
        return emissions, mask

    def _check_tags(self, tags: torch.Tensor, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not isinstance(tags, torch.Tensor) or tuple(tags.shape) != tuple(emissions.shape[:2]):
            shape = tuple(tags.shape) if isinstance(tags, torch.Tensor) else type(tags).__name__
            raise ValueError(f"tags must have shape (batch, time) = {tuple(emissions.shape[:2])}, got {shape}")
        if tags.is_floating_point() or tags.is_complex() or tags.dtype == torch.bool:
            raise ValueError(f"tags must be an integer tensor, got dtype {tags.dtype}")
        tags = tags.long()
        bad = mask & ((tags < 0) | (tags >= self.num_tags))
        if in_graph():
            torch._assert_async(bad.logical_not().all(), f"tags must be in [0, {self.num_tags}) at unmasked positions")
        elif bad.any():
            position = tuple(torch.nonzero(bad)[0].tolist())
            raise ValueError(
                f"tags must be in [0, {self.num_tags}) at unmasked positions; found {int(tags[position])} at "
                f"(batch, time) = {position}"
            )
        return tags
