"""Check that a finished two-process training run exits: N runs in a row under a parallel CPU load (issue 36).

Each run is ``torch.distributed.run --standalone --nproc_per_node 2 -m modeling_elmo.training.train_lm`` with the
tiny settings of the two-process tests of ``tests/test_pretraining.py`` (gloo on loopback, ``--ddp_timeout 120``):
a new tiny biLM (``test_two_process_gloo_run_matches_single_process``) and the fine-tuning of a saved one
(``test_two_process_fine_tuning_of_a_saved_lm_folder``), in turn, while ``--load`` busy-loop processes compete for
the CPUs. For each run it measures the time from the last line the run printed to the end of the run as a caller
sees it: the launcher has exited *and* its stdout/stderr pipes are closed (``subprocess.communicate`` waits for
both; a process left behind that holds a pipe keeps a caller waiting as much as a rank that does not exit). A run
passes when that time is at most ``--grace`` seconds (default 30) and it exits with status 0.

A run still alive ``--grace`` seconds after its last line is a hang: the ranks run with
``ELMO_EXIT_STACK_DUMP_SECONDS`` set (``modeling_elmo/training/distributed.py``), so a rank still alive that long
after its end of run prints every thread's stack to stderr; the script also runs ``py-spy dump`` (Python and native
frames) on every process of the run when py-spy is installed (``pip install py-spy``), then stops the run. The output
and the dumps of a failed run are written to ``--keep`` (default: a temporary folder, printed).

    python scripts/check_two_process_exit.py                 # 20 runs, 2 busy loops beside them
    python scripts/check_two_process_exit.py --runs 40 --load 3 --variant fine-tune
    python scripts/check_two_process_exit.py --repo ../other-checkout   # the same check on another checkout

Prints one line per run and a summary; exits with 0 when every run passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "her sister"]
VERBS = ["sees", "likes", "finds", "eats", "hears"]
OBJECTS = ["the fish", "a ball", "the red car", "some bread", "a small house"]
TINY_FLAGS = [
    "--lstm_dim", "16", "--projection_dim", "8", "--n_layers", "1", "--n_highway", "1",
    "--char_embedding_dim", "4", "--char_cnn_filters", "1:4,2:4",
]  # fmt: skip


def write_corpus(folder: Path) -> tuple[str, str]:
    """The test's corpus: 240 training and 24 evaluation sentences of a toy grammar."""
    paths = []
    for name, n, seed in (("train", 240, 0), ("eval", 24, 1)):
        rng = random.Random(seed)
        lines = [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ." for _ in range(n)]
        path = folder / f"{name}.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths[0], paths[1]


def train_lm_command(train: str, evaluation: str, output_dir: str, start: str | None = None) -> list[str]:
    """The two-process command of the tests: ``test_two_process_gloo_run_matches_single_process`` (a new tiny
    biLM), or with ``start`` (a folder written by train_lm) ``test_two_process_fine_tuning_of_a_saved_lm_folder``."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command += ["-m", "modeling_elmo.training.train_lm", "--train_file", train, "--eval_file", evaluation]
    command += ["--disable_tqdm", "--num_samples", "0", "--save_steps", "100", "--max_eval_samples", "10"]
    command += ["--optim", "adamw_torch", "--learning_rate", "1e-2", "--per_device_train_batch_size", "2"]
    if start is None:
        command += [*TINY_FLAGS, "--max_steps", "3", "--dropout", "0", "--seed", "5"]
        command += ["--train_sampling_strategy", "sequential"]
    else:
        command += ["--model_name_or_path", start, "--max_steps", "2"]
    command += ["--output_dir", output_dir, "--ddp_backend", "gloo", "--ddp_timeout", "120"]
    return command


def saved_lm_folder(train: str, evaluation: str, folder: Path, repo: Path, env: dict) -> str:
    """A tiny biLM trained for 2 steps in one process (the fine-tuning test's starting folder)."""
    command = [sys.executable, "-m", "modeling_elmo.training.train_lm", "--train_file", train]
    command += ["--eval_file", evaluation, *TINY_FLAGS, "--disable_tqdm", "--num_samples", "0", "--max_steps", "2"]
    command += ["--save_steps", "100", "--optim", "adamw_torch", "--output_dir", str(folder)]
    subprocess.run(command, cwd=repo, env=env, check=True, capture_output=True)
    return str(folder)


def process_table() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                table[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return table


def descendants(pid: int) -> list[int]:
    table = process_table()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, p in table.items() if p == parent]
        found += children
        frontier += children
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def stack_dumps(pids: list[int]) -> str:
    """``py-spy dump`` (Python and native frames) of each process, when py-spy is installed."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if spy is None:
        return "(py-spy is not installed: no outside stack dump; see the ranks' own dumps in stderr)\n"
    text = ""
    for pid in pids:
        for extra in ([], ["--native"]):
            done = subprocess.run([spy, "dump", *extra, "--pid", str(pid)], capture_output=True, text=True)
            text += f"===== py-spy dump {' '.join(extra)} --pid {pid}\n{done.stdout}{done.stderr}\n"
    return text


class Run:
    """One two-process run: its output lines with times, and when the launcher exited and its pipes closed."""

    def __init__(self, command: list[str], env: dict, repo: Path):
        self.started = time.monotonic()
        self.lines: list[tuple[float, str, str]] = []
        self.last_line = self.started
        self.closed: dict[str, float] = {}
        self.seen: set[int] = set()  # every process of the run seen so far (ranks start in sessions of their own)
        self.process = subprocess.Popen(
            command,
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.pumps = [
            threading.Thread(target=self._pump, args=(self.process.stdout, "out"), daemon=True),
            threading.Thread(target=self._pump, args=(self.process.stderr, "err"), daemon=True),
        ]
        for pump in self.pumps:
            pump.start()

    def _pump(self, stream, name: str) -> None:
        for line in stream:
            self.last_line = time.monotonic()
            self.lines.append((self.last_line - self.started, name, line.rstrip("\n")))
        self.closed[name] = time.monotonic()

    def finished(self) -> bool:
        return self.process.poll() is not None and len(self.closed) == 2

    def ended_at(self) -> float:
        exited = getattr(self, "exited", None) or time.monotonic()
        return max(exited, *self.closed.values()) if len(self.closed) == 2 else time.monotonic()

    def watch(self, grace: float, limit: float) -> bool:
        """Wait until the run ends; ``False`` when it lives ``grace`` s past its last line (or ``limit`` s)."""
        while not self.finished():
            self.seen.update(descendants(self.process.pid))
            if self.process.poll() is not None and not hasattr(self, "exited"):
                self.exited = time.monotonic()
            now = time.monotonic()
            if now - self.last_line > grace or now - self.started > limit:
                return False
            time.sleep(0.1)
        if not hasattr(self, "exited"):
            self.exited = time.monotonic()
        return True

    def stop(self) -> None:
        """SIGTERM to the launcher (it stops its ranks), then SIGKILL to whatever of the run is left."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        for pid in [self.process.pid, *self.seen]:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.process.wait()
        for pump in self.pumps:
            pump.join(5)

    def text(self) -> str:
        return "\n".join(f"{t:8.2f} {name} {line}" for t, name, line in self.lines)


def spread(times: list[float]) -> dict:
    times = sorted(times)
    return {"n": len(times), "min": times[0], "median": times[len(times) // 2], "max": times[-1]} if times else {}


def busy_loops(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="consecutive two-process runs (default 20)")
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes beside the runs (default 2)")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds allowed from last line to exit (30)")
    parser.add_argument("--limit", type=float, default=240.0, help="seconds one run may take in all (240)")
    parser.add_argument("--keep", default=None, help="folder for the outputs of failed runs (default: temporary)")
    parser.add_argument("--json", default=None, help="also write the per-run results to this JSON file")
    parser.add_argument(
        "--variant",
        choices=("new", "fine-tune", "both"),
        default="both",
        help="new: a new tiny biLM (test_two_process_gloo_run_matches_single_process); fine-tune: a saved one "
        "(test_two_process_fine_tuning_of_a_saved_lm_folder); both (default): the two in turn",
    )
    parser.add_argument("--repo", default=str(ROOT), help="the checkout to run (default: this one)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="two-process-exit-"))
    keep = Path(args.keep) if args.keep else work / "failed"
    keep.mkdir(parents=True, exist_ok=True)
    train, evaluation = write_corpus(work)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "GLOO_SOCKET_IFNAME": "lo"}
    repo = Path(args.repo).resolve()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    # A rank still alive this long after its end of run prints its threads' stacks (before --grace runs out).
    env["ELMO_EXIT_STACK_DUMP_SECONDS"] = str(max(1, int(args.grace * 2 / 3)))
    start = saved_lm_folder(train, evaluation, work / "start", repo, env) if args.variant != "new" else None
    variants = {"new": ["new"], "fine-tune": ["fine-tune"], "both": ["new", "fine-tune"]}[args.variant]
    load = busy_loops(args.load)
    results = []
    try:
        for i in range(args.runs):
            output_dir = work / f"run{i}"
            variant = variants[i % len(variants)]
            command = train_lm_command(train, evaluation, str(output_dir), start if variant == "fine-tune" else None)
            run = Run(command, env, repo)
            ended = run.watch(args.grace, args.limit)
            dumps = ""
            if not ended:
                time.sleep(max(0.0, args.grace * 2 / 3 + 2 - (time.monotonic() - run.last_line)))
                dumps = stack_dumps([run.process.pid, *sorted(p for p in run.seen if alive(p))])
                run.stop()
            exit_after = run.ended_at() - run.last_line if ended else None
            result = {
                "run": i,
                "variant": variant,
                "status": run.process.returncode,
                "seconds": round(run.ended_at() - run.started, 1),
                "last_line_to_exit_s": round(exit_after, 2) if exit_after is not None else None,
                "launcher_exit_after_last_line_s": round(run.exited - run.last_line, 2) if ended else None,
                "passed": ended and run.process.returncode == 0 and exit_after <= args.grace,
            }
            results.append(result)
            if not result["passed"]:
                (keep / f"run{i}.txt").write_text(run.text() + "\n\n" + dumps, encoding="utf-8")
                result["output"] = str(keep / f"run{i}.txt")
            print(json.dumps(result), flush=True)
            shutil.rmtree(output_dir, ignore_errors=True)
    finally:
        for process in load:
            process.kill()
            process.wait()
    times = [r["last_line_to_exit_s"] for r in results if r["last_line_to_exit_s"] is not None]
    failed = [r["run"] for r in results if not r["passed"]]
    summary = {
        "runs": len(results),
        "passed": len(results) - len(failed),
        "failed_runs": failed,
        "load": args.load,
        "grace_s": args.grace,
        "last_line_to_exit_s": spread(times),
    }
    if len(variants) > 1:
        summary["by_variant"] = {
            v: spread([r["last_line_to_exit_s"] for r in results if r["variant"] == v and r["last_line_to_exit_s"]])
            for v in variants
        }
    print(("PASS " if not failed else "FAIL ") + json.dumps(summary), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": results}, indent=1), encoding="utf-8")
    if not failed:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"outputs of the failed runs: {keep}", file=sys.stderr)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
