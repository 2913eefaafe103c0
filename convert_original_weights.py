"""Convert an original ELMo model (``options.json`` + HDF5 weights) to a Hugging Face folder.

A thin entry for a checkout: ``python convert_original_weights.py --options_file ... --weight_file ...
--output_dir OUT``. The conversion lives in :mod:`modeling_elmo.hub.convert`, the command in
:mod:`modeling_elmo.commands.convert` (installed: ``elmo convert``).
"""

import sys

from elmo_cli import import_package

import_package()  # quietly, as the `elmo` command does (without transformers' note on the stock pipeline task)

from modeling_elmo.commands.convert import main  # noqa: E402
from modeling_elmo.hub.convert import ConversionError, convert, read_original_weights  # noqa: E402

__all__ = ["ConversionError", "convert", "main", "read_original_weights"]

if __name__ == "__main__":
    sys.exit(main())
