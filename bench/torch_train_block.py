#!/usr/bin/env python3
"""One training step of one Wan2.1-1.3B transformer block in PyTorch, with
random weights: the PyTorch half of bench/compare_train.sh.

The block is bench/torch_block.py's (diffusers' WanTransformerBlock). A
step is its forward with autograd recording, then backward from a fixed
random gradient of the block's output, as the block sits inside a model:
the gradient of its input hidden states is computed (earlier blocks need
it), and
  lora: rank-R adapters y = Wx + b + (alpha/R)·B(Ax) on the ten default
        targets (attn1/attn2 q, k, v, o; ffn.net.0.proj, ffn.net.2) are the
        only trainable tensors; the base weights are frozen;
  full: every weight of the block is trainable, and the gradients of the
        text context and the timestep modulation flow back too.
Prints one line per timed round: "torch-<mode> <seconds>".
"""
import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

from torch_block import attention, make_weights, rms_norm, rope

LORA_TARGETS = ("attn1.q", "attn1.k", "attn1.v", "attn1.o",
                "attn2.q", "attn2.k", "attn2.v", "attn2.o", "ffn1", "ffn2")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", default="lora", choices=["lora", "full"])
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=1280)
    p.add_argument("--text", type=int, default=512)
    p.add_argument("--dim", type=int, default=1536)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=8960)
    p.add_argument("--dtype", default="fp32", choices=["fp32"])
    return p.parse_args()


def make_lora(w, rank, gen):
    """A (Kaiming-uniform, as PEFT) and B for every target; B small but
    non-zero so the backward does real work in every product."""
    lora = {}
    for name in LORA_TARGETS:
        out_f, in_f = w[name][0].shape
        bound = 1 / math.sqrt(in_f)
        a = (torch.rand(rank, in_f, generator=gen) * 2 - 1) * bound
        b = torch.randn(out_f, rank, generator=gen) * 0.01
        lora[name] = (a.requires_grad_(), b.requires_grad_())
    return lora


def lin(w, lora, scale, name, x):
    y = F.linear(x, *w[name])
    if lora is not None and name in lora:
        a, b = lora[name]
        y = y + scale * F.linear(F.linear(x, a), b)
    return y


def attend(w, lora, scale, name, x, ctx, heads, eps, cos=None, sin=None):
    b, l, d = x.shape
    q = rms_norm(lin(w, lora, scale, f"{name}.q", x), w[f"{name}.norm_q"], eps)
    k = rms_norm(lin(w, lora, scale, f"{name}.k", ctx), w[f"{name}.norm_k"], eps)
    v = lin(w, lora, scale, f"{name}.v", ctx)
    q = q.unflatten(2, (heads, d // heads))
    k = k.unflatten(2, (heads, d // heads))
    v = v.unflatten(2, (heads, d // heads))
    if cos is not None:
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    return lin(w, lora, scale, f"{name}.o", attention(q, k, v))


def block(w, lora, scale, h, text, temb6, cos, sin, heads, eps=1e-6):
    d = h.shape[-1]
    shift, sc, gate, c_shift, c_scale, c_gate = (w["table"] + temb6).chunk(6, dim=1)
    x = F.layer_norm(h, (d,), eps=eps) * (1 + sc) + shift
    h = h + attend(w, lora, scale, "attn1", x, x, heads, eps, cos, sin) * gate
    x = F.layer_norm(h, (d,), w["norm2"][0], w["norm2"][1], eps)
    h = h + attend(w, lora, scale, "attn2", x, text, heads, eps)
    x = F.layer_norm(h, (d,), eps=eps) * (1 + c_scale) + c_shift
    y = lin(w, lora, scale, "ffn2", F.gelu(lin(w, lora, scale, "ffn1", x), approximate="tanh"))
    return h + y * c_gate


def trainable(w, full):
    """Marks the block's weights trainable (full) or frozen (lora)."""
    for v in w.values():
        for t in (v if isinstance(v, tuple) else (v,)):
            t.requires_grad_(full)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    w = make_weights(a, torch.float32)
    full = a.mode == "full"
    trainable(w, full)
    gen = torch.Generator().manual_seed(3)
    lora = None if full else make_lora(w, a.rank, gen)
    scale = 1.0  # alpha = rank
    h = torch.randn(a.batch, a.tokens, a.dim, generator=gen).requires_grad_()
    text = torch.randn(a.batch, a.text, a.dim, generator=gen).requires_grad_(full)
    temb6 = (0.1 * torch.randn(a.batch, 6, a.dim, generator=gen)).requires_grad_(full)
    hd = a.dim // a.heads
    angles = torch.rand(a.tokens, hd // 2, generator=gen) * 6.28
    cos, sin = angles.cos(), angles.sin()
    grad_out = torch.randn(a.batch, a.tokens, a.dim, generator=gen)
    print(f"torch {torch.__version__} {a.mode}: {a.threads} threads, {a.tokens} tokens, batch {a.batch}, "
          f"text {a.text}, rank {a.rank}", flush=True, file=sys.stderr)

    def step():
        out = block(w, lora, scale, h, text, temb6, cos, sin, a.heads)
        out.backward(grad_out)

    step()  # warm-up
    for _ in range(a.rounds):
        start = time.perf_counter()
        step()
        print(f"torch-{a.mode} {time.perf_counter() - start:.4f}", flush=True)


if __name__ == "__main__":
    main()
