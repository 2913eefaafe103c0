"""The biLM's recurrent state, carried from one call to the next (``ElmoModel.forward(..., lstm_state=...)``).

Shapes: per LSTM layer ``(h (2, R, P), c (2, R, D))`` for ``R`` batch rows; index 0 of the first dimension is the
forward direction, 1 the backward one.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
import torch.nn.functional as F

# One layer's recurrent state, both directions: (projected output h (2, n, P), cell c (2, n, D)).
LstmState = tuple[torch.Tensor, torch.Tensor]


class ElmoLstmState:
    """The biLM's recurrent state, carried from one call to the next as transformers models carry
    ``past_key_values``: per LSTM layer, ``(h (2, R, P), c (2, R, D))`` for ``R`` batch rows (index 0 of the
    first dimension is the forward direction, 1 the backward one).

    [`ElmoModel.forward`] takes one (``lstm_state=``), starts each batch row from that row's state, and
    [`update`]s it in place with the states the rows end with (returned as ``ElmoModelOutput.lstm_state``).
    An empty state (``ElmoLstmState()``, or after [`reset`]) means zeros, and rows past its end start from
    zero. Stored states are detached from the autograd graph: backpropagation stops at the start of a call.

    ```python
    state = ElmoLstmState()
    for batch in batches:  # row b of every batch continues row b of the previous one
        out = model(**batch, lstm_state=state)
    state.reset()  # start again from zero
    ```
    """

    def __init__(self, layers: Sequence[LstmState] | None = None):
        self.layers: list[LstmState] = list(layers) if layers is not None else []

    @property
    def num_rows(self) -> int:
        """Rows ``R`` held (0 when empty)."""
        return self.layers[0][0].shape[1] if self.layers else 0

    def select(self, rows: torch.Tensor) -> ElmoLstmState:
        """The states of ``rows`` ``(n,)`` (long), in that order; rows past the end are zeros. Empty stays empty."""
        if not self.layers:
            return ElmoLstmState()
        size = max(self.num_rows, int(rows.max()) + 1 if rows.numel() else 0)
        rows = rows.to(self.layers[0][0].device)
        padded = [(_pad_rows(h, size), _pad_rows(c, size)) for h, c in self.layers]
        return ElmoLstmState([(h.index_select(1, rows), c.index_select(1, rows)) for h, c in padded])

    def update(self, rows: torch.Tensor, new: ElmoLstmState) -> ElmoLstmState:
        """Set the states of ``rows`` ``(n,)`` to ``new`` (``n`` rows; detached), growing with zero rows as
        needed; the other rows keep theirs. Returns this state."""
        if not new.layers or rows.numel() == 0:
            return self
        size = max(self.num_rows, int(rows.max()) + 1)
        if not self.layers:
            self.layers = [(h.new_zeros(2, 0, h.shape[2]), c.new_zeros(2, 0, c.shape[2])) for h, c in new.layers]
        self._grow(size)
        rows = rows.to(new.layers[0][0].device)
        self.layers = [
            (old_h.to(h).index_copy(1, rows, h.detach()), old_c.to(c).index_copy(1, rows, c.detach()))
            for (old_h, old_c), (h, c) in zip(self.layers, new.layers, strict=True)
        ]
        return self

    def reset(self) -> None:
        """Forget every row's state (back to zeros)."""
        self.layers = []

    def _grow(self, rows: int) -> None:
        if rows > self.num_rows:
            self.layers = [(_pad_rows(h, rows), _pad_rows(c, rows)) for h, c in self.layers]

    def __repr__(self) -> str:
        return f"ElmoLstmState(layers={len(self.layers)}, rows={self.num_rows})"

    def __getitem__(self, row: int) -> ElmoLstmState:
        """Row ``row``'s state alone (one row; zeros past the end, as [`select`]), as ``tensor[b]`` is row ``b``:
        this is how transformers' pipelines split a batched output (``ElmoModelOutput.lstm_state``) by sentence."""
        row = operator.index(row)
        if row < 0:
            raise IndexError(f"ElmoLstmState rows are indexed from 0, got {row}")
        return self.select(torch.tensor([row]))

    __iter__ = None  # rows past the end read as zeros, so there is no end to iterate to: use range(num_rows)


def _pad_rows(state: torch.Tensor, rows: int) -> torch.Tensor:
    """Extend a ``(2, n, size)`` state with zero rows to ``(2, rows, size)``."""
    return F.pad(state, (0, 0, 0, rows - state.shape[1]))


__all__ = ["ElmoLstmState", "LstmState"]
