"""Backpropagation through time for the biLM layer's steps, as the compiled path trains it (``torch.compile``):
the forward keeps what each step computed, and the backward walks the steps in reverse with it, instead of running
the forward again under ``torch.func.vjp``.

Both functions here are the plain step-by-step path in torch operations, on any device and dtype: what the compiled
biLM operator (``elmo::bilstm_layer_train``, ``compiled_ops_elmo.py``) runs on CUDA and where the C++ steps
(``native_steps_elmo.py``, which compute the same in one call each) are not built, and the reference the C++ is tested
against. The recurrence is ``ElmoBiLstmLayer``'s (modeling_elmo.py), per direction ``g`` and step::

    a = gates_in + h_{t-1} W_s                   (gates_in: the input product and bias, i j f o)
    c_raw = sigmoid(f) c_{t-1} + sigmoid(i) tanh(j),    c_t = clip(c_raw, cell_clip)
    m = sigmoid(o) tanh(c_t),    p_raw = m W_P,    h_t = clip(p_raw, proj_clip)

over packed steps (``batch_sizes``: the rows running at each step, non-increasing) from zero states. Without a
projection (``None``: the task BiLSTM's ``nn.LSTM`` cell), ``p_raw = m``; with ``lstm_order`` the gates come in
``nn.LSTM``'s order ``i f g o`` (its ``g`` is ``j``), so that its weights serve as they are. Kept
per packed row: the four activations (in the gates' own buffer, which they overwrite), ``c_raw`` (float32 for
bfloat16 and float16 weights, as the cell state) and ``p_raw``, so that the backward knows exactly where each clip
held.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def state_dtype(dtype: torch.dtype) -> torch.dtype:
    """The cell state's dtype for weights of ``dtype`` (``ElmoBiLstmLayer.state_dtype``)."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _clip(x: Tensor, clip: float | None) -> Tensor:
    return x if clip is None else x.clamp(-clip, clip)


def _gate_blocks(x: Tensor, lstm_order: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``x (..., 4D)``'s blocks as ``i, j, f, o``, from ``nn.LSTM``'s order ``i f g o`` with ``lstm_order``."""
    i, a, b, o = x.chunk(4, dim=-1)
    return (i, b, a, o) if lstm_order else (i, a, b, o)


def _offsets(batch_sizes: Sequence[int]) -> list[int]:
    offsets, total = [], 0
    for n in batch_sizes:
        offsets.append(total)
        total += n
    return offsets


def steps_saving(
    gates: Tensor,
    batch_sizes: Sequence[int],
    state_kernel: Tensor,
    projection: Tensor | None,
    cell_clip: float | None,
    proj_clip: float | None,
    lstm_order: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """The steps of ``G`` directions from zero states, keeping what the backward needs.

    Args:
        gates: ``(G, R, 4D)``, its first ``N = sum(batch_sizes)`` rows the packed steps' input products, bias
            included (``R >= N``: rows past ``N`` are room the caller keeps). Overwritten with the activations
            ``sigmoid(i), tanh(j), sigmoid(f), sigmoid(o)``.
        batch_sizes: rows running at each step.
        state_kernel: ``(G, P, 4D)``; projection: ``(G, D, P)``, or ``None`` (``P = D``).
        lstm_order: the gate blocks in ``nn.LSTM``'s order ``i f g o``, not ``i j f o`` (the activations too).

    Returns:
        ``outputs (G, N, P)`` (the clipped ``h_t``), ``c_raw (G, R, D)`` and ``p_raw (G, R, P)`` (first ``N`` rows).
    """
    groups, rows, four_d = gates.shape
    d = four_d // 4
    p = d if projection is None else projection.shape[-1]
    c_raw = gates.new_empty(groups, rows, d, dtype=state_dtype(gates.dtype))
    p_raw = gates.new_empty(groups, rows, p)
    outputs = gates.new_empty(groups, sum(batch_sizes), p)
    h = gates.new_zeros(groups, batch_sizes[0] if batch_sizes else 0, p)
    c = c_raw.new_zeros(groups, h.shape[1], d)
    for offset, n in zip(_offsets(batch_sizes), batch_sizes, strict=True):
        h, c = h[:, :n], c[:, :n]
        step = gates[:, offset : offset + n]
        a = torch.baddbmm(step, h, state_kernel)
        step.copy_(torch.sigmoid(a))
        j_at = 2 * d if lstm_order else d
        step[..., j_at : j_at + d] = torch.tanh(a[..., j_at : j_at + d])
        i, j, f, o = _gate_blocks(step, lstm_order)
        c = torch.addcmul(f * c, i, j)
        c_raw[:, offset : offset + n] = c
        c = _clip(c, cell_clip)
        memory = (o * torch.tanh(c)).to(gates.dtype)
        projected = memory if projection is None else torch.bmm(memory, projection)
        p_raw[:, offset : offset + n] = projected
        h = _clip(projected, proj_clip)
        outputs[:, offset : offset + n] = h
    return outputs, c_raw, p_raw


def steps_backward(
    grad: Tensor,
    activations: Tensor,
    c_raw: Tensor,
    p_raw: Tensor,
    batch_sizes: Sequence[int],
    state_kernel: Tensor,
    projection: Tensor | None,
    cell_clip: float | None,
    proj_clip: float | None,
    lstm_order: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The gradients of [`steps_saving`] from the gradient of its ``outputs``.

    Args:
        grad: ``(G, N, P)``; activations, c_raw, p_raw: what [`steps_saving`] kept (``(G, R, ...)``, ``R >= N``).
        batch_sizes, state_kernel ``(G, P, 4D)``, projection ``(G, D, P)``, the clips, lstm_order: as for
            [`steps_saving`].

    Returns:
        ``d_gates (G, N, 4D)`` (the gradient of the input products, and of the gates' pre-activations, in the
        gates' order),
        ``d_state_kernel (G, P, 4D)`` and ``d_projection (G, D, P)`` (``None`` without a projection).
    """
    groups, total, p = grad.shape
    d = c_raw.shape[-1]
    d_gates = activations.new_empty(groups, total, 4 * d)
    memory = activations.new_empty(groups, total, d)
    d_projected = grad.new_empty(groups, total, p)
    rows = batch_sizes[0] if batch_sizes else 0
    dh = grad.new_zeros(groups, rows, p)  # from the next step's gates
    dc = c_raw.new_zeros(groups, rows, d)  # from the next step's cell
    offsets = _offsets(batch_sizes)
    for t in range(len(batch_sizes) - 1, -1, -1):
        offset, n = offsets[t], batch_sizes[t]
        now = slice(offset, offset + n)
        g = grad[:, now] + dh[:, :n]
        if proj_clip is not None:
            g = torch.where(p_raw[:, now].abs() <= proj_clip, g, 0)
        d_projected[:, now] = g
        dm = g if projection is None else torch.bmm(g, projection.transpose(1, 2))
        i, j, f, o = _gate_blocks(activations[:, now], lstm_order)
        raw = c_raw[:, now]
        tanh_c = torch.tanh(_clip(raw, cell_clip))
        memory[:, now] = o * tanh_c
        d_cell = dc[:, :n] + dm * o * (1 - tanh_c * tanh_c)
        if cell_clip is not None:
            d_cell = torch.where(raw.abs() <= cell_clip, d_cell, 0)
        c_prev = _clip(c_raw[:, offsets[t - 1] : offsets[t - 1] + n], cell_clip) if t else torch.zeros_like(raw)
        d_i, d_j, d_f = d_cell * j * i * (1 - i), d_cell * i * (1 - j * j), d_cell * c_prev * f * (1 - f)
        d_o = dm * tanh_c * o * (1 - o)
        d_gates[:, now] = torch.cat([d_i, d_f, d_j, d_o] if lstm_order else [d_i, d_j, d_f, d_o], dim=-1)
        dc[:, :n] = d_cell * f
        dh[:, :n] = torch.bmm(d_gates[:, now], state_kernel.transpose(1, 2))
    # The weights' gradients over all steps at once: h_{t-1} of each packed row (zero at step 0), and m.
    h_prev = grad.new_zeros(groups, total, p)
    for t in range(1, len(batch_sizes)):
        n = batch_sizes[t]
        h_prev[:, offsets[t] : offsets[t] + n] = _clip(p_raw[:, offsets[t - 1] : offsets[t - 1] + n], proj_clip)
    d_state_kernel = torch.bmm(h_prev.transpose(1, 2), d_gates)
    d_projection = None if projection is None else torch.bmm(memory.transpose(1, 2), d_projected)
    return d_gates, d_state_kernel, d_projection


__all__ = ["state_dtype", "steps_backward", "steps_saving"]
