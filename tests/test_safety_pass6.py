"""Issue 49, the attack pass on the file-safety, Parquet, CLI and ``python -m modeling_elmo`` surfaces: each test
failed before its fix.

Temporary names followed through planted symbolic links (item 1), a Parquet folder caught mid-publish (2), a remote
code save through a link (3), the Parquet card kept and the read printed (6). On the tiny random model and the demo
models; nothing needs the shared data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import TINY

import elmo_cli as cli
from modeling_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from modeling_elmo.inference import parquet_shards
from modeling_elmo.inference.parquet_shards import METADATA_NAME, ShardFolderError, write_shards

datasets = pytest.importorskip("datasets")  # the [train] extra

pytestmark = pytest.mark.usefixtures("one_thread")

TOKENIZER = ElmoTokenizer()
ROWS = [f"sentence {i} has {'many ' * (i % 4)}words ." for i in range(18)]
SECRET = b"a file outside the output folder\n"


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


@pytest.fixture(scope="module")
def model() -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**TINY)).eval()


def write(model, folder, **kwargs):
    settings = dict(output_type="elmo", shard_size=3, chunk_size=3, progress=False, log=lambda line: None)
    dataset = datasets.Dataset.from_dict({"text": ROWS})
    return write_shards(model, TOKENIZER, dataset, str(folder), **{**settings, **kwargs})


def outside(tmp_path: Path) -> Path:
    """A file outside every output folder, that planted links point at."""
    victim = tmp_path / "elsewhere" / "secret.txt"
    victim.parent.mkdir(exist_ok=True)
    victim.write_bytes(SECRET)
    return victim


def plant(folder: Path, pattern: str, victim: Path, spread: int = 200) -> None:
    """Symbolic links named ``pattern`` with the PIDs around this process's (the run's), to ``victim``."""
    pid = os.getpid()
    for n in range(max(1, pid - spread), pid + spread):
        os.symlink(victim, folder / pattern.format(pid=n))


def read(folder: Path, cache: Path):
    return datasets.load_dataset(str(folder), cache_dir=str(cache))["train"]


# --------------------------------------------------------------------------------------------------
# Item 1: no temporary file is written through a planted link


def test_item1_links_at_the_metadata_temporary_names_are_strangers_and_are_not_written_through(model, tmp_path):
    """400 links ``.elmo_embed.json.PID.tmp`` to a file outside: before, the folder read as empty and the outside
    file received the metadata. Now the links are strangers: refused, the outside file as it was."""
    victim, folder = outside(tmp_path), tmp_path / "out"
    folder.mkdir()
    plant(folder, f".{METADATA_NAME}.{{pid}}.tmp", victim)
    with pytest.raises(ShardFolderError, match="is not empty"):
        write(model, folder)
    assert victim.read_bytes() == SECRET and not os.path.lexists(folder / METADATA_NAME)


def test_item1_the_cli_refuses_the_planted_metadata_links(model, tiny_dir, tmp_path, capsys):
    victim, folder = outside(tmp_path), tmp_path / "out"
    folder.mkdir()
    plant(folder, f".{METADATA_NAME}.{{pid}}.tmp", victim)
    text = tmp_path / "in.txt"
    text.write_text("".join(row + "\n" for row in ROWS), encoding="utf-8")
    argv = ["embed", "--train_file", text, "--output_dir", folder, "--model", tiny_dir, "--disable_tqdm"]
    assert cli.main([str(a) for a in argv]) == 1
    assert "is not empty" in capsys.readouterr().err and victim.read_bytes() == SECRET


def test_item1_links_at_the_card_temporary_names_are_not_written_through(model, tmp_path):
    """An unfinished run's folder, then 400 links ``.README.md.PID.tmp`` to a file outside: before, the completing run
    wrote the card into the outside file. Now the card is a regular file of the folder and the outside file is as it
    was."""
    victim, folder = outside(tmp_path), tmp_path / "out"
    assert not write(model, folder, rank=0, world=2).complete
    plant(folder, ".README.md.{pid}.tmp", victim)
    assert write(model, folder, rank=1, world=2).complete
    card = folder / "README.md"
    assert victim.read_bytes() == SECRET
    assert not card.is_symlink() and "num_examples: 18" in card.read_text()
    assert not (folder / METADATA_NAME).is_symlink()


def test_item1_a_link_at_a_commands_temporary_name_is_refused_not_followed(tmp_path, capsys):
    """``elmo score -o out.jsonl`` with a link ``.out.jsonl.score-partial-PID.tmp`` to a file outside: before, the
    scores went into the outside file (and out.jsonl became a hard link to it). Now one error naming the link."""
    victim, out = outside(tmp_path), tmp_path / "out.jsonl"
    text = tmp_path / "in.txt"
    text.write_text("the cat sat .\n", encoding="utf-8")
    os.symlink(victim, tmp_path / f".out.jsonl.score-partial-{os.getpid()}.tmp")
    assert cli.main(["score", "--model", "demo", "--disable_tqdm", str(text), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "temporary name" in err and "symbolic link" in err and "move it away" in err, err
    assert victim.read_bytes() == SECRET and not out.exists()


def test_item1_a_link_at_export_vectors_own_temporary_name_is_not_followed(tiny_dir, tmp_path, capsys):
    """The word2vec writer's own temporary name beside the command's: a link there is refused, never written
    through (before, the vectors went into the outside file)."""
    victim, out = outside(tmp_path), tmp_path / "vec.txt"
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("the\ncat\n", encoding="utf-8")
    pid = os.getpid()
    os.symlink(victim, tmp_path / f"..vec.txt.export-vectors-partial-{pid}.tmp.export-{pid}.tmp")
    argv = ["export-vectors", "--model", tiny_dir, "--vocab_file", vocab, "--output_file", out, "--disable_tqdm"]
    assert cli.main([str(a) for a in argv]) == 1
    assert "is taken" in capsys.readouterr().err
    assert victim.read_bytes() == SECRET and not out.exists()


def test_item1_a_link_at_the_plots_old_temporary_name_is_not_followed(tiny_dir, tmp_path):
    """`elmo similar --plot`: the image was saved under ``.NAME.partial.png`` beside the command's temporary file, by
    name (before, a link there received the image). Now under a new, unguessable name: the link is left alone."""
    pytest.importorskip("matplotlib")
    victim, plot = outside(tmp_path), tmp_path / "plot.png"
    os.symlink(victim, tmp_path / f"..plot.png.similar-partial-{os.getpid()}.tmp.png.partial.png")
    argv = ["similar", "--model", tiny_dir, "--device", "cpu", "--plot", plot]
    assert cli.main([str(a) for a in argv]) == 0
    assert victim.read_bytes() == SECRET and plot.read_bytes().startswith(b"\x89PNG")


def test_item1_a_model_card_link_is_not_written_through(tmp_path):
    """``write_model_card`` (``elmo convert``, the training commands) with ``README.md`` a link to a card outside the
    folder: before, the new card went into the link's target. Now the link is no card of the package's: left alone,
    its target as it was."""
    from modeling_elmo.hub.model_card import GENERATED_MARKER, write_model_card

    victim = outside(tmp_path)
    victim.write_text(f"---\nlicense: apache-2.0\n---\n{GENERATED_MARKER}\nanother model's card\n")
    before = victim.read_bytes()
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(victim, folder / "README.md")
    assert write_model_card(folder, ElmoConfig(**TINY), how_made="A test.") is None
    assert victim.read_bytes() == before and (folder / "README.md").is_symlink()
    os.unlink(folder / "README.md")
    assert write_model_card(folder, ElmoConfig(**TINY), how_made="A test.") == folder / "README.md"
    assert GENERATED_MARKER in (folder / "README.md").read_text() and os.listdir(folder) == ["README.md"]


# --------------------------------------------------------------------------------------------------
# Item 2: a folder caught while its shards get their names does not read as a smaller dataset


def test_item2_a_run_killed_at_the_third_of_six_renames_fails_to_load_then_completes(model, tmp_path, monkeypatch):
    """The state a kill at the 3rd of 6 renames leaves (the process stops there: nothing after runs): before, no card
    and two public shards, and ``load_dataset(DIR)`` read 6 of 18 rows without a word. Now the card, written before
    the renames, names the missing shards: the load fails naming one. The rerun completes the folder: 18 rows."""
    publish = parquet_shards._publish_shard

    class Killed(BaseException):
        pass

    def killed_at_the_third(output_dir, plan, index):
        if index == 2:
            raise Killed
        publish(output_dir, plan, index)

    folder = tmp_path / "out"
    monkeypatch.setattr(parquet_shards, "_publish_shard", killed_at_the_third)
    with pytest.raises(Killed):
        write(model, folder)
    assert len(list(folder.glob("train-*.parquet"))) == 2
    with pytest.raises(FileNotFoundError, match="train-00002-of-00006.parquet"):
        read(folder, tmp_path / "c1")
    monkeypatch.setattr(parquet_shards, "_publish_shard", publish)
    assert write(model, folder).complete
    assert read(folder, tmp_path / "c2")["text"] == ROWS


# --------------------------------------------------------------------------------------------------
# Item 6: a rerun keeps the card as edited; the printed read checks the card


def test_item6_a_no_op_rerun_keeps_the_users_edit_of_the_card(model, tmp_path):
    folder = tmp_path / "out"
    assert write(model, folder).complete
    card = folder / "README.md"
    edited = card.read_text() + "\nCollected for the 2026 study; see the paper.\n"
    card.write_text(edited)
    run = write(model, folder)
    assert run.complete and run.written == [] and card.read_text() == edited


def test_item6_embed_prints_the_read_that_checks_the_card(tiny_dir, tmp_path, capsys):
    """`elmo embed --output_dir` prints ``datasets.load_dataset("DIR")``: with a shard deleted, that read fails
    (before: the printed ``data_dir=`` read gave 15 of 18 rows without a word)."""
    folder, text = tmp_path / "out", tmp_path / "in.txt"
    text.write_text("".join(row + "\n" for row in ROWS), encoding="utf-8")
    argv = ["embed", "--train_file", text, "--output_dir", folder, "--model", tiny_dir, "--disable_tqdm",
            "--shard_size", "3"]  # fmt: skip
    assert cli.main([str(a) for a in argv]) == 0
    assert f'datasets.load_dataset("{folder}")' in capsys.readouterr().err
    assert read(folder, tmp_path / "c1")["text"] == ROWS
    (folder / "train-00001-of-00006.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="train-00001-of-00006.parquet"):
        read(folder, tmp_path / "c2")


# --------------------------------------------------------------------------------------------------
# Item 3: a remote-code save replaces a link, never its target


def test_item3_save_with_remote_code_replaces_links_not_their_targets(tmp_path):
    """Links in the destination under a module's name and under ``config.json``, to files outside: before, the save
    wrote the module's code and the config into them. Now the links are replaced by the files; the targets stay."""
    from modeling_elmo.hub.remote_code import save_with_remote_code, shipped_files

    folder = tmp_path / "saved"
    folder.mkdir()
    module = outside(tmp_path)
    config = module.with_name("config.txt")
    config.write_bytes(SECRET)
    os.symlink(module, folder / "modeling_elmo.py")
    os.symlink(config, folder / "config.json")
    torch.manual_seed(0)
    save_with_remote_code(ElmoModel(ElmoConfig(**TINY)), TOKENIZER, folder)
    assert module.read_bytes() == SECRET and config.read_bytes() == SECRET
    for name in ("modeling_elmo.py", "config.json"):
        assert not (folder / name).is_symlink()
    source = next(p for p in shipped_files() if p.name == "modeling_elmo.py")
    assert (folder / "modeling_elmo.py").read_bytes() == source.read_bytes()
    assert not [n for n in os.listdir(folder) if n.startswith(".")]


# --------------------------------------------------------------------------------------------------
# Items 7, 8: bad numbers are usage errors at flag parsing; an output named as a folder gets a message


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["embed", "in.txt", "--batch_size", "0"], "--batch_size"),
        (["embed", "in.txt", "--max_batch_words", "0"], "--max_batch_words"),
        (["embed", "in.txt", "--max-batch-words", "-3"], "--max-batch-words"),
        (["embed", "--train_file", "in.txt", "--output_dir", "out", "--shard_size", "0"], "--shard_size"),
        (["export-vectors", "--vocab_file", "v.txt", "--output_file", "o.txt", "--batch_size", "0"], "--batch_size"),
        (["score", "in.txt", "--batch_size", "0"], "--batch_size"),
        (["demo", "--port", "99999"], "--port"),
        (["demo", "--port", "0"], "--port"),
    ],
)
def test_item7_bad_numbers_exit_2_at_flag_parsing(argv, flag, capsys):
    """Before: exit 1 after the model loaded (or the web server failed to bind). Now argparse's usage error."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and ("at least 1" in err or "1 to 65535" in err), err


def test_item7_write_shards_refuses_a_bool_shard_size(model, tmp_path):
    with pytest.raises(ValueError, match="shard_size must be a positive integer, got True"):
        write(model, tmp_path / "out", shard_size=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["out.jsonl/", "sub/"])
def test_item8_an_output_named_as_a_folder_gets_a_message_not_an_errno(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("in.txt").write_text("the cat sat .\n", encoding="utf-8")
    assert cli.main(["score", "--model", "demo", "--disable_tqdm", "in.txt", "-o", name]) == 1
    err = capsys.readouterr().err
    assert f"-o/--output {name} ends with '/'" in err or f"--output {name} ends with '/'" in err, err
    assert "Errno" not in err and sorted(os.listdir()) == ["in.txt"]


# --------------------------------------------------------------------------------------------------
# Item 10: `elmo similar` concludes only from a gap that means something


def test_item10_similar_on_an_untrained_model_draws_no_conclusion(tiny_dir, capsys):
    """Untrained models of the demo's size: the gap between the means is chance, often positive (before: "the
    vectors depend on the context" for a gap of 0.007). Each summary gives the numbers and why they tell nothing;
    so does the command on the tiny random model."""
    from elmo_flags.similar import SIMILAR_EXAMPLES
    from modeling_elmo import demo_model_path
    from modeling_elmo.commands.similar import sense_summary, word_similarities

    config = ElmoConfig.from_pretrained(demo_model_path())
    tokenizer = ElmoTokenizer.from_pretrained(demo_model_path())
    positive = 0
    for seed in range(4):
        torch.manual_seed(seed)
        untrained = ElmoModel(config).eval()
        for word, example in SIMILAR_EXAMPLES.items():
            _, sim, _ = word_similarities(untrained, tokenizer, list(example.sentences), word, config.n_layers)
            positive += float(sim[0, 1] + sim[2, 3]) / 2 > float(sim[:2, 2:].mean())
            line = sense_summary(example, sim)
            assert "depend on the context" not in line and "does not tell these senses apart" in line, line
    assert positive  # the gaps that the old line took for a conclusion
    assert cli.main(["similar", "--model", str(tiny_dir), "--device", "cpu"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Same sense"))
    assert "does not tell these senses apart" in line, line


# --------------------------------------------------------------------------------------------------
# Item 5: what the stock pipeline does with a folder saved with its code, as docs/transformers-integration.md says


def test_item5_a_remote_code_folder_needs_trust_or_pipeline_class_in_the_stock_pipeline(tmp_path):
    """The docs' statement: `custom_pipelines` names the stock task, so transformers refuses the folder without
    ``trust_remote_code=True`` even with the package installed; ``pipeline_class=ElmoTokenClassificationPipeline``
    runs the package's class on it, no code of the folder, with the tags of the same model saved plain."""
    from transformers import pipeline

    from modeling_elmo import ElmoForTokenClassification
    from modeling_elmo.hub.remote_code import save_with_remote_code
    from modeling_elmo.pipelines_elmo import ElmoTokenClassificationPipeline

    labels = ["O", "B-PER", "I-PER"]
    torch.manual_seed(0)
    config = ElmoConfig(**TINY, id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    tagger = ElmoForTokenClassification(config).eval()
    tagger.save_pretrained(tmp_path / "plain")
    TOKENIZER.save_pretrained(tmp_path / "plain")
    save_with_remote_code(tagger, TOKENIZER, tmp_path / "code")
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        pipeline("token-classification", model=str(tmp_path / "code"))
    text = "Ada Lovelace wrote the first program ."
    plain = pipeline("token-classification", model=str(tmp_path / "plain"))(text)
    chosen = pipeline(
        "token-classification", model=str(tmp_path / "code"), pipeline_class=ElmoTokenClassificationPipeline
    )
    assert type(chosen) is ElmoTokenClassificationPipeline
    tags = chosen(text)
    assert [t["word"] for t in tags] == [t["word"] for t in plain] and tags
    assert [t["entity"] for t in tags] == [t["entity"] for t in plain]
    for got, want in zip(tags, plain, strict=True):
        assert abs(got["score"] - want["score"]) <= 1e-5


# --------------------------------------------------------------------------------------------------
# Item 11: `elmo train-lm --remote_code` maps every Auto class, as every other save with code does


def test_item11_train_lm_remote_code_maps_every_auto_class(tmp_path, capsys):
    import json

    from modeling_elmo.auto_map_elmo import AUTO_MAP, CUSTOM_PIPELINES, code_file
    from modeling_elmo.training import train_lm

    train = tmp_path / "train.txt"
    train.write_text("the cat sees a fish .\na dog likes the ball .\n" * 8, encoding="utf-8")
    out = tmp_path / "lm"
    argv = ["--train_file", train, "--output_dir", out, "--max_steps", "1", "--disable_tqdm", "--remote_code"]
    argv += ("--lstm_dim 16 --projection_dim 8 --n_layers 1 --n_highway 1 --char_embedding_dim 4 "
             "--char_cnn_filters 1:4,2:8 --per_device_train_batch_size 8 --save_steps 1000").split()  # fmt: skip
    assert train_lm.main([str(a) for a in argv]) == 0
    capsys.readouterr()
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"] == AUTO_MAP and config["custom_pipelines"] == CUSTOM_PIPELINES
    assert {code_file(value) for value in AUTO_MAP.values()} <= set(os.listdir(out))
