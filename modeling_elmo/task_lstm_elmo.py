"""The task models' BiLSTM (the tagger's, the sentence classifier's, ESIM's and BiDAF's): [`ElmoTaskLstm`].

It has ``nn.LSTM``'s parameters, names and gates, so a head saved with an ``nn.LSTM`` loads as it is, and runs the
same kernel in eager mode. It is not an ``nn.LSTM``: ``torch.compile`` refuses to trace into any module of that class
(dynamo's ``allow_rnn``), even to read its weights, so a head holding one could never compile whole.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .compiled_ops_elmo import task_lstm
from .graph_path_elmo import compiling, in_graph, run_task_lstm


class ElmoTaskLstm(nn.Module):
    """A task's bidirectional LSTM (batch first): in eager mode on packed sequences, with the kernel ``nn.LSTM``
    calls (``torch.lstm``); under ``torch.compile``, the same kernel in one custom operator per layer
    (``compiled_ops_elmo.task_lstm``: packing reads the lengths into Python, which a graph cannot); under
    ``torch.export``, [`run_task_lstm`] (scans) on the padded input.

    Input ``(B, W, F)`` and lengths ``(B,)``; output ``(B, W, 2H)``; past each sentence's end, zero (an empty
    sentence runs one step in eager mode: its first position holds that step, which the heads mask).
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, dropout: float):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers, self.dropout = input_size, hidden_size, num_layers, dropout
        for layer in range(num_layers):
            width = input_size if layer == 0 else 2 * hidden_size
            for suffix in (f"l{layer}", f"l{layer}_reverse"):
                self.register_parameter(f"weight_ih_{suffix}", nn.Parameter(torch.empty(4 * hidden_size, width)))
                self.register_parameter(f"weight_hh_{suffix}", nn.Parameter(torch.empty(4 * hidden_size, hidden_size)))
                self.register_parameter(f"bias_ih_{suffix}", nn.Parameter(torch.empty(4 * hidden_size)))
                self.register_parameter(f"bias_hh_{suffix}", nn.Parameter(torch.empty(4 * hidden_size)))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``nn.LSTM``'s own initialisation: ``U(-1/sqrt(H), 1/sqrt(H))`` for every weight and bias."""
        bound = self.hidden_size**-0.5
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def flat_weights(self) -> list[torch.Tensor]:
        """The weights in ``torch.lstm``'s order: per layer, per direction, ``W_ih, W_hh, b_ih, b_hh``."""
        return [
            getattr(self, f"{kind}_l{layer}{direction}")
            for layer in range(self.num_layers)
            for direction in ("", "_reverse")
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if compiling():
            return task_lstm(self, features, lengths)
        if in_graph():  # torch.export
            return run_task_lstm(self, features, lengths)
        batch, words, _ = features.shape
        if words == 0:  # only empty sentences: nothing to run (packing would fail on empty tensors)
            return features.new_zeros(batch, 0, 2 * self.hidden_size)
        # pack_padded_sequence rejects empty rows: give them one (zero, later masked) step.
        packed = pack_padded_sequence(features, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        state = packed.data.new_zeros(2 * self.num_layers, batch, self.hidden_size)  # zero: order-free
        data, _, _ = torch.lstm(
            packed.data, packed.batch_sizes, (state, state), self.flat_weights(), True, self.num_layers,
            self.dropout, self.training, True,
        )  # fmt: skip
        output = PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
        return pad_packed_sequence(output, batch_first=True, total_length=words)[0]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, dropout={self.dropout}"


__all__ = ["ElmoTaskLstm"]
