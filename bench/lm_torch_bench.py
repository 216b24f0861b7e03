#!/usr/bin/env python3
"""PyTorch baseline for bench/lm_bench.cpp: the same model shape and batch as policies/lm, on one CPU thread.

Usage: lm_torch_bench.py train|sample VOCAB D HEADS LAYERS DFF MAXPOS SEQS LEN [NEW] [SECONDS]
Prints one line "tokens_per_second X" (per second of process CPU time). train: forward + backward of the SFT loss over SEQS sequences of LEN
tokens (one (SEQS, LEN) tensor: PyTorch's natural batched form). sample: SEQS prompts of LEN tokens, then NEW
tokens each with a per-layer key-value cache, batched over the sequences (temperature 1, multinomial).
Exit code 3 when torch cannot be imported.
"""
import math
import sys
import time

try:
    import torch
except Exception as e:  # noqa: BLE001
    print(f"torch unavailable: {e}", file=sys.stderr)
    sys.exit(3)

torch.set_num_threads(1)
torch.manual_seed(0)
mode = sys.argv[1]
V, d, H, L, F, P, B, N = (int(a) for a in sys.argv[2:10])
NEW = int(sys.argv[10]) if len(sys.argv) > 10 else 0
SECONDS = float(sys.argv[11]) if len(sys.argv) > 11 else 2.0
hd = d // H


def p(*shape, std=0.02):
    return (torch.randn(*shape) * std).requires_grad_(True)


tok, pos = p(V, d), p(P, d)
blocks = [dict(n1=torch.ones(d, requires_grad=True), qkv=p(d, 3 * d), wo=p(d, d), n2=torch.ones(d, requires_grad=True),
               w1=p(d, F), w2=p(F, d)) for _ in range(L)]
nf, vw = torch.ones(d, requires_grad=True), torch.zeros(d, requires_grad=True)


def rms(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g


def forward(tokens):  # (B, n)
    b, n = tokens.shape
    x = tok[tokens] + pos[:n]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for blk in blocks:
        q, k, v = (rms(x, blk["n1"]) @ blk["qkv"]).split(d, dim=-1)
        q, k, v = (t.reshape(b, n, H, hd).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        o = (torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v).transpose(1, 2).reshape(b, n, d)
        x = x + o @ blk["wo"]
        x = x + torch.nn.functional.gelu(rms(x, blk["n2"]) @ blk["w1"]) @ blk["w2"]
    h = rms(x, nf)
    return h @ tok.T, h.detach() @ vw


def train_once(tokens):
    logits, values = forward(tokens)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1)) + values.sum()
    loss.backward()
    for t in [tok, pos, nf, vw] + [t for blk in blocks for t in blk.values()]:
        t.grad = None


@torch.no_grad()
def sample_once(prompts):
    b, n = prompts.shape
    keys = [torch.empty(b, H, P, hd) for _ in range(L)]
    vals = [torch.empty(b, H, P, hd) for _ in range(L)]

    def step(x, at, width):  # x (b, width, d) at positions [at, at + width)
        for li, blk in enumerate(blocks):
            q, k, v = (rms(x, blk["n1"]) @ blk["qkv"]).split(d, dim=-1)
            q, k, v = (t.reshape(b, width, H, hd).transpose(1, 2) for t in (q, k, v))
            keys[li][:, :, at:at + width] = k
            vals[li][:, :, at:at + width] = v
            s = (q @ keys[li][:, :, :at + width].transpose(-1, -2)) / math.sqrt(hd)
            if width > 1:
                s = s.masked_fill(~torch.ones(width, at + width, dtype=torch.bool).tril(at), float("-inf"))
            o = (torch.softmax(s, -1) @ vals[li][:, :, :at + width]).transpose(1, 2).reshape(b, width, d)
            x = x + o @ blk["wo"]
            x = x + torch.nn.functional.gelu(rms(x, blk["n2"]) @ blk["w1"]) @ blk["w2"]
        return rms(x[:, -1], nf) @ tok.T

    logits = step(tok[prompts] + pos[:n], 0, n)
    for i in range(NEW):
        probs = torch.softmax(logits, -1)
        nxt = torch.multinomial(probs, 1)[:, 0]
        torch.log_softmax(logits, -1).gather(1, nxt[:, None])
        if i + 1 < NEW:
            logits = step((tok[nxt] + pos[n + i])[:, None], n + i, 1)


def measure(fn, arg, tokens_per_call):
    # Process CPU time, as Google Benchmark's items_per_second: comparable on a loaded machine (one thread).
    fn(arg)  # warm-up
    calls, start = 0, time.process_time()
    while True:
        fn(arg)
        calls += 1
        elapsed = time.process_time() - start
        if elapsed >= SECONDS and calls >= 2:
            return calls * tokens_per_call / elapsed


tokens = torch.randint(0, V, (B, N))
if mode == "train":
    print(f"tokens_per_second {measure(train_once, tokens, B * N):.1f}")
else:
    print(f"tokens_per_second {measure(sample_once, tokens, B * NEW):.1f}")
