"""Issue 42: a remote-code folder used by someone who has transformers but not this package.

The folder that ``save_with_remote_code`` writes from the demo biLM (what ``elmo convert --remote_code`` shares) maps
every Auto class the package registers. In a Python environment where ``modeling_elmo`` cannot be imported, each
Auto class loads from it with ``trust_remote_code=True``, a tagger fine-tunes on it with ``Trainer`` (the data
collator, ``compute_metrics`` with ``np.argmax(predictions, axis=2)``, evaluate, predict), ``save_model`` writes a
folder that reloads to the same outputs, and the stock ``pipeline("token-classification")`` runs it.

The clean environment is a virtual environment made with ``python -m venv --without-pip``, whose site-packages hold
one ``.pth`` line naming a folder of links to this environment's site-packages, less the project's own entries
(``modeling_elmo``, ``elmo_cli``, ``elmo_flags``, the editable install's finder and metadata). A ``.pth`` line only
adds its folder to ``sys.path``; the ``.pth`` files inside that folder (the editable install's hook) never run. The
script runs with ``-I`` (no current folder, no ``PYTHONPATH``), checks that the package's names do not import, and
reports any module that was loaded from the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
import transformers
from transformers import AutoModel

import modeling_elmo
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, demo_model_path
from modeling_elmo.auto_map_elmo import AUTO_MAP, CUSTOM_PIPELINES, code_file
from modeling_elmo.hub.remote_code import AUTO_CLASSES, save_with_remote_code

REPO = Path(__file__).resolve().parent.parent
# The project's entries in site-packages (an editable or a regular install), and its top-level modules.
LIBRARIES = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
PROJECT_ENTRIES = ("modeling_elmo", "elmo_cli", "elmo_flags", "__editable__", "configuration_elmo", "convert_original")


def _registered_auto_classes() -> set[str]:
    """The Auto classes that ``import modeling_elmo`` registered, found through transformers' public calls: those
    whose ``from_config`` builds something for an ELMo config (or refuses with ELMo's own message)."""
    config = ElmoConfig(
        lstm_dim=8, projection_dim=4, char_embedding_dim=4, char_cnn_filters=[[1, 4]], n_highway=1, lm_vocab_size=3
    )
    found = set()
    for name in dir(transformers):
        if not name.startswith("AutoModel"):
            continue
        try:
            getattr(transformers, name).from_config(config)
        except ValueError as error:
            if "elmo" in str(error).lower() and "Unrecognized configuration class" not in str(error):
                found.add(name)  # ELMo's refusal (AutoModelForMaskedLM names "elmo-fill-mask")
        except Exception:  # noqa: S112 - not an Auto class for configs (AutoModel's mixins, deprecated names)
            continue
        else:
            found.add(name)
    return found


def test_auto_map_names_every_auto_class_the_package_registers():
    """``AUTO_MAP`` (one line per head) and the package's ``register`` calls agree: a head registered in
    ``__init__.py`` without its line (or the reverse) fails here."""
    models = {name for name in AUTO_MAP if name.startswith("AutoModel")}
    assert _registered_auto_classes() == models
    for auto_class, reference in AUTO_MAP.items():
        module, name = (reference[0] if isinstance(reference, list) else reference).rsplit(".", 1)
        cls = getattr(modeling_elmo, name, None) or getattr(
            __import__(f"modeling_elmo.{module}", fromlist=[name]), name
        )
        assert cls.__module__ == f"modeling_elmo.{module}", (auto_class, cls.__module__)
        assert (REPO / "modeling_elmo" / code_file(reference)).is_file()
    assert set(AUTO_CLASSES.values()) == models


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory) -> Path:
    """A Python interpreter that sees this environment's libraries but not the project."""
    root = tmp_path_factory.mktemp("clean-env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    view = root / "libraries"
    view.mkdir()
    for folder in LIBRARIES:
        for entry in Path(folder).iterdir():
            if not entry.name.startswith(PROJECT_ENTRIES) and not (view / entry.name).exists():
                (view / entry.name).symlink_to(entry)
    site = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "libraries-without-the-project.pth").write_text(f"{view}\n")
    return python


@pytest.fixture(scope="module")
def shared_folder(tmp_path_factory) -> Path:
    """The demo biLM saved with its code, as ``elmo convert --remote_code`` shares a biLM."""
    folder = tmp_path_factory.mktemp("shared") / "elmo-demo"
    model = ElmoModel.from_pretrained(demo_model_path())
    save_with_remote_code(model, ElmoTokenizer.from_pretrained(demo_model_path()), folder)
    return folder


def test_shared_folder_maps_every_auto_class_and_holds_its_code(shared_folder):
    config = json.loads((shared_folder / "config.json").read_text())
    assert config["auto_map"] == AUTO_MAP
    assert config["custom_pipelines"] == CUSTOM_PIPELINES
    held = set(os.listdir(shared_folder))
    assert {code_file(value) for value in [*AUTO_MAP.values(), *CUSTOM_PIPELINES.values()]} <= held
    tokenizer_config = json.loads((shared_folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == AUTO_MAP["AutoTokenizer"][0]
    # The package's classes keep no trace of the registration: a later save is plain.
    again = shared_folder.parent / "again"
    AutoModel.from_pretrained(shared_folder).save_pretrained(again)
    saved = json.loads((again / "config.json").read_text())
    assert "auto_map" not in saved and "custom_pipelines" not in saved
    assert not [f for f in os.listdir(again) if f.endswith(".py")]


CLEAN_SCRIPT = textwrap.dedent(
    r"""
    import json, os, sys
    from pathlib import Path

    repo, folder, out = Path(sys.argv[1]).resolve(), sys.argv[2], Path(sys.argv[3])
    for name in ("modeling_elmo", "elmo_cli", "elmo_flags"):
        try:
            __import__(name)
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit(f"{name} imports here: the environment is not clean")

    import numpy as np
    import torch
    import transformers
    from transformers import (AutoConfig, AutoModelForTokenClassification, AutoTokenizer,
                              DataCollatorForTokenClassification, Trainer, TrainingArguments, pipeline)

    report = {"loaded": {}}
    for auto_name in json.loads((Path(folder) / "config.json").read_text())["auto_map"]:
        try:
            loaded = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True)
        except ValueError as error:
            report["loaded"][auto_name] = f"ValueError: {error}"
        else:
            report["loaded"][auto_name] = f"{type(loaded).__module__}.{type(loaded).__name__}"

    tags = ["O", "B-PER", "I-PER", "B-LOC"]
    data = [
        ("John Smith lives in Paris .", "B-PER I-PER O O B-LOC O"),
        ("Mary Jones went to Rome .", "B-PER I-PER O O B-LOC O"),
        ("Paris is far from Rome .", "B-LOC O O O B-LOC O"),
        ("Anna Berg met John Smith .", "B-PER I-PER O B-PER I-PER O"),
    ]
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForTokenClassification.from_pretrained(
        folder, trust_remote_code=True, id2label=dict(enumerate(tags)), label2id={t: i for i, t in enumerate(tags)}
    )

    def encode(words, labels):
        encoded = tokenizer(words, is_split_into_words=True, truncation=True)
        encoded["labels"] = [-100 if w is None else tags.index(labels[w]) for w in encoded.word_ids()]
        return dict(encoded)

    examples = [encode(text.split(), labels.split()) for text, labels in data]

    def compute_metrics(prediction):
        predictions, labels = prediction
        predictions = np.argmax(predictions, axis=2)
        kept = labels != -100
        return {"word_accuracy": float((predictions[kept] == labels[kept]).mean())}

    args = TrainingArguments(
        output_dir=str(out / "run"), max_steps=20, per_device_train_batch_size=4, learning_rate=3e-2,
        use_cpu=True, report_to=[], save_strategy="no", logging_steps=10, seed=0, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=examples, eval_dataset=examples, processing_class=tokenizer,
                      data_collator=DataCollatorForTokenClassification(tokenizer), compute_metrics=compute_metrics)
    report["before"] = trainer.evaluate()["eval_word_accuracy"]
    trainer.train()
    report["after"] = trainer.evaluate()["eval_word_accuracy"]
    predicted = trainer.predict(examples)
    report["predict_shape"] = list(predicted.predictions.shape)
    report["predict_accuracy"] = predicted.metrics["test_word_accuracy"]
    tuned = out / "tuned"
    trainer.save_model(str(tuned))

    again = AutoModelForTokenClassification.from_pretrained(str(tuned), trust_remote_code=True).eval()
    batch = DataCollatorForTokenClassification(tokenizer)(examples)
    with torch.no_grad():
        report["reload_max_diff"] = float((again(**batch).logits - trainer.model.eval()(**batch).logits).abs().max())
    report["tuned_config"] = type(AutoConfig.from_pretrained(str(tuned), trust_remote_code=True)).__name__
    report["tuned_tokenizer"] = type(AutoTokenizer.from_pretrained(str(tuned), trust_remote_code=True)).__name__
    ner = pipeline("token-classification", model=str(tuned), trust_remote_code=True, aggregation_strategy="simple")
    text = "Mary Jones lives in Rome ."
    report["pipeline"] = type(ner).__module__ + "." + type(ner).__name__
    report["entities"] = [[e["entity_group"], e["word"], text[e["start"]:e["end"]]] for e in ner(text)]
    report["tuned_files"] = sorted(os.listdir(tuned))
    report["tuned_code"] = {k: v for k, v in json.loads((tuned / "config.json").read_text()).items()
                            if k in ("auto_map", "custom_pipelines")}

    # The libraries' real folders may lie inside the checkout too (a .venv there): those are not the project.
    libraries = [*json.loads(sys.argv[4]), sys.prefix, sys.base_prefix, sys.exec_prefix]
    env_prefixes = tuple(str(Path(p).resolve()) + "/" for p in libraries)

    def from_checkout(module):
        path = str(Path(getattr(module, "__file__", None) or "/").resolve())
        return path.startswith(str(repo) + "/") and not path.startswith(env_prefixes)

    report["modules_from_repo"] = sorted(n for n, m in list(sys.modules.items()) if from_checkout(m))
    (out / "report.json").write_text(json.dumps(report))
    """
)


@pytest.mark.slow  # a fresh interpreter, eight loads, 20 training steps: about 60 s on 2 busy CPUs
def test_without_the_package_each_auto_class_loads_and_a_tagger_fine_tunes(clean_python, shared_folder, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))} | {
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    script = tmp_path / "fine_tune_without_the_package.py"
    script.write_text(CLEAN_SCRIPT)
    result = subprocess.run(
        [str(clean_python), "-I", str(script), str(REPO), str(shared_folder), str(tmp_path), json.dumps(LIBRARIES)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["modules_from_repo"] == []

    # Each Auto class of the folder loads its ELMo class from the folder's code; the masked-LM one refuses, naming
    # the task that fills blanks.
    for auto_class, reference in AUTO_MAP.items():
        loaded = report["loaded"][auto_class]
        if auto_class == "AutoModelForMaskedLM":
            assert loaded.startswith("ValueError") and "elmo-fill-mask" in loaded, loaded
        else:
            name = (reference[0] if isinstance(reference, list) else reference).rsplit(".", 1)[1]
            assert loaded.startswith("transformers_modules.") and loaded.endswith(f".{name}"), (auto_class, loaded)

    # Trainer: compute_metrics gets one array of logits (B, W, labels), the tagger learns the four sentences.
    assert report["predict_shape"][0] == 4 and report["predict_shape"][2] == 4
    assert report["after"] > report["before"] and report["after"] >= 0.9, report
    assert report["predict_accuracy"] == report["after"]

    # The fine-tuned folder reloads to the same outputs and runs in the stock task, still without the package.
    assert report["reload_max_diff"] <= 1e-4  # the same weights (a reloaded copy may take another CPU path)
    assert (report["tuned_config"], report["tuned_tokenizer"]) == ("ElmoConfig", "ElmoTokenizer")
    assert report["pipeline"].endswith("pipelines_elmo.ElmoTokenClassificationPipeline"), report["pipeline"]
    for group, word, span in report["entities"]:
        assert word == span and group in {"PER", "LOC"}, report["entities"]
    # Its config names only code that it holds (transformers copied the tagger's modules, the config's and the
    # tokenizer's, and the pipeline that the base model's module imports).
    files = set(report["tuned_files"])
    for field in report["tuned_code"].values():
        for value in field.values():
            assert code_file(value) in files, (value, sorted(files))
    assert {"AutoConfig", "AutoModel", "AutoModelForTokenClassification"} <= set(report["tuned_code"]["auto_map"])
    assert set(report["tuned_code"]["custom_pipelines"]) == {"token-classification"}
