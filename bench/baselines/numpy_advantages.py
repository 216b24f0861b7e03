#!/usr/bin/python3
"""NumPy baseline for bench_learner: CompactionRL advantages + token-normalized PPO/value losses written the
way trainers write GAE today (a reverse Python loop over time per segment, as in cleanrl's ppo.py and verl's
compute_gae_advantage_return), with the losses vectorized in NumPy.

bench_learner writes the batch as raw arrays into --dir (the same data as the C++ benchmark), runs this script
and reads one line back: "seconds_per_run <s> max_abs_diff <d>", where max_abs_diff compares the baseline's
advantages with the C++ ones written beside the batch (a baseline that computes something else is no
baseline). Times are process CPU time (NumPy runs single-threaded here), like the CPU-time rates Google
Benchmark reports for the C++ rows, so a loaded machine does not favour either side.
"""
import argparse
import os
import time

import numpy as np


def load(d, name, dtype):
    return np.fromfile(os.path.join(d, name), dtype=dtype)


def advantages_and_losses(values, actor, critic, seg_off, roll_off, rewards, old_lp, new_lp, new_v,
                          gamma=1.0, alpha=1.5, eps=0.2):
    adv = np.zeros_like(values)
    ret = values.copy()
    for r in range(len(rewards)):
        segs = range(roll_off[r], roll_off[r + 1])
        n = [int(critic[seg_off[s]:seg_off[s + 1]].sum()) for s in segs]
        for k, s in enumerate(segs):
            b = seg_off[s]
            idx = np.nonzero(critic[b:seg_off[s + 1]])[0] + b  # the sampled positions of the segment
            v = values[idx]
            length = len(idx)
            lam = 1.0 - 1.0 / (alpha * max(length, 1))
            n_after = sum(n[k + 1:])
            a = np.zeros(length)
            lastgaelam = 0.0
            for t in reversed(range(length)):
                if t == length - 1:
                    nextvalue, reward = 0.0, rewards[r]
                else:
                    nextvalue, reward = v[t + 1], 0.0
                delta = reward + gamma * nextvalue - v[t]
                a[t] = lastgaelam = delta + gamma * lam * lastgaelam
            factor = np.exp(n_after * (np.log(gamma) + np.log1p(-1.0 / (alpha * max(length, 1))))) if n_after else 1.0
            adv[idx] = factor * a
            ret[idx] = a + v
    m = actor.astype(np.float64)
    c = critic.astype(np.float64)
    ratio = np.exp(new_lp - old_lp)
    unclipped = ratio * adv
    clipped = np.clip(ratio, 1.0 - eps, 1.0 + eps) * adv
    policy_loss = (-np.minimum(unclipped, clipped) * m).sum() / m.sum()
    grad_lp = np.where(unclipped <= clipped, -unclipped, 0.0) * m / m.sum()
    diff = new_v - ret
    value_loss = (diff * diff * c).sum() / c.sum()
    grad_v = 2.0 * diff * c / c.sum()
    return adv, ret, policy_loss, value_loss, grad_lp, grad_v


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    d = args.dir
    values = load(d, "values.f64", np.float64)
    actor = load(d, "actor.u8", np.uint8)
    critic = load(d, "critic.u8", np.uint8)
    seg_off = load(d, "segment_offsets.i64", np.int64)
    roll_off = load(d, "rollout_offsets.i64", np.int64)
    rewards = load(d, "rewards.f64", np.float64)
    old_lp = load(d, "old_logprobs.f64", np.float64)
    new_lp = load(d, "new_logprobs.f64", np.float64)
    new_v = load(d, "new_values.f64", np.float64)
    expected = load(d, "cpp_advantages.f64", np.float64)
    best = None
    adv = None
    for _ in range(max(1, args.repeats)):
        start = time.process_time()
        adv, *_ = advantages_and_losses(values, actor, critic, seg_off, roll_off, rewards, old_lp, new_lp, new_v)
        elapsed = time.process_time() - start
        best = elapsed if best is None else min(best, elapsed)
    print("seconds_per_run %.9g max_abs_diff %.3g" % (best, float(np.max(np.abs(adv - expected)))))


if __name__ == "__main__":
    main()
