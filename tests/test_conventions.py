"""transformers conventions of the model classes (issue 14): one door into ElmoModel (checked on the source with
``ast``), model code without the tokenizer, ``set_input_embeddings``, ``output_hidden_states``/``return_dict`` in
the heads, one initialisation policy, ``from_pretrained(None, config=, state_dict=)``, and the post-load hook."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import PreTrainedModel

from modeling_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from modeling_elmo.inference.tf_hub import embed_sentences

PACKAGE = Path(__file__).resolve().parent.parent / "modeling_elmo"
TINY = dict(
    char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], n_highway=1, lstm_dim=16, projection_dim=8, n_layers=2
)
LABELS = {"id2label": {0: "O", 1: "B-X", 2: "I-X"}, "label2id": {"O": 0, "B-X": 1, "I-X": 2}}
TAGGER = dict(tagger_hidden_size=8, tagger_num_layers=1, tagger_dropout=0.0, elmo_dropout=0.0, **LABELS)

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------ one door: the source check

# Expressions that hold an ElmoModel in the package's heads, commands and tools: `<anything>.elmo` (the heads'
# base_model_prefix), `base_model`, `self.model` (the export wrapper), and names bound to `ElmoModel(...)` or
# `ElmoModel.from_pretrained(...)`.
ELMO_ATTRIBUTES = {"elmo", "base_model"}


def _is_elmo_constructor(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    while isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id == "ElmoModel":
            return True
        func = func.value
    return isinstance(func, ast.Name) and func.id == "ElmoModel"


def private_accesses(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: expr._name`` for every underscore-prefixed attribute read off an ElmoModel expression."""
    tree = ast.parse(source, filename)
    names = {"elmo"}
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and node.value is not None
            and _is_elmo_constructor(node.value)
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    found = []
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        base = node.value
        is_elmo = (
            (isinstance(base, ast.Attribute) and base.attr in ELMO_ATTRIBUTES)
            or (isinstance(base, ast.Name) and base.id in names)
            or (isinstance(base, ast.Attribute) and base.attr == "model" and isinstance(base.value, ast.Name))
        )
        if is_elmo:
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_private_reads_of_an_elmo_model():
    source = """
from modeling_elmo import ElmoModel
class Head:
    def forward(self, ids):
        mask = self.elmo._word_mask(ids, None)
        ids = self.model._boundary_ids
        self._own_helper()            # the head's own member: allowed
        return torch._higher_order_ops  # not an ElmoModel
def tool(path):
    base = ElmoModel.from_pretrained(path)
    base._states = None
    head.elmo.bilm.layers            # public: allowed
    return head.base_model._token_cache
"""
    found = private_accesses(source)
    assert [line.split(": ", 1)[1] for line in found] == [
        "self.elmo._word_mask",
        "self.model._boundary_ids",
        "base._states",
        "head.base_model._token_cache",
    ]


def test_no_head_command_or_tool_reads_a_private_member_of_elmo_model():
    """Everything outside modeling_elmo.py (sub-packages and the elmo command too) uses ElmoModel's public members
    only."""
    files = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "modeling_elmo.py") + [PACKAGE.parent / "elmo_cli.py"]
    assert {"modeling_elmo_tagging.py", "export.py", "train_lm.py", "elmo_cli.py"} <= {p.name for p in files}
    found = [hit for path in files for hit in private_accesses(path.read_text(encoding="utf-8"), str(path))]
    assert not found, "\n".join(found)


def test_model_code_does_not_import_the_tokenizer():
    tree = ast.parse((PACKAGE / "modeling_elmo.py").read_text(encoding="utf-8"))
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)] + [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    ]
    assert not [name for name in imported if "tokeniz" in name], imported


def test_embed_sentences_needs_the_callers_tokenizer():
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**TINY))
    with pytest.raises(TypeError, match="tokenizer"):
        embed_sentences(model, ["A sentence ."])
    vectors = embed_sentences(model, ["A sentence ."], tokenizer=ElmoTokenizer())
    assert vectors.shape == (1, 16)


# ------------------------------------------------------------------------ the three classes


def _models(**overrides) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "base": ElmoModel(ElmoConfig(**TINY, **overrides)),
        "lm": ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=11, lm_num_samples=0, **overrides)),
        "tagger": ElmoForTokenClassification(ElmoConfig(**TINY, **TAGGER, **overrides)),
    }


def _batch() -> dict[str, torch.Tensor]:
    return ElmoTokenizer()(["The cat sat .", "Hi"], padding=True, return_tensors="pt")


@pytest.mark.parametrize("kind", ["base", "lm", "tagger"])
def test_set_input_embeddings_replaces_the_character_embedding(kind):
    model = _models()[kind].eval()
    replacement = nn.Embedding(262, model.config.char_embedding_dim, padding_idx=0)
    model.set_input_embeddings(replacement)
    assert model.get_input_embeddings() is replacement
    base = model if kind == "base" else model.elmo
    assert base.char_cnn.char_embedding is replacement
    calls = []
    replacement.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        model(**_batch())
    assert calls, "the new character encoder was not used"


@pytest.mark.parametrize("kind", ["lm", "tagger"])
def test_heads_return_hidden_states_when_asked_or_configured(kind):
    batch = _batch()
    model = _models()[kind].eval()
    n_layers = model.config.n_layers
    with torch.no_grad():
        assert model(**batch).hidden_states is None
        asked = model(**batch, output_hidden_states=True)
        as_tuple = model(**batch, output_hidden_states=True, return_dict=False)
        configured = _models(output_hidden_states=True)[kind].eval()(**batch)
    assert len(asked.hidden_states) == n_layers + 1
    assert all(h.shape == (2, 4, 16) for h in asked.hidden_states)
    assert isinstance(as_tuple, tuple) and any(x is not None and len(x) == n_layers + 1 for x in as_tuple[1:])
    assert configured.hidden_states is not None and len(configured.hidden_states) == n_layers + 1


@contextlib.contextmanager
def seeded_initialisation(seed: int = 42):
    """Seed before each module's initialisation, as transformers' common tests do (``seeded_weight_init``): the
    random draws of torch's own constructors then do not matter, only ``_init_weights``'s."""
    original = PreTrainedModel._initialize_weights

    def seeded(*args, **kwargs):
        torch.manual_seed(seed)
        original(*args, **kwargs)

    PreTrainedModel._initialize_weights = seeded
    try:
        yield
    finally:
        PreTrainedModel._initialize_weights = original


def test_lm_head_init_weights_gives_the_same_weights_as_init():
    """One initialisation policy: re-running the initialisation gives __init__'s weights, the original's training
    scales included (carry-gate bias -2, character embedding U(-1, 1))."""
    config = ElmoConfig(**TINY, lm_vocab_size=11)
    with seeded_initialisation():
        built = ElmoForPreTraining(config)
    again = ElmoForPreTraining(config)
    for tensor in (*again.parameters(), *again.buffers(), *again.modules()):  # forget "already initialised"
        tensor.__dict__.pop("_is_hf_initialized", None)
    with seeded_initialisation():
        again.init_weights()
    differ = [k for k, v in built.state_dict().items() if not torch.equal(v, again.state_dict()[k])]
    assert not differ, differ
    assert torch.all(built.elmo.char_cnn.highways[0].carry.bias == -2.0)
    assert built.elmo.char_cnn.char_embedding.weight[1:].abs().max() > 0.5  # U(-1, 1), not N(0, 0.05)


def test_from_pretrained_without_a_path_and_missing_head_weights_reported(tmp_path):
    torch.manual_seed(0)
    base = ElmoModel(ElmoConfig(**TINY))
    loaded = ElmoModel.from_pretrained(None, config=base.config, state_dict=base.state_dict())
    for key, value in base.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    config = ElmoConfig(**TINY, **TAGGER)
    state = {f"elmo.{k}": v for k, v in base.state_dict().items() if k.startswith(("char_cnn.", "bilm."))}
    tagger, info = ElmoForTokenClassification.from_pretrained(
        None, config=config, state_dict=state, output_loading_info=True
    )
    # The new head is initialised and listed as missing (it is untrained); the mixes are declared optional, not listed.
    assert {key.split(".")[0] for key in info["missing_keys"]} == {"encoder", "classifier", "crf"}
    assert torch.isfinite(tagger.classifier.weight).all()
    assert tagger.classifier.weight.abs().max() > 0
    assert torch.equal(tagger.elmo.bilm.layers[0].input_kernel, base.bilm.layers[0].input_kernel)
    # The checks stay: a base model whose shapes do not fit the config is a named error.
    with pytest.raises(ValueError, match="do not fit the config"):
        ElmoModel.from_pretrained(None, config=ElmoConfig(**{**TINY, "lstm_dim": 8}), state_dict=base.state_dict())


def test_freezing_follows_the_config_after_init_and_after_loading_without_writing_it(tmp_path):
    config = ElmoConfig(**TINY, **TAGGER)
    tagger = ElmoForTokenClassification(config)
    bilm = [p for m in (tagger.elmo.char_cnn, tagger.elmo.bilm) for p in m.parameters()]
    assert not any(p.requires_grad for p in bilm)
    tagger.freeze_bilm(False)
    assert all(p.requires_grad for p in bilm) and tagger.config.freeze_bilm  # the config is not written
    assert tagger.config.num_output_representations == 1 and len(tagger.elmo.scalar_mixes) == 1
    tagger.save_pretrained(tmp_path)
    loaded = ElmoForTokenClassification.from_pretrained(tmp_path)  # the post-load hook freezes again
    assert not any(p.requires_grad for m in (loaded.elmo.char_cnn, loaded.elmo.bilm) for p in m.parameters())
    assert all(p.requires_grad for p in loaded.elmo.scalar_mixes.parameters())
