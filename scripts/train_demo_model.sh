#!/usr/bin/env bash
# Trains the demo model bundled in modeling_elmo/commands/demo_model: a toy-sized biLM (preset "tiny": 2 layers,
# LSTM 256, projection 64, 5 small char-CNN filters) that the project's own LM command trains on the
# WikiText-2 text in ../shared/data (train: valid.txt, perplexity: test.txt; the text is not in the repo).
# It is not the released ELMo. A fixed number of steps (2000 batches of 32 windows of <= 20 words, about
# 5 passes over valid.txt), so that the model does not depend on the machine's speed: about 3 minutes of
# training on an idle 2-core CPU. Training is benchmarks/bench_lm.py with its defaults; it prints words/s
# and the perplexities on the whole of test.txt (also in demo_model/eval_results.json and the README).
#
#   bash scripts/train_demo_model.sh            # ELMO_SHARED_DIR=/path/to/shared to read the data elsewhere
#
# Then the folder keeps only the ElmoModel part, the tokenizer and the perplexities, and, like every saved folder,
# the code files and auto_map that save_pretrained writes: without this package,
# AutoModel/AutoTokenizer.from_pretrained(folder, trust_remote_code=True) load it, and without trust_remote_code
# transformers refuses it clearly (never a generic word-level tokenizer). The LM softmax of the same run goes
# beside it, to modeling_elmo/commands/demo_model_lm/softmax.safetensors: W (10000 x 64) in float16 (1.3 MB
# instead of 2.6), b in float32, and the SHA-256 of the biLM file it belongs to. modeling_elmo.commands.demo_lm
# joins the two into an ElmoForPreTraining (elmo score --model demo, the elmo-fill-mask pipeline, elmo demo).
# To ship it, add "modeling_elmo.commands.demo_model_lm" to pyproject.toml's packages and package-data (*.safetensors).
#
# Not bit-reproducible: on 2026-11-26 this recipe (seed 0, OMP_NUM_THREADS=2) gave a biLM up to 2.7 apart from the
# shipped one (perplexity 175.2, shipped 177.0), and the code of the commit that made it (b0234d5) one up to 0.31
# apart (perplexity 177.0). Retraining therefore replaces the shipped biLM and every number measured on it.
#
#   ELMO_DEMO_EXPORT_ONLY=1 ELMO_DEMO_WORK_DIR=modeling_elmo/commands/demo_model bash scripts/train_demo_model.sh
#
# re-saves the bundled folder as it is (same weights), e.g. to refresh its code files after the package changed.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${ELMO_SHARED_DIR:-../shared}/data/wikitext-2"
WORK="${ELMO_DEMO_WORK_DIR:-${TMPDIR:-/tmp}/elmo-demo-lm}"
OUT="${ELMO_DEMO_OUT:-modeling_elmo/commands/demo_model}"
LM_OUT="${ELMO_DEMO_LM_OUT:-modeling_elmo/commands/demo_model_lm}"
test -f "$DATA/valid.txt" || { echo "error: $DATA/valid.txt not found (set ELMO_SHARED_DIR)" >&2; exit 1; }

# ELMO_DEMO_EXPORT_ONLY=1: skip training, only rebuild the package folder from an earlier run in $WORK.
# The training run is the LM benchmark (its defaults are this recipe); it prints words/s and perplexities.
[ "${ELMO_DEMO_EXPORT_ONLY:-0}" = 1 ] || python benchmarks/bench_lm.py --output_dir "$WORK" --seed 0

python - "$WORK" "$OUT" "$LM_OUT" <<'PY'
"""Keep the ElmoModel part of the trained folder, the tokenizer and the perplexities, as save_pretrained writes them."""
import json
import os
import shutil
import sys
import tempfile

from modeling_elmo import ElmoModel, ElmoTokenizer
from modeling_elmo.commands.demo_model_card import write_demo_card

work, out, lm_out = sys.argv[1], sys.argv[2], sys.argv[3]
staging = tempfile.mkdtemp(prefix=".demo_model.", dir=os.path.dirname(os.path.abspath(out)))
ElmoModel.from_pretrained(work).save_pretrained(staging)
# WikiText-2 is already tokenized (hence --no-split_punctuation in training); users give raw text, which the
# shipped tokenizer splits like the training text ("bank." -> bank .). Characters, not word ids, feed the model.
ElmoTokenizer.from_pretrained(work, split_punctuation=True).save_pretrained(staging)
os.remove(os.path.join(staging, "README.md"))  # the generic card; the demo's own is written below
with open(os.path.join(work, "eval_results.json")) as f:
    results = json.load(f)
with open(os.path.join(staging, "eval_results.json"), "w") as f:
    json.dump(results, f, indent=2, sort_keys=True)
    f.write("\n")
write_demo_card(staging, results)
os.chmod(staging, 0o755)  # mkdtemp makes it private; package data should be readable by all
for name in os.listdir(staging):
    os.chmod(os.path.join(staging, name), 0o644)
if os.path.exists(out):
    shutil.rmtree(out)
os.replace(staging, out)
print(f"wrote {out}: {sorted(os.listdir(out))}")

# The LM softmax of the same run, tied to the biLM file above by its SHA-256 (demo_lm refuses a mismatched pair).
# One metadata entry only: safetensors writes several in a random order, and the file should be byte-reproducible.
import hashlib

from safetensors.torch import save_file

from modeling_elmo.modeling_elmo_pretraining import ElmoForPreTraining
from modeling_elmo.scoring_elmo import folder_has_softmax

if not folder_has_softmax(work):  # e.g. ELMO_DEMO_WORK_DIR=the bundled folder: the shipped softmax stays
    print(f"{work} holds no softmax: {lm_out} left as it is")
else:
    softmax = ElmoForPreTraining.from_pretrained(work).softmax
    with open(os.path.join(out, "model.safetensors"), "rb") as f:
        bilm_sha256 = hashlib.sha256(f.read()).hexdigest()
    os.makedirs(lm_out, exist_ok=True)
    target = os.path.join(lm_out, "softmax.safetensors")
    tensors = {
        "softmax.weight": softmax.weight.detach().half().contiguous(),  # 1.3 MB; error: docs/language-model.md
        "softmax.bias": softmax.bias.detach().float().contiguous(),
    }
    save_file(tensors, target + ".part", metadata={"bilm_sha256": bilm_sha256})
    os.chmod(target + ".part", 0o644)
    os.replace(target + ".part", target)
    print(f"wrote {target}")
PY
ls -la "$OUT" "$LM_OUT"
