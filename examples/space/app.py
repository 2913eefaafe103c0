"""The ELMo web demo as a Hugging Face Space (Gradio SDK): the app of `elmo demo`, from environment variables.

ELMO_MODEL: a model folder, Hub id or released name (default: the bundled demo model); ELMO_TAGGER: a tagger folder
or Hub id (optional). Run locally with `python examples/space/app.py` from a checkout.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported

# The package: installed, copied beside this file (a Space), or the checkout two folders up.
here = Path(__file__).resolve().parent
for folder in (here, here.parent.parent):
    if (folder / "modeling_elmo" / "__init__.py").is_file():
        sys.path.insert(0, str(folder))
        break

from modeling_elmo.commands.demo import DemoModels, build_app, launch  # noqa: E402

demo = build_app(DemoModels.load(os.environ.get("ELMO_MODEL") or None, os.environ.get("ELMO_TAGGER") or None))

if __name__ == "__main__":
    # A Space sets GRADIO_SERVER_NAME=0.0.0.0; on a desktop the demo stays on this machine.
    launch(demo, os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
