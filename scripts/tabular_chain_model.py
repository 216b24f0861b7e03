#!/usr/bin/env python3
"""A small Python model of the tabular trainer on the memory chain (policies/tabular/README.md).

It is not the engine (its random numbers differ), but it follows the same rules: a binary fact, K summaries
pi_S(m' | m) over {V0, V1, EMPTY}, an answer pi_E(a | m_K), R = [a == fact], lambda = 1 so every advantage
is R - V(role, m) with the value recorded at sampling time, batches of 16, one critic pass (V += 0.2 (R - V)
per token) then one actor pass (per-token SGD on the logits, LR 0.5), zero-initialised tables. The final
accuracy is computed exactly from the tables. It answers "how many seeds learn" for variants the engine does
not ship (a per-compaction table, a lower LR, every-visit training under per-episode draws) in seconds.

  scripts/tabular_chain_model.py --resets 11 --seeds 10                       # per-visit draws (the default)
  scripts/tabular_chain_model.py --resets 11 --seeds 40 --per-episode --entropy 0.05
  scripts/tabular_chain_model.py --resets 11 --seeds 10 --per-compaction-table
Standard library only.
"""
import argparse
import itertools
import math
import random


def softmax(row):
    top = max(row)
    e = [math.exp(x - top) for x in row]
    total = sum(e)
    return [x / total for x in e]


def draw(p, u):
    c = 0.0
    for i, x in enumerate(p):
        c += x
        if u < c:
            return i
    return len(p) - 1


def entropy_step(row, lr, beta):
    p = softmax(row)
    h = -sum(x * math.log(x) for x in p if x > 0)
    for k in range(len(row)):
        if p[k] > 0:
            row[k] -= lr * beta * p[k] * (math.log(p[k]) + h)


def run(seed, a):
    rng = random.Random(seed)
    tables = a.resets if a.per_compaction_table else 1
    ls = [[[0.0] * 3 for _ in range(3)] for _ in range(tables)]  # [table][m][m']
    le = [[0.0] * 2 for _ in range(3)]  # [m][answer]
    vs = [[0.0] * 3 for _ in range(tables)]
    ve = [0.0] * 3
    for _ in range(0, a.episodes, 16):
        batch = []
        for _ in range(16):
            fact = rng.randrange(2)
            m, tokens = fact, []
            per_state = [rng.random() for _ in range(3)]  # the episode's draw per memory state
            for j in range(a.resets):
                t = j if a.per_compaction_table else 0
                u = per_state[m] if a.per_episode else rng.random()
                choice = draw(softmax(ls[t][m]), u)
                tokens.append(("S", t, m, choice, vs[t][m]))
                m = choice
            answer = draw(softmax(le[m]), rng.random())
            tokens.append(("E", 0, m, answer, ve[m]))
            batch.append((tokens, 1.0 if answer == fact else 0.0))
        for tokens, r in batch:  # critic pass
            for role, t, m, _, _ in tokens:
                if role == "S":
                    vs[t][m] += 0.2 * (r - vs[t][m])
                else:
                    ve[m] += 0.2 * (r - ve[m])
        for tokens, r in batch:  # actor pass
            seen = set()
            for role, t, m, choice, v in tokens:
                if a.per_episode and not a.every_visit:
                    if (role, t, m) in seen:
                        continue  # lambda = 1: every visit has the same advantage, so the mean is the first
                    seen.add((role, t, m))
                row = ls[t][m] if role == "S" else le[m]
                p = softmax(row)
                for k in range(len(row)):
                    row[k] += a.lr * (r - v) * ((k == choice) - p[k])
                if a.entropy > 0:
                    entropy_step(row, a.lr, a.entropy)
    ps = [[softmax(ls[t][m]) for m in range(3)] for t in range(tables)]
    pe = [softmax(le[m]) for m in range(3)]
    accuracy = 0.0
    if a.per_episode:  # one map per episode: sum over the 27 maps of the shared table
        for f in itertools.product(range(3), repeat=3):
            pm = ps[0][0][f[0]] * ps[0][1][f[1]] * ps[0][2][f[2]]
            for fact in (0, 1):
                m = fact
                for _ in range(a.resets):
                    m = f[m]
                accuracy += 0.5 * pm * pe[m][fact]
        return accuracy
    for fact in (0, 1):
        d = [0.0, 0.0, 0.0]
        d[fact] = 1.0
        for j in range(a.resets):
            t = ps[j if a.per_compaction_table else 0]
            d = [sum(d[x] * t[x][y] for x in range(3)) for y in range(3)]
        accuracy += 0.5 * sum(d[m] * pe[m][fact] for m in range(3))
    return accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resets", type=int, default=11, help="summaries per episode (11 or 3)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1")
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--lr", type=float, default=0.5, help="actor LR")
    parser.add_argument("--per-episode", action="store_true", help="one draw per (episode, memory state)")
    parser.add_argument("--every-visit", action="store_true", help="with --per-episode: train every visit")
    parser.add_argument("--entropy", type=float, default=0.0, help="entropy bonus beta")
    parser.add_argument("--per-compaction-table", action="store_true", help="pi_S keyed by (index, m)")
    a = parser.parse_args()
    if a.per_episode and a.per_compaction_table:
        parser.error("--per-episode with --per-compaction-table is not modelled")
    accuracies = [run(s, a) for s in range(a.seeds)]
    print(" ".join("%.3f" % x for x in accuracies))
    print("learned (>= 90%%): %d of %d; lowest %.3f, mean %.4f" %
          (sum(x >= 0.9 for x in accuracies), len(accuracies), min(accuracies), sum(accuracies) / len(accuracies)))


if __name__ == "__main__":
    main()
