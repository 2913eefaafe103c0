"""Tests of the biLM language-model head (ElmoForPreTraining), its data pipeline and the train_lm command.

Everything runs on tiny models and corpora generated here (a small template grammar), on the CPU.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil

import pytest
import torch
import torch.nn.functional as F
from helpers import BATCHING_ATOL, run_two_processes
from huggingface_hub import ModelCard

from modeling_elmo import ElmoConfig, ElmoForPreTraining, ElmoModel, ElmoTokenizer
from modeling_elmo.modeling_elmo_pretraining import shift_labels
from modeling_elmo.training.lm_data import ElmoLMCollator, build_vocab, make_windows

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(lstm_dim=32, projection_dim=8, char_cnn_filters=[[1, 4], [2, 4]], n_highway=1, char_embedding_dim=4)
# The same sizes as command-line flags (one LSTM layer: the command tests are about the pipeline, not depth).
TINY_FLAGS = [
    "--lstm_dim", "16", "--projection_dim", "8", "--n_layers", "1", "--n_highway", "1",
    "--char_embedding_dim", "4", "--char_cnn_filters", "1:4,2:4",
]  # fmt: skip
# Two gloo processes; a rank left waiting in a collective fails within 2 minutes (the default waits 30).
DDP_FLAGS = ["--ddp_backend", "gloo", "--ddp_timeout", "120"]

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "her sister"]
VERBS = ["sees", "likes", "finds", "eats", "hears"]
OBJECTS = ["the fish", "a ball", "the red car", "some bread", "a small house"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("corpus")
    paths = {}
    for name, n, seed in (("train", 240, 0), ("eval", 24, 1)):
        paths[name] = str(folder / f"{name}.txt")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write("\n".join(_sentences(n, seed)) + "\n")
    return paths


def _vocab() -> dict[str, int]:
    words = build_vocab(s.split() for s in _sentences(200, 0))
    return {w: i for i, w in enumerate(words)}


def _model(vocab_size: int, seed: int = 0, **overrides) -> ElmoForPreTraining:
    torch.manual_seed(seed)
    config = ElmoConfig(**TINY, lm_vocab_size=vocab_size, **{"lm_dropout": 0.0, **overrides})
    return ElmoForPreTraining(config)


def _batch(tokenizer: ElmoTokenizer, sentences: list[str]) -> dict[str, torch.Tensor]:
    enc = tokenizer(sentences, padding=True, return_vocab_ids=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": enc["vocab_ids"]}


def _run_main(argv: list[str]) -> None:
    from modeling_elmo.training.train_lm import main

    assert main(argv) == 0


def _results(folder: str) -> dict:
    with open(os.path.join(folder, "eval_results.json")) as f:
        return json.load(f)


# --------------------------------------------------------------------------------------------------
# (a) The head's shifting against a plain loop over words


def test_head_losses_match_a_loop_over_words():
    vocab = _vocab()
    tokenizer = ElmoTokenizer(vocab=vocab)
    model = _model(len(vocab)).eval()
    with torch.no_grad():
        model.softmax.bias.normal_()  # a non-zero bias is part of the check
    sentences = ["the cat sees a ball .", "a dog eats", "unknownword likes the fish ."]
    batch = _batch(tokenizer, sentences)
    batch["labels"][2, 3] = -100  # an ignored word: no target points at it
    out = model(**batch, return_logits=True, output_hidden_states=True)

    bos, eos = vocab["<S>"], vocab["</S>"]
    top = out.hidden_states[-1]
    p = model.config.projection_dim
    forward_terms, backward_terms = [], []
    for row, n in enumerate(batch["attention_mask"].sum(1).tolist()):
        ids = batch["labels"][row, :n].tolist()
        for k in range(n):
            forward_target = ids[k + 1] if k + 1 < n else eos
            backward_target = ids[k - 1] if k > 0 else bos
            forward_logits = top[row, k, :p] @ model.softmax.weight.t() + model.softmax.bias
            backward_logits = top[row, k, p:] @ model.softmax.weight.t() + model.softmax.bias
            assert torch.allclose(out.forward_logits[row, k], forward_logits, atol=1e-5)
            assert torch.allclose(out.backward_logits[row, k], backward_logits, atol=1e-5)
            if forward_target != -100:
                forward_terms.append(F.cross_entropy(forward_logits[None], torch.tensor([forward_target])))
            if backward_target != -100:
                backward_terms.append(F.cross_entropy(backward_logits[None], torch.tensor([backward_target])))
    assert ids[0] == vocab["<UNK>"]  # out-of-vocabulary word: <UNK>
    assert len(forward_terms) == len(backward_terms) == 6 + 3 + 5 - 1
    forward_loss = torch.stack(forward_terms).mean()
    backward_loss = torch.stack(backward_terms).mean()
    torch.testing.assert_close(out.forward_loss, forward_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.backward_loss, backward_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, (forward_loss + backward_loss) / 2, atol=1e-5, rtol=1e-5)
    assert out.forward_logits.shape == (3, 6, len(vocab))

    # Exact per-sentence sums agree with the batch means.
    sums, counts = model.sentence_losses(**batch)
    torch.testing.assert_close(sums.sum(0) / counts.sum(0), torch.stack([forward_loss, backward_loss]))


def test_shift_labels_boundaries_and_padding():
    labels = torch.tensor([[5, 6, 7], [8, -100, -100], [-100, -100, -100]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]]).bool()
    forward, backward = shift_labels(labels, mask, bos_id=0, eos_id=1)
    assert forward.tolist() == [[6, 7, 1], [1, -100, -100], [-100] * 3]
    assert backward.tolist() == [[0, 5, 6], [0, -100, -100], [-100] * 3]
    forward, backward = shift_labels(labels, mask, 0, 1, boundary_labels=torch.tensor([[9, 4], [-100, 3], [0, 1]]))
    assert forward.tolist() == [[6, 7, 4], [3, -100, -100], [-100] * 3]
    assert backward.tolist() == [[9, 5, 6], [-100, -100, -100], [-100] * 3]


def test_bad_inputs_raise_clear_errors():
    vocab = _vocab()
    model = _model(len(vocab))
    batch = _batch(ElmoTokenizer(vocab=vocab), ["the cat sees", "a dog"])
    with pytest.raises(ValueError, match="labels must be word ids in"):
        model(**{**batch, "labels": batch["labels"].masked_fill(batch["labels"] >= 0, len(vocab))})
    with pytest.raises(ValueError, match="labels must be \\(batch, words\\)"):
        model(**{**batch, "labels": batch["labels"][:, :2]})
    with pytest.raises(ValueError, match="lm_vocab_size >= 1"):
        ElmoForPreTraining(ElmoConfig(**TINY))
    with pytest.raises(ValueError, match="stateless"):
        ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=5, stateful=True))
    with pytest.raises(ValueError, match="lm_num_samples must be a non-negative"):
        ElmoConfig(**TINY, lm_num_samples=-1)


# --------------------------------------------------------------------------------------------------
# (b) Sampled softmax with every word sampled is the full softmax; bounded memory with a big vocabulary


def test_sampled_loss_with_all_words_equals_full_loss_through_the_head():
    vocab = _vocab()
    batch = _batch(ElmoTokenizer(vocab=vocab), ["the cat sees a ball .", "a dog eats", "her sister"])
    model = _model(len(vocab), lm_num_samples=len(vocab) + 3)
    sampled = model.train()(**batch)
    full = model.eval()(**batch)
    torch.testing.assert_close(sampled.forward_loss, full.forward_loss)
    torch.testing.assert_close(sampled.backward_loss, full.backward_loss)
    torch.testing.assert_close(sampled.loss, full.loss)


def test_sampled_training_never_builds_batch_by_vocab():
    vocab_size, samples = 200_000, 64
    model = _model(vocab_size, lm_num_samples=samples, lm_dropout=0.1).train()
    tokenizer = ElmoTokenizer()
    batch = tokenizer(["a b c d e", "f g h", "i j k l"], padding=True, return_tensors="pt")
    labels = torch.randint(0, vocab_size, batch["attention_mask"].shape).masked_fill(batch["attention_mask"] == 0, -100)
    rows = labels.numel()

    largest = 0

    def pack(tensor):
        nonlocal largest
        largest = max(largest, tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = model(**batch, labels=labels)
    out.loss.backward()
    assert out.forward_logits is None and torch.isfinite(out.loss)
    # Nothing of size (B, W, V) (here 60 * 200k) is kept; the softmax weight (V, P) itself is the largest.
    assert largest <= vocab_size * model.config.projection_dim < rows * vocab_size
    assert (model.softmax.weight.grad != 0).any(1).sum() <= 2 * rows + samples


# --------------------------------------------------------------------------------------------------
# (c) Trainer steps lower the full-softmax perplexity; evaluate reports the three perplexities


@pytest.mark.slow  # issue 51: 100 Trainer steps (a learning test)
def test_trainer_lowers_full_softmax_perplexity(tmp_path):
    import datasets
    from transformers import TrainingArguments

    from modeling_elmo.training.train_lm import ElmoPreTrainingTrainer

    vocab = _vocab()
    tokenizer = ElmoTokenizer(vocab=vocab)
    windows = lambda sents: datasets.Dataset.from_dict(make_windows([s.split() for s in sents], vocab))  # noqa: E731
    # Seed 2: the biLM's initial weights decide how far 100 steps get (seeds 1-3 reach 5.9-7.6, seed 0 11).
    model = _model(len(vocab), seed=2, lm_num_samples=8, lm_dropout=0.1)  # sampled in training (V = 24)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=100,
        per_device_train_batch_size=16,
        learning_rate=2e-2,
        optim="adamw_torch",
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
        logging_steps=100,
        seed=0,
    )
    trainer = ElmoPreTrainingTrainer(
        model=model,
        args=args,
        train_dataset=windows(_sentences(200, 0)),
        eval_dataset=windows(_sentences(24, 1)),
        data_collator=ElmoLMCollator(tokenizer),
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    for key in ("eval_forward_perplexity", "eval_backward_perplexity", "eval_perplexity"):
        assert math.isfinite(after[key])
    assert after["eval_perplexity"] == pytest.approx(
        math.exp((math.log(after["eval_forward_perplexity"]) + math.log(after["eval_backward_perplexity"])) / 2)
    )
    assert before["eval_perplexity"] > 0.8 * len(vocab)  # about uniform at the start
    # The grammar's true perplexity is a few words: well below the vocabulary size.
    assert after["eval_perplexity"] < 0.3 * before["eval_perplexity"], (before, after)


# --------------------------------------------------------------------------------------------------
# (d) Save and load: AutoModelForPreTraining gives the same loss, ElmoModel the same biLM


def test_save_load_roundtrips(tmp_path):
    from transformers import AutoModelForPreTraining

    vocab = _vocab()
    batch = _batch(ElmoTokenizer(vocab=vocab), ["the cat sees a ball .", "a dog eats"])
    model = _model(len(vocab)).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(loaded) is ElmoForPreTraining
    torch.testing.assert_close(loaded(**batch).loss, model(**batch).loss, rtol=0, atol=0)

    bilm = ElmoModel.from_pretrained(tmp_path).eval()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    for a, b in zip(
        bilm(**inputs, output_hidden_states=True).hidden_states,
        model.elmo(**inputs, output_hidden_states=True).hidden_states,
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    # An ElmoModel folder loads into the head: same biLM, a new softmax.
    bilm.save_pretrained(tmp_path / "bilm")
    head = ElmoForPreTraining.from_pretrained(tmp_path / "bilm", lm_vocab_size=len(vocab))
    torch.testing.assert_close(head.elmo.bilm.layers[0].input_kernel, model.elmo.bilm.layers[0].input_kernel)
    assert head.softmax.weight.shape == (len(vocab), 8) and head.softmax.weight.std() > 0


# --------------------------------------------------------------------------------------------------
# (e, f, g) The command: end to end, fine-tuning, resuming


def test_command_end_to_end(corpus, tmp_path, capsys):
    out = str(tmp_path / "lm")
    _run_main(
        ["--train_file", corpus["train"], "--eval_file", corpus["eval"], "--output_dir", out, *TINY_FLAGS]
        + ["--max_steps", "12", "--per_device_train_batch_size", "16", "--num_samples", "8", "--save_steps", "100"]
        + ["--optim", "adamw_torch", "--learning_rate", "2e-2", "--disable_tqdm", "--logging_steps", "4", "--seed", "3"]
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    results = _results(out)
    assert printed["perplexity"] == pytest.approx(results["eval_perplexity"])
    assert set(printed) == {"forward_perplexity", "backward_perplexity", "perplexity"}
    # The model card says how the model was made and how well it does.
    card = open(os.path.join(out, "README.md"), encoding="utf-8").read()
    assert "trained from scratch with `python -m modeling_elmo.training.train_lm`" in card and "12 steps" in card
    assert f"mean {results['eval_perplexity']:.1f}" in card and "| labels |" not in card
    index = {r.metric_name: r.metric_value for r in ModelCard.load(os.path.join(out, "README.md")).data.eval_results}
    assert index["Perplexity (mean of both directions)"] == pytest.approx(results["eval_perplexity"], abs=0.01)

    # The folder is a usable biLM with its vocabulary (bilm-tf order: specials first, then by frequency).
    tokenizer = ElmoTokenizer.from_pretrained(out)
    vocab_lines = open(os.path.join(out, "vocab.txt"), encoding="utf-8").read().split("\n")
    assert vocab_lines[:4] == ["<S>", "</S>", "<UNK>", "."]  # "." ends every sentence: the most frequent
    bilm = ElmoModel.from_pretrained(out)
    enc = tokenizer(["the cat sees a ball ."], return_tensors="pt")
    assert bilm(**enc).elmo.shape == (1, 6, 16)
    assert results["eval_perplexity"] < 0.8 * len(tokenizer.get_vocab())


def test_command_fine_tunes_an_existing_elmo_model(corpus, tmp_path):
    start = tmp_path / "bilm"
    torch.manual_seed(0)
    sizes = {**TINY, "lstm_dim": 16, "n_layers": 1}
    ElmoModel(ElmoConfig(**sizes)).save_pretrained(start)
    out = str(tmp_path / "tuned")
    _run_main(
        ["--train_file", corpus["train"], "--eval_file", corpus["eval"], "--model_name_or_path", str(start)]
        + ["--output_dir", out, "--max_steps", "4", "--num_samples", "0", "--disable_tqdm", "--save_steps", "100"]
    )
    before, after = ElmoModel.from_pretrained(start), ElmoModel.from_pretrained(out)
    assert not torch.equal(before.bilm.layers[0].input_kernel, after.bilm.layers[0].input_kernel)
    assert math.isfinite(_results(out)["eval_perplexity"])
    # Size flags cannot change an existing model.
    from modeling_elmo.training.train_lm import main

    argv = ["--train_file", corpus["train"], "--model_name_or_path", str(start), "--output_dir", out, "--lstm_dim", "8"]
    assert main(argv) == 1


@pytest.mark.slow  # issue 51: three command runs
def test_resume_from_checkpoint_matches_an_uninterrupted_run(corpus, tmp_path):
    common = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], *TINY_FLAGS, "--disable_tqdm"]
    common += ["--max_steps", "6", "--save_steps", "3", "--per_device_train_batch_size", "8", "--num_samples", "8"]
    common += ["--dropout", "0.2", "--seed", "3", "--save_total_limit", "3"]
    full = str(tmp_path / "full")
    _run_main([*common, "--output_dir", full])
    resumed = str(tmp_path / "resumed")
    os.makedirs(resumed)
    shutil.copytree(os.path.join(full, "checkpoint-3"), os.path.join(resumed, "checkpoint-3"))
    from modeling_elmo.training.train_lm import main

    # Existing checkpoints and no decision: an error, not a silent restart.
    assert main([*common, "--output_dir", resumed]) == 1
    _run_main([*common, "--output_dir", resumed, "--resume_from_checkpoint", "last"])
    assert _results(resumed)["eval_loss"] == pytest.approx(_results(full)["eval_loss"], abs=1e-6)
    a, b = ElmoForPreTraining.from_pretrained(full), ElmoForPreTraining.from_pretrained(resumed)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=0, msg=name)


# --------------------------------------------------------------------------------------------------
# (h) Data-parallel: 2 processes (gloo, CPU) agree with one process on the same effective batch


def _one_process_and_two(common: list[str], tmp_path) -> tuple[str, str]:
    """Run the command in one process with 4 windows per step, and in 2 gloo processes with 2 each."""
    single = str(tmp_path / "single")
    _run_main([*common, "--output_dir", single, "--per_device_train_batch_size", "4"])
    double = str(tmp_path / "ddp")
    command = ["-m", "modeling_elmo.training.train_lm", *common, "--output_dir", double]
    command += ["--per_device_train_batch_size", "2", *DDP_FLAGS]
    done = run_two_processes(command, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    # The command's own messages come from the main process only (issue 16: they once repeated per process).
    assert done.stderr.count("modeling_elmo.training.train_lm: vocabulary:") == 1, done.stderr[-3000:]
    return single, double


@pytest.mark.slow  # issue 51: a torchrun launch of 2 processes
def test_two_process_gloo_run_matches_single_process(corpus, tmp_path):
    common = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], *TINY_FLAGS, "--disable_tqdm"]
    common += ["--max_steps", "3", "--num_samples", "0", "--dropout", "0", "--seed", "5"]
    common += ["--train_sampling_strategy", "sequential", "--save_steps", "100", "--optim", "adamw_torch"]
    common += ["--learning_rate", "1e-2", "--max_eval_samples", "10"]
    single, double = _one_process_and_two(common, tmp_path)

    one, two = _results(single), _results(double)
    assert two["eval_words"] == one["eval_words"]
    for key in ("eval_forward_loss", "eval_backward_loss", "eval_loss"):
        assert two[key] == pytest.approx(one[key], abs=1e-5), key
    a, b = ElmoForPreTraining.from_pretrained(single), ElmoForPreTraining.from_pretrained(double)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=name)
    assert ElmoModel.from_pretrained(double).config.projection_dim == 8


# --------------------------------------------------------------------------------------------------
# (i) Stream training (the original's): windows of token streams, states carried between batches


def _token_pairs(sentences: list[list[str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(input, target) pairs of each direction, read off the text sentence by sentence."""
    forward, backward = [], []
    for words in sentences:
        tokens = ["<S>", *words, "</S>"]
        forward += list(zip(tokens[:-1], tokens[1:], strict=True))
    for words in reversed(sentences):
        tokens = ["</S>", *reversed(words), "<S>"]
        backward += list(zip(tokens[:-1], tokens[1:], strict=True))
    return forward, backward


def test_stream_windows_are_contiguous_rows_of_both_streams():
    from modeling_elmo.training.lm_data import make_stream_windows

    sentences = [s.split() for s in _sentences(30, 4)]
    vocab = _vocab()
    rows, size = 3, 4
    data = make_stream_windows(sentences, vocab, rows=rows, max_words=size)
    forward, backward = _token_pairs(sentences)
    piece = len(forward) // rows
    windows = piece // size
    assert len(data["words"]) == windows * rows
    for pairs, words_key, labels_key in ((forward, "words", "labels"), (backward, "backward_words", "backward_labels")):
        for r in range(rows):
            # Row r over the batches, in order: one unbroken piece of the stream.
            got_words = [w for j in range(windows) for w in data[words_key][j * rows + r]]
            got_labels = [t for j in range(windows) for t in data[labels_key][j * rows + r]]
            expected = pairs[r * piece : r * piece + windows * size]
            assert got_words == [x for x, _ in expected]
            assert got_labels == [vocab.get(y, vocab["<UNK>"]) for _, y in expected]
    with pytest.raises(ValueError, match="too few"):
        make_stream_windows(sentences[:1], vocab, rows=4, max_words=20)


def _stream_batch(forward: list[list[str]], backward: list[list[str]]) -> dict[str, torch.Tensor]:
    from modeling_elmo.training.lm_data import ElmoLMStreamCollator

    features = [
        {"words": f, "labels": [0] * len(f), "backward_words": b, "backward_labels": [1] * len(b)}
        for f, b in zip(forward, backward, strict=True)
    ]
    return ElmoLMStreamCollator()(features)


def test_stream_states_match_the_sentence_model():
    """One sentence as a stream window in each direction gives the stateless biLM's top layer, word by word."""
    vocab = _vocab()
    model = _model(len(vocab)).eval()
    words = "the cat sees a ball .".split()
    batch = _stream_batch([["<S>", *words]], [["</S>", *reversed(words)]])
    with torch.no_grad():
        stream = model.stream_hidden_states(batch["input_ids"], batch["backward_input_ids"])  # (2, 1, 7, P)
        enc = ElmoTokenizer(vocab=vocab)([words], is_split_into_words=True, return_tensors="pt")
        top = model.elmo(enc["input_ids"], output_hidden_states=True).hidden_states[-1][0]  # (6, 2P)
    forward, backward = top.chunk(2, dim=-1)
    torch.testing.assert_close(stream[0, 0, 1:], forward, atol=BATCHING_ATOL, rtol=0)  # after <S> w_1 .. w_k
    torch.testing.assert_close(stream[1, 0, 1:].flip(0), backward, atol=BATCHING_ATOL, rtol=0)  # after </S> w_n .. w_k


def test_stream_states_carry_over_between_batches():
    """Two windows with the carried state equal one long window; a reset starts from zero again."""
    vocab = _vocab()
    model = _model(len(vocab)).eval()
    fwd = [
        ["<S>", "the", "cat", "sees", "a", "ball", ".", "<S>"],
        ["<S>", "a", "dog", "eats", "bread", ".", "<S>", "a"],
    ]
    bwd = [list(reversed(row)) for row in fwd]
    whole = _stream_batch(fwd, bwd)
    first = _stream_batch([r[:3] for r in fwd], [r[:3] for r in bwd])
    second = _stream_batch([r[3:] for r in fwd], [r[3:] for r in bwd])
    with torch.no_grad():
        model.reset_stream_states()
        expected = model.stream_hidden_states(whole["input_ids"], whole["backward_input_ids"])
        model.reset_stream_states()
        parts = [model.stream_hidden_states(b["input_ids"], b["backward_input_ids"]) for b in (first, second)]
        torch.testing.assert_close(torch.cat(parts, dim=2), expected, atol=BATCHING_ATOL, rtol=0)
        model.reset_stream_states()
        again = model.stream_hidden_states(first["input_ids"], first["backward_input_ids"])
        torch.testing.assert_close(again, parts[0], atol=0, rtol=0)
    # Training: a loss, and carried states cut from the graph (backpropagation stops at the window's start).
    model.train()
    out = model(**first)
    assert torch.isfinite(out.loss) and out.forward_loss > 0 and out.backward_loss > 0
    out.loss.backward()
    assert all(not h.requires_grad and not c.requires_grad for h, c in model.stream_state.layers)
    with pytest.raises(ValueError, match="full windows"):
        model.stream_hidden_states(torch.zeros_like(whole["input_ids"]), whole["backward_input_ids"])


@pytest.mark.slow  # issue 51: 150 steps (a learning test)
def test_command_stream_training_lowers_perplexity(corpus, tmp_path):
    out = str(tmp_path / "stream")
    common = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], *TINY_FLAGS, "--disable_tqdm"]
    common += ["--training_mode", "stream", "--per_device_train_batch_size", "8", "--max_words", "10"]
    common += ["--num_samples", "8", "--optim", "adamw_torch", "--learning_rate", "2e-2", "--save_steps", "1000"]
    _run_main([*common, "--output_dir", out, "--max_steps", "150"])
    # An untrained biLM is about uniform over the vocabulary; the grammar's true perplexity is a few words.
    vocab_size = ElmoForPreTraining.from_pretrained(out).config.lm_vocab_size
    assert _results(out)["eval_perplexity"] < 0.4 * vocab_size, _results(out)
    assert ElmoModel.from_pretrained(out).config.n_layers == 1


@pytest.mark.slow  # issue 51: a torchrun launch of 2 processes
def test_two_process_stream_training_matches_single_process(corpus, tmp_path):
    """Data-parallel stream training: each process keeps its own rows' states; 2 x 2 rows train as 1 x 4."""
    common = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], *TINY_FLAGS, "--disable_tqdm"]
    common += ["--training_mode", "stream", "--max_words", "6", "--max_steps", "4", "--num_samples", "0"]
    common += ["--dropout", "0", "--seed", "5", "--save_steps", "100", "--optim", "adamw_torch"]
    common += ["--learning_rate", "1e-2", "--max_eval_samples", "10"]
    single, double = _one_process_and_two(common, tmp_path)
    one, two = _results(single), _results(double)
    for key in ("eval_forward_loss", "eval_backward_loss"):
        assert two[key] == pytest.approx(one[key], abs=1e-5), key
    a, b = ElmoForPreTraining.from_pretrained(single), ElmoForPreTraining.from_pretrained(double)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=name)


def test_stream_mode_trainer_feeds_windows_in_order(corpus, tmp_path):
    """The command's Trainer gives batch j = window j of every row (no shuffling of stream windows)."""
    import datasets

    from modeling_elmo.training.lm_data import make_stream_windows
    from modeling_elmo.training.train_lm import ElmoPreTrainingTrainer, _stream_order, _StreamOrSentences, build_parser

    _, data_args, args = build_parser().parse(
        ["--train_file", corpus["train"], "--output_dir", str(tmp_path), "--training_mode", "stream"]
        + ["--per_device_train_batch_size", "4", "--max_words", "5"]
    )
    assert _stream_order(data_args, args) == args.seed and args.train_sampling_strategy == "sequential"
    vocab = _vocab()
    windows = make_stream_windows([s.split() for s in _sentences(40, 2)], vocab, rows=4, max_words=5)
    trainer = ElmoPreTrainingTrainer(
        model=_model(len(vocab)),
        args=args,
        train_dataset=datasets.Dataset.from_dict(windows),
        data_collator=_StreamOrSentences(ElmoTokenizer(vocab=vocab)),
    )
    batches = list(trainer.get_train_dataloader())
    assert len(batches) == len(windows["labels"]) // 4
    for j, batch in enumerate(batches):
        assert batch["labels"].tolist() == windows["labels"][4 * j : 4 * j + 4]
        assert batch["backward_labels"].tolist() == windows["backward_labels"][4 * j : 4 * j + 4]


# --------------------------------------------------------------------------------------------------
# (j) Nothing computed and thrown away; fine-tuning a saved head on 2 processes


def test_lm_head_has_no_mixes_and_every_parameter_gets_a_gradient(tmp_path):
    vocab = _vocab()
    model = _model(len(vocab), lm_num_samples=0).train()
    assert len(model.elmo.scalar_mixes) == 0
    model.save_pretrained(tmp_path)
    loaded = ElmoForPreTraining.from_pretrained(tmp_path).train()  # as train_lm fine-tunes a saved folder
    assert not any("scalar_mixes" in name for name in loaded.state_dict())
    batch = _batch(ElmoTokenizer(vocab=vocab), ["the cat sees a ball .", "a dog eats"])
    loaded(**batch).loss.backward()
    idle = [name for name, p in loaded.named_parameters() if p.requires_grad and p.grad is None]
    assert not idle, idle
    # The biLM folder still loads as an ElmoModel with its mix (new, as for any head without one).
    assert len(ElmoModel.from_pretrained(tmp_path).scalar_mixes) == 1


@pytest.mark.slow  # issue 51: a torchrun launch of 2 processes
def test_two_process_fine_tuning_of_a_saved_lm_folder(corpus, tmp_path):
    """A folder written by train_lm fine-tunes on 2 gloo processes (DDP without find_unused_parameters)."""
    common = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], "--disable_tqdm", "--num_samples", "0"]
    common += ["--save_steps", "100", "--max_eval_samples", "10", "--optim", "adamw_torch", "--learning_rate", "1e-2"]
    start = str(tmp_path / "start")
    _run_main([*common, *TINY_FLAGS, "--output_dir", start, "--max_steps", "2"])
    tuned = str(tmp_path / "tuned")
    command = ["-m", "modeling_elmo.training.train_lm", *common, "--model_name_or_path", start]
    command += ["--output_dir", tuned, "--max_steps", "2", "--per_device_train_batch_size", "2", *DDP_FLAGS]
    done = run_two_processes(command, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = ElmoForPreTraining.from_pretrained(start), ElmoForPreTraining.from_pretrained(tuned)
    assert not torch.equal(before.elmo.bilm.layers[0].input_kernel, after.elmo.bilm.layers[0].input_kernel)
    assert not torch.equal(before.softmax.weight, after.softmax.weight)
    assert math.isfinite(_results(tuned)["eval_perplexity"])
