"""Which ambiguous word shows the bundled demo biLM's contextual vectors best? (issue 15 item 12)

`elmo similar` (no arguments) compares one word's vectors in sentences where it has two different senses. The demo
model is a toy-sized biLM (0.9M parameters, WikiText-2): it may separate some senses and not others. So the default
example is chosen by a measurement, not by one lucky run:

- each candidate word has two senses and 6 sentences per sense, all written before measuring;
- the first 2 sentences of each sense are the ones `elmo similar` would show (the display set), the other 4 are
  held out;
- on the held-out sentences, each word gets the mean cosine similarity of its vectors between sentences of the same
  sense and between sentences of different senses (the top biLM layer, as `elmo similar` shows), their gap, and the
  share of (same-sense pair, different-sense pair) combinations where the same-sense pair is the more similar (1.0:
  always, 0.5: chance);
- the word with the largest held-out gap is the default; its display set is then measured as well, and that is
  what the command prints.

    python benchmarks/pick_demo_word.py                  # the bundled demo model
    python benchmarks/pick_demo_word.py --model FOLDER   # any model folder (e.g. a converted ELMo)
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch

from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.commands.similar import SIMILAR_EXAMPLES, word_similarities
from modeling_elmo.demo_models.model import demo_model_path

DISPLAYED = 2  # sentences per sense that the command shows; the rest are held out

# word -> (sense, sentences) x 2. Each sentence holds the word once, never first (where it would be capitalised).
CANDIDATES: dict[str, tuple[tuple[str, list[str]], tuple[str, list[str]]]] = {
    "play": (
        (
            "verb",
            [
                "The children like to play in the garden after school .",
                "He learned to play the piano when he was young .",
                "They will play against the champions next week .",
                "She wanted to play football with her brothers .",
                "We often play cards in the evening .",
                "The band will play three new songs tonight .",
            ],
        ),
        (
            "noun",
            [
                "The play was performed at the theatre in London .",
                "Shakespeare wrote the play in the early seventeenth century .",
                "Critics praised the play for its strong dialogue .",
                "The school staged a play about the war .",
                "His first play opened on Broadway in 1950 .",
                "The audience left the play before the final act .",
            ],
        ),
    ),
    "bank": (
        (
            "river",
            [
                "He sat on the bank of the river and watched the water .",
                "The boat drifted to the muddy bank of the river .",
                "Trees grew along the east bank of the stream .",
                "The soldiers crossed to the far bank at night .",
                "Fishermen stood on the grassy bank all morning .",
                "The flood washed away part of the river bank .",
            ],
        ),
        (
            "money",
            [
                "She went to the bank to open an account .",
                "The bank raised the interest rate on its loans .",
                "He borrowed money from the bank to buy a house .",
                "The central bank announced new measures on Monday .",
                "The company sold its shares to a large bank .",
                "Robbers broke into the bank and stole the gold .",
            ],
        ),
    ),
    "left": (
        (
            "departed",
            [
                "He left the city in 1920 and never returned .",
                "The ship left the harbour early in the morning .",
                "She left her job to study music in Paris .",
                "Most of the soldiers left before the winter .",
                "The band left the stage after the last song .",
                "They left the house without saying a word .",
            ],
        ),
        (
            "direction",
            [
                "The road turns to the left after the bridge .",
                "He broke his left arm during the match .",
                "The church stands on the left side of the square .",
                "She held the book in her left hand .",
                "The goal came from a cross on the left wing .",
                "Turn left at the end of the street .",
            ],
        ),
    ),
    "record": (
        (
            "noun",
            [
                "The album set a record for sales in its first week .",
                "He broke the world record in the long jump .",
                "The band released a new record in the autumn .",
                "There is no record of his birth in the church .",
                "The team finished the season with a winning record .",
                "She kept a record of every game she played .",
            ],
        ),
        (
            "verb",
            [
                "They went to London to record their second album .",
                "The band began to record new songs in March .",
                "Scientists record the temperature every hour .",
                "He decided to record the interview on tape .",
                "The cameras record everything that happens in the street .",
                "She wanted to record the song with a full orchestra .",
            ],
        ),
    ),
    "light": (
        (
            "noun",
            [
                "The light from the window filled the room .",
                "Plants need light and water to grow .",
                "A bright light appeared in the sky at night .",
                "The light of the sun reached the valley late .",
                "He switched off the light and went to sleep .",
                "The painting shows the light on the water .",
            ],
        ),
        (
            "adjective",
            [
                "The new armour was light and strong .",
                "She wore a light coat in the spring .",
                "The ship carried a light load of cotton .",
                "The division was equipped with light tanks .",
                "A light rain fell during the afternoon .",
                "The bridge was built for light traffic only .",
            ],
        ),
    ),
    "well": (
        (
            "adverb",
            [
                "The team played very well in the second half .",
                "The song was received well by critics .",
                "He spoke French and German well .",
                "The plan worked well for several years .",
                "She knew the city well from her childhood .",
                "The album sold well in Europe and Japan .",
            ],
        ),
        (
            "noun",
            [
                "The villagers drew water from the old well .",
                "They dug a deep well near the house .",
                "The oil well produced thousands of barrels a day .",
                "A stone fell into the dry well .",
                "The town had only one well for all its people .",
                "The company drilled a new well in the desert .",
            ],
        ),
    ),
    "fair": (
        (
            "just",
            [
                "The election was free and fair .",
                "He thought the decision was not fair to the players .",
                "Everyone deserves a fair trial .",
                "The workers demanded a fair wage .",
                "It was a fair result after a hard game .",
                "The judge was known to be fair and honest .",
            ],
        ),
        (
            "event",
            [
                "The county fair opened in August .",
                "They sold cattle at the annual fair .",
                "The world 's fair was held in Chicago in 1893 .",
                "Thousands of people visited the fair each summer .",
                "The book fair attracts publishers from many countries .",
                "He won a prize at the state fair .",
            ],
        ),
    ),
    "match": (
        (
            "game",
            [
                "The match ended in a draw after extra time .",
                "He scored twice in the final match of the season .",
                "The match was played in front of a large crowd .",
                "They lost the first match of the tour .",
                "Rain stopped the match for an hour .",
                "The championship match was held in Melbourne .",
            ],
        ),
        (
            "fire",
            [
                "He struck a match to light the candle .",
                "She dropped the burning match into the grass .",
                "The wind blew out the match at once .",
                "A single match can start a forest fire .",
                "He lit his pipe with a match from the box .",
                "The match flared and went out .",
            ],
        ),
    ),
}


def sense_gap(sim: torch.Tensor, senses: list[int]) -> tuple[float, float, float]:
    """From an ``(n, n)`` cosine matrix and each row's sense: mean same-sense similarity, mean different-sense
    similarity (pairs ``i < j``), and the share of (same, different) pair combinations where the same-sense pair is
    the more similar (ties count half)."""
    same, different = [], []
    for i, j in itertools.combinations(range(len(senses)), 2):
        (same if senses[i] == senses[j] else different).append(float(sim[i, j]))
    wins = sum((s > d) + 0.5 * (s == d) for s in same for d in different)
    return statistics.fmean(same), statistics.fmean(different), wins / (len(same) * len(different))


def measure(model, tokenizer, word: str, groups, part: slice) -> tuple[float, float, float]:
    sentences, senses = [], []
    for index, (_, texts) in enumerate(groups):
        sentences += texts[part]
        senses += [index] * len(texts[part])
    _, sim, _ = word_similarities(model, tokenizer, sentences, word, model.config.n_layers)
    return sense_gap(sim, senses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(demo_model_path()), help="model folder (default: the demo model)")
    args = parser.parse_args()
    torch.manual_seed(0)
    tokenizer = ElmoTokenizer.from_pretrained(args.model)
    model = ElmoModel.from_pretrained(args.model).eval()
    print(f"model: {args.model}; top biLM layer; held out: {6 - DISPLAYED} sentences per sense\n")
    print(f"{'word':<8} {'senses':<20} {'same':>6} {'diff':>6} {'gap':>6} {'same>diff':>9}")
    rows = {}
    for word, groups in CANDIDATES.items():
        same, different, wins = measure(model, tokenizer, word, groups, slice(DISPLAYED, None))
        rows[word] = same - different
        senses = "/".join(name for name, _ in groups)
        print(f"{word:<8} {senses:<20} {same:6.3f} {different:6.3f} {same - different:6.3f} {wins:9.2f}")
    best = max(rows, key=rows.get)
    same, different, wins = measure(model, tokenizer, best, CANDIDATES[best], slice(None, DISPLAYED))
    print(f"\nlargest held-out gap: {best!r} ({rows[best]:.3f})")
    print(
        f"its display set ({DISPLAYED} sentences per sense): same sense {same:.3f}, different sense {different:.3f}, "
        f"same > different in {wins:.0%} of combinations"
    )
    shown = SIMILAR_EXAMPLES.get(best)
    if shown is not None:
        groups = CANDIDATES[best]
        expected = [s for _, texts in groups for s in texts[:DISPLAYED]]
        print(f"`elmo similar --word {best}` shows the display set: {list(shown.sentences) == expected}")


if __name__ == "__main__":
    main()
