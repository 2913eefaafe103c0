"""The ``elmo`` command's subcommands (not shipped with saved models); ``elmo_cli.py`` dispatches to them.

One module per subcommand, each with ``add_arguments(parser)`` and ``run(args) -> int``: ``convert``, ``download``,
``embed``, ``similar``, ``export_vectors``, ``score``, ``demo``. What they share: ``common`` (errors, the model,
device and precision flags, input checks, signals, [`run_command`]) and ``output_files`` (writing an output file
whole, never over a file the user did not ask to replace). The library never imports this folder.
"""
