"""The ``elmo`` command's subcommands (not shipped with saved models); ``elmo_cli.py`` dispatches to them.

One module per subcommand, each with ``run(args) -> int``: ``convert``, ``download``, ``embed``, ``similar``,
``export_vectors``, ``score``, ``demo``; each subcommand's flags are the module of the same name in ``elmo_flags``
(beside the package, so that ``--help`` and usage errors import neither torch nor this package). What they share:
``common`` (errors, the model, device and precision checks, input checks, signals, [`run_command`]) and
``output_files`` (writing an output file whole, never over a file the user did not ask to replace). The library
never imports this folder.
"""
