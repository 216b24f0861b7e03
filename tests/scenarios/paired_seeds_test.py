#!/usr/bin/python3
"""scripts/paired_seeds.py: the paired comparison of two arms of different result sets (its numbers, its
determinism and its errors), run by ctest as `paired_seeds_script`."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "paired_seeds.py")


def summary(path, arms):
    """Writes a summary.json with {arm: {seed: accuracy}}."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"scenario": "t", "arms": [
            {"name": name, "mean_accuracy": sum(seeds.values()) / len(seeds),
             "seeds": [{"seed": s, "accuracy": a, "episodes": 0, "eval_episodes": 60} for s, a in seeds.items()]}
            for name, seeds in arms.items()]}, f)
    return path


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


class PairedSeeds(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.a = summary(os.path.join(self.dir.name, "a.json"),
                         {"x": {1: 0.5, 2: 0.6, 3: 0.7}, "all7": {s: 0.5 for s in range(7)}})
        self.b = summary(os.path.join(self.dir.name, "b.json"),
                         {"y": {1: 0.4, 2: 0.6, 3: 0.5}, "low7": {s: 0.25 + 0.01 * s for s in range(7)},
                          "y4": {4: 0.1}})

    def tearDown(self):
        self.dir.cleanup()

    def test_differences_sign_test_and_interval(self):
        r = run(f"{self.a}:x", f"{self.b}:y")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 1 | 50.00 | 40.00 | +10.00 |", r.stdout)
        self.assertIn("| 2 | 60.00 | 60.00 | +0.00 |", r.stdout)
        # differences +10, 0, +20: mean +10, ahead 2, tied 1, p = 2 * 1/4
        self.assertIn("mean +10.00 points", r.stdout)
        self.assertIn("first ahead on 2, behind on 0, tied on 1 of 3 seeds, sign test p = 0.5000", r.stdout)
        lo, hi = r.stdout.split("95% CI [")[1].split("]")[0].split(", ")
        self.assertLessEqual(float(lo), 10.0)
        self.assertGreaterEqual(float(hi), 10.0)
        self.assertGreaterEqual(float(lo), 0.0)   # every resample's mean lies within the differences' range
        self.assertLessEqual(float(hi), 20.0)
        self.assertEqual(run(f"{self.a}:x", f"{self.b}:y").stdout, r.stdout)  # the same bytes every run
        seven = run(f"{self.a}:all7", f"{self.b}:low7")
        self.assertIn("first ahead on 7, behind on 0, tied on 0 of 7 seeds, sign test p = 0.0156", seven.stdout)
        reverse = run(f"{self.b}:y", f"{self.a}:x")
        self.assertIn("mean -10.00 points", reverse.stdout)

    def test_items_on_one_side_pool_their_seeds(self):
        pooled = summary(os.path.join(self.dir.name, "c.json"), {"x": {4: 0.3}})
        r = run(f"{self.a}:x,{pooled}:x", f"{self.b}:y,{self.b}:y4")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 4 | 30.00 | 10.00 | +20.00 |", r.stdout)
        self.assertIn("of 4 seeds", r.stdout)

    def test_seeds_restricts_both_sides(self):
        r = run("--seeds", "1,3", f"{self.a}:x", f"{self.b}:y")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 1 | 50.00 | 40.00 | +10.00 |", r.stdout)
        self.assertNotIn("| 2 |", r.stdout)
        self.assertIn("first ahead on 2, behind on 0, tied on 0 of 2 seeds", r.stdout)
        # Sides with other seeds beyond the chosen ones compare on those alone.
        r = run("--seeds", "1,2,3", f"{self.a}:all7", f"{self.b}:y")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("of 3 seeds", r.stdout)
        for seeds, says in (("1,9", "the first side has no seed [9]"), ("1,x", "expected comma-separated"),
                            ("1,1", "a seed is given twice")):
            bad = run("--seeds", seeds, f"{self.a}:x", f"{self.b}:y")
            self.assertEqual(bad.returncode, 2, seeds)
            self.assertIn(says, bad.stderr, seeds)

    def test_bad_input_names_what_is_wrong(self):
        cases = [
            ((f"{self.a}:nope", f"{self.b}:y"), "no arm 'nope' (arms: 'x', 'all7')"),
            ((f"{self.a}:x", f"{self.b}:low7"), "the two sides hold other seeds"),
            ((f"{self.a}:x,{self.a}:x", f"{self.b}:y"), "seed 1 of arm 'x' is already on this side"),
            ((f"{self.a}", f"{self.b}:y"), "expected SUMMARY.json:ARM"),
            ((os.path.join(self.dir.name, "missing.json") + ":x", f"{self.b}:y"), "missing.json: cannot read"),
        ]
        broken = os.path.join(self.dir.name, "broken.json")
        with open(broken, "w", encoding="utf-8") as f:
            f.write('{"arms": [')
        cases.append(((f"{broken}:x", f"{self.b}:y"), "broken.json: not JSON"))
        other = os.path.join(self.dir.name, "other.json")
        with open(other, "w", encoding="utf-8") as f:
            json.dump({"arms": [{"name": "x", "seeds": [{"seed": "1", "accuracy": 0.5}]}]}, f)
        cases.append(((f"{other}:x", f"{self.b}:y"), "without an integer seed"))
        for args, says in cases:
            r = run(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(says, r.stderr, args)
            self.assertEqual(r.stdout, "", args)
        self.assertEqual(run().returncode, 2)


if __name__ == "__main__":
    unittest.main()
