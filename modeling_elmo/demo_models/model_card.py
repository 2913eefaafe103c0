"""The model card of the bundled demo model, built like every other card (``model_card.write_model_card``).

``scripts/train_demo_model.sh`` calls it after training; ``python -m modeling_elmo.demo_models.model_card``
rewrites the card of the bundled folder from its ``eval_results.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult

from ..configuration_elmo import ElmoConfig
from ..hub.model_card import write_model_card
from .model import DEMO_MODEL_DIR


def write_demo_card(folder: str | os.PathLike, results: dict[str, Any]) -> Path:
    """Write ``folder/README.md`` for the demo biLM, with the perplexities of ``results`` in its ``model-index``.

    Args:
        folder: the demo model's folder (``config.json`` inside).
        results: the LM command's evaluation metrics on WikiText-2's test.txt (``eval_perplexity``,
            ``eval_forward_perplexity``, ``eval_backward_perplexity``, ``eval_words``).
    """
    config = ElmoConfig.from_pretrained(folder)
    metrics = [
        ("eval_perplexity", "Perplexity (mean of both directions)"),
        ("eval_forward_perplexity", "Perplexity (forward LM)"),
        ("eval_backward_perplexity", "Perplexity (backward LM)"),
    ]
    eval_results = [
        EvalResult(
            task_type="text-generation",
            task_name="Language modeling (forward and backward)",
            dataset_type="Salesforce/wikitext",
            dataset_name="WikiText-2",
            dataset_config="wikitext-2-v1",
            dataset_split="test",
            metric_type="perplexity",
            metric_name=name,
            metric_value=round(float(results[key]), 2),
        )
        for key, name in metrics
        if key in results
    ]
    how_made = (
        f"A toy-sized ELMo biLM ({config.n_layers} layers, LSTM {config.lstm_dim}, projection "
        f"{config.projection_dim}) trained by this project's own LM command (`scripts/train_demo_model.sh`) on "
        "WikiText-2 (valid.txt: 2000 steps of 32 windows of <= 20 words, about 5 passes), perplexity "
        f"{results.get('eval_perplexity', float('nan')):.0f} on test.txt ({results.get('eval_words', '?')} words, "
        "full softmax). It is bundled so that `elmo similar` and the examples run without a download. "
        "Not the released ELMo: for real use, convert the original weights with `elmo convert`."
    )
    readme = Path(folder) / "README.md"
    readme.unlink(missing_ok=True)  # regenerated from scratch: the card is derived, never edited by hand
    path = write_model_card(
        folder,
        config,
        how_made=how_made,
        eval_results=eval_results,
        datasets=["Salesforce/wikitext"],
        license="cc-by-sa-3.0",  # the license of its training text, WikiText-2
    )
    assert path is not None
    return path


if __name__ == "__main__":
    with open(DEMO_MODEL_DIR / "eval_results.json", encoding="utf-8") as handle:
        print(write_demo_card(DEMO_MODEL_DIR, json.load(handle)))
