"""Sentence log-probabilities from the biLM and its released softmax (``elmo score``), and the log-softmax pieces
the fill-mask pipeline shares.

For a sentence ``w_1 .. w_n`` the biLM reads ``<S> w_1 .. w_n </S>`` (positions 0 .. n+1). With ``h_f(t)``,
``h_b(t)`` the forward and backward halves of the top LSTM layer at position t, one softmax ``(W, b)`` for both::

    forward_logprob  = sum_{t=0..n}   log softmax(W h_f(t) + b)[token t+1]     (w_1 .. w_n and </S>)
    backward_logprob = sum_{t=1..n+1} log softmax(W h_b(t) + b)[token t-1]     (w_n .. w_1 and <S>)
    perplexity       = exp(-(forward_logprob + backward_logprob) / (2 (n + 1)))

Words outside the vocabulary count as ``<UNK>`` (the targets only: the biLM still reads their characters).
The log-sum-exp over the V words runs over blocks of rows of ``W`` (``vocab_chunk_size``), so memory stays
O(N x block) for N positions, never (N, V). ``softmax_dtype="bfloat16"`` does the products of the log-sum-exp in
bfloat16 (a bfloat16 copy of ``W``, float32 sums); the target logits stay float32.

Shapes: B sentences, W words, T = W + 2 positions, C characters per word, P = projection_dim, V words.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import torch

from .modeling_elmo import ElmoLstmState
from .softmax_elmo import IGNORE_INDEX

# Logit elements per block of the log-sum-exp (N positions x rows of W): 16M floats = 64 MiB in float32.
DEFAULT_BLOCK_ELEMENTS = 1 << 24
SOFTMAX_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def top_layer_with_boundaries(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, lstm_state: ElmoLstmState | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top LSTM layer at every position of ``<S> w_1 .. w_n </S>``, which ``ElmoModel.forward`` drops.

    Args:
        model: an ``ElmoModel`` (``ElmoForPreTraining.elmo``).
        input_ids: ``(B, W, C)`` character ids; attention_mask ``(B, W)`` (default: the non-empty words).
        lstm_state: carried between calls (stateful scoring): row b starts from its row b and is updated.

    Returns:
        ``top (B, W + 2, 2P)`` (``[h_f; h_b]``, zero past position n + 1) and ``lengths (B,)`` = n + 2.
    """
    mask = model.word_mask(input_ids, attention_mask).bool()
    ids, lengths = model.add_boundaries(input_ids, mask)
    present = torch.arange(ids.shape[1], device=ids.device) < lengths.unsqueeze(1)
    tokens = ids.new_zeros((*present.shape, model.config.projection_dim), dtype=model.dtype)
    tokens[present] = model.embed_words(ids[present])
    rows = torch.arange(ids.shape[0], device=ids.device)
    layers, final = model.bilm(tokens, lengths, lstm_state.select(rows) if lstm_state is not None else None)
    if lstm_state is not None:
        lstm_state.update(rows, final)
    return layers[-1], lengths


def log_sum_exp_logits(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    compute_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """``logsumexp(hidden @ weight.T + bias, dim=-1)`` ``(N,)`` float32, over blocks of rows of ``weight``.

    Args:
        hidden: ``(N, P)``; weight ``(V, P)``; bias ``(V,)``.
        block_elements: at most this many logits at a time (N x rows of a block).
        compute_weight: ``weight`` in the products' dtype (e.g. a cached bfloat16 copy); default ``weight``.
    """
    w = weight if compute_weight is None else compute_weight
    h = hidden.to(w.dtype)
    rows = max(1, block_elements // max(1, h.shape[0]))
    total = torch.full((h.shape[0],), -math.inf, device=h.device)
    for start in range(0, w.shape[0], rows):
        block_w, block_b = w[start : start + rows], bias[start : start + rows]
        if w.dtype == bias.dtype:  # one fused product and bias
            logits = torch.addmm(block_b, h, block_w.T)  # (N, rows)
        else:  # reduced precision: the bias is added in float32
            logits = (h @ block_w.T).float() + block_b.float()
        # torch.logsumexp is one fused pass (max, exp, sum); blocks combine exactly with logaddexp
        total = torch.logaddexp(total, torch.logsumexp(logits.float(), dim=1))
    return total


def target_log_probs(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    compute_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """``log softmax(hidden @ weight.T + bias)[targets]`` ``(N,)`` float32, without an ``(N, V)`` tensor."""
    target_logits = (hidden.float() * weight[targets].float()).sum(-1) + bias[targets].float()
    return target_logits - log_sum_exp_logits(hidden, weight, bias, block_elements, compute_weight)


def full_log_probs(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``log softmax(hidden @ weight.T + bias)`` ``(N, V)`` float32 (for a few positions: the fill-mask)."""
    return torch.log_softmax(hidden.float() @ weight.float().T + bias.float(), dim=-1)


def sentence_targets(vocab_ids: torch.Tensor, lengths: torch.Tensor, bos_id: int, eos_id: int) -> torch.Tensor:
    """``(B, W)`` word ids (``-100`` padding) -> ``(B, W + 2)`` ids of ``<S> w_1 .. w_n </S>`` (``-100`` after)."""
    batch, words = vocab_ids.shape
    full = vocab_ids.new_full((batch, words + 2), IGNORE_INDEX)
    full[:, 0] = bos_id
    full[:, 1 : words + 1] = vocab_ids
    positions = torch.arange(words + 2, device=vocab_ids.device)
    full = full.masked_fill(positions >= lengths.unsqueeze(1) - 1, IGNORE_INDEX)
    full[torch.arange(batch, device=full.device), lengths - 1] = eos_id
    return full


def folder_has_softmax(folder) -> bool:
    """Whether a local model folder's safetensors files hold ``softmax.weight`` (a converted or trained LM head);
    ``ElmoForPreTraining.from_pretrained`` would otherwise start a random softmax. Reads file headers only."""
    import os

    from safetensors import safe_open

    folder = os.fspath(folder)
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), framework="pt") as handle:
                if "softmax.weight" in handle.keys():
                    return True
    return False


def load_language_model(name_or_path, device=None):
    """``(ElmoForPreTraining, ElmoTokenizer)`` of a folder with a softmax, in eval mode; ``ValueError`` if the folder
    has none (a plain ELMo folder, or the demo model, which ships without its softmax)."""
    import os

    from .modeling_elmo_pretraining import ElmoForPreTraining
    from .tokenization_elmo import ElmoTokenizer

    path = os.fspath(name_or_path)
    if os.path.isdir(path) and not folder_has_softmax(path):
        raise ValueError(
            f"{path} holds no language-model softmax (softmax.weight): convert the released model with "
            "--softmax_weight_file and --vocab_file, or use `elmo download original-lm`"
        )
    model = ElmoForPreTraining.from_pretrained(path).eval()
    if device is not None:
        model = model.to(device)
    return model, ElmoTokenizer.from_pretrained(path)


def check_sentences(sentences) -> None:
    """``TypeError`` for one sentence given where a collection of sentences is expected: a bare ``str`` (or
    ``bytes``) is iterable, and would be scored character by character, each character as a sentence."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(
            f"sentences must be a list (or other iterable) of sentences, got a single {type(sentences).__name__}: "
            f"wrap one sentence in a list, e.g. score_sentences(model, [{sentences[:40]!r}])"
        )


class ElmoSentenceScorer:
    """Scores sentences with an ``ElmoForPreTraining`` that holds a real softmax (see the module docstring).

    Args:
        model: an ``ElmoForPreTraining`` (e.g. converted with ``--softmax_weight_file``); put in eval mode.
        tokenizer: its ``ElmoTokenizer`` (the vocabulary of the softmax).
        stateful: carry the LSTM states from one batch to the next, row by row, as AllenNLP's biLM and the
            published LM evaluations did; default stateless (a sentence's score depends on it alone).
        softmax_dtype: ``"float32"`` (default) or ``"bfloat16"``/``"float16"``: the products of the log-sum-exp
            in that dtype (a copy of ``W`` in it is kept).
        block_elements: logits per block of the log-sum-exp.
    """

    def __init__(
        self,
        model,
        tokenizer,
        stateful: bool = False,
        softmax_dtype: str = "float32",
        block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    ):
        if softmax_dtype not in SOFTMAX_DTYPES:
            raise ValueError(f"softmax_dtype must be one of {', '.join(SOFTMAX_DTYPES)}, got {softmax_dtype!r}")
        vocab_size = getattr(model.config, "lm_vocab_size", 0)
        if not hasattr(model, "softmax") or not vocab_size:
            raise ValueError("scoring needs an ElmoForPreTraining with its softmax (see --softmax_weight_file)")
        words = len(tokenizer.get_vocab()) - 1  # <pad> excluded
        if words != vocab_size:
            raise ValueError(f"the tokenizer has {words} words, the model's softmax {vocab_size}: not a pair")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.stateful = stateful
        self.lstm_state = ElmoLstmState() if stateful else None
        self.block_elements = block_elements
        self.softmax_dtype = softmax_dtype
        weight = model.softmax.weight
        dtype = SOFTMAX_DTYPES[softmax_dtype]
        self._compute_weight = None if dtype == weight.dtype else weight.detach().to(dtype)

    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful mode)."""
        if self.lstm_state is not None:
            self.lstm_state.reset()

    @torch.no_grad()
    def score_batch(self, sentences: Sequence, tokenized: bool = False) -> list[dict]:
        """One result per sentence (see [`score`]); ``sentences`` are strings, or lists of words if ``tokenized``."""
        check_sentences(sentences)
        model, tokenizer = self.model, self.tokenizer
        sentences = [s.split() if isinstance(s, str) else list(s) for s in sentences] if tokenized else list(sentences)
        device = model.softmax.weight.device
        batch = tokenizer(
            list(sentences),
            is_split_into_words=tokenized,
            padding=True,
            return_tensors="pt",
            return_vocab_ids=True,
        )
        input_ids = batch["input_ids"].to(device)
        mask = batch["attention_mask"].to(device)
        top, lengths = top_layer_with_boundaries(model.elmo, input_ids, mask, self.lstm_state)
        cfg = model.config
        targets = sentence_targets(batch["vocab_ids"].to(device), lengths, cfg.lm_bos_vocab_id, cfg.lm_eos_vocab_id)
        forward, backward = top.to(model.softmax.weight.dtype).chunk(2, dim=-1)
        positions = torch.arange(targets.shape[1], device=device)
        # forward at t predicts token t + 1 (t = 0 .. n); backward at t predicts token t - 1 (t = 1 .. n + 1).
        f_rows, f_pos = (positions[None, :] < (lengths - 1)[:, None]).nonzero(as_tuple=True)
        b_rows, b_pos = ((positions[None, :] >= 1) & (positions[None, :] < lengths[:, None])).nonzero(as_tuple=True)
        hidden = torch.cat([forward[f_rows, f_pos], backward[b_rows, b_pos]])
        wanted = torch.cat([targets[f_rows, f_pos + 1], targets[b_rows, b_pos - 1]])
        weight, bias = model.softmax.weight, model.softmax.bias
        log_probs = target_log_probs(hidden, wanted, weight, bias, self.block_elements, self._compute_weight)
        split = f_rows.numel()
        batch_size = len(sentences)
        forward_sum = torch.zeros(batch_size, dtype=torch.float64, device=device)
        backward_sum = torch.zeros(batch_size, dtype=torch.float64, device=device)
        forward_sum.index_add_(0, f_rows, log_probs[:split].double())
        backward_sum.index_add_(0, b_rows, log_probs[split:].double())
        results = []
        for row in range(batch_size):
            n = int(lengths[row]) - 2
            f, b = float(forward_sum[row]), float(backward_sum[row])
            tokens = list(sentences[row]) if tokenized else tokenizer.tokenize(sentences[row])
            results.append(
                {
                    "tokens": tokens,
                    "forward_logprob": f,
                    "backward_logprob": b,
                    "perplexity": math.exp(-(f + b) / (2 * (n + 1))),
                }
            )
        return results

    def score(
        self,
        sentences: Iterable,
        tokenized: bool = False,
        batch_size: int = 32,
        progress: bool = False,
        total: int | None = None,
    ) -> Iterator[dict]:
        """Score ``sentences`` in order, ``batch_size`` at a time; yields per sentence a dict with ``tokens`` (the
        words scored), ``forward_logprob``, ``backward_logprob`` (natural logs) and ``perplexity``. A bare string
        is refused (``TypeError``) when this is called, not when the first result is asked for."""
        check_sentences(sentences)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        return self._score(sentences, tokenized, batch_size, progress, total)

    def _score(self, sentences: Iterable, tokenized: bool, batch_size: int, progress: bool, total: int | None):
        from tqdm.auto import tqdm

        if total is None and hasattr(sentences, "__len__"):
            total = len(sentences)
        with tqdm(total=total, unit="sentence", desc="Scoring", disable=not progress) as bar:
            pending: list = []
            for sentence in sentences:
                pending.append(sentence)
                if len(pending) == batch_size:
                    yield from self.score_batch(pending, tokenized)
                    bar.update(len(pending))
                    pending = []
            if pending:
                yield from self.score_batch(pending, tokenized)
                bar.update(len(pending))


def score_sentences(
    model,
    sentences: Iterable,
    tokenizer=None,
    tokenized: bool = False,
    batch_size: int = 32,
    stateful: bool = False,
    softmax_dtype: str = "float32",
    progress: bool = False,
) -> list[dict]:
    """Score sentences with the biLM's softmax: a list of dicts (``tokens``, ``forward_logprob``,
    ``backward_logprob``, ``perplexity``), one per sentence, in order.

    ``model`` is an ``ElmoForPreTraining`` with its softmax, or the folder (or Hub id) of one; ``tokenizer`` its
    ``ElmoTokenizer`` (default: loaded from the folder). See [`ElmoSentenceScorer`] for the rest. One sentence
    alone is a ``TypeError``: give ``[sentence]``.
    """
    check_sentences(sentences)  # before a model folder loads
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        model, loaded_tokenizer = load_language_model(model)
        tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
    if tokenizer is None:
        raise ValueError("give the model's tokenizer (or a folder to load both from)")
    scorer = ElmoSentenceScorer(model, tokenizer, stateful=stateful, softmax_dtype=softmax_dtype)
    return list(scorer.score(sentences, tokenized=tokenized, batch_size=batch_size, progress=progress))


__all__ = [
    "ElmoSentenceScorer",
    "check_sentences",
    "folder_has_softmax",
    "full_log_probs",
    "load_language_model",
    "log_sum_exp_logits",
    "score_sentences",
    "sentence_targets",
    "target_log_probs",
    "top_layer_with_boundaries",
]
