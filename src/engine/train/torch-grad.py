#!/usr/bin/python3
"""PyTorch oracle for tandem's llama gradients (a development check; tandem never needs it).

Reads JSON on stdin: {"shape": {...}, "names": [...], "dims": [[rows, cols], ...],
"weights": [...flat f32 in paramLayout order...], "batch": [...], "rows", "seq"}; writes
{"loss", "grad": [...flat...]} computed in float64 by autograd, with the architecture of
bench/trained/train.py (RMSNorm eps 1e-5, RoPE on adjacent pairs base 10000, GQA, SwiGLU).
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

EPS = 1e-5
BASE = 10000.0


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, cos, sin):
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def main():
    req = json.load(sys.stdin)
    s = req['shape']
    flat = torch.tensor(req['weights'], dtype=torch.float64)
    W, at = {}, 0
    for name, (rows, cols) in zip(req['names'], req['dims']):
        t = flat[at:at + rows * cols].view(rows, cols) if rows > 1 else flat[at:at + cols]
        W[name] = t.clone().requires_grad_(True)
        at += rows * cols
    B, T = req['rows'], req['seq']
    data = torch.tensor(req['batch'], dtype=torch.long).view(B, T + 1)
    ids, targets = data[:, :-1], data[:, 1:]
    H, KV, D = s['heads'], s['kvHeads'], s['headDim']
    inv = BASE ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    mask = torch.full((T, T), float('-inf'), dtype=torch.float64).triu(1)
    x = W['token_embd.weight'][ids]
    for i in range(s['layers']):
        p = f'blk.{i}.'
        h = rms_norm(x, W[p + 'attn_norm.weight'])
        q = (h @ W[p + 'attn_q.weight'].T).view(B, T, H, D).transpose(1, 2)
        k = (h @ W[p + 'attn_k.weight'].T).view(B, T, KV, D).transpose(1, 2)
        v = (h @ W[p + 'attn_v.weight'].T).view(B, T, KV, D).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D) + mask
        o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + o @ W[p + 'attn_output.weight'].T
        h = rms_norm(x, W[p + 'ffn_norm.weight'])
        x = x + (F.silu(h @ W[p + 'ffn_gate.weight'].T) * (h @ W[p + 'ffn_up.weight'].T)) @ W[p + 'ffn_down.weight'].T
    logits = rms_norm(x, W['output_norm.weight']) @ W['output.weight'].T
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    grad = torch.cat([W[n].grad.flatten() for n in req['names']])
    json.dump({'loss': loss.item(), 'grad': grad.tolist()}, sys.stdout)


if __name__ == '__main__':
    main()
