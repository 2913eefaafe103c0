"""The ``elmo`` command and its subcommands (not shipped with saved models)."""
