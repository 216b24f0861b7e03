#!/usr/bin/env python3
"""Independent PyTorch reference for policies/lm (issue 17), written from the model's description in
policies/lm/cpu/model.h and config.h, not from the C++ code.

Usage: torch_reference.py DIR [--dtype float64|float32]
Reads DIR/config.json, DIR/params.bin (float32, the flat layout) and DIR/batch.json
(tokens, targets, offsets, mask, rl_dlogp, dvalue). Writes DIR/logits.bin, logp.bin, values.bin, grad.bin
(float32) and DIR/out.json ({"loss": ...}). The loss is
  mean over masked targets of -logp  +  sum_t rl_dlogp[t] logp[t]  +  sum_t dvalue[t] value[t].
Exit code 3 when torch cannot be imported (the C++ test then skips).
"""
import json
import math
import sys

try:
    import torch
except Exception as e:  # noqa: BLE001 - any import failure means "no reference here"
    print(f"torch unavailable: {e}", file=sys.stderr)
    sys.exit(3)
import numpy as np


def main():
    folder = sys.argv[1]
    dtype = torch.float64
    if "--dtype" in sys.argv and sys.argv[sys.argv.index("--dtype") + 1] == "float32":
        dtype = torch.float32
    cfg = json.load(open(f"{folder}/config.json"))
    batch = json.load(open(f"{folder}/batch.json"))
    flat = torch.tensor(np.fromfile(f"{folder}/params.bin", dtype=np.float32), dtype=dtype)
    V, d, H, L, F, P = (cfg[k] for k in ("vocab", "d_model", "heads", "layers", "d_ff", "max_positions"))
    eps, hd = cfg["norm_eps"], d // H

    # Slice the flat buffer in layout order into leaf tensors that require gradients.
    shapes = [("tok", (V, d)), ("pos", (P, d))]
    for b in range(L):
        shapes += [(f"n1_{b}", (d,)), (f"qkv_{b}", (d, 3 * d)), (f"wo_{b}", (d, d)), (f"n2_{b}", (d,)),
                   (f"w1_{b}", (d, F)), (f"w2_{b}", (F, d))]
    shapes += [("nf", (d,)), ("vw", (d,)), ("vb", (1,))]
    params, at = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        params[name] = flat[at:at + n].clone().reshape(shape).requires_grad_(True)
        at += n
    assert at == flat.numel(), (at, flat.numel())

    def rms(x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    tokens = torch.tensor(batch["tokens"], dtype=torch.long)
    targets = torch.tensor(batch["targets"], dtype=torch.long)
    offsets = batch["offsets"]
    outs_h = []
    for s in range(len(offsets) - 1):
        n = offsets[s + 1] - offsets[s]
        if n == 0:
            continue
        x = params["tok"][tokens[offsets[s]:offsets[s + 1]]] + params["pos"][:n]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        for b in range(L):
            a = rms(x, params[f"n1_{b}"])
            q, k, v = (a @ params[f"qkv_{b}"]).split(d, dim=-1)
            q, k, v = (t.reshape(n, H, hd).transpose(0, 1) for t in (q, k, v))  # (H, n, hd)
            scores = (q @ k.transpose(1, 2)) / math.sqrt(hd)
            scores = scores.masked_fill(~causal, float("-inf"))
            o = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(n, d)
            x = x + o @ params[f"wo_{b}"]
            m = rms(x, params[f"n2_{b}"])
            x = x + torch.nn.functional.gelu(m @ params[f"w1_{b}"]) @ params[f"w2_{b}"]
        outs_h.append(rms(x, params["nf"]))
    h = torch.cat(outs_h) if outs_h else torch.zeros(0, d, dtype=dtype)
    logits = h @ params["tok"].T
    logsm = torch.log_softmax(logits, dim=-1)
    has = targets >= 0
    logp = torch.where(has, logsm.gather(1, targets.clamp(min=0)[:, None])[:, 0], torch.zeros((), dtype=dtype))
    trunk = h if cfg["value_grad_to_trunk"] else h.detach()
    values = trunk @ params["vw"] + params["vb"]

    mask = torch.tensor(batch["mask"], dtype=dtype) * has.to(dtype)
    count = mask.sum()
    sft = -(mask * logp).sum() / count if count > 0 else torch.zeros((), dtype=dtype)
    loss = sft + (torch.tensor(batch["rl_dlogp"], dtype=dtype) * logp).sum() + \
        (torch.tensor(batch["dvalue"], dtype=dtype) * values).sum()
    loss.backward()
    grad = torch.cat([params[name].grad.reshape(-1) for name, _ in shapes])

    def save(name, t):
        t.detach().to(torch.float32).numpy().tofile(f"{folder}/{name}")

    save("logits.bin", logits)
    save("logp.bin", logp)
    save("values.bin", values)
    save("grad.bin", grad)
    json.dump({"loss": loss.item(), "sft": sft.item()}, open(f"{folder}/out.json", "w"))


if __name__ == "__main__":
    main()
