"""``pipeline("elmo-question-answering", model=FOLDER)``: extractive answers, as character spans of the context.

transformers 5 removed its ``"question-answering"`` task (``pipeline("question-answering")`` raises "The task
question-answering has been removed from transformers" before any registry is read), so the task gets a name of the
package's own, registered with ``PIPELINE_REGISTRY.register_pipeline``. Its calls, options and answers are those of
the removed pipeline, which run_qa.py's post-processing shares:

    qa = pipeline("elmo-question-answering", model=folder)
    qa(question="Who?", context="John Smith went home .")  # {"score", "start", "end", "answer"}
    qa({"question": ..., "context": ...}, top_k=3)           # a list of the 3 best, best first
    qa(question=[q1, q2], context=c)                         # one answer per question (or per context)
    qa(question=..., context=..., batch_size=8)              # 8 windows per forward pass

A context longer than ``max_seq_len`` words (default 384) is read in windows (``tokenizer(question, context,
truncation="only_second", max_length=max_seq_len, stride=doc_stride, return_overflowing_tokens=True)``, default
stride ``min(max_seq_len // 2, 128)``); each window is one item of transformers' ``ChunkPipeline``, so the model
reads ``batch_size`` windows at a time (1 by default), whatever the context's length. A question longer than
``max_question_len`` words (default 64) keeps its first ``max_question_len`` words; where the question leaves fewer
than ``doc_stride + 1`` words of the window to the context, the stride is lowered to fit, as the removed pipeline did.
Each span is scored ``p_start(i) * p_end(j)`` (softmax over the window's context words, ``i <= j < i +
max_answer_len``, default 15), from a ``(context words, max_answer_len)`` score array per window, and the best
spans of all windows are ranked together. ``start`` and ``end`` index characters of ``context``:
``context[start:end] == answer``.

Of the removed pipeline's options, ``align_to_words`` changes nothing (ELMo's tokens are whole words, so every
answer is aligned to words) and ``handle_impossible_answer=True`` is refused: the head scores the context's words
only and has no no-answer position (BERT's ``[CLS]``) to score "no answer" with. Any other option is refused by name.
"""

from __future__ import annotations

import difflib
import numbers

import numpy as np
import torch
from transformers.pipelines.base import ChunkPipeline

QA_TASK = "elmo-question-answering"
OPTIONS = (
    "top_k",
    "max_answer_len",
    "max_seq_len",
    "doc_stride",
    "max_question_len",
    "handle_impossible_answer",
    "align_to_words",
)
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _count(name: str, value, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``, or a ValueError naming the option."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, got {value!r}")
    return int(value)


class ElmoQuestionAnsweringPipeline(ChunkPipeline):
    """Extractive question answering with an [`ElmoForQuestionAnswering`] (see the module docstring)."""

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(
        self,
        top_k=None,
        max_answer_len=None,
        max_seq_len=None,
        doc_stride=None,
        max_question_len=None,
        handle_impossible_answer=None,
        align_to_words=None,
        **unknown,
    ):
        if unknown:
            names = []
            for name in sorted(unknown):
                close = difflib.get_close_matches(name, OPTIONS, n=1)
                names.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise TypeError(
                f"{QA_TASK} does not take {', '.join(names)}; its options are {', '.join(OPTIONS)} "
                "(and the pipelines' batch_size, num_workers)"
            )
        if handle_impossible_answer:
            raise ValueError(
                "handle_impossible_answer=True needs a no-answer position (BERT's [CLS]) to score, and "
                "ElmoForQuestionAnswering scores the context's words only: every answer is a span of the context"
            )
        if align_to_words is not None and not isinstance(align_to_words, bool):
            raise ValueError(f"align_to_words must be True or False, got {align_to_words!r}")
        preprocess, postprocess = {}, {}
        if max_seq_len is not None:
            preprocess["max_seq_len"] = _count("max_seq_len", max_seq_len, 2)
        if doc_stride is not None:
            preprocess["doc_stride"] = _count("doc_stride", doc_stride, 0)
        if max_question_len is not None:
            preprocess["max_question_len"] = _count("max_question_len", max_question_len, 1)
        if top_k is not None:
            postprocess["top_k"] = _count("top_k", top_k, 1)
        if max_answer_len is not None:
            postprocess["max_answer_len"] = _count("max_answer_len", max_answer_len, 1)
        return preprocess, {}, postprocess

    def __call__(self, *args, **kwargs):
        """``qa(question=..., context=...)`` (each a string or a list), ``qa({"question": ..., "context": ...})`` or
        a list of such dicts; options as keywords (see the module docstring)."""
        if "question" in kwargs or "context" in kwargs:
            if args:
                raise ValueError("give the inputs either as question=/context= or as a dict, not both")
            if "question" not in kwargs or "context" not in kwargs:
                raise ValueError(f"{QA_TASK} needs both question= and context=")
            return super().__call__(_pairs(kwargs.pop("question"), kwargs.pop("context")), **kwargs)
        return super().__call__(*args, **kwargs)

    def preprocess(self, inputs, max_seq_len: int | None = None, doc_stride: int | None = None, max_question_len=64):
        """One window of ``inputs`` (a dict with ``question`` and ``context``) per item: its model inputs ``(1, W,
        ...)``, the words' character offsets, which text each word is from (``sequence_ids``), and ``is_last``."""
        if not isinstance(inputs, dict) or not {"question", "context"} <= set(inputs):
            raise ValueError(
                f'{QA_TASK} takes question="..." and context="...", or {{"question": ..., "context": ...}}'
            )
        question, context = inputs["question"], inputs["context"]
        if not isinstance(question, str) or not question.strip() or not isinstance(context, str) or not context.strip():
            raise ValueError("the question and the context must be non-empty strings")
        if max_seq_len is None:
            max_seq_len = max(2, min(384, self.tokenizer.model_max_length))
        if doc_stride is None:
            doc_stride = min(max_seq_len // 2, 128)
        if doc_stride >= max_seq_len:
            raise ValueError(f"doc_stride ({doc_stride}) must be smaller than max_seq_len ({max_seq_len})")
        words = self.tokenizer(question, return_offsets_mapping=True)["offset_mapping"]
        if len(words) > max_question_len:  # the removed pipeline truncated long questions too
            question = question[: words[max_question_len - 1][1]]
        room = max_seq_len - min(len(words), max_question_len)  # the context's words per window
        if room < 1:
            raise ValueError(
                f"max_seq_len={max_seq_len} leaves no word of a window to the context after the question's "
                f"{min(len(words), max_question_len)} words: raise max_seq_len or lower max_question_len"
            )
        encoded = self.tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=max_seq_len,
            stride=min(doc_stride, room - 1),  # the tokenizer needs a window to move on by a word at least
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        count, names = len(encoded["input_ids"]), {*self.tokenizer.model_input_names, *MODEL_INPUTS}
        for window in range(count):
            yield {
                **{name: torch.tensor([encoded[name][window]]) for name in names if name in encoded},
                "offsets": encoded["offset_mapping"][window],
                "sequence_ids": encoded.sequence_ids(window),
                "context": context,
                "is_last": window == count - 1,
            }

    def _forward(self, inputs):
        names = {*self.tokenizer.model_input_names, *MODEL_INPUTS}  # vocab_ids too, for a word-input biLM
        out = self.model(**{name: inputs[name] for name in names if name in inputs})
        return {  # start first: the pipeline reads the batch's size from the first value
            "start": out.start_logits.float(),  # (B, W)
            "end": out.end_logits.float(),
            **{k: inputs[k] for k in ("offsets", "sequence_ids", "context", "is_last")},
        }

    def postprocess(self, outputs, top_k: int = 1, max_answer_len: int = 15):
        """The ``top_k`` best spans of all the windows of one (question, context) (``outputs``: one dict per
        window), best first; one dict for ``top_k=1``."""
        context, candidates = outputs[0]["context"], []
        for window in outputs:
            sequence_ids = window["sequence_ids"]
            in_context = np.array([s == 1 for s in sequence_ids])
            if not in_context.any():
                continue
            logits = [window[k][0, : len(sequence_ids)].numpy().astype(np.float64) for k in ("start", "end")]
            p_start, p_end = (_softmax(x, in_context) for x in logits)
            for i, j, score in _best_spans(p_start, p_end, max_answer_len, top_k):
                start, end = window["offsets"][i][0], window["offsets"][j][1]
                candidates.append({"score": score, "start": int(start), "end": int(end), "answer": context[start:end]})
        seen, best = set(), []  # the same span from overlapping windows counts once, with its best score
        for answer in sorted(candidates, key=lambda answer: -answer["score"]):
            if (answer["start"], answer["end"]) not in seen:
                seen.add((answer["start"], answer["end"]))
                best.append(answer)
        return best[0] if top_k == 1 and best else best[:top_k]


def _pairs(question, context) -> dict | list[dict]:
    """``question=``/``context=`` as the pipeline's inputs: one dict, or one per question (or per context)."""
    if isinstance(question, str) and isinstance(context, str):
        return {"question": question, "context": context}
    if isinstance(question, str):
        question = [question] * len(context) if isinstance(context, (list, tuple)) else question
    if isinstance(context, str):
        context = [context] * len(question) if isinstance(question, (list, tuple)) else context
    if not isinstance(question, (list, tuple)) or not isinstance(context, (list, tuple)):
        raise ValueError("question= and context= take strings or lists of strings")
    if len(question) != len(context):
        raise ValueError(
            f"question= has {len(question)} entries and context= has {len(context)}: give one context per question, "
            "or one context (or one question) for all"
        )
    return [{"question": q, "context": c} for q, c in zip(question, context, strict=True)]


def _softmax(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Softmax of ``logits`` ``(W,)`` over the positions where ``keep`` ``(W,)`` is True; 0 elsewhere."""
    shifted = np.where(keep, logits - logits[keep].max(), -np.inf)
    weights = np.exp(shifted)
    return weights / weights.sum()


def _best_spans(p_start: np.ndarray, p_end: np.ndarray, max_answer_len: int, top_k: int) -> list:
    """The ``top_k`` best ``(i, j, p_start[i] * p_end[j])`` with ``i <= j < i + max_answer_len`` and a score above
    0, best first, from a ``(n, L)`` array (``n`` positions with ``p_start > 0``, ``L = min(max_answer_len, W)``):
    O(W * max_answer_len), not O(W^2)."""
    starts = np.flatnonzero(p_start > 0)  # (n,)
    length = min(max_answer_len, len(p_end))
    ends = starts[:, None] + np.arange(length)[None, :]  # (n, L)
    inside = ends < len(p_end)
    scores = np.where(inside, p_start[starts, None] * p_end[np.where(inside, ends, 0)], 0.0)  # (n, L)
    flat = scores.ravel()
    count = min(top_k, flat.size)
    best = np.argpartition(-flat, count - 1)[:count]
    best = best[np.argsort(-flat[best], kind="stable")]
    return [(int(starts[f // length]), int(ends.flat[f]), float(flat[f])) for f in best if flat[f] > 0]


__all__ = ["QA_TASK", "ElmoQuestionAnsweringPipeline"]
