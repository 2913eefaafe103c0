"""Prepacked CPU weights (issue 17): the LSTM's products at inference use oneDNN's prepacked weights
(``fast_path_elmo``, chosen in ``ElmoBiLstmLayer.forward``). They must give what the plain products give, be
rebuilt whenever the weights change, and stay out of the way of autograd."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import BATCHING_ATOL, TINY

from modeling_elmo import ElmoConfig, ElmoModel
from modeling_elmo.fast_path_elmo import PrepackedProducts, _PrepackedWeights, prepacked
from modeling_elmo.modeling_elmo import ElmoBiLstmLayer

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not _PrepackedWeights.supported(torch.float32), reason="this torch build has no oneDNN"),
]


@pytest.fixture(autouse=True)
def prepack_any_size(monkeypatch):
    """The tiny model's weights are far below the size where prepacking starts to pay: pack them anyway."""
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_elements", 0)
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_rows", 0)


@pytest.fixture
def model() -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**TINY)).eval()


@pytest.fixture
def batch() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(1, 200, (3, 7, 50))
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5])
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _layers(model: ElmoModel) -> list[ElmoBiLstmLayer]:
    return [m for m in model.modules() if isinstance(m, ElmoBiLstmLayer)]


def _packed_layers(model: ElmoModel) -> int:
    return sum(layer in _PrepackedWeights._cache for layer in _layers(model))


def _run(model: ElmoModel, batch, prepacked: bool) -> torch.Tensor:
    old = ElmoBiLstmLayer.use_prepacked_weights
    ElmoBiLstmLayer.use_prepacked_weights = prepacked
    try:
        return torch.stack([t.float() for t in model(**batch, output_hidden_states=True).hidden_states])
    finally:
        ElmoBiLstmLayer.use_prepacked_weights = old


@pytest.mark.parametrize("min_rows", [0, 2], ids=["every-step", "from-2-rows"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_prepacked_products_match_the_plain_ones(model, batch, dtype, min_rows, monkeypatch):
    """Prepacked, the two directions run one after the other; with ``prepack_min_rows`` 2, the steps where one
    row is left take the plain product of one direction's weights."""
    if not _PrepackedWeights.supported(dtype):
        pytest.skip(f"oneDNN has no prepacked {dtype} products on this CPU")
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_rows", min_rows)
    model = model.to(dtype)
    with torch.no_grad():
        plain = _run(model, batch, prepacked=False)
        assert _packed_layers(model) == 0
        packed = _run(model, batch, prepacked=True)
        h = torch.zeros(2, 3, 8, dtype=dtype)
        assert all(PrepackedProducts.for_layer(layer, h).runs_directions_apart(h) for layer in _layers(model))
    assert _packed_layers(model) == 2  # the prepacked path really ran, for both layers
    # Both accumulate in float32; only the order of the sums may differ: float32 is a batching difference (measured
    # 2.4e-7); bfloat16 outputs near 1.6 round in steps of 7.8e-3, 2e-2 allows about two (measured 0 here).
    torch.testing.assert_close(packed, plain, atol=BATCHING_ATOL if dtype == torch.float32 else 2e-2, rtol=1e-5)


def test_changed_weights_are_packed_again(model, batch):
    with torch.no_grad():
        _run(model, batch, prepacked=True)
        for layer in _layers(model):
            layer.state_kernel.mul_(0.5)  # in place: the same tensor, a new version
        layer.projection.data = layer.projection.data * 2  # a new tensor
        packed = _run(model, batch, prepacked=True)
        plain = _run(model, batch, prepacked=False)
    torch.testing.assert_close(packed, plain, atol=BATCHING_ATOL, rtol=0)


def test_a_round_trip_through_bfloat16_is_not_served_stale_weights(model, batch):
    with torch.no_grad():
        _run(model, batch, prepacked=True)
        model.to(torch.bfloat16).to(torch.float32)  # rounded weights, possibly at a freed address
        packed = _run(model, batch, prepacked=True)
        plain = _run(model, batch, prepacked=False)
    torch.testing.assert_close(packed, plain, atol=BATCHING_ATOL, rtol=0)


def test_training_uses_the_plain_products_and_gets_gradients(model, batch):
    model.train()
    out = _run(model, batch, prepacked=True)
    assert _packed_layers(model) == 0
    out.sum().backward()
    assert all(
        layer.state_kernel.grad is not None and layer.state_kernel.grad.abs().sum() > 0 for layer in _layers(model)
    )


def test_a_frozen_bilm_is_prepacked_while_gradients_are_on(model, batch):
    model.requires_grad_(False)  # a tagger's frozen biLM: grad mode is on, but nothing here needs it
    out = _run(model, batch, prepacked=True)
    assert _packed_layers(model) == 2
    assert not out.requires_grad


def test_copies_do_not_carry_the_packed_weights(model, batch):
    with torch.no_grad():
        _run(model, batch, prepacked=True)
        twin = copy.deepcopy(model)
        assert _packed_layers(twin) == 0
        torch.testing.assert_close(_run(twin, batch, prepacked=True), _run(model, batch, prepacked=False))
    assert not any("packed" in key for key in model.state_dict())


def test_only_weights_of_the_minimum_size_are_prepacked(model, batch, monkeypatch):
    # Per direction: input and state kernels 8 x 64 = 512 elements, the projection 16 x 8 = 128.
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_elements", 200)
    with torch.no_grad():
        packed = _run(model, batch, prepacked=True)
        plain = _run(model, batch, prepacked=False)
    for layer in _layers(model):
        assert [w is not None for w in _PrepackedWeights._cache[layer].packed] == [True, True, False]
        assert prepacked(layer, torch.zeros(2, 1, 8), 2) is None
    torch.testing.assert_close(packed, plain, atol=BATCHING_ATOL, rtol=0)
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_elements", 1 << 20)  # the default: nothing this small
    _PrepackedWeights._cache.clear()
    with torch.no_grad():
        _run(model, batch, prepacked=True)
    assert _packed_layers(model) == 0


def test_one_row_products_use_the_plain_kernel(model, monkeypatch):
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_rows", 2)
    layer = _layers(model)[0]
    with torch.no_grad():
        assert prepacked(layer, torch.zeros(2, 1, 8), 1) is None
        assert prepacked(layer, torch.zeros(2, 2, 8), 1) is not None
        one = torch.randint(1, 200, (1, 5, 50))
        packed = model(input_ids=one, output_hidden_states=True).hidden_states
        monkeypatch.setattr(ElmoBiLstmLayer, "use_prepacked_weights", False)
        plain = model(input_ids=one, output_hidden_states=True).hidden_states
    for a, b in zip(packed, plain, strict=True):
        torch.testing.assert_close(a, b, atol=BATCHING_ATOL, rtol=0)


def test_one_row_products_prepack_in_bfloat16(model, monkeypatch):
    """In bfloat16 a one-row step (batch 1) takes oneDNN's product too: torch's own one-row bfloat16 product is
    slower than its float32 one."""
    if not _PrepackedWeights.supported(torch.bfloat16):
        pytest.skip("oneDNN has no prepacked bfloat16 products on this CPU")
    monkeypatch.setattr(ElmoBiLstmLayer, "prepack_min_rows", 2)
    model = model.to(torch.bfloat16)
    layer = _layers(model)[0]
    with torch.no_grad():
        assert prepacked(layer, torch.zeros(2, 1, 8, dtype=torch.bfloat16), 1) is not None
        one = torch.randint(1, 200, (1, 5, 50))
        packed = _run(model, {"input_ids": one}, prepacked=True)
        plain = _run(model, {"input_ids": one}, prepacked=False)
    # As in test_prepacked_products_match_the_plain_ones: bfloat16 rounding steps near 1.6 are 7.8e-3.
    torch.testing.assert_close(packed, plain, atol=2e-2, rtol=1e-5)
