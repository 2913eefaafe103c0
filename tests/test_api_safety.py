"""Clear errors for careless calls of the Python API (issue 26 entries 7, 10, 14, 15 and 16): multi-label targets
outside [0, 1], vocabulary ids past the vocabulary, None given to the AllenNLP drop-in, labels as Python lists, and
the int8 model quantized twice, quantized with a NaN weight, or saved."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import TINY, TINY_SIZES

from modeling_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from modeling_elmo.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids
from modeling_elmo.inference.quantize import quantize_int8

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = [["The", "cat", "sat", "."], ["Hi", "there"]]


def char_ids() -> torch.Tensor:
    return ElmoTokenizer()(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]


# ------------------------------------------------------------------------- entry 7: multi-label targets


def multi_label_classifier() -> ElmoForSequenceClassification:
    torch.manual_seed(0)
    config = ElmoConfig(**TINY, num_labels=3, problem_type="multi_label_classification", classifier_hidden_size=8)
    return ElmoForSequenceClassification(config).eval()


@pytest.mark.parametrize("bad", [2.0, -1.0, math.nan])
def test_multi_label_targets_outside_0_1_are_refused(bad):
    model = multi_label_classifier()
    labels = torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, bad]])
    with pytest.raises(ValueError, match=r"targets must be in \[0, 1\]"):
        model(char_ids(), labels=labels)
    # Soft targets inside [0, 1] still train.
    loss = model(char_ids(), labels=labels.nan_to_num(0.0).clamp(0, 1)).loss
    assert torch.isfinite(loss)


# ------------------------------------------------------------------------- entry 10: ids past the vocabulary


def test_convert_ids_to_tokens_names_an_id_past_the_vocabulary():
    tokenizer = ElmoTokenizer(vocab={"<S>": 0, "</S>": 1, "<UNK>": 2, "cat": 3})
    size = len(tokenizer)
    assert tokenizer.convert_ids_to_tokens([3, -100]) == ["cat", None]  # padding ids stay None
    cases = [([10**12], 10**12), (10**12, 10**12), ([3, size], size), (size, size), ([2**32 - 1], 2**32 - 1)]
    for ids, named in cases:  # past 2**32 the Rust tokenizer raised OverflowError; below, it answered None
        with pytest.raises(ValueError, match=rf"token id {named} is not in the vocabulary \(ids are in \[0, {size}\)"):
            tokenizer.convert_ids_to_tokens(ids)
    with pytest.raises(ValueError, match="10000000000000 is not in the vocabulary"):
        tokenizer.convert_ids_to_tokens(torch.tensor([3, 10**13]))


# ------------------------------------------------------------------------- entry 14: the AllenNLP drop-in


@pytest.fixture(scope="module")
def bilm() -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**TINY_SIZES, num_output_representations=0)).eval()


@pytest.mark.parametrize(
    "batch, message",
    [
        (None, r"batch_to_ids takes a list of sentences.*got NoneType"),
        ([None], r"sentence 0 is NoneType"),
        ([["a"], ["b", None]], r"sentence 1, word 1 is NoneType"),
        ("a b", r"list of sentences.*got str"),
        (["a", "b"], r"sentence 0 is str"),
    ],
)
def test_batch_to_ids_names_what_is_not_a_list_of_words(batch, message):
    with pytest.raises(TypeError, match=message):
        batch_to_ids(batch)


def test_embedder_and_elmo_name_a_none_input(bilm, tmp_path):
    bilm.save_pretrained(tmp_path / "bilm")
    embedder = ElmoEmbedder(str(tmp_path / "bilm"))
    with pytest.raises(TypeError, match=r"embed_sentence takes one sentence.*got NoneType"):
        embedder.embed_sentence(None)
    with pytest.raises(TypeError, match=r"embed_batch: sentence 0, word 1 is NoneType"):
        embedder.embed_sentence(["a", None])
    with pytest.raises(TypeError, match=r"embed_batch takes a list of sentences.*got NoneType"):
        embedder.embed_batch(None)
    elmo = Elmo(None, module=bilm, dropout=0.0)
    with pytest.raises(TypeError, match=r"inputs must be a tensor of character ids.*got NoneType"):
        elmo(None)
    assert elmo(batch_to_ids(SENTENCES))["elmo_representations"][0].shape == (2, 4, 2 * TINY_SIZES["projection_dim"])


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_output_representations": -1}, ValueError, r"num_output_representations must be at least 1 .*, got -1"),
        ({"num_output_representations": 0}, ValueError, r"at least 1"),
        ({"num_output_representations": 1.5}, TypeError, r"must be an int, got float"),
        ({"scalar_mix_parameters": [math.nan] * 3}, ValueError, r"scalar_mix_parameters must hold finite numbers"),
        ({"scalar_mix_parameters": [0.0, math.inf, 0.0]}, ValueError, r"finite numbers"),
        ({"scalar_mix_parameters": [0.0, "a", 0.0]}, TypeError, r"must hold numbers, got str"),
        ({"scalar_mix_parameters": "abc"}, TypeError, r"list of numbers \(one per layer\), got str"),
        ({"scalar_mix_parameters": [0.0, 0.0]}, ValueError, r"has 2 values; this biLM has 3 layers"),
    ],
)
def test_elmo_refuses_meaningless_mix_settings(bilm, kwargs, error, message):
    with pytest.raises(error, match=message):
        Elmo(None, module=bilm, **kwargs)


def test_elmo_fixed_mix_parameters_still_apply(bilm):
    elmo = Elmo(None, module=bilm, scalar_mix_parameters=[-1e4, -1e4, 0.0], dropout=0.0)  # the top layer only
    out = bilm(batch_to_ids(SENTENCES), output_hidden_states=True)
    top = out.hidden_states[-1] * out.mask.unsqueeze(-1)
    assert torch.allclose(elmo(batch_to_ids(SENTENCES))["elmo_representations"][0], top)


# ------------------------------------------------------------------------- entry 15: labels as Python lists


def heads_with_list_labels():
    """Each head with labels as nested Python lists of the right shape and values (B = 2 sentences, W = 4)."""
    torch.manual_seed(0)
    classes = dict(num_labels=2, classifier_hidden_size=8)
    yield "classifier", ElmoForSequenceClassification(ElmoConfig(**TINY, **classes)), {"labels": [0, 1]}
    tagger = ElmoForTokenClassification(
        ElmoConfig(**TINY, num_labels=3, tagger_word_input="bilm", tagger_hidden_size=8)
    )
    yield "tagger", tagger, {"labels": [[0, 1, 2, 0], [1, 2, -100, -100]]}
    lm = ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=10))
    yield "pretraining", lm, {"labels": [[1, 2, 3, 4], [5, 6, -100, -100]]}
    yield (
        "pretraining",
        lm,
        {"labels": torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]]), "boundary_labels": [[0, 1]] * 2},
    )


@pytest.mark.parametrize(
    "name, model, labels", list(heads_with_list_labels()), ids=lambda x: x if isinstance(x, str) else ""
)
def test_labels_as_lists_are_a_clear_type_error_in_every_head(name, model, labels):
    """One rule for every head: labels are tensors (as input_ids and attention_mask are); a list is refused by name,
    with the fix, before the biLM runs."""
    listed = next(key for key, value in labels.items() if isinstance(value, list))
    with pytest.raises(
        TypeError, match=rf"^{listed} must be a torch.Tensor \(e.g. torch.tensor\({listed}\)\), got list"
    ):
        model.eval()(char_ids(), **labels)
    as_tensors = {key: torch.as_tensor(value) for key, value in labels.items()}
    assert torch.isfinite(model(char_ids(), **as_tensors).loss)  # the same labels as tensors work
    if name == "pretraining":
        with pytest.raises(TypeError, match=rf"{listed} must be a torch.Tensor"):
            model.sentence_losses(char_ids(), **labels)


# ------------------------------------------------------------------------- entry 16: int8


def test_quantize_int8_twice_is_refused_and_leaves_the_model_working():
    torch.manual_seed(0)
    model = quantize_int8(ElmoModel(ElmoConfig(**TINY_SIZES)).eval())
    before = model(char_ids()).elmo_representations[0]
    with pytest.raises(ValueError, match=r"already quantized to int8 \(char_cnn\.highways\.0\.carry is int8\)"):
        quantize_int8(model)
    assert torch.equal(model(char_ids()).elmo_representations[0], before)


def test_quantize_int8_names_a_nan_weight_and_changes_nothing():
    torch.manual_seed(0)
    tagger = ElmoForTokenClassification(ElmoConfig(**TINY, num_labels=3, tagger_hidden_size=8))
    with torch.no_grad():
        tagger.elmo.bilm.layers[1].state_kernel[0, 2, 3] = math.nan
    with pytest.raises(ValueError, match=r"the weight elmo\.bilm\.layers\.1\.state_kernel holds NaN"):
        quantize_int8(tagger)
    assert type(tagger.elmo.bilm.layers[0]).__name__ == "ElmoBiLstmLayer"  # nothing was quantized
    assert isinstance(tagger.elmo.char_cnn.projection, torch.nn.Linear)


@pytest.mark.parametrize("head", [False, True])
def test_save_pretrained_refuses_an_int8_model_before_writing(tmp_path, head):
    torch.manual_seed(0)
    config = ElmoConfig(**TINY, num_labels=3, tagger_hidden_size=8)
    model = quantize_int8(ElmoForTokenClassification(config) if head else ElmoModel(config))
    out = tmp_path / "saved"
    with pytest.raises(ValueError, match=r"quantized to int8 .*save the float32 model, and quantize again"):
        model.save_pretrained(out)
    assert not out.exists()  # nothing written, not even the folder
    (tmp_path / "existing").mkdir()
    with pytest.raises(ValueError, match="quantized to int8"):
        model.save_pretrained(tmp_path / "existing")
    assert list((tmp_path / "existing").iterdir()) == []
