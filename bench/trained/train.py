#!/usr/bin/python3
"""Trains the small llama of bench/trained/shape.ts on a token file from corpus.ts.

The forward pass is llama.cpp's llama: RMSNorm (eps 1e-5), RoPE on adjacent pairs
(base 10000), grouped-query causal attention, SwiGLU, untied output head. Weights are
written in GGUF's names and row order (a torch Linear's [out, in] rows are GGUF's rows),
so to-gguf.ts copies them as they are.

Needs PyTorch (Debian: apt-get install python3-torch). A development tool for measuring
on a trained model; tandem itself never runs it.

  /usr/bin/python3 bench/trained/train.py CORPUS.tokens OUT_DIR [--minutes 10] [--seed 0]
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

# bench/trained/shape.ts's TRAINED_SHAPE (to-gguf.ts refuses weights of any other shape)
SHAPE = dict(layers=4, embd=256, ff=768, heads=8, kv_heads=4, head_dim=32, vocab=2048, context=512)
EPS = 1e-5
ROPE_BASE = 10000.0


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, cos, sin):
    # x: [batch, heads, tokens, head_dim]; pairs (2i, 2i+1) rotate by pos * base^(-2i/d)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Llama(torch.nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        e, q, kv = s['embd'], s['heads'] * s['head_dim'], s['kv_heads'] * s['head_dim']
        P = torch.nn.Parameter
        std = 0.02
        self.params = {}

        def add(name, *shape, norm=False):
            t = P(torch.ones(*shape) if norm else torch.randn(*shape) * std)
            self.register_parameter(name.replace('.', '_'), t)
            self.params[name] = t

        add('token_embd.weight', s['vocab'], e)
        for i in range(s['layers']):
            p = f'blk.{i}.'
            add(p + 'attn_norm.weight', e, norm=True)
            add(p + 'attn_q.weight', q, e)
            add(p + 'attn_k.weight', kv, e)
            add(p + 'attn_v.weight', kv, e)
            add(p + 'attn_output.weight', e, q)
            add(p + 'ffn_norm.weight', e, norm=True)
            add(p + 'ffn_gate.weight', s['ff'], e)
            add(p + 'ffn_up.weight', s['ff'], e)
            add(p + 'ffn_down.weight', e, s['ff'])
        add('output_norm.weight', e, norm=True)
        add('output.weight', s['vocab'], e)
        with torch.no_grad():
            for i in range(s['layers']):  # scaled residual projections (GPT-2's init)
                for n in ('attn_output', 'ffn_down'):
                    self.params[f'blk.{i}.{n}.weight'].mul_(1 / math.sqrt(2 * s['layers']))
        d = s['head_dim']
        inv = ROPE_BASE ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(s['context'], dtype=torch.float64)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().float(), ang.sin().float()

    def forward(self, ids):
        s, W = self.s, self.params
        B, T = ids.shape
        H, KV, D = s['heads'], s['kv_heads'], s['head_dim']
        x = W['token_embd.weight'][ids]
        cos, sin = self.cos[:T], self.sin[:T]
        mask = torch.full((T, T), float('-inf')).triu(1)
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
            g = F.silu(h @ W[p + 'ffn_gate.weight'].T) * (h @ W[p + 'ffn_up.weight'].T)
            x = x + g @ W[p + 'ffn_down.weight'].T
        return rms_norm(x, W['output_norm.weight']) @ W['output.weight'].T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('corpus')
    ap.add_argument('out')
    ap.add_argument('--minutes', type=float, default=10)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--tokens', type=int, default=320)
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    data = torch.from_numpy(np.fromfile(a.corpus, dtype='<u2').astype(np.int64))
    held = data[-65536:]
    train = data[:-65536]
    model = Llama(SHAPE)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(a.seed)

    def batch(src):
        at = torch.randint(0, len(src) - a.tokens - 1, (a.batch,), generator=gen)
        x = torch.stack([src[j:j + a.tokens + 1] for j in at.tolist()])
        return x[:, :-1], x[:, 1:]

    def held_loss():
        with torch.no_grad():
            x = held[: (len(held) // (a.tokens + 1)) * (a.tokens + 1)].view(-1, a.tokens + 1)[:32]
            return F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).item()

    budget = a.minutes * 60
    start = time.time()
    step = 0
    warm = 50
    while True:
        spent = time.time() - start
        if spent >= budget:
            break
        frac = spent / budget
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g['lr'] = lr
        x, y = batch(train)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f'step {step}  {spent:6.0f} s  loss {loss.item():.3f}  lr {lr:.2e}', flush=True)
    final = held_loss()
    print(f'{step} steps in {time.time() - start:.0f} s; held-out loss {final:.3f} nats/token', flush=True)

    os.makedirs(a.out, exist_ok=True)
    manifest = []
    with open(os.path.join(a.out, 'weights.f32'), 'wb') as f:
        for name, t in model.params.items():
            arr = t.detach().numpy().astype('<f4')
            manifest.append({'name': name, 'shape': list(arr.shape)})
            f.write(arr.tobytes())
    # a greedy continuation from torch itself, so the engine's reading of the file can be checked
    prompt = data[1000:1016].tolist()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(24):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    info = {'shape': SHAPE, 'steps': step, 'held_out_loss': final, 'seed': a.seed, 'tensors': manifest,
            'check': {'prompt': prompt, 'greedy': ids[len(prompt):]}}
    with open(os.path.join(a.out, 'manifest.json'), 'w') as f:
        json.dump(info, f, indent=1)
    print(f'wrote {a.out}/weights.f32 and manifest.json', flush=True)


if __name__ == '__main__':
    main()
