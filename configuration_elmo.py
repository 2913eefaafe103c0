"""Top-level alias of :class:`modeling_elmo.ElmoConfig`.

The class is defined inside the package so that it travels with the model code on the Hub.
"""

from modeling_elmo.configuration_elmo import ElmoConfig

__all__ = ["ElmoConfig"]
