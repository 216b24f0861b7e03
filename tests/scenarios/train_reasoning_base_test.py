#!/usr/bin/python3
"""scripts/train_reasoning_base.sh: the one-command recipe of the reasoning base (issue 17), run by ctest as
`train_reasoning_base_script`. Training itself takes hours on 2 cores, so this checks what can be checked in
seconds: its errors, that a killed run resumes at its stage (stages whose checkpoints exist are not run
again), that a failing stage stops the run naming its log, and the closed-loop evaluation, on the committed
base, against what data/README.md reports for it.

argv[1]: the crl binary."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "train_reasoning_base.sh")
BASE = os.path.join(ROOT, "data", "checkpoints", "synthetic_tinylm_reasoning_base.ckpt")
STAGES = ["1-short_drills", "2-long_drills_sft", "3-sft_more", "4-notes", "5-final32", "6-windows",
          "7-windows_b1"]
CRL = None


def run(*args, crl=None):
    env = dict(os.environ, CRL=crl or CRL)
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=600, env=env)


def processes_naming(text):
    """The command lines of running processes that contain `text` (a temporary path: a leaked server)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                line = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line and "train_reasoning_base" not in line:
            found.append(line)
    return found


def exact(summary, mode):
    """(wins, tasks) of the `all` line under the greedy or sampled heading of summary.txt."""
    block = summary.split(mode + " (")[1]
    found = re.search(r"^all +exact (\d+)/(\d+)", block, re.M)
    return int(found.group(1)), int(found.group(2))


def recording_crl(directory, gate_rule):
    """A stand-in for `crl lm train` that records each call's arguments (calls.txt) and writes the --out
    checkpoint (a copy of the committed base) with a stage log's `after:` line; an `--eval-only` call (the
    gate) prints a `dev:` line whose final actions' exact is gate_rule(the --init path), a Python expression
    in `init`. Everything else runs the real crl, which replaces the stand-in's process (exec), so the
    script's kill of `crl lm serve` reaches it. Returns (wrapper path, record path)."""
    record = os.path.join(directory, "calls.txt")
    wrapper = os.path.join(directory, "crl-recording")
    with open(wrapper, "w") as f:
        f.write("#!/usr/bin/python3\nimport os, shutil, sys\n"
                "if sys.argv[1:3] == ['lm', 'train']:\n"
                "    with open(%r, 'a') as f: f.write('\\t'.join(sys.argv[3:]) + '\\n')\n"
                "    if '--eval-only' in sys.argv:\n"
                "        init = sys.argv[sys.argv.index('--init') + 1]\n"
                "        print('dev: dev loss 0.2, token accuracy 0.9, exact spans 0.7 (1317); actions 1 / 1 (1020); '\n"
                "              'summaries 0.9 / 0.1 (706); final actions 0.9 / %%.4f (180)' %% (%s)); sys.exit(0)\n"
                "    print('after: dev loss 0.1, token accuracy 0.9, exact spans 0.8 (439); actions 1 / 1 (340); '\n"
                "          'summaries 0.9 / 0.3 (79); final actions 0.9 / 0.2500 (20); answers after the notes 0.9 / '\n"
                "          '0.7500 (20)')\n"
                "    shutil.copy(%r, sys.argv[sys.argv.index('--out') + 1]); sys.exit(0)\n"
                "os.execv(%r, [%r] + sys.argv[1:])\n" % (record, gate_rule, BASE, CRL, CRL))
    os.chmod(wrapper, 0o755)
    return wrapper, record


def recorded_calls(record):
    """(training calls, gate calls): each an argument list."""
    with open(record) as f:
        calls = [line.rstrip("\n").split("\t") for line in f]
    return [c for c in calls if "--eval-only" not in c], [c for c in calls if "--eval-only" in c]


def argument(args, name):
    return args[args.index(name) + 1]


class TrainReasoningBase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.dir.name, "out")

    def tearDown(self):
        self.dir.cleanup()

    def refused(self, args, message):
        r = run(*args)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(message, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "summary.txt")))

    def test_bad_arguments_are_refused_naming_the_argument(self):
        self.refused(["--out", self.out], "--seed must be a non-negative integer of at most 15 digits, got ''")
        self.refused(["--seed", "x1", "--out", self.out], "got 'x1'")
        self.refused(["--seed", "1" * 16, "--out", self.out], "of at most 15 digits")
        self.refused(["--seed", "1"], "--out DIR is required")
        self.refused(["--seed", "1", "--out", self.out, "--eval-tasks", "0"], "--eval-tasks must be a positive")
        self.refused(["--seed", "1", "--out", self.out, "--frobnicate"], "unknown argument '--frobnicate'")
        self.refused(["--evaluate", os.path.join(self.dir.name, "missing.ckpt"), "--out", self.out],
                     "missing.ckpt: no such file")
        self.refused(["--evaluate", BASE, "--seed", "1", "--out", self.out], "leave out --seed")
        self.refused(["--evaluate", BASE, "--stages-only", "--out", self.out], "exclude each other")
        r = run("--seed", "1", "--out", self.out, crl=os.path.join(self.dir.name, "no-crl"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-crl not found", r.stderr)

    def test_a_directory_of_another_seed_is_refused(self):
        os.makedirs(self.out)
        with open(os.path.join(self.out, "seed"), "w") as f:
            f.write("2\n")
        shutil.copy(BASE, os.path.join(self.out, "stage-1-short_drills.ckpt"))
        self.refused(["--seed", "1", "--out", self.out], "holds the stages of seed 2, not 1")

    def test_a_failing_stage_stops_the_run_and_names_its_log(self):
        fake = os.path.join(self.dir.name, "fake-crl")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'fake crl: refused' >&2\nexit 3\n")
        os.chmod(fake, 0o755)
        r = run("--seed", "1", "--out", self.out, crl=fake)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("stage 1-short_drills failed; its log: " + self.out + "/stage-1-short_drills.log", r.stderr)
        self.assertIn("fake crl: refused", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "stage-1-short_drills.ckpt")))
        self.assertFalse(os.path.exists(os.path.join(self.out, "base.ckpt")))

    def test_stages_whose_checkpoints_exist_are_not_run_again(self):
        os.makedirs(self.out)
        for stage in STAGES:  # a run killed after its last stage: every checkpoint there
            shutil.copy(BASE, os.path.join(self.out, "stage-%s.ckpt" % stage))
        # A crl that fails any training and runs everything else: the run passes only if no stage trained.
        wrapper = os.path.join(self.dir.name, "crl-no-training")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\ncase "$*" in *--eval-only*) echo "dev: dev loss 0.2; final actions 0.9 / 0.6000 (180)"; exit 0;; esac\n'
                    '[ "$1 $2" = "lm train" ] && { echo "trained" >&2; exit 7; }\nexec %s "$@"\n' % CRL)
        os.chmod(wrapper, 0o755)
        r = run("--seed", "1", "--out", self.out, "--eval-tasks", "3", crl=wrapper)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for stage in STAGES:
            self.assertIn("stage %s: %s/stage-%s.ckpt exists, not run again" % (stage, self.out, stage), r.stdout)
        with open(BASE, "rb") as a, open(os.path.join(self.out, "base.ckpt"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(processes_naming(self.out), [], "crl lm serve outlived the script")
        with open(os.path.join(self.out, "summary.txt")) as f:
            summary = f.read()
        self.assertEqual(exact(summary, "greedy")[1], 3)
        self.assertEqual(exact(summary, "sampled")[1], 3)
        # No stage logs (the stages were copied in): their metrics read n/a, and the run still completes.
        self.assertIn("stage 3-sft_more: teacher-forced dev exact: final actions n/a, answers after the notes n/a",
                      summary)

    def test_every_stage_is_a_valid_crl_lm_train_call_from_the_previous_stage(self):
        # A stand-in for `crl lm train` records its arguments and writes the --out checkpoint (a copy of the
        # committed base); everything else runs the real crl. Each call's options must be options of the real
        # `crl lm train` (its --help), none given twice (boost refuses that only after hours of earlier stages).
        # The real crl replaces the stand-in's process (exec), so the script's kill of `crl lm serve` reaches it.
        wrapper, record = recording_crl(self.dir.name, "0.25")
        r = run("--seed", "5", "--out", self.out, "--eval-tasks", "2", crl=wrapper)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        help_text = subprocess.run([CRL, "lm", "train", "--help"], capture_output=True, text=True).stdout
        known = set(re.findall(r"--([a-z][a-z0-9-]*)", help_text))
        calls, gates = recorded_calls(record)
        self.assertEqual(len(calls), len(STAGES))
        # One gate, after stage 2, on its checkpoint: the 180 phase3 dev tasks, stage 2's budget.
        self.assertEqual(len(gates), 1)
        self.assertEqual(argument(gates[0], "--init"), os.path.join(self.out, "stage-2-long_drills_sft.ckpt"))
        self.assertEqual(argument(gates[0], "--eval-namespace"), "phase3")
        self.assertEqual(argument(gates[0], "--eval-tasks"), "180")
        self.assertEqual(argument(gates[0], "--per-turn-cap"), argument(calls[1], "--per-turn-cap"))
        self.assertNotIn("--out", gates[0])
        options = [a[2:] for a in gates[0] if a.startswith("--")]
        self.assertLessEqual(set(options), known, "gate")
        previous = None
        for stage, args in zip(STAGES, calls):
            options = [a[2:] for a in args if a.startswith("--")]
            self.assertEqual(sorted(set(options)), sorted(options), "%s gives an option twice: %s" % (stage, args))
            self.assertLessEqual(set(options), known, stage)
            self.assertEqual(args[args.index("--seed") + 1], "5", stage)
            self.assertEqual(args[args.index("--out") + 1], os.path.join(self.out, "stage-%s.ckpt" % stage))
            if previous is None:
                self.assertNotIn("--init", args)
            else:
                self.assertEqual(args[args.index("--init") + 1], previous, stage)
            previous = args[args.index("--out") + 1]
        self.assertIn("--reasoning", calls[-1])
        # Stage 2's long drills and its mix are half lookups (without them the copy formed on 2 of 12 seeds).
        self.assertEqual(argument(calls[1], "--copy-drill-lookup"), "0.5")
        # summary.txt ends with each stage's teacher-forced dev exacts, read from the stage's log.
        with open(os.path.join(self.out, "summary.txt")) as f:
            summary = f.read()
        for stage in STAGES:
            self.assertIn("stage %s: teacher-forced dev exact: final actions 0.2500, answers after the notes 0.7500"
                          % stage, summary)
        self.assertIn("gate, attempt 0 (seed 5): final actions exact 0.2500 on 180 phase3 dev tasks (passes at >= "
                      "0.15): passed", summary)
        self.assertFalse(os.path.exists(os.path.join(self.out, "attempt-1")))

    def test_a_seed_that_misses_the_gate_starts_over_with_the_next_seed(self):
        # Attempts 0 and 1 stay under the gate (0.0100 < 0.15), attempt 2 passes (0.3000): stages 1-2 three times
        # with seeds 7, 1007, 2007, then stages 3-7 from attempt 2's stage 2, in DIR/attempt-2/.
        wrapper, record = recording_crl(self.dir.name, "0.3 if 'attempt-2' in init else 0.01")
        r = run("--seed", "7", "--out", self.out, "--stages-only", crl=wrapper)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls, gates = recorded_calls(record)
        self.assertEqual([argument(c, "--seed") for c in calls], ["7"] * 2 + ["1007"] * 2 + ["2007"] * 7)
        dirs = [self.out, os.path.join(self.out, "attempt-1"), os.path.join(self.out, "attempt-2")]
        self.assertEqual([argument(g, "--init") for g in gates],
                         [os.path.join(d, "stage-2-long_drills_sft.ckpt") for d in dirs])
        self.assertNotIn("--init", calls[2])  # a fresh model for every attempt
        self.assertNotIn("--init", calls[4])
        previous = None
        for stage, args in zip(STAGES, calls[4:]):
            self.assertEqual(argument(args, "--out"), os.path.join(dirs[2], "stage-%s.ckpt" % stage))
            if previous:
                self.assertEqual(argument(args, "--init"), previous)
            previous = argument(args, "--out")
        with open(os.path.join(self.out, "gates.txt")) as f:
            gates_text = f.read()
        self.assertEqual(gates_text.count("): failed\n"), 2, gates_text)
        self.assertIn("attempt 2 (seed 2007): final actions exact 0.3000", gates_text)
        with open(os.path.join(self.out, "stages.txt")) as f:
            self.assertTrue(f.read().startswith(gates_text))
        with open(BASE, "rb") as a, open(os.path.join(self.out, "base.ckpt"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        # Resumed, nothing trains again: every attempt's stages exist, the gates are measured again.
        os.remove(record)
        r = run("--seed", "7", "--out", self.out, "--stages-only", crl=wrapper)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls, gates = recorded_calls(record)
        self.assertEqual((len(calls), len(gates)), (0, 3))

    def test_four_attempts_under_the_gate_stop_with_an_error_and_no_base(self):
        wrapper, record = recording_crl(self.dir.name, "0.1499")
        r = run("--seed", "3", "--out", self.out, crl=wrapper)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("stage 2 missed the gate on all 4 attempts (seeds 3, 1003, ... 3003)", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "base.ckpt")))
        self.assertFalse(os.path.exists(os.path.join(self.out, "summary.txt")))
        calls, gates = recorded_calls(record)
        self.assertEqual((len(calls), len(gates)), (8, 4))  # stages 1-2 four times, no stage 3
        with open(os.path.join(self.out, "gates.txt")) as f:
            self.assertEqual(f.read().count("0.1499 on 180 phase3 dev tasks (passes at >= 0.15): failed"), 4)

    def test_a_gate_evaluation_that_fails_stops_the_run_naming_its_log(self):
        wrapper, _ = recording_crl(self.dir.name, "sys.exit(4)")  # the evaluation exits 4, printing nothing
        r = run("--seed", "2", "--out", self.out, crl=wrapper)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("the gate's evaluation failed; its log: " + self.out + "/gate.log", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "base.ckpt")))
        self.assertFalse(os.path.exists(os.path.join(self.out, "attempt-1")))

    def test_editing_the_script_during_a_run_does_not_change_the_run(self):
        # A copy of the script whose first training call rewrites the copy (as a user editing the recipe while
        # a run of hours goes on): the run must go on with the script it started with.
        # The whole run, evaluation included: bash reads the commands after the training block from the file
        # only when it reaches them.
        os.makedirs(os.path.join(self.dir.name, "repo", "scripts"))
        os.symlink(os.path.join(ROOT, "data"), os.path.join(self.dir.name, "repo", "data"))
        copy = os.path.join(self.dir.name, "repo", "scripts", "train_reasoning_base.sh")
        shutil.copy(SCRIPT, copy)
        wrapper, record = recording_crl(self.dir.name, "0.5")
        editing = os.path.join(self.dir.name, "crl-editing")
        with open(editing, "w") as f:
            f.write("#!/bin/sh\nprintf 'echo edited; exit 9\\n%%.0s' $(seq 1 400) > %s\nexec %s \"$@\"\n"
                    % (copy, wrapper))
        os.chmod(editing, 0o755)
        r = subprocess.run(["bash", copy, "--seed", "4", "--out", self.out, "--eval-tasks", "1"], capture_output=True,
                           text=True, timeout=600, env=dict(os.environ, CRL=editing))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("edited", r.stdout)
        self.assertEqual(len(recorded_calls(record)[0]), len(STAGES))
        self.assertEqual(exact(r.stdout, "greedy")[1], 1)
        with open(copy) as f:
            self.assertTrue(f.read().startswith("echo edited"))  # the file did change under the run

    def test_the_committed_base_evaluates_as_data_readme_reports(self):
        # data/README.md: 25 of the 60 default-dev episodes greedy, 19 sampled at temperature 1 (seed 7). Greedy
        # is a bound, not the number: another CPU may round a near tie differently.
        r = run("--evaluate", BASE, "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.out, "summary.txt")) as f:
            summary = f.read()
        wins, tasks = exact(summary, "greedy")
        self.assertEqual(tasks, 60)
        self.assertGreaterEqual(wins, 20, summary)
        self.assertRegex(summary, r"(?m)^early_fact +exact (1[89]|20)/20")
        self.assertEqual(exact(summary, "sampled")[1], 60)
        for name in ("dev-greedy.jsonl", "dev-sampled.jsonl"):
            self.assertGreater(os.path.getsize(os.path.join(self.out, name)), 0)
        # Same checkpoint, same seed: the same evaluation, byte for byte.
        again = os.path.join(self.dir.name, "again")
        r = run("--evaluate", BASE, "--out", again)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(again, "summary.txt")) as f:
            self.assertEqual(f.read(), summary)


if __name__ == "__main__":
    CRL = os.path.abspath(sys.argv.pop(1))
    unittest.main()
