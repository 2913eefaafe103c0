"""``pipeline("elmo-question-answering", model=FOLDER)``: extractive answers, as character spans of the context.

transformers 5 removed its ``"question-answering"`` task (``pipeline("question-answering")`` raises "The task
question-answering has been removed from transformers" before any registry is read), so the task gets a name of the
package's own, registered with ``PIPELINE_REGISTRY.register_pipeline``. Its calls and answers are those of the
removed pipeline, which run_qa.py's post-processing shares:

    qa = pipeline("elmo-question-answering", model=folder)
    qa(question="Who?", context="John Smith went home .")  # {"score", "start", "end", "answer"}
    qa({"question": ..., "context": ...}, top_k=3)           # a list of the 3 best, best first

A context longer than ``max_seq_len`` words is read in windows (``tokenizer(question, context,
truncation="only_second", max_length=max_seq_len, stride=doc_stride, return_overflowing_tokens=True)``); each span
is scored ``p_start(i) * p_end(j)`` (softmax over the window's context words, ``i <= j < i + max_answer_len``) and
the best spans of all windows are ranked together. ``start`` and ``end`` index characters of ``context``:
``context[start:end] == answer``.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import Pipeline

QA_TASK = "elmo-question-answering"


class ElmoQuestionAnsweringPipeline(Pipeline):
    """Extractive question answering with an [`ElmoForQuestionAnswering`] (see the module docstring)."""

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def _sanitize_parameters(self, top_k=None, max_answer_len=None, max_seq_len=None, doc_stride=None, **kwargs):
        preprocess, postprocess = {}, {}
        for name, value in (("max_seq_len", max_seq_len), ("doc_stride", doc_stride)):
            if value is not None:
                preprocess[name] = int(value)
        if top_k is not None:
            if int(top_k) < 1:
                raise ValueError(f"top_k must be at least 1, got {top_k}")
            postprocess["top_k"] = int(top_k)
        if max_answer_len is not None:
            if int(max_answer_len) < 1:
                raise ValueError(f"max_answer_len must be at least 1, got {max_answer_len}")
            postprocess["max_answer_len"] = int(max_answer_len)
        return preprocess, {}, postprocess

    def __call__(self, *args, **kwargs):
        """``qa(question=..., context=...)``, ``qa({"question": ..., "context": ...})`` or a list of such dicts."""
        if not args and "question" in kwargs and "context" in kwargs:
            question, context = kwargs.pop("question"), kwargs.pop("context")
            if isinstance(question, list):
                return super().__call__(
                    [{"question": q, "context": c} for q, c in zip(question, context, strict=True)], **kwargs
                )
            return super().__call__({"question": question, "context": context}, **kwargs)
        return super().__call__(*args, **kwargs)

    def preprocess(self, inputs, max_seq_len: int = 384, doc_stride: int = 128):
        if not isinstance(inputs, dict) or not {"question", "context"} <= set(inputs):
            raise ValueError(
                'elmo-question-answering takes question="..." and context="...", or {"question": ..., "context": ...}'
            )
        question, context = inputs["question"], inputs["context"]
        if not isinstance(question, str) or not question.strip() or not isinstance(context, str) or not context.strip():
            raise ValueError("the question and the context must be non-empty strings")
        encoded = self.tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=max_seq_len,
            stride=min(doc_stride, max_seq_len - 1),
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
        )
        windows = [encoded.sequence_ids(i) for i in range(len(encoded["input_ids"]))]
        tensors = {
            name: torch.tensor(encoded[name])
            for name in ("input_ids", "attention_mask", "token_type_ids")
            if name in encoded
        }
        return {
            "model_inputs": tensors,
            "offsets": encoded["offset_mapping"],
            "sequence_ids": windows,
            "context": context,
        }

    def _forward(self, inputs):
        out = self.model(**inputs["model_inputs"])
        return {
            "start": out.start_logits.float().cpu().numpy(),
            "end": out.end_logits.float().cpu().numpy(),
            **{k: inputs[k] for k in ("offsets", "sequence_ids", "context")},
        }

    def postprocess(self, outputs, top_k: int = 1, max_answer_len: int = 15):
        context, candidates = outputs["context"], []
        for window, sequence_ids in enumerate(outputs["sequence_ids"]):
            in_context = np.array(
                [s == 1 for s in sequence_ids] + [False] * (outputs["start"].shape[1] - len(sequence_ids))
            )
            if not in_context.any():
                continue
            p_start, p_end = (_softmax(outputs[k][window], in_context) for k in ("start", "end"))
            scores = np.triu(np.outer(p_start, p_end)) - np.triu(np.outer(p_start, p_end), max_answer_len)
            for flat in np.argsort(-scores, axis=None)[:top_k]:
                i, j = np.unravel_index(flat, scores.shape)
                if scores[i, j] <= 0:
                    break
                start, end = outputs["offsets"][window][i][0], outputs["offsets"][window][j][1]
                candidates.append(
                    {"score": float(scores[i, j]), "start": int(start), "end": int(end), "answer": context[start:end]}
                )
        seen, best = set(), []  # the same span from overlapping windows counts once, with its best score
        for answer in sorted(candidates, key=lambda answer: -answer["score"]):
            if (answer["start"], answer["end"]) not in seen:
                seen.add((answer["start"], answer["end"]))
                best.append(answer)
        return best[0] if top_k == 1 and best else best[:top_k]


def _softmax(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Softmax of ``logits`` ``(W,)`` over the positions where ``keep`` ``(W,)`` is True; 0 elsewhere."""
    shifted = np.where(keep, logits - logits[keep].max(), -np.inf)
    weights = np.exp(shifted)
    return weights / weights.sum()


__all__ = ["QA_TASK", "ElmoQuestionAnsweringPipeline"]
