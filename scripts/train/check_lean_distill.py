#!/usr/bin/env python3
"""lean_distill against the loss it replaces (train.distill itself, through autograd): the
same loss, the same gradients (the drafter's states; DSpark's Markov input and weight), the same
argmax and per-row L1, in f32 and under bf16 autocast, with chunks that do and do not divide the
rows, with and without the total-variation term and the Markov head. Exits non-zero on a
mismatch.

  python scripts/train/check_lean_distill.py
"""
import os
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402
from lean_distill import lean_distill  # noqa: E402


def reference(h, emb, emb_t, hfin, tgt, w, u=None, w2=None, l1w=0.0):
    """train.distill itself (through autograd), with the drafters' extra terms and weighting as
    train.dflash_loss / train.dspark_loss add them: DSpark's Markov head when u is given."""
    logits = h @ emb.t()
    if u is not None:
        logits = logits + u @ w2.t()
    train.EMB = emb_t
    rows = torch.arange(h.shape[0])
    d, logp, pt, _ = train.distill(logits, SimpleNamespace(greedy=tgt, hfin=hfin), rows, None)
    l1 = (logp.exp() - pt).abs().sum(-1)
    if l1w:
        d = d + l1w * l1
    return (d * w).sum(), logp.argmax(-1), (l1 if l1w else torch.zeros_like(l1)).detach()


def case(R, V, H, chunk, autocast, seed, markov=False, l1w=0.0):
    g = torch.Generator().manual_seed(seed)
    h0 = torch.randn(R, H, generator=g)
    emb = torch.randn(V, H, generator=g) * 0.2
    hfin = torch.randn(R, H, generator=g)
    tgt = torch.randint(0, V, (R,), generator=g)
    w = torch.rand(R, generator=g)
    w = w / w.sum()
    u0, w20 = torch.randn(R, 16, generator=g), torch.randn(V, 16, generator=g) * 0.3
    out = []
    for lean in (False, True):
        h = h0.clone().requires_grad_(True)
        u = u0.clone().requires_grad_(True) if markov else None
        w2 = w20.clone().requires_grad_(True) if markov else None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            e = emb.to(torch.bfloat16) if autocast else emb
            hh = h.to(torch.bfloat16) if autocast else h
            if lean:
                loss, am, l1 = lean_distill(hh, e, emb, hfin, tgt, w, chunk, u=u, w2=w2, l1w=l1w)
            else:
                loss, am, l1 = reference(hh, e, emb, hfin, tgt, w, u, w2, l1w)
        loss.backward()
        grads = [h.grad] + ([u.grad, w2.grad] if markov else [])
        out.append((loss.item(), [x.clone() for x in grads], am, l1))
    (l0, g0, a0, r0), (l1_, g1, a1, r1) = out
    tol = 2e-2 if autocast else 1e-5
    dl = abs(l0 - l1_) / max(1.0, abs(l0))
    dg = max(((x - y).abs().max() / x.abs().max()).item() for x, y in zip(g0, g1))
    dr = (r0 - r1).abs().max().item()
    same_am = bool((a0 == a1).all())
    ok = dl < tol and dg < tol and dr < tol and same_am
    print(f"R={R} V={V} H={H} chunk={chunk} autocast={autocast} markov={markov} l1w={l1w}: "
          f"loss {l0:.6f} vs {l1_:.6f} (rel {dl:.1e}), grads rel {dg:.1e}, L1 rows {dr:.1e}, "
          f"argmax {'same' if same_am else 'DIFFERENT'} -> {'ok' if ok else 'FAIL'}")
    return ok


def main():
    ok = True
    cases = [(37, 500, 32, 8, False, False, 0.0), (64, 1000, 48, 64, False, False, 0.0),
             (64, 1000, 48, 13, False, False, 0.0), (50, 2048, 64, 16, True, False, 0.0),
             (9, 49152, 64, 4, False, False, 0.0),
             (41, 700, 32, 10, False, False, 1.0),      # DFlash with --dflash-l1
             (41, 700, 32, 10, False, True, 1.0),       # DSpark: Markov head and the L1 term
             (30, 49152, 48, 7, False, True, 1.0), (48, 1024, 64, 16, True, True, 1.0)]
    for i, (R, V, H, chunk, ac, mk, l1w) in enumerate(cases):
        ok &= case(R, V, H, chunk, ac, 20261206 + i, mk, l1w)
    # under no_grad (validation), with inputs that want gradients: the loss alone, no error
    with torch.no_grad():
        h = torch.randn(5, 8, requires_grad=True)
        loss, _, l1 = lean_distill(h, torch.randn(40, 8), torch.randn(40, 8), torch.randn(5, 8),
                                   torch.randint(0, 40, (5,)), torch.full((5,), 0.2), 2,
                                   u=torch.randn(5, 16), w2=torch.randn(40, 16), l1w=1.0)
    ok &= bool(torch.isfinite(loss)) and bool((l1 > 0).all())
    print("all ok" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
