#!/usr/bin/env python3
"""Checks that the training path's block attention (common.net_anchored, no dense mask) gives
the same block hidden states as KvInjectionNet.forward with block_inputs' mask (the path the
evaluator, and so the engine cross-check, uses). CPU, a few seconds:

  python scripts/train/check_anchored.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch.manual_seed(0)
cfg = common.base_config(2, 64, 5, vocab=50, hidden=576)
net = common.KvInjectionNet(cfg, 576).double()
B, T, bs = 2, 30, 5
emb = torch.randn(50, 576, dtype=torch.double)
fused = torch.randn(B, T, 4 * 576, dtype=torch.double)
tok = torch.randint(0, 50, (B, T))
anchors = torch.tensor([[3, 7, 12, 20], [1, 5, 9, 24]])
ids, pos, mask = common.block_inputs(anchors, tok, bs, T)
ref = net(fused, torch.nn.functional.embedding(ids, emb), pos, mask).view(B, anchors.shape[1], bs, -1)
got = common.net_anchored(net, fused, tok, anchors, bs, emb)
diff = (ref - got).abs().max().item()
print(f"max |dense - anchored| = {diff:.3g}")
assert diff < 1e-5, diff  # the anchored path takes its softmax in f32
