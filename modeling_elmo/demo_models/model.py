"""Where the bundled demo model lives: its folder, a plain saved biLM that ``from_pretrained`` loads.

The folder's files are package data under ``modeling_elmo/demo_models/demo_bilm`` (the commands use it without
``--model``); this module only names the folder, for the library and the commands alike.
"""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo_bilm"


def demo_model_path() -> Path:
    """The folder of the bundled demo model, to pass to ``from_pretrained`` (what ``elmo embed`` and ``elmo similar``
    use without ``--model``).

    The demo model is a toy-sized biLM (2 layers, LSTM 256, projection 64) that this project trained on WikiText-2,
    not the released ELMo: it runs the examples without a download. The folder is a plain saved model (config,
    weights, tokenizer and card; no code), so ``AutoModel.from_pretrained(demo_model_path())`` works with this
    package imported.

    ```python
    from modeling_elmo import ElmoModel, ElmoTokenizer
    from modeling_elmo.demo_models.model import demo_model_path

    model = ElmoModel.from_pretrained(demo_model_path())
    tokenizer = ElmoTokenizer.from_pretrained(demo_model_path())
    ```

    The folder may be missing in a checkout that has not trained it (``scripts/train_demo_model.sh``).
    """
    return DEMO_MODEL_DIR
