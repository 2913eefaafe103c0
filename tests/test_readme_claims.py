"""The README's "How it hooks into transformers" paragraph: each statement, and the tests that check it.

Cheap statements are checked here directly; the ones that need a trained model or a clean environment name the
test that checks them, and this file checks that those tests exist (they run in the same suite).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "modeling_elmo"

# A phrase of the paragraph -> the tests (file::name) that check it.
CLAIMS = {
    "registers ELMo with transformers through public calls only": [
        "test_readme_claims.py::test_import_registers_the_auto_classes_and_pipelines",
        "test_readme_claims.py::test_no_import_hooks_private_overrides_or_log_filters",
    ],
    "unchanged for other models": ["test_pipelines.py::test_other_models_get_the_same_results_as_from_the_stock_class"],
    "work on saved ELMo folders without `trust_remote_code`": [
        "test_pipelines.py::test_stock_pipeline_on_a_trained_crf_tagger_folder_gives_viterbi_on_every_dev_word",
        "test_pipelines.py::test_stock_text_classification_pipeline_on_a_saved_classifier_folder",
    ],
    "their argmax is the Viterbi path": [
        "test_pipelines.py::test_crf_logits_are_the_max_marginals_and_their_argmax_is_viterbi"
    ],
    "Saved folders are plain": ["test_hub.py::test_saved_folders_are_plain"],
    "such a folder loads without the package": ["test_hub.py::test_remote_code_loads_without_the_package"],
    "declared in `_keys_to_ignore_on_load_missing`": [
        "test_quiet.py::test_loads_print_no_table_and_a_mismatch_one_error"
    ],
    "network calls of the package's own": ["test_loading_safety.py::test_released_short_name_fails_at_once"],
    "imports the package only when a subcommand runs": [
        "test_quiet.py::test_elmo_help_imports_neither_torch_nor_transformers"
    ],
}


def paragraph() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## How it hooks into transformers\n(.*?)^## ", text, re.S | re.M)
    assert match, "README.md has no 'How it hooks into transformers' section"
    return " ".join(match.group(1).split())


def test_every_claim_is_in_the_readme_and_has_its_tests():
    text = paragraph()
    for phrase, tests in CLAIMS.items():
        assert " ".join(phrase.split()) in text, f"the README no longer says {phrase!r}: update CLAIMS"
        for test in tests:
            file, name = test.split("::")
            tree = ast.parse((REPO / "tests" / file).read_text(encoding="utf-8"))
            names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
            assert name in names, f"{test}, which checks {phrase!r}, does not exist"


def test_import_registers_the_auto_classes_and_pipelines():
    from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification
    from transformers.pipelines import PIPELINE_REGISTRY

    import modeling_elmo

    assert AutoConfig.for_model("elmo").__class__ is modeling_elmo.ElmoConfig
    config = modeling_elmo.ElmoConfig()
    assert AutoModel._model_mapping[type(config)] is modeling_elmo.ElmoModel
    assert AutoModelForTokenClassification._model_mapping[type(config)] is modeling_elmo.ElmoForTokenClassification
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

    assert TOKENIZER_MAPPING[type(config)] is modeling_elmo.ElmoTokenizer
    tasks = PIPELINE_REGISTRY.supported_tasks
    assert tasks["token-classification"]["impl"] is modeling_elmo.ElmoTokenClassificationPipeline
    assert tasks["elmo-feature-extraction"]["impl"] is modeling_elmo.ElmoFeatureExtractionPipeline
    assert tasks["elmo-fill-mask"]["impl"] is modeling_elmo.ElmoFillMaskPipeline


@pytest.mark.parametrize(
    "pattern",
    [
        r"sys\.meta_path",
        r"_load_pretrained_model",
        r"addFilter",
        r"set_verbosity_error",
        r"supported_tasks\[[^]]+\]\s*=",
    ],
)
def test_no_import_hooks_private_overrides_or_log_filters(pattern):
    """No import hook, no override of transformers' private loader, no filter or level change on its loggers, no
    write into the pipeline registry's dictionaries, in any file of the package. (The ``elmo`` command, an
    application, sets transformers' verbosity for its own output; it has no hook, override or filter either.)"""
    files = [*PACKAGE.rglob("*.py")] + ([REPO / "elmo_cli.py"] if pattern != "set_verbosity_error" else [])
    found = [f"{p.relative_to(REPO)}" for p in files if re.search(pattern, p.read_text(encoding="utf-8"))]
    assert not found, f"{pattern!r} in {found}"
