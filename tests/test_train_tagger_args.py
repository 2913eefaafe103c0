"""The tagger command on HfArgumentParser (issue 16), its logging and its time budget (issue 15 items 2 and 3).

Tiny runs of ``modeling_elmo.training.train_tagger``: its options as dataclasses (every ``TrainingArguments`` flag under
its transformers name, a JSON config file, the old names as deprecated aliases), ``--dataset_name`` from a saved
``DatasetDict``, status lines on stderr and only the JSON result on stdout, no LOAD REPORT, and a ``--time_budget`` that
bounds training time (evaluation excluded) with one final evaluation.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from unittest import mock

import pytest
from huggingface_hub import ModelCard
from transformers import TrainerCallback

from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.training import tagging_data, train_tagger
from modeling_elmo.training.train_tagger import build_parser, main, parse_args, setup_logging, train

pytest.importorskip("datasets")
pytest.importorskip("seqeval")
pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parent.parent
WORDS = ["the", "cat", "sat", "on", "a", "mat", "went", "to", "with", "and", "John", "Mary", "Paris", "London"]
TAGS = {"John": "B-PER", "Mary": "B-PER", "Paris": "B-LOC", "London": "B-LOC"}
TINY_HEAD = ["--hidden_size", "8", "--num_layers", "1", "--word_dim", "8", "--min_word_freq", "1"]


def corpus(n: int, seed: int) -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(seed)
    sentences = [[rng.choice(WORDS) for _ in range(rng.randint(4, 12))] for _ in range(n)]
    return sentences, [[TAGS.get(word, "O") for word in sentence] for sentence in sentences]


def write_conll(path: Path, n: int, seed: int) -> Path:
    sentences, tags = corpus(n, seed)
    path.write_text(
        "".join(
            "".join(f"{w} {t}\n" for w, t in zip(s, ts, strict=True)) + "\n"
            for s, ts in zip(sentences, tags, strict=True)
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tagger_args")
    bilm = root / "bilm"
    ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], n_highway=1, lstm_dim=16,
                         projection_dim=8, n_layers=1)).save_pretrained(bilm)  # fmt: skip
    ElmoTokenizer().save_pretrained(bilm)
    return {"bilm": bilm, "train": write_conll(root / "train.txt", 40, 1), "dev": write_conll(root / "dev.txt", 20, 2)}


# ---------------------------------------------------------------------------------------------
# Parsing: Trainer flags, recipe defaults, config files, deprecated names, prog
# ---------------------------------------------------------------------------------------------


def test_trainer_flags_reach_training_arguments_and_the_recipe_is_the_default(files, tmp_path):
    base = ["--no_elmo", "--train_file", str(files["train"]), "--output_dir", str(tmp_path / "out")]
    _, _, defaults = parse_args(base)
    # The tagger's recipe lives in the dataclass.
    assert (defaults.learning_rate, defaults.per_device_train_batch_size, defaults.per_device_eval_batch_size) == (
        1e-3, 32, 64,
    )  # fmt: skip
    assert (defaults.max_grad_norm, defaults.num_train_epochs, defaults.lr_scheduler_type.value) == (5.0, 3.0, "linear")
    assert defaults.eval_strategy.value == "epoch" and defaults.train_sampling_strategy == "group_by_length"
    assert defaults.include_num_input_tokens_seen == "non_padding" and defaults.report_to == []
    flags = [
        "--weight_decay", "0.01", "--gradient_accumulation_steps", "2", "--optim", "adamw_torch", "--report_to",
        "none", "--torch_compile", "--push_to_hub", "--hub_model_id", "someone/ner-elmo", "--warmup_steps", "3",
        "--load_best_model_at_end", "--metric_for_best_model", "f1", "--save_strategy", "epoch",
    ]  # fmt: skip
    _, _, args = parse_args([*base, *flags])
    assert (args.weight_decay, args.gradient_accumulation_steps, args.optim.value) == (0.01, 2, "adamw_torch")
    assert args.torch_compile and args.push_to_hub and args.hub_model_id == "someone/ner-elmo"
    assert args.load_best_model_at_end and args.metric_for_best_model == "f1" and args.warmup_steps == 3


def test_a_json_config_file_gives_the_same_run_as_the_flags(files, tmp_path):
    options = {
        "no_elmo": True, "train_file": str(files["train"]), "eval_file": str(files["dev"]),
        "output_dir": str(tmp_path / "out"), "hidden_size": 8, "per_device_train_batch_size": 4,
        "num_train_epochs": 2.0, "learning_rate": 0.01, "eval_strategy": "steps", "eval_steps": 3, "time_budget": 5.0,
    }  # fmt: skip
    flags = []
    for key, value in options.items():
        flags += [f"--{key}"] if value is True else [f"--{key}", str(value)]
    config = tmp_path / "run.json"
    config.write_text(json.dumps(options), encoding="utf-8")
    from_flags = [asdict(a) for a in parse_args(flags)]
    from_file = [asdict(a) for a in build_parser().parse([str(config)])]
    assert from_file == from_flags
    assert from_file[2]["time_budget"] == 5.0 and from_file[2]["eval_steps"] == 3


def test_old_flag_names_still_work_with_a_note(files, tmp_path, capsys):
    old = [
        "--no_elmo", "--train_file", str(files["train"]), "--output_dir", str(tmp_path / "out"), "--epochs", "7",
        "--batch_size", "5", "--eval_batch_size=6", "--lr_scheduler", "constant", "--cpu", "--no_progress",
    ]  # fmt: skip
    _, _, args = parse_args(old)
    assert (args.num_train_epochs, args.per_device_train_batch_size, args.per_device_eval_batch_size) == (7, 5, 6)
    assert args.lr_scheduler_type.value == "constant" and args.use_cpu and args.disable_tqdm
    err = capsys.readouterr().err
    for name, new in [
        ("--epochs", "--num_train_epochs"),
        ("--no_progress", "--disable_tqdm true"),
        ("--cpu", "--use_cpu"),
    ]:
        assert f"note: {name} is deprecated" in err and f"use {new}" in err
    # Also with --predict, whose batch size is --per_device_eval_batch_size now.
    assert main(["--predict", str(tmp_path / "missing"), "--eval_batch_size", "0", "a sentence"]) == 1
    err = capsys.readouterr().err
    assert "note: --eval_batch_size is deprecated" in err and "error: --per_device_eval_batch_size must be >= 1" in err
    assert main(["--predict", str(tmp_path / "missing"), "a sentence"]) == 1
    assert "no such folder" in capsys.readouterr().err
    # Hidden: --help shows the new names only.
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "--per_device_train_batch_size" in text and "--batch_size " not in text and "--epochs" not in text


def test_prog_usage_errors_and_refusals(files, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"], prog="elmo train-tagger")
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: elmo train-tagger") and "evaluation" in help_text.split("--time_budget")[1]
    # A usage error: one line naming the prog, exit 2.
    with pytest.raises(SystemExit) as exit_info:
        main(["--no_such_flag"], prog="elmo train-tagger")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "elmo train-tagger: error: unrecognized arguments: --no_such_flag (see elmo train-tagger --help)"
    ]
    # Refusals: one error line, exit 1, no usage block.
    base = ["--train_file", str(files["train"]), "--output_dir", str(tmp_path / "out")]
    for argv, message in [
        (base, "give --bilm PATH"),
        (["--no_elmo", "--train_file", str(files["train"])], "--output_dir is required"),
        ([*base, "--no_elmo", "--dataset_name", "x"], "one of them"),
        ([*base, "--no_elmo", "--time_budget", "nan"], "--time_budget must be a finite number"),
        ([*base, "--no_elmo", "--word_input", "bilm"], "needs --word_input embedding"),
    ]:
        assert main(argv, prog="elmo train-tagger") == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------------------------------------
# --dataset_name, a refused re-run, push_to_hub
# ---------------------------------------------------------------------------------------------


def test_dataset_name_trains_from_a_saved_datasetdict_and_a_rerun_is_refused(tmp_path, capsys):
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]  # MISC is declared, never used
    features = Features({"tokens": Sequence(Value("string")), "ner_tags": Sequence(ClassLabel(names=names))})

    def split(n: int, seed: int) -> Dataset:
        sentences, tags = corpus(n, seed)
        return Dataset.from_dict(
            {"tokens": sentences, "ner_tags": [[names.index(t) for t in row] for row in tags]}, features=features
        )

    DatasetDict({"train": split(40, 3), "validation": split(12, 4)}).save_to_disk(tmp_path / "ner-data")
    out = tmp_path / "out"
    argv = ["--no_elmo", "--dataset_name", str(tmp_path / "ner-data"), "--output_dir", str(out), "--max_steps",
            "3", "--per_device_train_batch_size", "8", "--save_steps", "2", "--disable_tqdm", "true",
            *TINY_HEAD]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert "eval_f1" in result and result["train_steps"] == 3  # the validation split was evaluated
    config = json.loads((out / "config.json").read_text())
    assert set(config["id2label"].values()) == set(names)  # label names from the ClassLabel, MISC included
    assert "ner-data" in (out / "README.md").read_text(encoding="utf-8")
    # The same command again would train over the checkpoints: refused in one line.
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "already has checkpoints (checkpoint-3)" in err and "usage" not in err
    # A missing column is named.
    assert main([*argv, "--output_dir", str(tmp_path / "o2"), "--label_column_name", "tags"]) == 1
    assert "no column 'tags'" in capsys.readouterr().err


def test_a_local_dataset_folder_loads_through_load_dataset(tmp_path):
    folder = tmp_path / "json-ner"
    folder.mkdir()
    for name, seed in (("train", 5), ("validation", 6)):
        sentences, tags = corpus(6, seed)
        rows = [json.dumps({"tokens": s, "ner_tags": t}) for s, t in zip(sentences, tags, strict=True)]
        (folder / f"{name}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    data_args = train_tagger.DataArguments(dataset_name=str(folder), cache_dir=str(tmp_path / "cache"))
    data = tagging_data.load_tagging_data(data_args)
    assert data.train_sentences == corpus(6, 5)[0] and data.train_tags == corpus(6, 5)[1]
    assert data.eval_tags == corpus(6, 6)[1] and data.label_names is None  # string tags: no ClassLabel


def test_push_to_hub_uploads_the_commands_card(files, tmp_path, capsys):
    """``--push_to_hub`` with the Hub client recorded at ``HfApi``: what ``upload_folder`` would upload."""
    uploads: list[dict[str, bytes]] = []

    def upload_folder(self, *, repo_id, folder_path, ignore_patterns=(), **kwargs):
        assert repo_id == "someone/ner-tiny"
        files = {p.name: p.read_bytes() for p in Path(folder_path).iterdir() if p.is_file()}
        uploads.append({name: data for name, data in files.items() if not name.startswith("_")})
        return mock.Mock(commit_url=f"https://huggingface.co/{repo_id}/commit/0")

    out = tmp_path / "out"
    argv = ["--no_elmo", "--train_file", str(files["train"]), "--eval_file", str(files["dev"]), "--output_dir",
            str(out), "--max_steps", "2", "--save_strategy", "no", "--disable_tqdm", "true", "--push_to_hub",
            "--hub_model_id", "someone/ner-tiny", *TINY_HEAD]  # fmt: skip
    with (
        mock.patch("huggingface_hub.HfApi.create_repo", return_value=mock.Mock(repo_id="someone/ner-tiny")),
        mock.patch("huggingface_hub.HfApi.upload_folder", upload_folder),
    ):
        assert main(argv) == 0
    assert len(uploads) == 1  # once, at the end (no checkpoints with --save_strategy no)
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(uploads[0])
    card = tmp_path / "pushed.md"
    card.write_bytes(uploads[0]["README.md"])
    f1 = json.loads(capsys.readouterr().out)["eval_f1"]
    index = {r.metric_type: r.metric_value for r in ModelCard.load(card).data.eval_results}
    assert index["f1"] == pytest.approx(100 * f1, abs=0.01)  # the command's card with the measured F1


def test_help_shows_the_taggers_options_first_and_the_common_trainer_options_under_their_heading(files, capsys):
    """Issue 36.4: ``--help`` was 704 lines, ELMo's options lost among transformers' 120 TrainingArguments. Now: the
    biLM and tagger options, then the data, then the TrainingArguments under their own heading, only the common ones
    (and those the tagger's recipe sets); ``--help-all`` lists every one, and every one works either way."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"], prog="elmo train-tagger")
    assert exit_info.value.code == 0
    short = capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["--help-all"], prog="elmo train-tagger")
    assert exit_info.value.code == 0
    full = capsys.readouterr().out
    for text in (short, full):
        order = [
            text.index("\nthe biLM and the tagger:\n"),
            text.index("  --bilm PATH"),
            text.index("\ndata:\n"),
            text.index("  --train_file"),
            text.index("\ntraining (transformers' TrainingArguments, the tagger's recipe as defaults):\n"),
            text.index("  --learning_rate"),
        ]
        assert order == sorted(order), order
        assert text.startswith("usage: elmo train-tagger (--bilm MODEL | --no_elmo)")
    # The recipe's own options and the common ones in both; the rare ones only with --help-all.
    for flag in ("--time_budget", "--num_threads", "--per_device_train_batch_size", "--bf16", "--push_to_hub"):
        assert f"  {flag}" in short and f"  {flag}" in full, flag
    for flag in ("--adam_beta1", "--torch_compile_mode", "--hub_private_repo"):
        assert f"  {flag}" not in short and f"  {flag}" in full, flag
    assert "--help-all" in short and len(short.splitlines()) < 300 < len(full.splitlines())
    # Hidden from --help, not from the parser.
    base = ["--no_elmo", "--train_file", str(files["train"]), "--output_dir", "o"]
    _, _, args = parse_args([*base, "--adam_beta1", "0.8"])
    assert args.adam_beta1 == 0.8


def test_bilm_takes_demo_as_the_commands_take_it(files, tmp_path, monkeypatch):
    """``--bilm demo`` was refused ("not a folder"), while ``elmo score --model demo`` and ``export-vectors --model
    demo`` worked: it is the bundled demo biLM's folder now (a folder called demo in the working directory wins)."""
    from modeling_elmo import demo_model_path

    base = ["--train_file", str(files["train"]), "--output_dir", str(tmp_path / "out")]
    model_args, _, _ = parse_args(["--bilm", "demo", *base])
    assert model_args.bilm == str(demo_model_path()) and model_args.bilm_name == "demo"
    model_args, _, _ = parse_args(["--model_name_or_path", "demo", *base])
    assert model_args.bilm == str(demo_model_path())
    monkeypatch.chdir(tmp_path)
    shutil.copytree(files["bilm"], tmp_path / "demo")
    model_args, _, _ = parse_args(["--bilm", "demo", *base])
    assert model_args.bilm == "demo"


# ---------------------------------------------------------------------------------------------
# Logging: status on stderr, JSON alone on stdout, no LOAD REPORT, progress bars off with transformers' switch
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # issue 51: a fresh interpreter
def test_stdout_holds_only_the_json_result_and_loads_are_quiet(files, tmp_path):
    argv = ["--bilm", str(files["bilm"]), "--train_file", str(files["train"]), "--eval_file", str(files["dev"]),
            "--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--logging_steps", "1", *TINY_HEAD]  # fmt: skip
    code = (
        "import sys; from transformers.utils import logging; logging.disable_progress_bar(); "
        "from modeling_elmo.training.train_tagger import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # nothing but the JSON result
    assert result["train_steps"] == 2
    err = done.stderr
    assert "training sentences" in err and "'loss'" in err  # status and the Trainer's log lines: stderr
    assert "LOAD REPORT" not in err and "MISSING" not in err  # the new head's weights are no news
    assert "new in the tagger, trained from scratch: classifier, crf, encoder, word_embeddings" in err  # one line
    assert "it/s]" not in err and "%|" not in err  # transformers' switch turned every progress bar off
    assert "PAD/BOS/EOS" not in err


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}


# ---------------------------------------------------------------------------------------------
# --time_budget: training time without evaluation; the dev set evaluated once at the end
# ---------------------------------------------------------------------------------------------


class EvaluationRecorder(TrainerCallback):
    """Records when training began and every evaluation (step, its duration as the Trainer measured it)."""

    def __init__(self) -> None:
        self.began: float | None = None
        self.evaluations: list[tuple[int, float]] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.monotonic()

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.evaluations.append((state.global_step, metrics["eval_runtime"]))


BUDGET = 2.0


@pytest.fixture(scope="module")
def budget_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("budget")
    # An epoch of 500 steps of 8 sentences is far longer than the budget (an idle AMX Xeon ran 120 steps in 2 s);
    # evaluating 800 sentences takes ~1 s or more.
    return {"train": write_conll(root / "train.txt", 4000, 7), "dev": write_conll(root / "dev.txt", 800, 8)}


def _budgeted_run(budget_files, out: Path, *extra: str) -> tuple[dict, EvaluationRecorder, float]:
    argv = ["--no_elmo", "--train_file", str(budget_files["train"]), "--eval_file", str(budget_files["dev"]),
            "--output_dir", str(out), "--time_budget", str(BUDGET), "--per_device_train_batch_size", "8",
            "--save_strategy", "no", "--disable_tqdm", "true", *extra]  # fmt: skip
    model_args, data_args, training_args = parse_args(argv)
    setup_logging(training_args)
    recorder = EvaluationRecorder()
    metrics = train(model_args, data_args, training_args, callbacks=[recorder])
    return metrics, recorder, time.monotonic()


@pytest.mark.slow  # issue 51: trains until a time budget
def test_time_budget_bounds_training_and_the_dev_set_is_evaluated_once(budget_files, tmp_path, capsys):
    # --eval_strategy epoch (the default), stopped on budget inside the first epoch.
    metrics, recorder, ended = _budgeted_run(budget_files, tmp_path / "epoch")
    assert metrics["train_stopped_on_time_budget"] and metrics["epoch"] < 1
    # The dev set was evaluated exactly once, at the last step (the Trainer's end-of-epoch evaluation is the final one).
    assert len(recorder.evaluations) == 1 and recorder.evaluations[0][0] == metrics["train_steps"]
    evaluation = recorder.evaluations[0][1]
    state = json.loads((tmp_path / "epoch" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "eval_loss" in e] == [metrics["train_steps"]]
    # From the start of training to the end of the run: the budget, one evaluation, the step that crossed the budget
    # and the final save (0.5 s here, in practice); evaluating twice would add another evaluation (1-3 s here).
    step = BUDGET / metrics["train_steps"]  # the mean step; the last one may take longer on a busy machine
    assert ended - recorder.began <= BUDGET + evaluation + 2 * step + 1.0
    # train_seconds is training time (before: also the evaluation at the stop), and words/s are words over it.
    assert BUDGET <= metrics["train_seconds"] <= BUDGET + 2 * step + 0.3
    assert metrics["train_words_per_second"] == pytest.approx(
        metrics["train_words_seen"] / metrics["train_seconds"], rel=0.01
    )
    capsys.readouterr()

    # Evaluations during training do not count against the budget.
    metrics, recorder, ended = _budgeted_run(
        budget_files, tmp_path / "steps", "--eval_strategy", "steps", "--eval_steps", "2", "--max_eval_sentences", "150"
    )
    evaluations = [seconds for _, seconds in recorder.evaluations]
    assert len(evaluations) >= 2
    trained = ended - recorder.began - sum(evaluations)  # wall time of training, evaluation taken out
    assert trained >= BUDGET and metrics["train_seconds"] >= BUDGET
    steps = [s for s, _ in recorder.evaluations]
    assert steps.count(metrics["train_steps"]) <= 1  # the last step is not evaluated twice


@pytest.mark.parametrize("max_words", [-1, -5, 2.5, True])
def test_encode_dataset_refuses_a_negative_max_words(max_words):
    """Issue 26, 11: ``sentence[:-1]`` would silently drop each sentence's last word; the CLI refuses -1, and so
    does the function."""
    from datasets import Dataset

    dataset = Dataset.from_dict({"tokens": [["a", "b", "c"]], "tags": [["O", "O", "O"]]})
    with pytest.raises(ValueError, match="max_words must be"):
        tagging_data.encode_dataset(dataset, ElmoTokenizer(), {"O": 0}, False, max_words)


@pytest.mark.parametrize(("max_words", "kept"), [(None, 3), (0, 3), (2, 2)])
def test_encode_dataset_max_words_cuts_or_keeps(max_words, kept):
    from datasets import Dataset

    dataset = Dataset.from_dict({"tokens": [["a", "b", "c"]], "tags": [["O", "O", "O"]]})
    encoded = tagging_data.encode_dataset(dataset, ElmoTokenizer(), {"O": 0}, False, max_words)
    assert encoded[0]["length"] == kept and encoded[0]["labels"] == [0] * kept
