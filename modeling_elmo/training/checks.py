"""Range checks of the training commands' numeric flags: a value that means nothing (a negative count, a zero
batch, a NaN rate) is a usage error naming the flag, never a silent misbehaviour (``--max_words -1`` once cut the
last word of every sentence)."""

from __future__ import annotations

import argparse
import math

# numpy's seed (set by transformers.set_seed) must fit in 32 bits.
MAX_SEED = 2**32 - 1
# A lowest bound meaning "greater than zero" (rates, clips, epochs).
POSITIVE = "positive"


def check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace, rules: dict[str, tuple]) -> None:
    """Refuse out-of-range numeric flags with ``parser.error`` (usage message, exit 2).

    Args:
        rules: flag name (without ``--``) -> ``(low, high, meaning)``: the value must be finite and in
            ``[low, high]`` (``None``: unbounded on that side; ``low=POSITIVE``: greater than 0). ``meaning``
            (may be empty) explains the bounds in the message, e.g. ``"0: no limit"``. A flag whose value is
            ``None`` (not given) is not checked.
    """
    for name, (low, high, meaning) in rules.items():
        value = getattr(args, name)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            parser.error(f"--{name} must be a finite number, got {value}")
        too_low = value <= 0 if low == POSITIVE else low is not None and value < low
        if too_low or (high is not None and value > high):
            if low == POSITIVE:
                bound = "> 0"
            elif high is None:
                bound = f">= {low}"
            elif low is None:
                bound = f"<= {high}"
            else:
                bound = f"in [{low}, {high}]"
            parser.error(f"--{name} must be {bound}{f' ({meaning})' if meaning else ''}, got {value}")


def check_fraction(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Refuse dropout-like flags outside ``[0, 1)`` (NaN included)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not 0.0 <= value < 1.0:
            parser.error(f"--{name} must be in [0, 1), got {value}")
