#!/usr/bin/env python3
"""One Wan2.1-1.3B transformer block in PyTorch with random weights: the
PyTorch half of bench/compare.sh.

The math is model/wan's block (diffusers' WanTransformerBlock): adaLN
modulation from scale_shift_table + the timestep projection; self-attention
on LayerNorm(h)*(1+scale)+shift with RMSNorm over all heads on q and k and
RoPE on adjacent pairs; cross-attention on the affine LayerNorm norm2(h)
against the projected text (no RoPE); a feed-forward with tanh GELU on
LayerNorm(h)*(1+c_scale)+c_shift, gated. Prints one line per timed round:
"torch-<dtype> <seconds>".
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--tokens", type=int, default=1280)
    p.add_argument("--text", type=int, default=512)
    p.add_argument("--dim", type=int, default=1536)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=8960)
    return p.parse_args()


def linear(gen, out_f, in_f, dt):
    w = torch.randn(out_f, in_f, generator=gen) / math.sqrt(in_f)
    b = torch.randn(out_f, generator=gen) * 0.02
    return w.to(dt), b.to(dt)


def make_weights(a, dt):
    gen = torch.Generator().manual_seed(1)
    d = a.dim
    w = {}
    for attn in ("attn1", "attn2"):
        for proj in ("q", "k", "v", "o"):
            w[f"{attn}.{proj}"] = linear(gen, d, d, dt)
        w[f"{attn}.norm_q"] = (1 + 0.1 * torch.randn(d, generator=gen)).to(dt)
        w[f"{attn}.norm_k"] = (1 + 0.1 * torch.randn(d, generator=gen)).to(dt)
    w["norm2"] = ((1 + 0.1 * torch.randn(d, generator=gen)).to(dt), (0.1 * torch.randn(d, generator=gen)).to(dt))
    w["ffn1"] = linear(gen, a.ffn, d, dt)
    w["ffn2"] = linear(gen, d, a.ffn, dt)
    w["table"] = (torch.randn(1, 6, d, generator=gen) / math.sqrt(d)).to(dt)
    return w


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, cos, sin):
    """Rotate adjacent pairs of x [B, L, H, D] by tables [L, D/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def attention(q, k, v):
    """softmax(q kᵀ/√d) v for [B, L, H, D] operands, heads merged."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "scaled_dot_product_attention"):
        o = F.scaled_dot_product_attention(q, k, v)
    else:  # PyTorch < 2.0 (Debian bookworm's 1.13)
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        o = torch.matmul(torch.softmax(s, dim=-1), v)
    return o.transpose(1, 2).flatten(2)


def attend(w, name, x, ctx, heads, eps, cos=None, sin=None):
    b, l, d = x.shape
    q = rms_norm(F.linear(x, *w[f"{name}.q"]), w[f"{name}.norm_q"], eps)
    k = rms_norm(F.linear(ctx, *w[f"{name}.k"]), w[f"{name}.norm_k"], eps)
    v = F.linear(ctx, *w[f"{name}.v"])
    q = q.unflatten(2, (heads, d // heads))
    k = k.unflatten(2, (heads, d // heads))
    v = v.unflatten(2, (heads, d // heads))
    if cos is not None:
        q, k = rope(q, cos, sin), rope(k, cos, sin)
    return F.linear(attention(q, k, v), *w[f"{name}.o"])


def block(w, h, text, temb6, cos, sin, heads, eps=1e-6):
    d = h.shape[-1]
    shift, scale, gate, c_shift, c_scale, c_gate = (w["table"] + temb6).chunk(6, dim=1)
    x = F.layer_norm(h, (d,), eps=eps) * (1 + scale) + shift
    h = h + attend(w, "attn1", x, x, heads, eps, cos, sin) * gate
    x = F.layer_norm(h, (d,), w["norm2"][0], w["norm2"][1], eps)
    h = h + attend(w, "attn2", x, text, heads, eps)
    x = F.layer_norm(h, (d,), eps=eps) * (1 + c_scale) + c_shift
    y = F.linear(F.gelu(F.linear(x, *w["ffn1"]), approximate="tanh"), *w["ffn2"])
    return h + y * c_gate


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    w = make_weights(a, dt)
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(a.batch, a.tokens, a.dim, generator=gen).to(dt)
    text = torch.randn(a.batch, a.text, a.dim, generator=gen).to(dt)
    temb6 = (0.1 * torch.randn(a.batch, 6, a.dim, generator=gen)).to(dt)
    hd = a.dim // a.heads
    angles = torch.rand(a.tokens, hd // 2, generator=gen) * 6.28
    cos, sin = angles.cos().to(dt), angles.sin().to(dt)
    print(f"torch {torch.__version__} {a.dtype}: {a.threads} threads, {a.tokens} tokens, batch {a.batch}, text {a.text}",
          flush=True, file=__import__("sys").stderr)
    with torch.inference_mode():
        block(w, h, text, temb6, cos, sin, a.heads)  # warm-up
        for _ in range(a.rounds):
            start = time.perf_counter()
            block(w, h, text, temb6, cos, sin, a.heads)
            print(f"torch-{a.dtype} {time.perf_counter() - start:.4f}", flush=True)


if __name__ == "__main__":
    main()
