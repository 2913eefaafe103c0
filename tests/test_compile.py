"""torch.compile and torch.export of ElmoModel and of every head (issue 43): the graph path
(modeling_elmo/graph_path_elmo.py).

Before the graph path, ``torch.compile(model, fullgraph=True)`` failed at the ``.item()`` of the character CNN and
``torch.export.export`` at the input check ``if bad.any():``. Most tests here compile with the ``aot_eager`` backend
(dynamo's graph capture and AOT autograd, exactly what fullgraph checks, without inductor's minutes of C++ compiling
on a small CPU); inductor itself runs in the slow tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import BATCHING_ATOL, TINY

from modeling_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    compiled_ops_elmo,
)

# Each test traces the model (10-60 s on a small shared CPU): all are slow-marked (CI still runs them).
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo's cache and its recompile_limit (8) are per code object, shared by every ElmoModel of the process (the
    forward's code): each test starts from an empty cache, as a user's process does."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _model(**overrides) -> ElmoModel:
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**{**TINY, "freeze_bilm": False, "elmo_dropout": 0.0, **overrides}))
    with torch.no_grad():  # non-zero mix weights, so that "elmo" is not the plain mean of the layers
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.5, -1.0, 1.0]))
    return model


def _batch(rows: int, words: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random words, right-padded to ``words``; row 0 full, the others of random lengths (0 included)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, words + 1, (rows,), generator=generator)
    lengths[0] = words
    mask = torch.arange(words) < lengths.unsqueeze(1)
    ids = torch.randint(1, 262, (rows, words, 50), generator=generator)
    ids[..., 20:] = 260  # padding characters after the word, as the tokenizer writes them
    return ids * mask.unsqueeze(-1), mask.long()


def _grads(model: ElmoModel) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return grads


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_fullgraph_compile_equals_eager(training):
    model = _model().train(training)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for rows, words in [(3, 5), (4, 7), (2, 9)]:  # the second shape compiles the dynamic graph, the third reuses it
        ids, mask = _batch(rows, words)
        with torch.set_grad_enabled(training):
            out = compiled(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            ref = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        for got, want in zip((out.elmo, *out.hidden_states), (ref.elmo, *ref.hidden_states), strict=True):
            torch.testing.assert_close(got, want, atol=BATCHING_ATOL, rtol=0)
            assert not got[~mask.bool()].any()  # padding exactly zero
        torch.testing.assert_close(out.mask, ref.mask, atol=0, rtol=0)
        if training:
            out.elmo.square().sum().backward()
            got = _grads(model)
            ref.elmo.square().sum().backward()
            for g, w in zip(got, _grads(model), strict=True):
                torch.testing.assert_close(g, w, atol=BATCHING_ATOL * max(1.0, w.abs().max().item()), rtol=1e-4)


def test_recompiles_stay_bounded_over_lengths_1_to_100_and_batches_1_to_64():
    """The bound: at most 5 graphs per grad mode, whatever the batch (1-64) and sentence length (1-100), within
    dynamo's default recompile_limit (8).

    By construction: the graph path has no Python branch on a value or a size (the recurrences are operators that take
    any length: compiled_ops_elmo.py), so dynamo compiles the first shape statically, then one graph with a symbolic
    batch and length, and one per size it specialises (1: batch 1, one word, both). The grid holds both ends of both
    ranges. Before the character CNN's convolutions became window products, conv1d's guard on the number of words
    (at least 16) cost 8 graphs here."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    model = _model().eval()
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    shapes = [(2, 3), (5, 9)] + [(b, w) for b in (1, 2, 17, 64) for w in (1, 2, 31, 32, 100)] + [(64, 57), (7, 1)]
    with torch.no_grad():
        for rows, words in shapes:
            ids, mask = _batch(rows, words, seed=rows * 1000 + words)
            compiled(input_ids=ids, attention_mask=mask)
    assert counter.frame_count <= 5, counter.frame_count


@pytest.mark.parametrize(
    "mask_change, message",
    [
        (lambda m: m.index_fill(1, torch.tensor([0]), 0), "right-padded"),
        (lambda m: m * 2, "only 0 .padding. and 1"),
    ],
    ids=["left-padded", "not-0-1"],
)
def test_input_checks_hold_inside_the_compiled_graph(mask_change, message):
    """Value checks run as torch._assert_async in the graph (no graph break under fullgraph): the same message, as a
    RuntimeError when the graph runs. Shape checks stay Python errors, raised while tracing."""
    compiled = torch.compile(_model().eval(), fullgraph=True, backend="aot_eager")
    ids, mask = _batch(3, 5)
    with torch.no_grad(), pytest.raises(RuntimeError, match=message):
        compiled(input_ids=ids, attention_mask=mask_change(mask))
    bad_ids = ids.clone()
    bad_ids[0, 0, 0] = 300
    with torch.no_grad(), pytest.raises(RuntimeError, match=r"character ids must be in \[0, 262\)"):
        compiled(input_ids=bad_ids, attention_mask=mask)
    with torch.no_grad(), pytest.raises(Exception, match=r"input_ids must be a \(batch, words, 50\) tensor"):
        compiled(input_ids=ids[..., :40], attention_mask=mask)


def test_a_carried_state_is_refused_under_compile():
    compiled = torch.compile(_model().eval(), fullgraph=True, backend="aot_eager")
    ids, mask = _batch(2, 4)
    with torch.no_grad(), pytest.raises(Exception, match="carried LSTM state"):
        compiled(input_ids=ids, attention_mask=mask, return_lstm_state=True)


def test_inductor_inference_equals_eager():
    """Inductor's fused kernels (what a CUDA build turns into Triton kernels): outputs within 1e-5 of eager."""
    model = _model().eval()
    compiled = torch.compile(model, fullgraph=True)
    ids, mask = _batch(3, 6)
    with torch.no_grad():
        out = compiled(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        ref = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    for got, want in zip(out.hidden_states, ref.hidden_states, strict=True):
        torch.testing.assert_close(got, want, atol=BATCHING_ATOL, rtol=0)


def _stock_program(model: ElmoModel, ids: torch.Tensor, mask: torch.Tensor):
    batch, words = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("words", min=1, max=4096)
    dims = {"input_ids": {0: batch, 1: words}, "attention_mask": {0: batch, 1: words}}
    with torch.no_grad():
        return torch.export.export(model, (), {"input_ids": ids, "attention_mask": mask}, dynamic_shapes=dims)


def test_torch_export_of_the_stock_model_with_dynamic_batch_and_words_and_onnx(tmp_path):
    """torch.export.export on ElmoModel itself (no wrapper), then torch.onnx.export(..., dynamo=True) from the
    program, run in onnxruntime: both equal eager at other batch sizes and lengths than the example's."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = _model().eval()
    program = _stock_program(model, *_batch(3, 5))
    onnx_program = torch.onnx.export(
        program, (), kwargs=dict(zip(("input_ids", "attention_mask"), _batch(3, 5), strict=True)), dynamo=True
    )
    onnx_program.save(str(tmp_path / "elmo.onnx"))
    session = ort.InferenceSession(str(tmp_path / "elmo.onnx"), providers=["CPUExecutionProvider"])
    for rows, words in [(4, 8), (2, 3), (6, 2)]:
        ids, mask = _batch(rows, words, seed=rows + words)
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=mask)
            got = program.module()(input_ids=ids, attention_mask=mask)
        for g, w in zip((got.elmo, got.last_hidden_state), (want.elmo, want.last_hidden_state), strict=True):
            torch.testing.assert_close(g, w, atol=BATCHING_ATOL, rtol=0)
        elmo = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        torch.testing.assert_close(torch.from_numpy(elmo), want.elmo, atol=BATCHING_ATOL, rtol=0)
    # The program keeps the input checks (torch._assert_async): a left-padded mask is refused when it runs.
    ids, mask = _batch(3, 5)
    with torch.no_grad(), pytest.raises(RuntimeError, match="right-padded"):
        program.module()(input_ids=ids, attention_mask=mask.index_fill(1, torch.tensor([0]), 0))


# ---------------------------------------------------------------------------------------------------- the heads

NO_DROPOUT = {"elmo_dropout": 0.0, "tagger_dropout": 0.0, "classifier_dropout": 0.0, "lm_dropout": 0.0}
HEADS = {
    "tagger": lambda: ElmoForTokenClassification(ElmoConfig(**TINY, **NO_DROPOUT, num_labels=3)),
    "crf_tagger": lambda: ElmoForTokenClassification(ElmoConfig(**TINY, **NO_DROPOUT, num_labels=3, use_crf=True)),
    "pair_classifier": lambda: ElmoForSequenceClassification(
        ElmoConfig(**TINY, **NO_DROPOUT, num_labels=3, classifier_head="pair")
    ),
    "question_answering": lambda: ElmoForQuestionAnswering(ElmoConfig(**TINY, **NO_DROPOUT)),
    # 64 negatives of 40 words: every id is taken (the sampled loss equals the full one), so compiled and eager
    # training see the same loss; fewer negatives are drawn at random, in a graph with replacement.
    "pretraining": lambda: ElmoForPreTraining(ElmoConfig(**TINY, **NO_DROPOUT, lm_vocab_size=40, lm_num_samples=64)),
}
OUTPUTS = ("loss", "logits", "start_logits", "end_logits", "forward_logits", "backward_logits")


def _head(name: str):
    torch.manual_seed(0)
    return HEADS[name]()


def _head_inputs(name: str, rows: int, words: int, seed: int = 0) -> dict:
    """A batch with partial rows (row 0 full) and each head's labels; pairs mark a second text from word 1 on."""
    generator = torch.Generator().manual_seed(seed)
    shortest = 2 if name in ("question_answering", "pair_classifier") else 1  # a word of each text
    lengths = torch.randint(shortest, words + 1, (rows,), generator=generator)
    lengths[0] = words
    mask = (torch.arange(words) < lengths.unsqueeze(1)).long()
    ids = torch.randint(1, 262, (rows, words, 50), generator=generator)
    ids[..., 20:] = 260
    ids = ids * mask.unsqueeze(-1)
    inputs = {"input_ids": ids, "attention_mask": mask}
    types = (torch.arange(words) >= 1).long().expand(rows, words) * mask
    if name in ("tagger", "crf_tagger"):
        inputs["labels"] = torch.randint(0, 3, (rows, words), generator=generator).masked_fill(mask == 0, -100)
    elif name == "pair_classifier":
        inputs["token_type_ids"] = types.clone()
        inputs["labels"] = torch.randint(0, 3, (rows,), generator=generator)
    elif name == "question_answering":
        inputs["token_type_ids"] = types.clone()
        inputs["start_positions"] = inputs["end_positions"] = torch.ones(rows, dtype=torch.long)
    else:
        inputs["labels"] = torch.randint(0, 40, (rows, words), generator=generator).masked_fill(mask == 0, -100)
    return inputs


def _trained_grads(model) -> dict[str, torch.Tensor]:
    """The gradients of the trained parameters (the frozen biLM has none), then zeroed."""
    grads = {key: p.grad.clone() for key, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return grads


def _compare(out, ref) -> None:
    for name in OUTPUTS:
        if getattr(ref, name, None) is not None:
            torch.testing.assert_close(getattr(out, name), getattr(ref, name), atol=BATCHING_ATOL, rtol=0)


@pytest.mark.parametrize("name", list(HEADS))
def test_every_head_compiles_whole_and_trains_as_eager(name):
    """torch.compile(head, fullgraph=True) in training: loss, logits and every gradient as eager (float32), on a
    batch of partial rows (one compile: the other shapes are the recompile and export tests'). Before the graph path,
    the heads broke the graph at pack_padded_sequence, at nn.LSTM (which dynamo refuses to trace), at the CRF's loop
    and at the label checks."""
    model = _head(name).train()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    inputs = _head_inputs(name, 4, 6)
    out = compiled(**inputs)
    out.loss.backward()
    got = _trained_grads(model)
    ref = model(**inputs)
    ref.loss.backward()
    _compare(out, ref)
    want = _trained_grads(model)
    assert got.keys() == want.keys() and got
    for key, w in want.items():
        torch.testing.assert_close(got[key], w, atol=BATCHING_ATOL * max(1.0, w.abs().max().item()), rtol=1e-4)
    if name in ("tagger", "crf_tagger"):  # a value check inside the graph: RuntimeError when it runs
        inputs["labels"] = inputs["labels"].masked_fill(inputs["labels"].eq(0), 7)
        with pytest.raises(RuntimeError, match=r"labels must be in \[0, 3\)"):
            compiled(**inputs)
    if name == "question_answering":
        inputs["token_type_ids"][0, 0] = 1
        inputs["token_type_ids"][0, 1] = 0  # a question word after a context word
        with pytest.raises(RuntimeError, match="token_type_ids must be 0s, then 1s"):
            compiled(**inputs)


def test_a_crf_tagger_compiles_with_inductor_at_inference():
    """Inductor's kernels for the heads' scans (the 2-layer task BiLSTM and the CRF's forward-backward): logits
    within 1e-5 of eager."""
    model = _head("crf_tagger").eval()
    compiled = torch.compile(model, fullgraph=True)
    inputs = _head_inputs("crf_tagger", 3, 6)
    del inputs["labels"]
    with torch.no_grad():
        _compare(compiled(**inputs), model(**inputs))


def test_a_heads_recompiles_stay_bounded_over_lengths_and_batches():
    """The CRF tagger (biLM, a 2-layer task BiLSTM and the CRF: every recurrence of the heads) over batches 1-64 and
    lengths 1-100, in training then at inference in one process: at most 5 graphs in training (the first shape
    static, then symbolic sizes, batch 1, one word, both) and 4 at inference (already symbolic). Together that is 9,
    one more than dynamo's default recompile_limit (8) when a process meets every size-1 corner in both modes
    (measured; raise ``torch._dynamo.config.recompile_limit`` there). A Trainer-like process (batches of several
    sentences of several words, a smaller last batch, then evaluation) stays below: 4 graphs.

    The 9 are dynamo's, not the model's: a plain ``nn.Linear`` over ``(batch, words, features)`` in the same process
    takes as many (measured: 5 and 4), and the tagger must take no more than it."""
    from torch._dynamo.testing import CompileCounter

    def count(plan) -> list[int]:
        counter, graphs = CompileCounter(), []
        model = _head("crf_tagger")
        compiled = torch.compile(model, fullgraph=True, backend=counter)
        for training, shapes in plan:
            model.train(training)
            for rows, words in shapes:
                inputs = _head_inputs("crf_tagger", rows, words, seed=rows * 1000 + words)
                with torch.set_grad_enabled(training):
                    out = compiled(**inputs)
                if training:
                    out.loss.backward()
            graphs.append(counter.frame_count - sum(graphs))
        torch._dynamo.reset()
        return graphs

    def linear_count(plan) -> list[int]:
        counter, graphs = CompileCounter(), []
        linear = torch.nn.Linear(8, 3)
        compiled = torch.compile(linear, fullgraph=True, backend=counter)
        for training, shapes in plan:
            for rows, words in shapes:
                with torch.set_grad_enabled(training):
                    out = compiled(torch.randn(rows, words, 8)).sum()
                if training:
                    out.backward()
            graphs.append(counter.frame_count - sum(graphs))
        torch._dynamo.reset()
        return graphs

    corners = [(2, 3), (5, 9)] + [(b, w) for b in (1, 64) for w in (1, 31, 32, 100)] + [(17, 57)]
    with torch._dynamo.config.patch(recompile_limit=64):
        training, inference = count([(True, corners), (False, corners)])
        plain = linear_count([(True, corners), (False, corners)])
    assert training <= 5 and inference <= 4, (training, inference)
    assert training + inference <= sum(plain), (training, inference, plain)
    trainer_like = count([(True, [(8, 12), (8, 30), (8, 21), (5, 17)]), (False, [(16, 40), (16, 25), (3, 9)])])
    assert sum(trainer_like) <= 4, trainer_like


@pytest.mark.parametrize("name", ["crf_tagger", "pair_classifier", "question_answering", "pretraining"])
def test_torch_export_of_every_head_with_dynamic_batch_and_words(name):
    """torch.export.export on the head itself, batch and words dynamic (down to 1 word): the program equals eager at
    another batch size and length than the example's."""
    model = _head(name).eval()
    example = _head_inputs(name, 3, 5)
    keys = [key for key in ("input_ids", "attention_mask", "token_type_ids") if key in example]
    batch, words = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("words", min=1, max=4096)
    with torch.no_grad():
        program = torch.export.export(
            model, (), {key: example[key] for key in keys}, dynamic_shapes={key: {0: batch, 1: words} for key in keys}
        )
        for rows, length in [(4, 8), (1, 2)]:
            inputs = _head_inputs(name, rows, length, seed=rows + length)
            inputs = {key: inputs[key] for key in keys}
            _compare(program.module()(**inputs), model(**inputs))


# ------------------------------------------------------------------------------ inductor: the default torch.compile

TRAINED = {
    # ElmoModel with its biLM and mix trained: the elmo::bilstm_layer operator's backward.
    "elmo": lambda: _model(),
    "tagger_crf_2_layers": lambda: ElmoForTokenClassification(
        ElmoConfig(**TINY, **NO_DROPOUT, num_labels=3, use_crf=True, tagger_num_layers=2)
    ),
    "tagger_1_layer": lambda: ElmoForTokenClassification(
        ElmoConfig(**TINY, **NO_DROPOUT, num_labels=3, use_crf=False, tagger_num_layers=1)
    ),
    "sentence_classifier": lambda: ElmoForSequenceClassification(ElmoConfig(**TINY, **NO_DROPOUT, num_labels=3)),
    "pair_classifier": HEADS["pair_classifier"],
    "question_answering": HEADS["question_answering"],
    "pretraining": HEADS["pretraining"],
}


def _trained_inputs(name: str, rows: int, words: int, seed: int) -> dict:
    if name == "elmo":
        ids, mask = _batch(rows, words, seed)
        return {"input_ids": ids, "attention_mask": mask}
    head = {"tagger_crf_2_layers": "tagger", "tagger_1_layer": "tagger", "sentence_classifier": "pair_classifier"}
    inputs = _head_inputs(head.get(name, name), rows, words, seed)
    if name == "sentence_classifier":
        del inputs["token_type_ids"]
    return inputs


def _loss(name: str, out) -> torch.Tensor:
    return out.elmo.square().sum() if name == "elmo" else out.loss


def _same_gradients(got: dict, want: dict) -> None:
    """Every gradient within 1e-5 relative, to the model's largest gradient as the scale (a gradient that is zero up
    to rounding, the bias of a softmax over positions, has no scale of its own). Measured: 4e-8 at most."""
    assert got.keys() == want.keys() and got
    scale = max(w.abs().max().item() for w in want.values())
    for key, w in want.items():
        torch.testing.assert_close(got[key], w, rtol=1e-5, atol=1e-5 * scale, msg=lambda m, key=key: f"{key}: {m}")


def _step_as_eager(name: str, model, compiled, inputs: dict) -> None:
    """One training step of ``compiled`` and of ``model`` (eager) on ``inputs``: the same loss and gradients."""
    out = compiled(**inputs)
    _loss(name, out).backward()
    got = _trained_grads(model)
    ref = model(**inputs)
    _loss(name, ref).backward()
    want = _trained_grads(model)
    torch.testing.assert_close(_loss(name, out), _loss(name, ref), rtol=1e-5, atol=1e-6)
    _same_gradients(got, want)


@pytest.mark.parametrize("name", list(TRAINED))
def test_inductor_training_gradients_equal_eager(name):
    """Plain ``torch.compile(model)`` (inductor, what ``Trainer(torch_compile=True)`` runs): one training step's loss
    and every gradient as eager's (1e-5 relative), on a first shape (a static graph) and a second (the dynamic one).
    Before the recurrences were operators, the first call failed in inductor's scan lowering for every model
    (``DataDependentOutputException``), and static graphs gave the 2-layer task BiLSTM and the CRF wrong gradients."""
    model = TRAINED[name]().train()
    compiled = torch.compile(model)
    for rows, words, seed in [(4, 6, 0), (3, 9, 1)]:
        inputs = _trained_inputs(name, rows, words, seed)
        _step_as_eager(name, model, compiled, inputs)


@pytest.mark.parametrize("name", ["elmo", "tagger_crf_2_layers", "question_answering"])
def test_the_cuda_layout_runs_on_the_cpu_as_eager(name, monkeypatch):
    """What the compiled path runs on CUDA, where it reads no value into Python (``compiled_ops_elmo.reads_values``:
    inductor's character CNN over all positions, every step of the padded batch, the torch steps of
    ``bptt_elmo.py``), here on the CPU, where no GPU tests it: inference outputs, the loss and every gradient as
    eager's, in the static graph and the dynamic one."""
    monkeypatch.setattr(compiled_ops_elmo, "reads_values", lambda device: False)
    monkeypatch.setattr(compiled_ops_elmo, "_native_bptt", lambda tensor: False)
    model = TRAINED[name]().train()
    compiled = torch.compile(model)
    for rows, words, seed in [(4, 6, 0), (3, 9, 1)]:
        inputs = _trained_inputs(name, rows, words, seed)
        with torch.no_grad():
            model.eval()
            for key in (*OUTPUTS, "elmo"):
                got, want = getattr(compiled(**inputs), key, None), getattr(model(**inputs), key, None)
                if want is not None:
                    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=key)
            model.train()
        _step_as_eager(name, model, compiled, inputs)


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_gradient_checkpointing_under_compile_gives_eager_gradients(reentrant):
    """``gradient_checkpointing_enable`` (what ``Trainer(gradient_checkpointing=True)`` calls) and plain
    ``torch.compile`` together, the biLM trained: every gradient as eager's. The reentrant checkpoint runs the layers'
    forward without gradients (the inference operators), then again with them (the training operators)."""
    grads = []
    ids, mask = _batch(3, 6)
    for compiled in (False, True):
        model = _model().train()  # (checkpointing applies in training mode)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        assert model.is_gradient_checkpointing
        module = torch.compile(model) if compiled else model
        out = module(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        sum(layer.pow(2).mean() for layer in out.hidden_states).backward()
        grads.append({name: p.grad for name, p in model.named_parameters() if p.grad is not None})
    eager, compiled_grads = grads
    assert any(name.startswith("bilm.") for name in eager)
    for name, want in eager.items():  # (compiled also gives the unused mixes zeros where eager leaves None)
        torch.testing.assert_close(compiled_grads[name], want, rtol=1e-5, atol=1e-7, msg=name)


def test_question_answering_trains_compiled_under_bfloat16_autocast_with_finite_gradients():
    """Compiled QA training under CPU bfloat16 autocast (``Trainer(bf16=True)``): the attention's max over the
    question took ``amax``, whose gradient divides by the count of entries equal to the max; inductor's kernels
    recompute the entries in float32 against the bfloat16 max, the count came to 0, and every gradient upstream of
    the attention was NaN (eager's were finite)."""
    model = TRAINED["question_answering"]().train()
    inputs = _trained_inputs("question_answering", 4, 6, 0)
    for module in (model, torch.compile(model)):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = module(**inputs)
        out.loss.backward()
        grads = _trained_grads(model)
        assert grads and all(torch.isfinite(g).all() for g in grads.values()), [
            name for name, g in grads.items() if not torch.isfinite(g).all()
        ]


def test_inductor_runs_the_eager_character_encoder_for_every_encoder_structure():
    """The compiled character encoder (``elmo::token_layer``: the eager encoder itself, each distinct word once) on an
    ELMoForManyLangs-shaped model: its own character vocabulary and padding id, a word input, tanh, 2 highways. The
    elmo mix and every gradient as eager's, in a static then a dynamic graph; a word repeated in a batch counts once
    in the encoder but its gradient flows from each of its positions."""
    torch.manual_seed(0)
    config = ElmoConfig(
        **{**TINY, "char_cnn_filters": [[1, 3], [2, 5]], "n_highway": 2},
        char_vocabulary="manylangs", n_characters=20, word_vocab_size=11, word_embedding_dim=3,
        char_cnn_activation="tanh", freeze_bilm=False, elmo_dropout=0.0,
    )  # fmt: skip
    model = ElmoModel(config).train()
    compiled = torch.compile(model)
    for rows, words, seed in [(3, 5, 0), (4, 8, 1)]:
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(7, 20, (rows, words, 50), generator=generator)
        ids[..., 6:] = model.char_cnn.padding_id
        ids[1, 1] = ids[0, 0]  # a repeated word
        vocab_ids = torch.randint(0, 11, (rows, words), generator=generator)
        mask = (torch.arange(words) < torch.tensor([words, *range(2, rows + 1)]).unsqueeze(1)).long()
        inputs = dict(input_ids=ids * mask.unsqueeze(-1), attention_mask=mask, vocab_ids=vocab_ids)
        compiled(**inputs).elmo.square().sum().backward()
        got = _grads(model)
        model(**inputs).elmo.square().sum().backward()
        want = _grads(model)
        names = [name for name, _ in model.named_parameters()]
        assert got[names.index("char_cnn.char_embedding.weight")].abs().max() > 0  # the encoder trains
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, atol=BATCHING_ATOL * max(1.0, w.abs().max().item()), rtol=1e-5)


def test_inductor_fullgraph_inference_and_training_of_the_crf_tagger():
    """``fullgraph=True`` with inductor: every recurrence of the heads (biLM, 2-layer task BiLSTM, CRF) in one graph,
    at inference (logits) and in training (gradients), as eager."""
    model = TRAINED["tagger_crf_2_layers"]()
    compiled = torch.compile(model, fullgraph=True)
    inputs = _trained_inputs("tagger_crf_2_layers", 3, 7, 2)
    with torch.no_grad():
        _compare(compiled(**inputs), model.eval()(**inputs))
    model.train()
    compiled(**inputs).loss.backward()
    got = _trained_grads(model)
    model(**inputs).loss.backward()
    _same_gradients(got, _trained_grads(model))


def test_a_batch_of_no_sentences_compiles():
    """Issue 49: a batch of 0 sentences returns (0, W, 2P) layers as eager does (the compiled character CNN's
    reshape to (0, T, -1) failed)."""
    model = _model().eval()
    compiled = torch.compile(model, backend="aot_eager")
    ids = torch.zeros(0, 5, 50, dtype=torch.long)
    with torch.no_grad():
        out = compiled(input_ids=ids, output_hidden_states=True)
        ref = model(input_ids=ids, output_hidden_states=True)
    assert out.elmo.shape == ref.elmo.shape == (0, 5, 2 * TINY["projection_dim"])
    assert [h.shape for h in out.hidden_states] == [h.shape for h in ref.hidden_states]


def test_an_int8_biLM_is_refused_under_compile_by_name():
    from modeling_elmo.inference.quantize import quantize_int8

    compiled = torch.compile(quantize_int8(_model().eval()), backend="aot_eager")
    ids, mask = _batch(2, 4)
    with torch.no_grad(), pytest.raises(Exception, match="Int8BiLstmLayer layers .* run it eagerly"):
        compiled(input_ids=ids, attention_mask=mask)


def test_trainer_with_torch_compile_trains_as_eager(tmp_path):
    """``Trainer(torch_compile=True)`` (inductor, plain ``torch.compile``) on the CRF tagger with a 2-layer task
    BiLSTM: after two steps every weight as with an eager Trainer.

    SGD with a learning rate of 1, so that each update is the gradient itself: Adam's first steps are
    ``lr * g / (|g| + 1e-8)``, which turns gradient components of 1e-12 to 1e-8 (present here, with rounding
    differences of ~1e-8 between eager's per-step sums and the compiled backward's all-steps products) into steps
    of any size up to ``lr``."""
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    from modeling_elmo import ElmoTokenizer, demo_model_path

    tokenizer = ElmoTokenizer.from_pretrained(demo_model_path())
    words = [s.split() for s in ("EU rejects German call .", "Peter Blackburn", "a b c d e f g")] * 3
    rows = [{**tokenizer(w, is_split_into_words=True), "labels": [k % 3 for k in range(len(w))]} for w in words]
    weights, initial = {}, {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = TRAINED["tagger_crf_2_layers"]()
        initial = {key: p.detach().clone() for key, p in model.named_parameters()}
        args = TrainingArguments(
            output_dir=str(tmp_path / str(compiled)), torch_compile=compiled, max_steps=2, report_to=[],
            per_device_train_batch_size=4, save_strategy="no", disable_tqdm=True, use_cpu=True, seed=0,
            optim="sgd", learning_rate=1.0, lr_scheduler_type="constant",
        )  # fmt: skip
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            data_collator=DataCollatorForTokenClassification(tokenizer),
        )
        trainer.train()
        weights[compiled] = {key: p.detach().clone() for key, p in model.named_parameters()}
    for key, want in weights[False].items():
        torch.testing.assert_close(weights[True][key], want, rtol=1e-5, atol=1e-6, msg=key)
    moved = [key for key, want in weights[False].items() if (want - initial[key]).abs().max() > 1e-3]
    assert any("encoder.lstm" in key for key in moved) and any("crf" in key for key in moved), moved


def test_the_operators_namespace_changes_with_their_source():
    """torch's compile caches key a compiled backward on its forward graph alone (pytorch/pytorch#144344; the stale
    backward of an older version once crashed this suite: ``task_lstm_layer_train_backward() expected at most 4
    argument(s) but received 6``). The operators' names carry a hash of their module's source, so that a cache
    written by another version of ``compiled_ops_elmo.py`` is never read."""
    source = Path(compiled_ops_elmo.__file__).read_bytes()
    package = "modeling_elmo.compiled_ops_elmo"
    assert compiled_ops_elmo.NAMESPACE == compiled_ops_elmo.operator_namespace(package, source)
    assert compiled_ops_elmo.operator_namespace(package, source + b"\n# changed\n") != compiled_ops_elmo.NAMESPACE
    remote = compiled_ops_elmo.operator_namespace("transformers_modules.folder.compiled_ops_elmo", source)
    assert remote != compiled_ops_elmo.NAMESPACE and remote.isidentifier()
    assert getattr(torch.ops, compiled_ops_elmo.NAMESPACE).token_layer_train is not None


_CACHED_STEP = """
import sys
import torch
sys.path.insert(0, sys.argv[1])  # the tests' helpers
from helpers import TINY
import modeling_elmo
from modeling_elmo import ElmoConfig, ElmoForTokenClassification

torch.manual_seed(0)
config = ElmoConfig(**TINY, num_labels=3, tagger_num_layers=1, tagger_dropout=0.0, elmo_dropout=0.0)
model = ElmoForTokenClassification(config).train()
ids = torch.randint(1, 262, (2, 4, 50), generator=torch.Generator().manual_seed(0))
ids[..., 8:] = 260
labels = torch.tensor([[0, 1, 2, 1], [2, 0, 1, 0]])
torch.compile(model)(input_ids=ids, attention_mask=torch.ones(2, 4, dtype=torch.long), labels=labels).loss.backward()
print(modeling_elmo.__file__, float(model.encoder.lstm.weight_ih_l0.grad.abs().sum()))
"""


def test_a_compile_cache_written_by_another_version_of_the_operators_is_never_read(tmp_path):
    """Two processes share one inductor cache folder. The first trains a compiled tagger step with the package; the
    second with a copy of it whose training operators' autograd formula doubles every gradient. The second must run
    its own backward (the task BiLSTM's weight gradients doubled), not the one the first left in the cache: torch
    keys a compiled backward on its forward graph alone (pytorch/pytorch#144344), so only the operators' names, which
    carry a hash of their source, keep the two apart."""
    copy = tmp_path / "copy"
    shutil.copytree(
        Path(compiled_ops_elmo.__file__).parent, copy / "modeling_elmo", ignore=shutil.ignore_patterns("__pycache__")
    )
    source = copy / "modeling_elmo" / "compiled_ops_elmo.py"
    text = source.read_text(encoding="utf-8")
    line = "        return grads, (None if ctx.consts else [])  # as [`_define`]'s formula\n"
    assert text.count(line) == 1
    source.write_text(text.replace(line, "        grads = [None if g is None else 2 * g for g in grads]\n" + line))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    runs = []
    for python_path in (
        os.environ.get("PYTHONPATH", ""),
        os.pathsep.join([str(copy), os.environ.get("PYTHONPATH", "")]),
    ):
        result = subprocess.run(
            [sys.executable, "-c", _CACHED_STEP, str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": python_path},
            timeout=600,
            cwd=tmp_path,
        )  # fmt: skip (cwd: not the repository, whose modeling_elmo python -c would import first)
        assert result.returncode == 0, result.stderr[-3000:]
        package, gradient = result.stdout.split()
        runs.append((Path(package), float(gradient)))
    (package, first), (copied, second) = runs
    assert copied.is_relative_to(copy) and not package.is_relative_to(copy)  # each process ran its own version
    assert first > 0
    torch.testing.assert_close(second, 2 * first, rtol=1e-5, atol=0)
