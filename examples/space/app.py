"""The ELMo web demo as a Hugging Face Space (Gradio SDK): the app of `elmo demo`, from environment variables.

ELMO_MODEL: a model folder, Hub id or released name (default: the bundled demo model); ELMO_TAGGER: a tagger folder
or Hub id (optional). Run locally with `python examples/space/app.py` from a checkout. The app is the command's:
the same per-request bounds, queue and upload limit (none: the views take text only).
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

from modeling_elmo.commands.demo import CliError, DemoModels, build_app, exposure_warning, launch  # noqa: E402

model, tagger = os.environ.get("ELMO_MODEL") or None, os.environ.get("ELMO_TAGGER") or None
try:
    models = DemoModels.load(model, tagger)
except CliError as err:  # a bad ELMO_MODEL or ELMO_TAGGER: one message, not a traceback
    sys.exit(f"ELMo demo: cannot start with ELMO_MODEL={model or ''} ELMO_TAGGER={tagger or ''}: {err}")
demo = build_app(models)

if __name__ == "__main__":
    # A Space sets GRADIO_SERVER_NAME=0.0.0.0 (and SPACE_ID: public by design); on a desktop the demo stays on this
    # machine unless GRADIO_SERVER_NAME says otherwise, and then it says so.
    host, port = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), int(os.environ.get("GRADIO_SERVER_PORT", "7860"))
    warning = None if os.environ.get("SPACE_ID") else exposure_warning(host, port)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    launch(demo, host, port)
