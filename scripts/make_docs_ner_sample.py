"""Write docs/data/ner/{train,dev,test}.txt: a small named-entity sample in CoNLL form for docs/training.md.

Every sentence comes from the templates below, filled with names, places, organisations and other names (MISC)
chosen for this sample; nothing is copied from a corpus, so the files are this project's own (CC0, see
docs/data/README.md). Tags are BIO (IOB2) over PER, LOC, ORG and MISC, one ``word TAG`` line per word, a blank line
after each sentence.

Half of the entities of the dev and test sentences never occur in the training sentences, so that a tagger must
tell an entity by its characters and its context rather than remember it: that is where the biLM helps.

    python scripts/make_docs_ner_sample.py    # rewrites the three files; the same files every time (fixed seed)
"""

from __future__ import annotations

import random
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "docs" / "data" / "ner"
SIZES = {"train": 240, "dev": 60, "test": 60}
SEED = 2018

# Entities by type; the last third of each list is held out of the training sentences.
ENTITIES = {
    "PER": [
        "Anna Kowalski",
        "Tomas Berg",
        "Maria Lindqvist",
        "David Okafor",
        "Sofia Marchetti",
        "Peter Hale",
        "Lena Vogel",
        "Samuel Adeyemi",
        "Clara Dumont",
        "Jonas Petersen",
        "Elena Ruiz",
        "Omar Haddad",
        "Grace Whitfield",
        "Henrik Nyberg",
        "Yuki Tanaka",
        "Ruth Calloway",
        "Marco Bellini",
        "Ines Ferreira",
        "Victor Lund",
        "Nadia Rahman",
        "Felix Brandt",
        "Laura Kessler",
        "Isaac Mensah",
        "Hana Novak",
        "Oskar Falk",
        "Mira Ivanova",
        "Daniel Reyes",
        "Alice Thornbury",
        "Kofi Asante",
        "Julia Stern",
    ],
    "LOC": [
        "Lisbon",
        "Oslo",
        "Nairobi",
        "Toronto",
        "Krakow",
        "Valencia",
        "Glasgow",
        "Osaka",
        "Lyon",
        "Turin",
        "Bergen",
        "Accra",
        "Montreal",
        "Seville",
        "Gdansk",
        "Portugal",
        "Kenya",
        "Norway",
        "Chile",
        "Austria",
        "Tampere",
        "Leeds",
        "Porto",
        "Quito",
        "Malmo",
        "Ghana",
        "Hamburg",
        "Adelaide",
        "Peru",
        "Iceland",
    ],
    "ORG": [
        "Kestrel Foods",
        "Northgate Bank",
        "the Aldermoor Institute",
        "Bluefin Airways",
        "Corvid Systems",
        "Harlow United",
        "the Meridian Trust",
        "Solstice Energy",
        "Redwater Rail",
        "Tallis Records",
        "the Coastal Health Agency",
        "Granite Insurance",
        "Fenwick Motors",
        "Lumen Press",
        "Orchard Telecom",
        "Brightwell Mining",
        "the Canal Workers Union",
        "Vantage Pharma",
        "Ashford Rovers",
        "Silverleaf Hotels",
    ],
    "MISC": [
        "French",
        "Brazilian",
        "Danish",
        "Japanese",
        "Scottish",
        "Mexican",
        "Polish",
        "Greek",
        "Irish",
        "Korean",
        "Swiss",
        "Dutch",
        "Finnish",
        "Moroccan",
        "Chilean",
    ],
    "EVENT": [  # also MISC
        "Harbour Cup",
        "Northern Open",
        "Winter Festival",
        "Coastal Marathon",
        "Spring Regatta",
        "Lakeside Games",
        "Autumn Fair",
        "River Derby",
        "Summit Trophy",
    ],
}
KIND = {"PER": "PER", "LOC": "LOC", "ORG": "ORG", "MISC": "MISC", "EVENT": "MISC"}

TEMPLATES = [
    "{PER} works for {ORG} in {LOC} .",
    "{ORG} opened a new office in {LOC} on Monday .",
    "{PER} , a {MISC} writer , lives in {LOC} .",
    "Shares of {ORG} rose 3 percent in {LOC} on Tuesday .",
    "{PER} met {PER} at the {ORG} offices in {LOC} .",
    "The {MISC} team won the {EVENT} in {LOC} .",
    "{LOC} will host the {EVENT} next year .",
    "{PER} said {ORG} would hire 200 people in {LOC} .",
    "{ORG} and {ORG} agreed to merge , the companies said .",
    "The {MISC} minister visited {LOC} last week .",
    "{PER} scored twice as {ORG} beat {ORG} 2-1 .",
    "After two years in {LOC} , {PER} moved back to {LOC} .",
    "{PER} of {ORG} will speak at the {EVENT} .",
    "Rain delayed the {EVENT} in {LOC} on Sunday .",
    "{ORG} cut its forecast after a weak quarter in {LOC} .",
    "A {MISC} court fined {ORG} for late payments .",
    "{PER} told reporters in {LOC} that talks went well .",
    "The new bridge links {LOC} with {LOC} .",
    "{PER} , who founded {ORG} , retired in May .",
    "Thousands watched the {EVENT} final in {LOC} .",
    "{ORG} signed a contract with {PER} on Friday .",
    "The {MISC} film by {PER} opens in {LOC} next month .",
    "Flights from {LOC} to {LOC} were cancelled .",
    "{PER} thanked fans after the {EVENT} .",
    "Police in {LOC} are looking for two men .",
    "{ORG} expects sales to grow in {LOC} and {LOC} .",
    "{PER} and {PER} will lead the {MISC} delegation .",
    "The museum in {LOC} bought a painting by {PER} .",
    "Workers at {ORG} in {LOC} went on strike .",
    "{PER} won the {EVENT} for the third time .",
]


def fill(template: str, rng: random.Random, pools: dict[str, list[str]]) -> list[tuple[str, str]]:
    """The template's words with their BIO tags, each slot filled from its pool."""
    pairs: list[tuple[str, str]] = []
    for token in template.split():
        slot = re.fullmatch(r"\{(\w+)\}", token)
        if slot is None:
            pairs.append((token, "O"))
            continue
        words = rng.choice(pools[slot.group(1)]).split()
        kind = KIND[slot.group(1)]
        if words[0] == "the":  # "the Aldermoor Institute": the article stays outside the entity
            pairs.append(("the", "O"))
            words = words[1:]
        pairs += [(word, f"{'B' if i == 0 else 'I'}-{kind}") for i, word in enumerate(words)]
    # A sentence opening with "the": capitalised, as a writer would.
    if pairs[0][0] == "the":
        pairs[0] = ("The", "O")
    return pairs


def sentences(split: str, count: int, rng: random.Random) -> list[list[tuple[str, str]]]:
    seen = {kind: names[: len(names) * 2 // 3] for kind, names in ENTITIES.items()}
    held_out = {kind: names[len(names) * 2 // 3 :] for kind, names in ENTITIES.items()}
    out = []
    for index in range(count):
        # Training sentences: seen entities only. Dev and test: every other sentence from the held-out ones.
        pools = held_out if split != "train" and index % 2 else seen
        out.append(fill(rng.choice(TEMPLATES), rng, pools))
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    for split, count in SIZES.items():
        text = "".join("".join(f"{w} {t}\n" for w, t in sent) + "\n" for sent in sentences(split, count, rng))
        (OUT / f"{split}.txt").write_text(text, encoding="utf-8")
        print(f"{OUT / f'{split}.txt'}: {count} sentences, {text.count(chr(10)) - count} words")


if __name__ == "__main__":
    main()
