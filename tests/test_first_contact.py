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
