"""Issue 42: transformers' own recipes on a plain ELMo folder, as the official example scripts run them.

``run_ner.py``, ``run_classification.py`` and ``run_glue.py`` (transformers' ``examples/pytorch/``) load a model only
through the Auto classes, tokenize with the model's tokenizer, batch with ``DataCollatorForTokenClassification``,
``DataCollatorWithPadding`` or ``default_data_collator``, train with ``Trainer``, score with a ``compute_metrics``
that takes ``np.argmax(predictions, axis=2)`` (axis 1 for sentences), then ``evaluate()``, ``predict()``,
``save_model()``; the course reloads the folder and runs the stock pipeline. The tests below make those calls, in
their own words, on the bundled demo biLM and a few sentences of the docs' CoNLL sample. The scripts themselves,
unmodified, run through ``python -m modeling_elmo SCRIPT.py ARGS`` (docs/transformers-integration.md gives the
commands and the figures); the last tests check that launcher on a small script, alone, under ``torchrun`` and under
``accelerate launch``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from helpers import BATCHING_ATOL, run_two_processes
from seqeval.metrics import f1_score
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    default_data_collator,
    pipeline,
)

import modeling_elmo  # noqa: F401  (registers ELMo with the Auto classes, as `python -m modeling_elmo` does)
from modeling_elmo import demo_model_path
from modeling_elmo.training.tagging_data import read_conll

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "docs" / "data" / "ner"


def _conll(split: str, n: int) -> Dataset:
    words, tags = read_conll(SAMPLE / f"{split}.txt")
    return Dataset.from_dict({"tokens": words[:n], "ner_tags": tags[:n]})


def _arguments(tmp_path: Path, **overrides) -> TrainingArguments:
    settings = dict(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=2e-2,
        max_steps=8,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    return TrainingArguments(**(settings | overrides))


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_token_classification_recipe(tmp_path, bf16):
    """run_ner.py's calls: labels from the data, the Auto classes with ``num_labels``, word-aligned labels (-100 off
    the first token of a word), the collator, ``compute_metrics`` on ``np.argmax(predictions, axis=2)``, evaluate,
    predict, save_model; then the saved folder in the stock pipeline, ``aggregation_strategy="simple"``."""
    train, dev = _conll("train", 24), _conll("dev", 8)
    label_list = sorted({tag for tags in train["ner_tags"] for tag in tags})
    folder = demo_model_path()
    config = AutoConfig.from_pretrained(folder, num_labels=len(label_list), finetuning_task="ner")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForTokenClassification.from_pretrained(folder, config=config)
    model.config.label2id = {label: i for i, label in enumerate(label_list)}
    model.config.id2label = dict(enumerate(label_list))

    def align(batch):
        encoded = tokenizer(batch["tokens"], truncation=True, is_split_into_words=True)
        encoded["labels"] = []
        for i, tags in enumerate(batch["ner_tags"]):
            previous, row = None, []
            for word in encoded.word_ids(batch_index=i):
                row.append(-100 if word is None or word == previous else label_list.index(tags[word]))
                previous = word
            encoded["labels"].append(row)
        return encoded

    train_set = train.map(align, batched=True, remove_columns=train.column_names)
    dev_set = dev.map(align, batched=True, remove_columns=dev.column_names)

    seen = {}

    def compute_metrics(prediction):
        predictions, labels = prediction  # one array of logits: the tagger's other outputs stay out of it
        seen["shape"] = predictions.shape
        predictions = np.argmax(predictions, axis=2)
        kept = labels != -100  # the first token of each word (every ELMo token is one)
        predicted = [[label_list[p] for p in row[keep]] for row, keep in zip(predictions, kept, strict=True)]
        gold = [[label_list[g] for g in row[keep]] for row, keep in zip(labels, kept, strict=True)]
        return {"f1": f1_score(gold, predicted)}

    trainer = Trainer(
        model=model,
        args=_arguments(tmp_path, bf16=bf16),
        train_dataset=train_set,
        eval_dataset=dev_set,
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=compute_metrics,
    )
    trainer.train()
    metrics = trainer.evaluate()
    assert 0.0 <= metrics["eval_f1"] <= 1.0 and np.isfinite(metrics["eval_loss"])
    assert seen["shape"][0] == len(dev_set) and seen["shape"][2] == len(label_list)
    predictions, labels, predict_metrics = trainer.predict(dev_set, metric_key_prefix="predict")
    assert isinstance(predictions, np.ndarray) and predictions.shape == seen["shape"]
    assert predict_metrics["predict_f1"] == metrics["eval_f1"]
    words = sum(len(tokens) for tokens in dev["tokens"])
    assert int((labels != -100).sum()) == words  # one label per word, padding at -100

    saved = tmp_path / "tagger"
    trainer.save_model(str(saved))
    again = AutoModelForTokenClassification.from_pretrained(saved).eval()
    trained = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False).eval()
    state = trained.state_dict()
    for name, value in again.state_dict().items():  # the trained weights, float32 (bf16 is autocast's compute only)
        assert torch.equal(value, state[name]) and value.dtype in (torch.float32, torch.bool), name
    batch = DataCollatorForTokenClassification(tokenizer)([dev_set[i] for i in range(4)])
    with torch.no_grad():  # the same weights; the reloaded copy may take the prepacked CPU path (BATCHING_ATOL)
        torch.testing.assert_close(
            again(**batch).logits, trained(**batch).logits, atol=BATCHING_ATOL, rtol=BATCHING_ATOL
        )

    ner = pipeline("token-classification", model=str(saved), aggregation_strategy="simple")
    text = " ".join(dev["tokens"][0])
    for entity in ner(text):
        assert entity["entity_group"] in {label[2:] for label in label_list if label != "O"}
        assert entity["word"] == text[entity["start"] : entity["end"]]


@pytest.mark.parametrize("padding", ["dynamic", "max_length"])
def test_sequence_classification_recipe(tmp_path, padding):
    """run_classification.py and run_glue.py's calls for single sentences: integer labels, the Auto classes with
    ``num_labels``; padding at batch time (``DataCollatorWithPadding``, the default when the tokenizer goes to
    ``Trainer``) or to ``max_length`` (``default_data_collator``); ``compute_metrics`` on ``np.argmax(..., axis=1)``;
    evaluate, predict without the label column, save_model, reload, the stock text-classification pipeline."""
    words, tags = read_conll(SAMPLE / "train.txt")
    sentences = [" ".join(w) for w in words[:32]]
    labels = [int("B-PER" in t) for t in tags[:32]]  # 1: the sentence names a person
    data = Dataset.from_dict({"sentence": sentences, "label": labels})
    folder = demo_model_path()
    config = AutoConfig.from_pretrained(folder, num_labels=2, finetuning_task="text-classification")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, config=config)

    def encode(batch):
        if padding == "max_length":
            return tokenizer(batch["sentence"], padding="max_length", max_length=48, truncation=True)
        return tokenizer(batch["sentence"], truncation=True, max_length=128)

    encoded = data.map(encode, batched=True, remove_columns=["sentence"])

    def compute_metrics(prediction):
        predictions = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        return {"accuracy": float((np.argmax(predictions, axis=1) == prediction.label_ids).mean())}

    trainer = Trainer(
        model=model,
        args=_arguments(tmp_path),
        train_dataset=encoded,
        eval_dataset=encoded,
        processing_class=tokenizer,
        data_collator=default_data_collator if padding == "max_length" else None,
        compute_metrics=compute_metrics,
    )
    if padding == "dynamic":
        assert isinstance(trainer.data_collator, DataCollatorWithPadding)
    trainer.train()
    metrics = trainer.evaluate()
    assert 0.0 <= metrics["eval_accuracy"] <= 1.0
    predictions = trainer.predict(encoded.remove_columns("label")).predictions
    assert isinstance(predictions, np.ndarray) and predictions.shape == (len(encoded), 2)
    assert float((predictions.argmax(axis=1) == np.array(labels)).mean()) == metrics["eval_accuracy"]

    saved = tmp_path / "classifier"
    trainer.save_model(str(saved))
    classify = pipeline("text-classification", model=str(saved))
    result = classify(sentences[:2])
    assert [r["label"] for r in result] == [model.config.id2label[int(i)] for i in predictions[:2].argmax(axis=1)]


# ---------------------------------------------------------------------------------------------
# python -m modeling_elmo SCRIPT.py ARGS: alone, under torchrun, under accelerate launch
# ---------------------------------------------------------------------------------------------

# A script that knows nothing of ELMo: the Auto classes on the folder it is given, and a neighbour module imported as
# `python SCRIPT.py` allows. With two processes, the ranks add their ones (gloo) to show that they ran together.
PROBE = textwrap.dedent(
    """
    import os
    import sys

    from transformers import AutoConfig, AutoModelForTokenClassification

    from probe_neighbour import NUM_LABELS

    config = AutoConfig.from_pretrained(sys.argv[1], num_labels=NUM_LABELS)
    model = AutoModelForTokenClassification.from_pretrained(sys.argv[1], config=config)
    ranks = "-"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        total = torch.ones(1)
        dist.all_reduce(total)
        ranks = int(total.item())
        dist.destroy_process_group()
    print(f"PROBE {__name__} {type(config).__name__} {type(model).__name__} {model.config.num_labels} "
          f"rank={os.environ.get('RANK', '-')} ranks={ranks} args={sys.argv[2:]}")
    """
)


@pytest.fixture
def probe(tmp_path) -> Path:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "probe.py").write_text(PROBE)
    (scripts / "probe_neighbour.py").write_text("NUM_LABELS = 3\n")
    return scripts / "probe.py"


def _env(tmp_path: Path) -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "TRANSFORMERS_VERBOSITY": "error",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _probe_lines(output: str) -> list[str]:
    """The probe's records, sorted. Matched as records, not lines: two ranks print into one pipe, and a record's text
    and its newline are two writes, so one rank's record can land before the other's newline (seen in CI)."""
    return sorted(re.findall(r"PROBE .*?args=\[[^\]]*\]", output))


def test_python_m_modeling_elmo_runs_an_unmodified_script(probe, tmp_path):
    run = [str(probe), str(demo_model_path()), "--flag", "value"]
    # Without the package's registration the script stops at AutoConfig, as the official scripts do.
    plain = subprocess.run(
        [sys.executable, *run], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert plain.returncode != 0 and "elmo" in plain.stderr, plain.stderr[-2000:]
    wrapped = subprocess.run(
        [sys.executable, "-m", "modeling_elmo", *run],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrapped.returncode == 0, wrapped.stderr[-3000:]
    assert _probe_lines(wrapped.stdout) == [
        "PROBE __main__ ElmoConfig ElmoForTokenClassification 3 rank=- ranks=- args=['--flag', 'value']"
    ]


def test_python_m_modeling_elmo_usage_and_exit_status(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "modeling_elmo", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    missing = run()
    assert missing.returncode == 2 and "usage: python -m modeling_elmo SCRIPT.py" in missing.stderr
    assert run("--help").returncode == 0
    absent = run("no_such_script.py")
    assert absent.returncode == 2 and "no such script file 'no_such_script.py'" in absent.stderr
    (tmp_path / "fails.py").write_text("import sys\nsys.exit(7)\n")
    assert run("fails.py").returncode == 7  # the script's own exit status


@pytest.mark.slow  # three launchers, each starting fresh interpreters: about 60 s on 2 CPUs
def test_python_m_modeling_elmo_under_torchrun_and_accelerate(probe, tmp_path):
    folder = str(demo_model_path())
    one = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
        + ["-m", "modeling_elmo", str(probe), folder],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    assert _probe_lines(one.stdout) == ["PROBE __main__ ElmoConfig ElmoForTokenClassification 3 rank=0 ranks=- args=[]"]

    two = run_two_processes(["-m", "modeling_elmo", str(probe), folder], cwd=tmp_path, env=_env(tmp_path))
    assert two.returncode == 0, two.stderr[-3000:]
    assert _probe_lines(two.stdout) == [
        f"PROBE __main__ ElmoConfig ElmoForTokenClassification 3 rank={rank} ranks=2 args=[]" for rank in (0, 1)
    ]

    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or "accelerate"
    launched = subprocess.run(
        [accelerate, "launch", "--cpu", "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no"]
        + ["--dynamo_backend", "no", "-m", "modeling_elmo", str(probe), folder, "--flag"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert _probe_lines(launched.stdout) == [  # one process: accelerate runs it without the distributed variables
        "PROBE __main__ ElmoConfig ElmoForTokenClassification 3 rank=- ranks=- args=['--flag']"
    ]


# python -m modeling_elmo as `python SCRIPT` (issue 49): a script reached through a link finds its neighbours and
# gets an absolute __file__; a folder or zip app with __main__.py runs; with -P, a filelock.py in the current folder
# does not shadow the library during the package's own imports.
APP = "import sys, os\nfrom probe_neighbour import NUM_LABELS\nprint('APP', NUM_LABELS, os.path.isabs(__file__))\n"


@pytest.mark.parametrize("how", ["linked script", "folder app", "zip app", "-P with a filelock.py here"])
def test_python_m_modeling_elmo_runs_what_python_runs(how, tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "probe_neighbour.py").write_text("NUM_LABELS = 3\n")
    (scripts / "app.py").write_text(APP)
    here = tmp_path / "here"
    here.mkdir()
    flags, target = [], None
    if how == "linked script":
        (here / "links").mkdir()
        os.symlink(scripts / "app.py", here / "links" / "app.py")
        target = "links/app.py"
    elif how == "folder app":
        (scripts / "__main__.py").write_text(APP)
        target = str(scripts)
    elif how == "zip app":
        with zipfile.ZipFile(here / "app.pyz", "w") as archive:
            archive.writestr("__main__.py", APP)
            archive.writestr("probe_neighbour.py", "NUM_LABELS = 3\n")
        target = "app.pyz"
    else:
        (here / "filelock.py").write_text("raise ImportError('the current folder shadowed filelock')\n")
        flags, target = ["-P"], str(scripts / "app.py")
    run = subprocess.run(
        [sys.executable, *flags, "-m", "modeling_elmo", target],
        cwd=here,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "APP 3" in run.stdout, run.stdout
    if how == "linked script":
        assert "APP 3 True" in run.stdout  # __file__ absolute, as `python links/app.py` gives it
