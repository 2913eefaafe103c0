"""Where the bundled demo model lives: its folder, a plain saved biLM that ``from_pretrained`` loads.

The folder's files are package data under ``modeling_elmo/demo_models/demo_bilm`` (the commands use it without
``--model``); this module only names the folder, for the library and the commands alike.
"""

from __future__ import annotations

import os
from pathlib import Path

DEMO_MODEL_DIR = Path(__file__).resolve().parent / "demo_bilm"
DEMO_NAME = "demo"  # what a model argument (--model, --bilm) takes for the bundled demo model


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


def resolve_model_name(name_or_path: str | os.PathLike, **kwargs) -> str:
    """A model argument (``--model``, ``--bilm``) as something ``from_pretrained`` loads, for the library and the
    commands alike: ``"demo"`` is the bundled demo model's folder, a released model's name (``small``, ``original``;
    ``elmo download --list``) its converted folder, downloaded and converted on first use
    (``modeling_elmo.hub.download.resolve_pretrained``, which takes the keyword arguments); anything else (a folder,
    a Hub id) is returned unchanged. An existing path wins over both names: a folder called ``demo`` or ``small`` in
    the working directory stays that folder.
    """
    name = os.fspath(name_or_path)
    if name.lower() == DEMO_NAME and not os.path.exists(name):
        return str(demo_model_path())
    from ..hub.download import resolve_pretrained

    return resolve_pretrained(name, **kwargs)
