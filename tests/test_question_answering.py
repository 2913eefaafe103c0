"""ElmoForQuestionAnswering (issue 45): the BiDAF-style head, transformers' layout of its logits and loss, the Auto
class, and the "elmo-question-answering" pipeline with answers as character spans of the context."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import TINY
from transformers import AutoModelForQuestionAnswering, pipeline

from modeling_elmo import (
    ElmoConfig,
    ElmoForQuestionAnswering,
    ElmoQuestionAnsweringPipeline,
    ElmoTokenizer,
    demo_model_path,
)

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTION = "Which person is mentioned ?"
NAMES = ["John Smith", "Mary", "Peter Jones", "Anna Berg", "Tom"]
FILLERS = [
    "Yesterday {} flew from London to Paris .",
    "The report said {} won the match in Rome on Sunday .",
    "{} was seen at the market with two friends .",
    "Police said that {} had left the city .",
]


def tiny_model(**kwargs) -> ElmoForQuestionAnswering:
    torch.manual_seed(0)
    settings = dict(TINY, classifier_hidden_size=8, classifier_dropout=0.0, elmo_dropout=0.0) | kwargs
    return ElmoForQuestionAnswering(ElmoConfig(**settings)).eval()


def test_auto_class_builds_the_qa_head():
    config = ElmoConfig(**TINY)
    assert isinstance(AutoModelForQuestionAnswering.from_config(config), ElmoForQuestionAnswering)


def test_logits_cover_the_context_only_and_the_loss_is_transformers_cross_entropy():
    model = tiny_model()
    tokenizer = ElmoTokenizer()
    batch = tokenizer(["who is it ?", "where"], ["John went home .", "in Paris"], padding=True, return_tensors="pt")
    context = batch["attention_mask"].bool() & batch["token_type_ids"].eq(1)
    with torch.no_grad():
        out = model(**batch, start_positions=torch.tensor([4, 1]), end_positions=torch.tensor([5, 2]))
    assert out.start_logits.shape == out.end_logits.shape == batch["attention_mask"].shape
    lowest = torch.finfo(out.start_logits.dtype).min
    assert bool((out.start_logits[~context] == lowest).all()) and bool((out.end_logits[~context] == lowest).all())
    assert bool((out.start_logits[context] > lowest / 2).all())
    expected = (
        F.cross_entropy(out.start_logits, torch.tensor([4, 1])) + F.cross_entropy(out.end_logits, torch.tensor([5, 2]))
    ) / 2
    torch.testing.assert_close(out.loss, expected)
    # A position outside the context (run_qa's label for a window that misses the answer) adds no loss.
    with torch.no_grad():
        partial = model(**batch, start_positions=torch.tensor([4, 0]), end_positions=torch.tensor([5, 0]))
    expected = (
        F.cross_entropy(out.start_logits[:1], torch.tensor([4]))
        + F.cross_entropy(out.end_logits[:1], torch.tensor([5]))
    ) / 2
    torch.testing.assert_close(partial.loss, expected)


def test_context_scores_depend_on_the_question():
    model = tiny_model()
    tokenizer = ElmoTokenizer()
    a = tokenizer(["who"], ["John went home"], return_tensors="pt")
    b = tokenizer(["where did he go"], ["John went home"], return_tensors="pt")
    with torch.no_grad():
        start_a = model(**a).start_logits[0, 1:]
        start_b = model(**b).start_logits[0, 4:]
    assert float((start_a - start_b).abs().max()) > 1e-4


def test_a_single_text_is_refused_with_the_fix():
    model = tiny_model()
    batch = ElmoTokenizer()(["John went home"], return_tensors="pt")
    batch.pop("token_type_ids", None)
    with pytest.raises(ValueError, match=r"tokenizer\(question, context\)"):
        model(**batch)


def toy_examples(n: int, seed: int) -> list[dict]:
    rng = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(n):
        name = NAMES[int(torch.randint(len(NAMES), (1,), generator=rng))]
        template = FILLERS[int(torch.randint(len(FILLERS), (1,), generator=rng))]
        context = template.format(name)
        examples.append({"context": context, "answer": name, "answer_start": context.index(name)})
    return examples


@pytest.mark.slow  # 40 training steps on the demo biLM
def test_trained_head_answers_through_the_pipeline_with_character_spans():
    """A few steps on the demo biLM teach "Which person is mentioned?"; the pipeline's answers are character spans
    of the context (``context[start:end] == answer``), top_k gives several, and a long context is read in windows."""
    path = demo_model_path()
    tokenizer = ElmoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(path, classifier_hidden_size=16, classifier_dropout=0.0)
    examples = toy_examples(64, seed=0)
    batch = tokenizer([QUESTION] * len(examples), [e["context"] for e in examples], padding=True, return_tensors="pt")
    question_words = len(QUESTION.split())
    starts = [question_words + len(e["context"][: e["answer_start"]].split()) for e in examples]
    ends = [s + len(e["answer"].split()) - 1 for s, e in zip(starts, examples, strict=True)]
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(40):
        loss = model(**batch, start_positions=torch.tensor(starts), end_positions=torch.tensor(ends)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    qa = pipeline("elmo-question-answering", model=model.eval(), tokenizer=tokenizer)
    assert isinstance(qa, ElmoQuestionAnsweringPipeline)
    held_out = [
        "On Monday Anna Berg said the talks had failed .",
        "The minister met Tom in Berlin .",
    ]
    for context, name in zip(held_out, ["Anna Berg", "Tom"], strict=True):
        answer = qa(question=QUESTION, context=context)
        assert context[answer["start"] : answer["end"]] == answer["answer"]
        assert answer["answer"] == name, answer
    several = qa({"question": QUESTION, "context": held_out[0]}, top_k=3)
    assert len(several) == 3 and several[0]["score"] >= several[1]["score"] >= several[2]["score"]
    assert all(held_out[0][a["start"] : a["end"]] == a["answer"] for a in several)
    long_context = " ".join(["The weather was fine ."] * 6 + [held_out[0]])
    windowed = qa(question=QUESTION, context=long_context, max_seq_len=16, doc_stride=4)
    assert long_context[windowed["start"] : windowed["end"]] == windowed["answer"] == "Anna Berg"


def test_pipeline_refuses_bad_input():
    qa = pipeline("elmo-question-answering", model=tiny_model(), tokenizer=ElmoTokenizer())
    with pytest.raises(ValueError, match="question"):
        qa("just a string")
    with pytest.raises(ValueError, match="non-empty"):
        qa(question="", context="John went home")
    with pytest.raises(ValueError, match="top_k"):
        qa(question="who", context="John went home", top_k=0)


@pytest.mark.slow  # a few Trainer steps on the demo biLM
def test_run_qa_flow_features_trainer_and_post_processing(tmp_path):
    """run_qa.py's calls in our words: windowed features with stride through Dataset.map (labels from the offsets and
    sequence_ids; a window without the answer labelled with position 0), the stock Trainer and collator, predict(),
    then the post-processing by offsets: the best span among the context's words of every window."""
    datasets = pytest.importorskip("datasets")
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    path = demo_model_path()
    tokenizer = ElmoTokenizer.from_pretrained(path)
    examples = toy_examples(48, seed=1)
    raw = datasets.Dataset.from_list(
        [
            {
                "id": str(i),
                "question": QUESTION,
                "context": e["context"],
                "answer_start": e["answer_start"],
                "answer": e["answer"],
            }
            for i, e in enumerate(examples)
        ]
    )

    def features(batch):
        enc = tokenizer(
            batch["question"],
            batch["context"],
            truncation="only_second",
            max_length=10,
            stride=3,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        samples = enc.pop("overflow_to_sample_mapping")
        enc["start_positions"], enc["end_positions"], enc["example_id"] = [], [], []
        for i, offsets in enumerate(enc["offset_mapping"]):
            sequence_ids, sample = enc.sequence_ids(i), samples[i]
            first = batch["answer_start"][sample]
            last = first + len(batch["answer"][sample])
            words = [
                w for w, s in enumerate(sequence_ids) if s == 1 and offsets[w][0] >= first and offsets[w][1] <= last
            ]
            enc["start_positions"].append(words[0] if words else 0)
            enc["end_positions"].append(words[-1] if words else 0)
            enc["example_id"].append(batch["id"][sample])
            enc["offset_mapping"][i] = [o if s == 1 else None for o, s in zip(offsets, sequence_ids, strict=True)]
        return enc

    mapped = raw.map(features, batched=True, remove_columns=raw.column_names)
    assert len(mapped) > len(raw)  # long contexts gave several windows
    assert any(s == 0 for s in mapped["start_positions"])  # windows without the answer
    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(path, classifier_hidden_size=16, classifier_dropout=0.0)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        num_train_epochs=8,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
    )
    train = mapped.remove_columns(["offset_mapping", "example_id"])
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer))
    trainer.train()
    held_out = datasets.Dataset.from_list(
        [
            {
                "id": f"t{i}",
                "question": QUESTION,
                "context": e["context"],
                "answer_start": e["answer_start"],
                "answer": e["answer"],
            }
            for i, e in enumerate(toy_examples(16, seed=7))
        ]
    )
    test = held_out.map(features, batched=True, remove_columns=held_out.column_names)
    start, end = trainer.predict(test.remove_columns(["offset_mapping", "example_id"])).predictions[:2]
    assert start.shape == end.shape == (len(test), start.shape[1])
    best: dict[str, tuple[float, str]] = {}
    for row, feature in enumerate(test):
        offsets = feature["offset_mapping"]
        for i in range(len(offsets)):
            for j in range(i, min(i + 5, len(offsets))):
                if offsets[i] is None or offsets[j] is None:
                    continue
                score = float(start[row, i] + end[row, j])
                context = held_out[int(feature["example_id"][1:])]["context"]
                if score > best.get(feature["example_id"], (-np.inf, ""))[0]:
                    best[feature["example_id"]] = (score, context[offsets[i][0] : offsets[j][1]])
    exact = np.mean([best[e["id"]][1] == e["answer"] for e in held_out])
    assert exact >= 0.75, (exact, best)


LONG_CONTEXT = " ".join(["The weather was fine in Paris today ."] * 8 + ["John Smith flew home ."])


def tiny_qa():
    return pipeline("elmo-question-answering", model=tiny_model(), tokenizer=ElmoTokenizer())


def test_pipeline_batch_size_gives_the_answers_of_batch_size_one():
    """Issue 49: ``batch_size=2`` collates windows (of one context and of several) into one forward pass; the
    answers are those of ``batch_size=1`` (spans equal, scores to float32 rounding of the padded batch)."""
    qa = tiny_qa()
    inputs = [{"question": "who", "context": LONG_CONTEXT}, {"question": "where did he fly", "context": "to Rome ."}]
    options = dict(max_seq_len=16, doc_stride=4, top_k=3)
    for alone, batched in zip(qa(inputs, **options), qa(inputs, batch_size=2, **options), strict=True):
        assert [(a["start"], a["end"]) for a in alone] == [(a["start"], a["end"]) for a in batched]
        np.testing.assert_allclose([a["score"] for a in alone], [a["score"] for a in batched], rtol=1e-5)
    single = qa(question="who", context=LONG_CONTEXT, batch_size=3, max_seq_len=16, doc_stride=4)
    assert single == qa(question="who", context=LONG_CONTEXT, max_seq_len=16, doc_stride=4) | {
        "score": pytest.approx(single["score"], rel=1e-5)
    }


def test_pipeline_reads_a_long_context_in_bounded_chunks():
    """Issue 49: a long context's windows go through the model ``batch_size`` at a time (a ChunkPipeline), not all
    at once; the answer is the same."""
    qa = tiny_qa()
    rows = []
    hook = qa.model.register_forward_hook(
        lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        one = qa(question="who", context=LONG_CONTEXT, max_seq_len=12, doc_stride=2)
        windows = len(rows)
        rows.clear()
        two = qa(question="who", context=LONG_CONTEXT, max_seq_len=12, doc_stride=2, batch_size=2)
    finally:
        hook.remove()
    assert windows > 4 and max(rows) == 2 and sum(rows) == windows
    assert (one["start"], one["end"]) == (two["start"], two["end"])


def test_span_search_is_bounded_by_max_answer_len_and_matches_the_full_search():
    """The span search scores ``(context words, max_answer_len)`` pairs, not ``(W, W)``; its best spans are those
    of the exhaustive search over every ``i <= j < i + L``."""
    from modeling_elmo.pipelines.question_answering import _best_spans

    rng = np.random.default_rng(0)
    for words, length, top_k in [(40, 5, 7), (9, 15, 3), (1, 4, 2), (300, 30, 20)]:
        p_start, p_end = rng.dirichlet(np.ones(words)), rng.dirichlet(np.ones(words))
        p_start[: words // 4] = 0  # the question's words
        p_end[: words // 4] = 0
        exhaustive = sorted(
            ((p_start[i] * p_end[j], i, j) for i in range(words) for j in range(i, min(words, i + length))),
            reverse=True,
        )
        expected = [(i, j) for score, i, j in exhaustive if score > 0][:top_k]
        found = _best_spans(p_start, p_end, length, top_k)
        assert [(i, j) for i, j, _ in found] == expected
        np.testing.assert_allclose([s for *_, s in found], [p_start[i] * p_end[j] for i, j in expected])


def test_pipeline_options_of_the_removed_pipeline():
    """Issue 49: the removed pipeline's options work or are refused by name; the inputs are checked up front."""
    qa = tiny_qa()
    for answer in qa(question="who", context=LONG_CONTEXT, top_k=5, max_answer_len=2):
        assert len(answer["answer"].split()) <= 2
    plain = qa(question="who", context=LONG_CONTEXT)
    assert qa(question="who", context=LONG_CONTEXT, align_to_words=False) == plain  # tokens are whole words
    with pytest.raises(TypeError, match=r"'topk' \(did you mean 'top_k'\?\)"):
        qa(question="who", context=LONG_CONTEXT, topk=2)
    with pytest.raises(ValueError, match=r"handle_impossible_answer=True needs a no-answer position"):
        qa(question="who", context=LONG_CONTEXT, handle_impossible_answer=True)
    assert qa(question="who", context=LONG_CONTEXT, handle_impossible_answer=False) == plain
    with pytest.raises(ValueError, match="max_seq_len must be an integer of at least 2, got 0"):
        qa(question="who", context=LONG_CONTEXT, max_seq_len=0)
    with pytest.raises(ValueError, match="doc_stride must be an integer of at least 0, got -5"):
        qa(question="who", context=LONG_CONTEXT, doc_stride=-5)
    with pytest.raises(ValueError, match=r"doc_stride \(20\) must be smaller than max_seq_len \(16\)"):
        qa(question="who", context=LONG_CONTEXT, doc_stride=20, max_seq_len=16)
    with pytest.raises(ValueError, match="question= has 2 entries and context= has 1"):
        qa(question=["who", "where"], context=[LONG_CONTEXT])
    several = qa(question=["who", "where"], context=LONG_CONTEXT)
    assert len(several) == 2 and several[0] == plain
    with pytest.raises(ValueError, match="needs both question= and context="):
        qa(question="who")


def test_pipeline_long_question_is_cut_to_max_question_len_or_lowers_the_stride():
    """Issue 49: a 300-word question (the tokenizer refused the default stride with a Rust panic) keeps its first
    ``max_question_len`` words; with a longer ``max_question_len`` the stride is lowered to fit the window, and a
    window with no room for the context is refused naming the options."""
    qa = tiny_qa()
    question = " ".join(["where"] * 300)
    context = "Yesterday John Smith flew from London to Paris ."
    cut = qa(question=question, context=context)
    assert cut == qa(question=" ".join(["where"] * 64), context=context)
    whole = qa(question=question, context=context, max_question_len=300, max_seq_len=305)  # stride 150 -> 4
    assert context[whole["start"] : whole["end"]] == whole["answer"]
    with pytest.raises(ValueError, match=r"max_seq_len=300 leaves no word .* lower max_question_len"):
        qa(question=question, context=context, max_question_len=300, max_seq_len=300)


@pytest.mark.parametrize(
    ("start", "end", "shape"),
    [
        (torch.tensor([4, 1, 2]), torch.tensor([5, 2, 2]), r"\(3,\)"),
        (torch.tensor([[4, 5], [1, 2]]), torch.tensor([5, 2]), r"\(2, 2\)"),
        (torch.tensor([4.0, 1.0]), torch.tensor([5, 2]), r"\(2,\) torch.float32"),
    ],
)
def test_positions_of_the_wrong_shape_are_named(start, end, shape):
    """Issue 49: positions that are not one integer per row are refused naming them (torch's gather error before)."""
    model = tiny_model()
    batch = ElmoTokenizer()(
        ["who is it ?", "where"], ["John went home .", "in Paris"], padding=True, return_tensors="pt"
    )
    with pytest.raises(
        ValueError, match=r"start_positions must be \(2,\) \(or \(2, 1\)\) integer word indices.*" + shape
    ):
        model(**batch, start_positions=start, end_positions=end)
    with torch.no_grad():  # (B, 1), as some collators give them, is taken
        model(**batch, start_positions=torch.tensor([[4], [1]]), end_positions=torch.tensor([[5], [2]]))


def test_float_token_type_ids_are_refused():
    """Issue 49: float token_type_ids were cast (0.7 read as 0); the model refuses them, naming the dtype."""
    model = tiny_model()
    batch = ElmoTokenizer()(["who is it ?"], ["John went home ."], return_tensors="pt")
    batch["token_type_ids"] = batch["token_type_ids"].float() * 0.7
    with pytest.raises(ValueError, match="token_type_ids must be integers .* torch.float32"):
        model(**batch)


def test_peft_question_answering_task_type_is_named_and_the_way_round_works():
    """Issue 49: PEFT's TaskType.QUESTION_ANS wrapper drops token_type_ids, and the head's message says so; wrapped
    without a task_type (docs/training.md's PEFT section), the head gets them and trains."""
    peft = pytest.importorskip("peft")
    batch = ElmoTokenizer()(["who is it ?"], ["John went home ."], return_tensors="pt")
    positions = {"start_positions": torch.tensor([4]), "end_positions": torch.tensor([5])}
    lora = dict(r=2, lora_alpha=4, target_modules=["carry", "transform", "projection"])
    wrapped = peft.get_peft_model(tiny_model(), peft.LoraConfig(task_type=peft.TaskType.QUESTION_ANS, **lora))
    with pytest.raises(ValueError, match=r"TaskType.QUESTION_ANS's wrapper .* drops token_type_ids"):
        wrapped(**batch)
    head = ["encoder", "attention", "modelling", "end_encoder", "start_output", "end_output", "elmo.scalar_mixes.0"]
    model = peft.get_peft_model(tiny_model(), peft.LoraConfig(task_type=None, modules_to_save=head, **lora))
    before = model(**batch).start_logits.detach().clone()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(2):
        model(**batch, **positions).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        assert not torch.allclose(model(**batch).start_logits, before)
