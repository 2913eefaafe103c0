"""The compiled character encoder's training operator (``elmo::token_layer_train``, ``compiled_ops_elmo.py``): its
output and every gradient against eager autograd through the encoder itself (``ElmoCharacterEncoder``, token by
token), for the encoder structures the package loads: relu and tanh, one and two highway layers, ELMo's character
vocabulary and ELMoForManyLangs' with its word input; with repeated words, past-the-end positions, more distinct
words than one block, and no word at all."""

from __future__ import annotations

import pytest
import torch

from modeling_elmo import ElmoConfig
from modeling_elmo.compiled_ops_elmo import call, char_encoder_consts
from modeling_elmo.modeling_elmo import ElmoCharacterEncoder

pytestmark = pytest.mark.usefixtures("one_thread")

STRUCTURES = {
    "elmo": dict(char_cnn_filters=[[1, 4], [2, 8], [3, 8]], n_highway=2),
    "manylangs": dict(
        char_cnn_filters=[[1, 3], [2, 5]], n_highway=1, char_vocabulary="manylangs", n_characters=20,
        word_vocab_size=11, word_embedding_dim=3, char_cnn_activation="tanh",
    ),
}  # fmt: skip


def _encoder(structure: str) -> ElmoCharacterEncoder:
    torch.manual_seed(0)
    config = ElmoConfig(char_embedding_dim=4, projection_dim=6, lstm_dim=8, **STRUCTURES[structure])
    encoder = ElmoCharacterEncoder(config)
    for weight in encoder.parameters():  # unit-scale weights: every highway gate and relu away from 0 and 1
        torch.nn.init.normal_(weight, std=0.7)
    return encoder


def _tokens(encoder: ElmoCharacterEncoder, rows: int, positions: int, seed: int) -> torch.Tensor:
    """``(rows, positions, 50)`` character ids (``+ 1`` column of word ids with a word input), some words repeated."""
    generator = torch.Generator().manual_seed(seed)
    top = encoder.char_embedding.num_embeddings
    ids = torch.randint(1, top, (rows, positions, 50), generator=generator)
    lengths = torch.randint(1, 12, (rows, positions), generator=generator)
    ids = torch.where(torch.arange(50) < lengths.unsqueeze(-1), ids, encoder.padding_id)
    ids[0, 1] = ids[-1, 0]  # the same word at two positions
    if encoder.word_input is not None:
        word_ids = torch.randint(0, encoder.word_input.embedding.num_embeddings, (rows, positions, 1))
        ids = torch.cat([ids, word_ids], dim=-1)
    return ids


@pytest.mark.parametrize("block_words", [1024, 5], ids=["one_block", "blocks_of_5"])
@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_token_layer_training_operator_has_the_encoders_gradients(structure, block_words, monkeypatch):
    monkeypatch.setattr(ElmoCharacterEncoder, "block_words", block_words)
    encoder = _encoder(structure)
    ids = _tokens(encoder, rows=3, positions=6, seed=1)
    steps = torch.tensor([6, 2, 4])
    present = torch.arange(6) < steps.unsqueeze(1)
    grad = torch.randn(3, 6, 6, generator=torch.Generator().manual_seed(2))
    want = encoder(ids) * present.unsqueeze(-1)  # every token on its own, zero past each row's steps
    want.backward(grad)
    expected = {name: w.grad.clone() for name, w in encoder.named_parameters()}
    encoder.zero_grad()
    weights = list(encoder.parameters())
    got = call("token_layer_train", [ids, steps, *weights], char_encoder_consts(encoder))
    got.backward(grad)
    # Measured: up to 6e-7 (outputs and gradients up to ~30).
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, w in encoder.named_parameters():
        assert w.grad is not None and (w.grad.abs().max() > 0 or expected[name].abs().max() == 0), name
        torch.testing.assert_close(w.grad, expected[name], atol=1e-5, rtol=1e-5, msg=name)


def test_token_layer_training_operator_with_no_word():
    encoder = _encoder("elmo")
    ids = _tokens(encoder, rows=2, positions=3, seed=3)
    weights = list(encoder.parameters())
    out = call("token_layer_train", [ids, torch.zeros(2, dtype=torch.long), *weights], char_encoder_consts(encoder))
    assert out.shape == (2, 3, 6) and not out.any()
    out.sum().backward()
    assert all(w.grad is not None and not w.grad.any() for w in weights)
