#!/usr/bin/python3
"""The anchor of `tandem bench train`: one PyTorch CPU training step (forward, backward,
AdamW) of the same llama shape, batch and threads, with bench/trained/train.py's model.
Prints one JSON line per timed step: {"ms": ..., "cpu_ms": ...} (wall and process CPU time). argv: JSON {shape, batch, seq, steps, threads}.
"""
import importlib.util
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

cfg = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location('tr', os.path.join(os.path.dirname(__file__), 'trained', 'train.py'))
tr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tr)
torch.set_num_threads(cfg['threads'])
torch.manual_seed(1)
s = dict(cfg['shape'])
shape = dict(layers=s['layers'], embd=s['embd'], ff=s['ff'], heads=s['heads'], kv_heads=s['kvHeads'],
             head_dim=s['headDim'], vocab=s['vocab'], context=s['context'])
model = tr.Llama(shape)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
x = torch.randint(0, shape['vocab'], (cfg['batch'], cfg['seq'] + 1))
for _ in range(cfg['steps']):
    t = time.perf_counter()
    c = time.process_time()
    loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(json.dumps({'ms': (time.perf_counter() - t) * 1000, 'cpu_ms': (time.process_time() - c) * 1000}), flush=True)
