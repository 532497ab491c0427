#!/usr/bin/python3
"""The PyTorch twin of a `tandem train` run, for comparing held-out losses: the same llama
shape (bench/trained/train.py's model and initialisation), steps, batch, sequence length,
AdamW (betas 0.9/0.95, eps 1e-8, weight decay on matrices only), gradient clipping and
schedule (linear warm-up, then a cosine to a tenth of the peak), on the same tokens
(bench/train-heldout.ts tokens). The batches are drawn by torch's generator, not tandem's.
Writes OUT_DIR/weights.f32 and manifest.json (bench/trained/to-gguf.ts turns them into a
GGUF; its held_out_loss field is 0 here: bench/train-heldout.ts measures it) and
OUT_DIR/curve.csv (step,loss,lr).
  /usr/bin/python3 bench/train-torch-run.py TRAIN.u16 OUT_DIR --steps 700 --batch 8 --seq 128 \
      --lr 3e-3 [--warmup N] [--threads 1] [--seed 0]
"""
import argparse
import importlib.util
import json
import math
import os
import signal
import time

import numpy as np
import torch
import torch.nn.functional as F

spec = importlib.util.spec_from_file_location('tr', os.path.join(os.path.dirname(__file__), 'trained', 'train.py'))
tr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('tokens')
    ap.add_argument('out')
    ap.add_argument('--steps', type=int, required=True)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--seq', type=int, default=128)
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--warmup', type=int)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    warmup = a.warmup if a.warmup is not None else min(100, math.ceil(a.steps / 10))
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    data = torch.from_numpy(np.fromfile(a.tokens, dtype='<u2').astype(np.int64))
    model = tr.Llama(tr.SHAPE)
    params = dict(model.params)
    decay = [p for n, p in params.items() if not n.endswith('norm.weight')]
    keep = [p for n, p in params.items() if n.endswith('norm.weight')]
    opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': keep, 'weight_decay': 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(a.seed)
    curve = []
    start = time.time()
    # SIGTERM ends the run early at the next multiple of 20 updates (tandem's checkpoints fall
    # there too), writing the weights so far: a partial run compares at equal updates
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    done = a.steps
    for step in range(a.steps):
        if stop and step % 20 == 0:
            done = step
            break
        if step < warmup:
            lr = a.lr * (step + 1) / warmup
        else:
            progress = min(1.0, (step - warmup) / max(1, a.steps - warmup))
            lr = a.lr * 0.1 + (a.lr - a.lr * 0.1) * 0.5 * (1 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g['lr'] = lr
        at = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=gen)
        x = torch.stack([data[j:j + a.seq + 1] for j in at.tolist()])
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve.append((step + 1, loss.item(), lr))
        if (step + 1) % 50 == 0:
            print(f'step {step + 1}  {time.time() - start:6.0f} s  loss {loss.item():.3f}  lr {lr:.2e}', flush=True)
    os.makedirs(a.out, exist_ok=True)
    manifest = []
    with open(os.path.join(a.out, 'weights.f32'), 'wb') as f:
        for name, t in model.params.items():
            arr = t.detach().numpy().astype('<f4')
            manifest.append({'name': name, 'shape': list(arr.shape)})
            f.write(arr.tobytes())
    with open(os.path.join(a.out, 'curve.csv'), 'w') as f:
        f.write('step,loss,lr\n' + ''.join(f'{s},{l},{r}\n' for s, l, r in curve))
    info = {'shape': tr.SHAPE, 'steps': done, 'planned_steps': a.steps, 'held_out_loss': 0.0, 'seed': a.seed,
            'tensors': manifest, 'seconds': time.time() - start}
    with open(os.path.join(a.out, 'manifest.json'), 'w') as f:
        json.dump(info, f, indent=1)
    print(f'{done} steps in {time.time() - start:.0f} s; wrote {a.out}', flush=True)


if __name__ == '__main__':
    main()
