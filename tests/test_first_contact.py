"""Issue 51: what a newcomer meets first: the load report of a tagger built from a biLM, and the way out offered
where an Auto class is given a released model's short name or a script forgot ``import modeling_elmo``."""

from __future__ import annotations

import torch

from modeling_elmo import ElmoForTokenClassification

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def test_a_tagger_from_a_bilm_reports_only_weights_that_start_untrained(tiny_dir):
    """The load report listed ``crf.constraint_mask`` as MISSING ("Consider training on your downstream task"): a
    buffer derived from the labels, which no training changes. It is declared now; the head's weights are still
    reported, and the mask is the one the labels give."""
    tagger, info = ElmoForTokenClassification.from_pretrained(
        tiny_dir,
        id2label=dict(enumerate(TAGS)),
        label2id={tag: i for i, tag in enumerate(TAGS)},
        tagger_hidden_size=8,
        output_loading_info=True,
    )
    missing = set(info["missing_keys"])
    assert "crf.constraint_mask" not in missing, sorted(missing)
    assert {"crf.transitions", "crf.start_transitions", "classifier.weight"} <= missing, sorted(missing)
    assert torch.equal(tagger.crf.constraint_mask, tagger.crf.build_constraint_mask())
    # BIO: no I-PER after O, I-LOC after B-PER, or I- at the start
    allowed, tag = tagger.crf.constraint_mask, TAGS.index
    assert not allowed[tag("O"), tag("I-PER")] and not allowed[tag("B-PER"), tag("I-LOC")]
    assert not allowed[tagger.crf.start_index, tag("I-LOC")] and allowed[tag("B-PER"), tag("I-PER")]


def test_a_plain_folders_card_names_the_two_ways_out_of_an_unrecognised_architecture(tmp_path):
    """A script that forgot ``import modeling_elmo`` gets transformers' "does not recognize this architecture" and a
    suggestion to upgrade transformers. The card of every plain folder says what that message means and names the
    two ways out; a remote-code folder, which loads without the package, does not need them."""
    import subprocess
    import sys

    from helpers import TINY_SIZES

    from modeling_elmo import ElmoConfig, ElmoModel
    from modeling_elmo.hub.model_card import build_model_card

    config = ElmoConfig(**TINY_SIZES)
    card = " ".join(build_model_card(config).split())
    assert "does not recognize the model type `elmo`" in card, card
    assert "add the import" in card and "`python -m modeling_elmo SCRIPT.py ARGS`" in card, card
    config.auto_map = {"AutoModel": "modeling_elmo.ElmoModel"}
    assert "python -m modeling_elmo" not in build_model_card(config)
    # The message the card describes is transformers' own, for a plain folder loaded without the package.
    ElmoModel(ElmoConfig(**TINY_SIZES)).save_pretrained(tmp_path)
    code = f"from transformers import AutoModel\nAutoModel.from_pretrained({str(tmp_path)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "does not recognize this architecture" in done.stderr, done.stderr[-2000:]


def test_the_readme_says_what_to_do_when_a_load_fails():
    """Issue 51: the README's troubleshooting names the way out of the two first-contact failures: an Auto class given
    a released model's short name, and a script without ``import modeling_elmo``."""
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8").split())
    section = text[text.index("## When something goes wrong") : text.index("## Documentation")]
    assert 'AutoModel.from_pretrained("original")' in section and 'download_released_model("original")' in section
    assert "`import modeling_elmo`" in section and "`python -m modeling_elmo SCRIPT.py ARGS`" in section
    assert "--index-url https://download.pytorch.org/whl/cpu" in text  # the CPU-only torch
    assert "`../shared/data/`" in text and "ELMO_SHARED_DIR" in text  # where the data-set tests find their data
