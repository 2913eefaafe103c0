"""``train_lm`` as transformers' examples: HfArgumentParser dataclasses, config files, old flag names, Hub datasets,
push_to_hub, logging to stderr with only the result on stdout, no warnings, and the full-softmax fallback (issues 15
and 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

import elmo_cli as cli
from modeling_elmo.inference.token_cache import build_token_cache
from modeling_elmo.training import train_lm

REPO = Path(__file__).resolve().parent.parent
TINY_LM = (
    "--lstm_dim 16 --projection_dim 8 --n_layers 1 --n_highway 1 --char_embedding_dim 4 --char_cnn_filters 1:4,2:8 "
    "--per_device_train_batch_size 8 --save_steps 1000"
).split()
SENTENCES = ["the cat sees a fish .", "a dog likes the ball .", "my friend eats some bread .", "her sister hears me ."]

pytestmark = pytest.mark.usefixtures("one_thread")


def build_parser():
    return train_lm.build_parser()


def _parse(*argv: str):
    return build_parser().parse([*argv, "--output_dir", "out"])


def _error_line(err: str) -> str:
    assert "Traceback" not in err and "usage:" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("lm-corpus")
    (folder / "train.txt").write_text("\n".join(SENTENCES * 6) + "\n", encoding="utf-8")
    (folder / "eval.txt").write_text("\n".join(SENTENCES[:2]) + "\n", encoding="utf-8")
    return {"train": str(folder / "train.txt"), "eval": str(folder / "eval.txt")}


# ---------------------------------------------------------------------------------------------
# Every Trainer flag under its transformers name; ELMo's recipe as the defaults
# ---------------------------------------------------------------------------------------------


def test_defaults_are_the_original_recipe():
    model_args, data_args, args = _parse("--train_file", "t.txt")
    assert args.optim == "adagrad" and args.adagrad_initial_accumulator == 1.0
    assert (args.learning_rate, args.lr_scheduler_type, args.max_grad_norm) == (0.2, "constant", 10.0)
    assert (args.per_device_train_batch_size, args.logging_steps, args.save_steps, args.save_total_limit) == (
        64,
        50,
        500,
        2,
    )
    assert args.report_to == [] or args.report_to in ("none", ["none"])
    assert args.dataloader_pin_memory is torch.cuda.is_available()  # no pinning (and no warning) without one
    assert args.activation_checkpointing is False
    assert (data_args.max_words, model_args.num_samples, model_args.dropout) == (20, None, 0.1)


def test_trainer_flags_reach_training_arguments():
    _, _, args = _parse(
        "--train_file", "t.txt", "--optim", "adamw_torch", "--weight_decay", "0.01", "--gradient_accumulation_steps",
        "3", "--warmup_steps", "2", "--save_strategy", "epoch", "--logging_first_step", "--disable_tqdm",
        "--push_to_hub", "--hub_model_id", "someone/elmo-lm", "--hub_strategy", "end", "--log_level", "error",
        "--adam_beta2", "0.98", "--load_best_model_at_end", "--eval_strategy", "epoch", "--metric_for_best_model",
        "perplexity", "--greater_is_better", "false",
    )  # fmt: skip
    assert args.optim == "adamw_torch" and args.optimizer_cls_and_kwargs() is None  # the Trainer's own AdamW
    assert (args.learning_rate, args.lr_scheduler_type) == (1e-3, "linear")  # AdamW's defaults, not Adagrad's
    assert (args.weight_decay, args.gradient_accumulation_steps, args.warmup_steps, args.adam_beta2) == (
        0.01,
        3,
        2,
        0.98,
    )
    assert args.save_strategy == "epoch" and args.logging_first_step and args.disable_tqdm is True
    assert args.push_to_hub and args.hub_model_id == "someone/elmo-lm" and args.hub_strategy == "end"
    assert args.log_level == "error" and args.load_best_model_at_end and args.greater_is_better is False


def test_adagrad_starts_its_accumulators_at_the_initial_value(tmp_path):
    """The original's Adagrad comes through Trainer(optimizer_cls_and_kwargs=...), accumulators at 1 (torch: 0)."""
    from modeling_elmo import ElmoConfig, ElmoForPreTraining
    from modeling_elmo.training.train_lm import ElmoPreTrainingTrainer

    _, _, args = build_parser().parse(["--output_dir", str(tmp_path), "--adagrad_initial_accumulator", "0.5"])
    model = ElmoForPreTraining(ElmoConfig(lstm_dim=8, projection_dim=4, char_cnn_filters=[[1, 4]], lm_vocab_size=9))
    trainer = ElmoPreTrainingTrainer(model=model, args=args, optimizer_cls_and_kwargs=args.optimizer_cls_and_kwargs())
    optimizer = trainer.create_optimizer()
    assert isinstance(optimizer, torch.optim.Adagrad) and optimizer.defaults["lr"] == 0.2
    sums = [optimizer.state[p]["sum"] for group in optimizer.param_groups for p in group["params"]]
    assert sums and all(torch.all(s == 0.5) for s in sums)


def test_a_config_file_gives_the_same_run_as_the_flags(tmp_path):
    flags = [
        "--train_file", "a.txt", "b.txt", "--eval_file", "c.txt", "--preset", "small", "--char_cnn_filters", "1:4,2:8",
        "--no_split_punctuation", "--training_mode", "stream", "--num_samples", "64", "--learning_rate", "0.1",
        "--max_steps", "7", "--bf16", "false", "--disable_tqdm", "--use_skip_connections", "--seed", "3",
    ]  # fmt: skip
    values = {
        "train_file": ["a.txt", "b.txt"], "eval_file": ["c.txt"], "preset": "small",
        "char_cnn_filters": [[1, 4], [2, 8]], "split_punctuation": False, "training_mode": "stream",
        "num_samples": 64, "learning_rate": 0.1, "max_steps": 7, "bf16": False, "disable_tqdm": True,
        "use_skip_connections": True, "seed": 3, "output_dir": "out",
    }  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(values))
    (tmp_path / "run.yaml").write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in values.items()))
    from_flags = _parse(*flags)
    for name in ("run.json", "run.yaml"):
        from_file = build_parser().parse([str(tmp_path / name)])
        assert from_file[:2] == from_flags[:2], name
        assert from_file[2].to_dict() == from_flags[2].to_dict(), name
    (tmp_path / "bad.json").write_text(json.dumps({**values, "no_such_option": 1}))
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse([str(tmp_path / "bad.json")])
    assert exit_info.value.code == 2


def test_old_flag_names_work_with_a_note(capsys):
    argv = ["--train_file", "t.txt", "--optimizer", "adamw", "--no-shuffle", "--no-split_punctuation"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # transformers' own FutureWarning for gradient_checkpointing would raise
        model_args, data_args, args = _parse(*argv, "--gradient_checkpointing", "--no-use_skip_connections")
    err = capsys.readouterr().err
    for old in ("--optimizer adamw", "--no-shuffle", "--no-split_punctuation", "--gradient_checkpointing"):
        assert f"note: {old} is deprecated" in err, err
    assert "use --optim adamw_torch" in err
    assert args.optim == "adamw_torch" and args.train_sampling_strategy == "sequential"
    assert data_args.split_punctuation is False and args.activation_checkpointing is True
    assert model_args.use_skip_connections is False
    assert _parse("--train_file", "t.txt", "--optimizer", "adagrad")[2].optim == "adagrad"
    help_text = build_parser().format_help()
    assert "--optimizer" not in help_text and "--no-shuffle" not in help_text and "--dataset_name" in help_text


# ---------------------------------------------------------------------------------------------
# Errors: one line, exit 1 (bad values, refused re-runs); usage errors one line, exit 2; the prog
# ---------------------------------------------------------------------------------------------


def test_refusals_are_one_error_line(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    train = tmp_path / "t.txt"
    train.write_text("a b c\n")
    assert train_lm.main(["--train_file", str(train), "--output_dir", str(out)]) == 1
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("error: ") and "already has checkpoints (checkpoint-3)" in line
    assert train_lm.main(["--train_file", str(train), "--output_dir", str(out), "--max_words", "0"]) == 1
    assert _error_line(capsys.readouterr().err) == "error: --max_words must be >= 1, got 0"
    assert train_lm.main(["--train_file", str(train), "--output_dir", str(out), "--lr_scheduler_type", "x"]) == 2
    assert "python -m modeling_elmo.training.train_lm: error: argument --lr_scheduler_type" in capsys.readouterr().err
    assert train_lm.main(["--train_file", str(train)]) == 1
    assert "--output_dir is required" in _error_line(capsys.readouterr().err)


def test_elmo_train_lm_names_itself(capsys):
    assert cli.main(["train-lm", "--no_such_flag"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("elmo train-lm: error: unrecognized arguments: --no_such_flag")
    assert cli.main(["train-lm", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: elmo train-lm")


# ---------------------------------------------------------------------------------------------
# The sampled softmax falls back to the full one where it would be slower
# ---------------------------------------------------------------------------------------------


def test_num_samples_default_and_fallback():
    from modeling_elmo.training.train_lm import effective_num_samples

    assert effective_num_samples(None, 793_471) == 8192  # the original's, on its vocabulary
    assert effective_num_samples(None, 10_000) == 1000  # a tenth of a small vocabulary
    assert effective_num_samples(None, 500) == 0  # tiny vocabulary: the full softmax
    assert effective_num_samples(8192, 10_000) == 0  # most of the vocabulary: the full softmax
    assert effective_num_samples(4999, 10_000) == 4999 and effective_num_samples(5000, 10_000) == 0
    assert effective_num_samples(0, 10_000) == 0


# ---------------------------------------------------------------------------------------------
# A real run: stdout is the JSON result only; stderr has the logs, no warnings, no bars with --disable_tqdm
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_a_run_prints_only_the_result_and_no_warnings(corpus, tmp_path):
    out = tmp_path / "lm"
    argv = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], "--output_dir", str(out), *TINY_LM]
    argv += ["--max_steps", "2", "--num_samples", "50", "--disable_tqdm"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "modeling_elmo.training.train_lm", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stdout.splitlines()  # the result, nothing else
    assert set(json.loads(line)) == {"forward_perplexity", "backward_perplexity", "perplexity"}
    err = done.stderr
    # Allowed on stderr: this command's INFO lines and the Trainer's log dicts and metric tables.
    assert "warn" not in err.lower() and "PAD/BOS/EOS" not in err and "pin_memory" not in err, err
    assert "%|" not in err, err  # --disable_tqdm: no progress bar (datasets', Trainer's, saving)
    assert "***** eval metrics *****" in err and "vocabulary: 21 words" in err
    # --num_samples 50 of a 21-word vocabulary: the full softmax, said once.
    assert err.count("training with the full softmax") == 1
    assert json.loads((out / "config.json").read_text())["lm_num_samples"] == 0


# ---------------------------------------------------------------------------------------------
# --dataset_name: a saved DatasetDict (and a local dataset folder) stand in for the Hub, offline
# ---------------------------------------------------------------------------------------------


def test_dataset_name_trains_from_a_saved_dataset_dict(tmp_path, capsys, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    saved = tmp_path / "my-corpus"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"id": list(range(24)), "sentence": SENTENCES * 6}),
            "validation": datasets.Dataset.from_dict({"id": [0, 1], "sentence": SENTENCES[:2]}),
        }
    ).save_to_disk(str(saved))
    out = tmp_path / "lm"
    argv = ["--dataset_name", str(saved), "--text_column_name", "sentence", "--output_dir", str(out), *TINY_LM]
    assert train_lm.main([*argv, "--max_steps", "2", "--disable_tqdm"]) == 0
    printed = json.loads(capsys.readouterr().out)
    results = json.loads((out / "eval_results.json").read_text())
    assert printed["perplexity"] == pytest.approx(results["eval_perplexity"]) and results["eval_words"] == 12
    assert (out / "vocab.txt").read_text().split("\n")[:4] == ["<S>", "</S>", "<UNK>", "."]
    assert "the `" + str(saved) + "` dataset" in (out / "README.md").read_text()
    # A column that is not there: one error line naming the text columns.
    assert train_lm.main(["--dataset_name", str(saved), "--text_column_name", "words", "--output_dir", "x"]) == 1
    assert "no text column 'words' (text columns: sentence)" in _error_line(capsys.readouterr().err)


def test_load_text_datasets_from_a_local_dataset_folder(tmp_path):
    from modeling_elmo.training.lm_data import load_text_datasets

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "train.txt").write_text("a b c\nd e\n")
    (folder / "validation.txt").write_text("a b\n")
    loaded = load_text_datasets(str(folder), cache_dir=str(tmp_path / "cache"))
    assert loaded["train"]["text"] == ["a b c", "d e"] and loaded["validation"]["text"] == ["a b"]
    with pytest.raises(ValueError, match="has no split 'dev'"):
        load_text_datasets(str(folder), train_split="dev", cache_dir=str(tmp_path / "cache"))


# ---------------------------------------------------------------------------------------------
# --push_to_hub: the Hub client recorded (as tests/test_hub.py does), the command's own card uploaded
# ---------------------------------------------------------------------------------------------


def test_push_to_hub_uploads_the_trained_folder_with_its_card(corpus, tmp_path, capsys):
    from unittest import mock

    uploads: list[dict] = []

    def upload_folder(*, repo_id, folder_path, **kwargs):  # the Hub's side: what the folder holds at upload time
        files = {p.name: p.read_bytes() for p in Path(folder_path).iterdir() if p.is_file()}
        uploads.append({"repo_id": repo_id, "files": files})
        return mock.Mock(commit_url=f"https://huggingface.co/{repo_id}/commit/0")

    out = tmp_path / "lm"
    argv = ["--train_file", corpus["train"], "--eval_file", corpus["eval"], "--output_dir", str(out), *TINY_LM]
    argv += ["--max_steps", "1", "--disable_tqdm", "--push_to_hub", "--hub_model_id", "someone/elmo-lm"]
    with (
        mock.patch("huggingface_hub.HfApi.create_repo", return_value=mock.Mock(repo_id="someone/elmo-lm")) as repo,
        mock.patch("huggingface_hub.HfApi.upload_folder", side_effect=upload_folder, autospec=False),
    ):
        assert train_lm.main(argv) == 0
    assert repo.call_args.args[0] == "someone/elmo-lm"
    assert uploads and all(upload["repo_id"] == "someone/elmo-lm" for upload in uploads)
    files = uploads[-1]["files"]  # the end of training (save_model uploads too, before the card has the metrics)
    assert {"config.json", "model.safetensors", "vocab.txt", "README.md"} <= set(files)
    assert not [name for name in files if name.endswith(".py")]  # a plain folder: code only with --remote_code
    card = ModelCard(files["README.md"].decode())
    assert "model card generated by modeling_elmo" in card.text  # the command's card, not transformers' generic one
    (result,) = [r for r in card.data.eval_results if r.metric_name == "Perplexity (mean of both directions)"]
    assert result.metric_value == pytest.approx(json.loads(capsys.readouterr().out)["perplexity"], abs=0.01)


# ---------------------------------------------------------------------------------------------
# build_token_cache's bar obeys transformers' switch
# ---------------------------------------------------------------------------------------------


def test_token_cache_progress_bar_obeys_transformers_switch(tiny_dir, capsys):
    from transformers.utils import logging as hf_logging

    from modeling_elmo import ElmoModel

    model = ElmoModel.from_pretrained(tiny_dir)
    capsys.readouterr()
    hf_logging.disable_progress_bar()
    try:
        build_token_cache(model, ["cat", "dog", "fish"])
    finally:
        hf_logging.enable_progress_bar()
    assert "Caching word vectors" not in capsys.readouterr().err
    build_token_cache(model, ["cat", "dog", "fish"])
    assert "Caching word vectors" in capsys.readouterr().err


def test_a_missing_model_folder_is_named(tmp_path, capsys):
    """Issue 26, 9: a missing folder is said to be missing, not reported as a badly formed Hub repo id."""
    train = tmp_path / "t.txt"
    train.write_text("a b c\n")
    base = ["--train_file", str(train), "--output_dir", str(tmp_path / "out")]
    missing = tmp_path / "missing" / "folder"
    assert train_lm.main([*base, "--model_name_or_path", str(missing)]) == 1
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"error: --model_name_or_path {missing}: no such folder"), line
    assert "Repo id" not in line
    (tmp_path / "empty").mkdir()
    assert train_lm.main([*base, "--model_name_or_path", str(tmp_path / "empty")]) == 1
    assert "the folder has no config.json" in _error_line(capsys.readouterr().err)
    assert train_lm.main([*base, "--model_name_or_path", str(train)]) == 1
    assert f"--model_name_or_path {train}: not a folder" in _error_line(capsys.readouterr().err)
