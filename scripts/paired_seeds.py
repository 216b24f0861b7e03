#!/usr/bin/python3
"""Paired comparison of two arms across result sets, seed by seed (Debian's python3, standard library only).

report.md's ablation table compares arms of ONE run. This compares an arm of one run with an arm of another
(an arm re-run on the same seeds from another scenario file, or `crl run --arms` runs of one file), using the
per-seed accuracies in each run's summary.json. Each side is one or more SUMMARY.json:ARM items joined by
commas; several items pool their seeds (a seed given twice on one side is an error).

    scripts/paired_seeds.py results/credit/summary.json:no_cross_gae_exec_only \\
        results/replication/summary.json:no_cross_gae

`--seeds 41,53,67` (before the two sides) compares only those seeds: each side must hold every one of them
and may hold others (a run with more seeds than the other side's, as a subset planned before the run).

prints each seed's accuracies and difference (first - second, in points), then the mean difference, its 95%
percentile bootstrap interval (10,000 resamples of the seeds drawn with random.Random(0): the same numbers
on every run; report.md uses the same method with another generator), the seeds on each side and the exact
two-sided sign test over the non-tied seeds (ties: |difference| < 1e-9 points). Both sides must hold the same
seeds. Exit status 2 with a message naming the file, arm or seed for bad input.
"""
import json
import math
import random
import sys

RESAMPLES = 10000
TIE = 1e-9


class BadInput(Exception):
    pass


def read_side(spec):
    """{seed: accuracy} of the items of one side ("PATH:ARM[,PATH:ARM...]")."""
    accuracies = {}
    for item in spec.split(","):
        path, sep, arm = item.rpartition(":")
        if not sep or not path or not arm:
            raise BadInput(f"{item!r}: expected SUMMARY.json:ARM")
        try:
            with open(path, encoding="utf-8") as f:
                summary = json.load(f)
        except OSError as e:
            raise BadInput(f"{path}: cannot read ({e.strerror})")
        except json.JSONDecodeError as e:
            raise BadInput(f"{path}: not JSON ({e.msg} at line {e.lineno})")
        arms = summary.get("arms") if isinstance(summary, dict) else None
        if not isinstance(arms, list):
            raise BadInput(f"{path}: no \"arms\" list (is it a crl summary.json?)")
        found = [a for a in arms if isinstance(a, dict) and a.get("name") == arm]
        if not found:
            names = ", ".join(repr(a.get("name")) for a in arms if isinstance(a, dict))
            raise BadInput(f"{path}: no arm {arm!r} (arms: {names})")
        for entry in found[0].get("seeds", []):
            seed, accuracy = entry.get("seed"), entry.get("accuracy")
            if not isinstance(seed, int) or not isinstance(accuracy, (int, float)) or isinstance(accuracy, bool):
                raise BadInput(f"{path}: arm {arm!r} has a seed entry without an integer seed and a numeric accuracy")
            if seed in accuracies:
                raise BadInput(f"{path}: seed {seed} of arm {arm!r} is already on this side (from another item)")
            accuracies[seed] = float(accuracy)
    if not accuracies:
        raise BadInput(f"{spec!r}: no seeds")
    return accuracies


def sign_test(ahead, behind):
    """Exact two-sided sign test p-value over ahead + behind non-tied pairs."""
    n, k = ahead + behind, min(ahead, behind)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def bootstrap_interval(values):
    """95% percentile bootstrap interval of the mean (RESAMPLES resamples, random.Random(0))."""
    rng = random.Random(0)
    means = sorted(sum(rng.choice(values) for _ in values) / len(values) for _ in range(RESAMPLES))
    return means[int(0.025 * RESAMPLES) - 1], means[int(0.975 * RESAMPLES) - 1]


def compare(first, second):
    """The report's lines for first - second (dicts seed -> accuracy with the same seeds)."""
    if set(first) != set(second):
        only_first = sorted(set(first) - set(second))
        only_second = sorted(set(second) - set(first))
        raise BadInput(f"the two sides hold other seeds (only the first: {only_first}; only the second: {only_second})")
    seeds = sorted(first)
    differences = [100.0 * (first[s] - second[s]) for s in seeds]
    lines = ["| seed | first | second | first - second |", "|---|---|---|---|"]
    for s, d in zip(seeds, differences):
        lines.append(f"| {s} | {100.0 * first[s]:.2f} | {100.0 * second[s]:.2f} | {d:+.2f} |")
    ahead = sum(d > TIE for d in differences)
    behind = sum(d < -TIE for d in differences)
    lo, hi = bootstrap_interval(differences)
    mean = sum(differences) / len(differences)
    lines.append(
        f"first - second: mean {mean:+.2f} points, 95% CI [{lo:+.2f}, {hi:+.2f}], first ahead on {ahead}, "
        f"behind on {behind}, tied on {len(seeds) - ahead - behind} of {len(seeds)} seeds, "
        f"sign test p = {sign_test(ahead, behind):.4f}")
    return lines


def restrict(side, seeds, which):
    """The side's accuracies of `seeds` only (each must be there)."""
    missing = sorted(set(seeds) - set(side))
    if missing:
        raise BadInput(f"--seeds: the {which} side has no seed {missing} (it holds {sorted(side)})")
    return {s: side[s] for s in seeds}


def parse_seeds(text):
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise BadInput(f"--seeds {text!r}: expected comma-separated integers (41,53,67)")
    if len(set(seeds)) != len(seeds):
        raise BadInput(f"--seeds {text!r}: a seed is given twice")
    return seeds


def main(argv):
    args = argv[1:]
    if len(args) == 1 and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    seeds_text = None
    if len(args) == 4 and args[0] == "--seeds":
        seeds_text, args = args[1], args[2:]
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        first, second = read_side(args[0]), read_side(args[1])
        if seeds_text is not None:
            seeds = parse_seeds(seeds_text)
            first, second = restrict(first, seeds, "first"), restrict(second, seeds, "second")
        print("\n".join(compare(first, second)))
    except BadInput as e:
        print(f"paired_seeds.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
