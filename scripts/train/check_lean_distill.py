#!/usr/bin/env python3
"""lean_distill against the loss it replaces (train.distill's expressions through autograd): the
same loss, the same gradient with respect to the drafter's states and the same argmax, in f32
and under bf16 autocast, with chunks that do and do not divide the rows, and rows whose target
softmax does not sum to exactly 1. Exits non-zero on a mismatch.

  python scripts/train/check_lean_distill.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lean_distill import lean_distill  # noqa: E402


def reference(h, emb, emb_t, hfin, tgt, w):
    """train.distill and train.dflash_loss's weighting, written out."""
    logits = h @ emb.t()
    with torch.no_grad():
        pt = torch.softmax(hfin.float() @ emb_t.t().float(), dim=-1)
    logp = torch.log_softmax(logits.float(), dim=-1)
    hard = -logp.gather(-1, tgt[:, None]).squeeze(-1)
    soft = -(pt * logp).sum(-1)
    return ((0.5 * hard + 0.5 * soft) * w).sum(), logp.argmax(-1)


def case(R, V, H, chunk, autocast, seed):
    g = torch.Generator().manual_seed(seed)
    h0 = torch.randn(R, H, generator=g)
    emb = torch.randn(V, H, generator=g) * 0.2
    hfin = torch.randn(R, H, generator=g)
    tgt = torch.randint(0, V, (R,), generator=g)
    w = torch.rand(R, generator=g)
    w = w / w.sum()
    out = []
    for fn in (reference, lambda *x: lean_distill(*x, chunk=chunk)):
        h = h0.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            e = emb.to(torch.bfloat16) if autocast else emb
            hh = h.to(torch.bfloat16) if autocast else h
            loss, am = fn(hh, e, emb, hfin, tgt, w)
        loss.backward()
        out.append((loss.item(), h.grad.clone(), am))
    (l0, g0, a0), (l1, g1, a1) = out
    tol = 2e-2 if autocast else 1e-5
    dl = abs(l0 - l1) / max(1.0, abs(l0))
    dg = ((g0 - g1).abs().max() / g0.abs().max()).item()
    same_am = bool((a0 == a1).all())
    ok = dl < tol and dg < tol and same_am
    print(f"R={R} V={V} H={H} chunk={chunk} autocast={autocast}: loss {l0:.6f} vs {l1:.6f} "
          f"(rel {dl:.1e}), grad rel {dg:.1e}, argmax {'same' if same_am else 'DIFFERENT'} -> "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def main():
    ok = True
    for i, (R, V, H, chunk, ac) in enumerate([(37, 500, 32, 8, False), (64, 1000, 48, 64, False),
                                              (64, 1000, 48, 13, False), (50, 2048, 64, 16, True),
                                              (9, 49152, 64, 4, False)]):
        ok &= case(R, V, H, chunk, ac, 20261206 + i)
    # no gradient wanted (validation): the loss alone, no error
    with torch.no_grad():
        loss, _ = lean_distill(torch.randn(5, 8), torch.randn(40, 8), torch.randn(40, 8),
                               torch.randn(5, 8), torch.randint(0, 40, (5,)), torch.full((5,), 0.2))
    ok &= bool(torch.isfinite(loss))
    print("all ok" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
