#!/usr/bin/env python3
"""Trains a DFlash and a DSpark drafter for SmolLM2-135M-Instruct together, on the target's own
responses (scripts/train/gen_data.py).

The target is frozen, so its outputs are computed once: one f32 pass over every sequence keeps
the tapped layers' outputs (bf16, [tokens, 4 x 576]), the target's greedy token after every
position and its final-normed hidden state (bf16, for the soft labels) in GPU memory; training
then runs only the drafters (bf16 autocast, f32 master weights), with the block attention
computed per anchor (common.net_anchored) instead of through a dense mask.

Architectures are the ones crates/dspark-engine runs (see common.py), geometry of the target's
layers (hidden 576, 9 heads / 3 kv heads x 64, MLP 1536), taps common.TAPS, mask id
common.MASK_ID, both sharing the target's embedding and LM head (not stored).

Distillation loss at each predicted position (the target's token after position j = a + r - 1
for DFlash row r, j = a + r for DSpark row r):
  D = 0.5 CE(draft, target's greedy token after j) + 0.5 CE(draft, target softmax after j).
DFlash (z-lab): block 16, `[pending, mask x 15]` predicts the 15 tokens after the anchor; every
  other step runs at block 8 (same weights serve both); loss D + l1w ||p_d - p_t||_1 (l1w 0 by
  default, --dflash-l1: the total-variation term DSpark trains with, which is what an
  acceptance test pays for), row r weighted exp(-(r-1)/gamma), gamma 7 by default (--dflash-gamma).
DSpark (DeepSpec): block 7, rows 0..6 predict the 7 tokens after the anchor; a rank-R Markov
  head adds w2(w1[prev]) (teacher-forced prev); loss per row (weight exp(-r/gamma), gamma 4 by
  default, --dspark-gamma):
  D + ||p_d - p_t||_1 + BCE(c_r, 1 - ||p_d - p_t||_1 / 2); the confidence head
  sigmoid(proj([h_r; w1[prev_r]])) is trained on detached inputs.
Anchors: A distinct random response positions per sequence per step (the pending token);
context = the target's tapped states of every earlier position. AdamW, linear warm-up, cosine
schedule over a time budget.

Validation (--val-seqs N): N sequences drawn by the seed are never trained on; every
--val-every steps each drafter's accepted-run metric (tau at fixed random anchors, every block
size it trains at) is measured on them, and the weights saved are those of its best validation
tau, not the last step's (the held-out sets MT-Bench and HumanEval are never looked at).
gen_data.py answers a prompt more than once (greedy, then sampled) and a second turn holds its
first exchange, so the split is by first user turn (--val-by prompt, the default): every answer
to a held-back prompt, second turns included, is held back. --val-by sequence (the fifth run's
split) lets a held-back sequence's prompt have trained answers, which flatters validation.

  python scripts/train/train.py --gguf-dir DIR --data data_u16.npz --out ckpt --budget-s 360
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from lean_distill import lean_distill  # noqa: E402


def load_data(path):
    """gen_data.py's torch file, or its compact form (data_u16.npz: tokens, lens, plens, modes);
    several comma-separated files (data sets of different seeds) are joined in order."""
    if "," in path:
        parts = [load_data(p) for p in path.split(",") if p]
        out = {k: [x for d in parts for x in d[k]] for k in ("seqs", "plens")}
        if all("modes" in d for d in parts):
            out["modes"] = [x for d in parts for x in d["modes"]]
        return out
    if not path.endswith(".npz"):
        return torch.load(path)
    import numpy as np
    z = np.load(path)
    tokens, lens = z["tokens"].astype(np.int64), z["lens"]  # read each array once (npz is lazy)
    ends = np.cumsum(lens)
    seqs = [tokens[e - n:e].tolist() for e, n in zip(ends, lens)]
    out = {"seqs": seqs, "plens": z["plens"].tolist()}
    if "modes" in z.files:
        out["modes"] = z["modes"].tolist()
    return out


def load_into(path, net, heads):
    """Loads a saved drafter directory (f16 safetensors) into the modules."""
    from safetensors.torch import load_file
    sd = load_file(os.path.join(path, "model.safetensors"))
    own = {k: v for k, v in sd.items() if not k.startswith(("markov_head", "confidence_head"))}
    net.load_state_dict({k: v.float() for k, v in own.items()}, strict=True)
    if heads is not None:
        heads.load_state_dict({k: v.float() for k, v in sd.items() if k not in own}, strict=True)


class Store:
    """The frozen target's outputs over the whole data set, flat over tokens, on the device."""

    def __init__(self, model, taps, emb, data, max_len, device, chunk_tokens):
        seqs = [s[:max_len] for s in data["seqs"]]
        self.n = len(seqs)
        self.lens = torch.tensor([len(s) for s in seqs])
        self.plens = torch.tensor([min(p, max_len - 2) for p in data["plens"]])
        self.start = torch.cumsum(self.lens, 0) - self.lens
        N = int(self.lens.sum())
        self.tokens = torch.tensor([t for s in seqs for t in s], dtype=torch.long, device=device)
        H = emb.shape[1]
        dt = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.fused = torch.zeros((N + 1, len(common.TAPS) * H), dtype=dt, device=device)
        self.hfin = torch.zeros((N + 1, H), dtype=dt, device=device)
        self.greedy = torch.zeros(N + 1, dtype=torch.long, device=device)   # target argmax after each position
        self.pad = N                                                         # index of a zero row
        order = sorted(range(self.n), key=lambda i: -len(seqs[i]))
        i = 0
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # the evaluator's (and dspark's) f32 target
        with torch.no_grad():
            while i < self.n:
                T = len(seqs[order[i]])
                j = min(self.n, i + max(1, chunk_tokens // T))
                idx = order[i:j]
                tok = torch.full((len(idx), T), common.PAD_ID, dtype=torch.long)
                for r, k in enumerate(idx):
                    tok[r, :len(seqs[k])] = torch.tensor(seqs[k])
                tok = tok.to(device)
                lens = self.lens[idx].to(device)
                attn = (torch.arange(T, device=device)[None] < lens[:, None]).long()
                fused, hfin = common.target_states(model, taps, tok, attn)
                for r, k in enumerate(idx):
                    s, n = int(self.start[k]), int(self.lens[k])
                    self.fused[s:s + n] = fused[r, :n].to(dt)
                    self.hfin[s:s + n] = hfin[r, :n].to(dt)
                    self.greedy[s:s + n] = (hfin[r, :n] @ emb.t()).argmax(-1)
                i = j
        torch.backends.cuda.matmul.allow_tf32 = prev
        self.lens, self.plens, self.start = self.lens.to(device), self.plens.to(device), self.start.to(device)
        self.N = N

    def batch(self, idx):
        """tokens [B, T], lens, plens, flat index [B, T] (pad rows -> the zero row)."""
        idx = torch.as_tensor(idx, device=self.lens.device)
        lens, plens, start = self.lens[idx], self.plens[idx], self.start[idx]
        T = int(lens.max())
        ar = torch.arange(T, device=lens.device)[None]
        flat = torch.where(ar < lens[:, None], start[:, None] + ar, torch.full_like(ar, self.pad))
        return self.tokens[flat.clamp(max=self.N - 1)], lens, plens, flat


def sample_anchors(gen, lens, plens, A):
    """A distinct anchors per row among response positions a (plen <= a <= len - 2), and which
    of them are real (rows with fewer positions get some invalid ones, at position 0)."""
    B = lens.shape[0]
    T = int(lens.max())
    ar = torch.arange(T, device=lens.device)[None]
    ok = (ar >= plens[:, None]) & (ar <= lens[:, None] - 2)
    score = torch.rand((B, T), generator=gen, device=lens.device) + (~ok).float() * 2
    A = min(A, T)
    s, anchors = torch.topk(score, A, dim=1, largest=False)
    valid = s < 1.5
    return torch.where(valid, anchors, torch.zeros_like(anchors)), valid


def distill(logits, store, rows_flat, labels_valid):
    """Per-row distillation loss (see the module doc) against the target after flat rows."""
    with torch.no_grad():
        tgt = store.greedy[rows_flat]
        pt = common.target_probs(store.hfin[rows_flat], EMB)
    logp = torch.log_softmax(logits.float(), dim=-1)
    hard = -logp.gather(-1, tgt[..., None]).squeeze(-1)
    soft = -(pt * logp).sum(-1)
    return 0.5 * hard + 0.5 * soft, logp, pt, tgt


def dflash_loss(net, emb, store, tok, flat, lens, anchors, avalid, bs, gamma, l1w=0.0):
    dev = tok.device
    fused = store.fused[flat]
    h = common.net_anchored(net, fused, tok, anchors, bs, emb)[:, :, 1:]
    r = torch.arange(1, bs, device=dev)
    j = anchors[:, :, None] + r - 1                                   # target position predicting a + r
    valid = (anchors[:, :, None] + r < lens[:, None, None]) & avalid[:, :, None]
    rows = flat.gather(1, j.clamp(max=flat.shape[1] - 1).flatten(1)).view_as(j)
    w = common.decay_weights(bs - 1, gamma, dev)[None, None] * valid
    if LEAN_CHUNK:
        loss, hit, _ = lean_rows(h, emb, store, rows, valid, w, l1w=l1w)
        return loss, dflash_stats(loss, hit, valid, avalid, bs)
    logits = h @ emb.t()
    d, logp, pt, tgt = distill(logits, store, rows, valid)
    if l1w:   # recomputed in backward: saving exp and |.| would hold two more [.., V] tensors
        l1 = torch.utils.checkpoint.checkpoint(lambda lp, p: (lp.exp() - p).abs().sum(-1), logp, pt,
                                               use_reentrant=False)
        d = d + l1w * l1
    loss = (d * w).sum() / w.sum()
    with torch.no_grad():
        hit = (logp.argmax(-1) == tgt) & valid
    return loss, dflash_stats(loss, hit, valid, avalid, bs)


def lean_rows(h, emb, store, rows, valid, w, **markov_l1):
    """train.distill's loss (plus the terms in markov_l1: u, w2, l1w) over the valid rows only,
    in chunks (lean_distill.py): (loss, hit [same shape as valid], L1 [same shape])."""
    rv = rows[valid]
    tgt = store.greedy[rv]
    loss, am, l1v = lean_distill(h[valid], emb, EMB, store.hfin[rv], tgt, w[valid] / w.sum(), LEAN_CHUNK,
                                 **markov_l1)
    hit = torch.zeros_like(valid)
    hit[valid] = am == tgt
    l1 = torch.zeros(valid.shape, device=valid.device)
    l1[valid] = l1v
    return loss, hit, l1


@torch.no_grad()
def dflash_stats(loss, hit, valid, avalid, bs):
    acc1 = hit[:, :, 0].float().sum() / valid[:, :, 0].float().sum().clamp(min=1)
    run = torch.cumprod(hit.float(), dim=-1).sum(-1)[avalid]
    return {f"dflash{bs}_loss": loss.item(), f"dflash{bs}_acc1": acc1.item(),
            f"dflash{bs}_tau": 1 + run.mean().item()}


def dspark_loss(net, heads, emb, store, tok, flat, lens, anchors, avalid, g, gamma):
    dev = tok.device
    fused = store.fused[flat]
    h = common.net_anchored(net, fused, tok, anchors, g, emb)
    prev, _ = common.shifted(tok, lens, anchors, torch.arange(g, device=dev))
    r = torch.arange(g, device=dev)
    j = anchors[:, :, None] + r                                       # target position predicting a + r + 1
    valid = (j + 1 < lens[:, None, None]) & avalid[:, :, None]
    rows = flat.gather(1, j.clamp(max=flat.shape[1] - 1).flatten(1)).view_as(j)
    w = common.decay_weights(g, gamma, dev)[None, None] * valid
    mk = heads.markov_head
    u = mk.markov_w1(prev)                                            # the Markov head is w2(w1[prev])
    if LEAN_CHUNK:
        main, hit, l1 = lean_rows(h, emb, store, rows, valid, w, u=u[valid], w2=mk.markov_w2.weight, l1w=1.0)
    else:
        logits = h @ emb.t() + mk.markov_w2(u)
        d, logp, pt, tgt = distill(logits, store, rows, valid)
        l1 = (logp.exp() - pt).abs().sum(-1)
        main = ((d + l1) * w).sum() / w.sum()
        with torch.no_grad():
            hit = (logp.argmax(-1) == tgt) & valid
    conf_in = torch.cat([h.detach(), u.detach()], dim=-1)
    conf = heads.confidence_head.proj(conf_in).squeeze(-1).float()
    bce = F.binary_cross_entropy_with_logits(conf, (1 - 0.5 * l1).detach().clamp(0, 1), reduction="none")
    cl = (bce * w).sum() / w.sum()
    with torch.no_grad():
        run = torch.cumprod(hit.float(), dim=-1).sum(-1)[avalid]
        l1m = (l1 * w).sum() / w.sum()
    return main + cl, {"dspark_loss": main.item(), "dspark_l1": l1m.item(), "dspark_conf_bce": cl.item(),
                       "dspark_tau": 1 + run.mean().item()}


def first_turn(seq, plen):
    """A sequence's prompt up to the end of its first user turn: the chat template's second
    <|im_end|> (the first closes the system turn), or the whole prompt where there are fewer."""
    ends = [i for i, t in enumerate(seq[:plen]) if t == common.EOS_IDS[0]]
    return tuple(seq[:ends[1] + 1] if len(ends) > 1 else seq[:plen])


def held_back(data, order, want, by):
    """Indices of about `want` sequences to validate on, taken in `order` (the seeded shuffle):
    single sequences, or (by prompt) every sequence of each first user turn taken."""
    if want <= 0:
        return []
    if by == "sequence":
        return order[:want]
    keys = [first_turn(q, p) for q, p in zip(data["seqs"], data["plens"])]
    groups = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out, seen = [], set()
    for i in order:
        key = keys[i]
        if key in seen:
            continue
        seen.add(key)
        out.extend(groups[key])
        if len(out) >= want:
            break
    return out


class Validation:
    """Fixed batches of held-back sequences with fixed anchors (drawn once from the seed)."""

    def __init__(self, store, idx, a, dev):
        g = torch.Generator(device=dev)
        g.manual_seed(a.seed + 1)
        self.batches = []
        for i in range(0, len(idx), a.batch):
            tok, lens, plens, flat = store.batch(idx[i:i + a.batch])
            anchors, avalid = sample_anchors(g, lens, plens, a.anchors)
            self.batches.append((tok, lens, flat, anchors, avalid))
        self.store = store

    @torch.no_grad()
    def run(self, nets, emb, a):
        """Mean tau (1 + accepted run at each anchor, all block rows) per drafter and block."""
        sums, n = {}, {}
        cast = dict(device_type=emb.device.type, dtype=torch.bfloat16, enabled=emb.device.type == "cuda")
        for tok, lens, flat, anchors, avalid in self.batches:
            w = int(avalid.sum())
            for k, (net, heads, cfg) in nets.items():
                net.eval()
                try:
                    with torch.autocast(**cast):
                        if k == "dflash":
                            blocks = [cfg["block_size"]] + ([a.dflash_alt_block] if a.dflash_alt_block else [])
                            out = {}
                            for bs in blocks:
                                out.update(dflash_loss(net, emb, self.store, tok, flat, lens, anchors, avalid,
                                                       bs, a.dflash_gamma)[1])
                        else:
                            out = dspark_loss(net, heads, emb, self.store, tok, flat, lens, anchors, avalid,
                                              cfg["block_size"], a.dspark_gamma)[1]
                finally:   # an out-of-memory error must not leave the net in eval mode
                    net.train()
                for key, v in out.items():
                    if key.endswith("_tau"):
                        sums[key] = sums.get(key, 0.0) + v * w
                        n[key] = n.get(key, 0) + w
        return {f"val_{k}": sums[k] / max(1, n[k]) for k in sums}


def keep_best(best, nets, row, step):
    """Keeps a copy of each drafter's weights at its best mean validation tau so far."""
    for k, (net, heads, _) in nets.items():
        taus = [v for key, v in row.items() if key.startswith(f"val_{k}") and key.endswith("_tau")]
        tau = sum(taus) / len(taus)
        if k not in best or tau > best[k]["tau"]:
            best[k] = {"tau": tau, "step": step,
                       "net": {n_: t.detach().clone() for n_, t in net.state_dict().items()},
                       "heads": ({n_: t.detach().clone() for n_, t in heads.state_dict().items()}
                                 if heads is not None else None)}


def validate(val, nets, emb, a, step, t_start, val_log, best):
    """One validation pass; one that runs out of GPU memory beside the training state is tried
    once more after the allocator's cache is emptied, then skipped."""
    for then in ("retrying", "skipped"):
        try:
            row = {"step": step, "seconds": round(time.time() - t_start, 1), **val.run(nets, emb, a)}
            break
        except torch.OutOfMemoryError:
            pass
        torch.cuda.empty_cache()
        print(f"validation at step {step} ran out of memory: {then}", flush=True)
    else:
        return
    val_log.append(row)
    print("val", json.dumps(row), flush=True)
    keep_best(best, nets, row, step)


EMB = None
LEAN_CHUNK = 0   # --lean-loss N: the loss in chunks of N rows (lean_distill.py); 0: train.distill


def main():
    global EMB, LEAN_CHUNK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--budget-s", type=float, default=360.0, help="training time (schedule follows it)")
    ap.add_argument("--max-steps", type=int, default=1000000)
    ap.add_argument("--limit", type=int, default=0, help="use the first N sequences only (tests)")
    ap.add_argument("--subset", type=int, default=0,
                    help="use N sequences drawn by the seed (their order kept): a data set whose "
                         "target states do not fit the GPU's memory whole (an H100 holds about 28,000)")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--anchors", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=704)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dflash-layers", type=int, default=1)
    ap.add_argument("--dspark-layers", type=int, default=1)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--dflash-intermediate", type=int, default=0, help="DFlash MLP width (0: --intermediate)")
    ap.add_argument("--dspark-intermediate", type=int, default=0, help="DSpark MLP width (0: --intermediate)")
    ap.add_argument("--dflash-block", type=int, default=16)
    ap.add_argument("--lean-loss", type=int, default=0, metavar="N",
                    help="the drafters' loss in chunks of N rows, its logit gradient in closed form "
                         "(lean_distill.py): no [rows, vocab] tensor outlives a chunk (0: off)")
    ap.add_argument("--dflash-alt-block", type=int, default=8, help="every other step's DFlash block (0: none)")
    ap.add_argument("--dspark-block", type=int, default=7)
    ap.add_argument("--markov-rank", type=int, default=16)
    ap.add_argument("--dflash-gamma", type=float, default=7.0,
                    help="DFlash row r's loss weight exp(-(r-1)/gamma)")
    ap.add_argument("--dflash-l1", type=float, default=0.0,
                    help="weight of the total-variation term ||p_d - p_t||_1 in DFlash's loss")
    ap.add_argument("--dspark-gamma", type=float, default=4.0, help="DSpark row r's loss weight exp(-r/gamma)")
    ap.add_argument("--which", default="dflash,dspark")
    ap.add_argument("--init", default="", help="DFLASH_DIR,DSPARK_DIR: continue from saved drafters")
    ap.add_argument("--precompute-chunk", type=int, default=32768, help="target tokens per precompute pass")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--val-seqs", type=int, default=0, help="sequences kept out of training for validation")
    ap.add_argument("--val-every", type=int, default=250, help="steps between validation passes")
    ap.add_argument("--val-by", choices=["prompt", "sequence"], default="prompt",
                    help="hold back whole first user turns (every answer to them) or single sequences")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    LEAN_CHUNK = a.lean_loss

    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = a.device
    which = set(a.which.split(","))
    t0 = time.time()
    tok_, model, _ = common.load_target(a.gguf_dir, dev)
    taps = common.Taps(model, common.TAPS)
    emb = common.embed_weight(model)
    assert emb.data_ptr() == common.lm_weight(model).data_ptr(), "SmolLM2 ties embedding and head"
    data = load_data(a.data)
    if a.limit:
        data = {k: v[:a.limit] for k, v in data.items()}
    if a.subset and a.subset < len(data["seqs"]):
        keep = sorted(random.Random(a.seed).sample(range(len(data["seqs"])), a.subset))
        data = {k: [v[i] for i in keep] for k, v in data.items()}
    n = len(data["seqs"])
    t_load = time.time() - t0
    print(f"target + {n} sequences loaded in {t_load:.1f}s", flush=True)
    store = Store(model, taps, emb, data, a.max_len, dev, a.precompute_chunk)
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    t_pre = time.time() - t0 - t_load
    print(f"target states of {store.N} tokens precomputed in {t_pre:.1f}s", flush=True)
    EMB = emb
    emb_bf = emb.to(torch.bfloat16) if dev.startswith("cuda") else emb
    del model.model.layers  # only the embedding and final norm are used from here on

    V, Ht = emb.shape
    nets, opts, params = {}, {}, {}
    if "dflash" in which:
        cfg = common.base_config(a.dflash_layers, a.dflash_intermediate or a.intermediate, a.dflash_block, vocab=V, hidden=Ht)
        nets["dflash"] = (common.KvInjectionNet(cfg, Ht).to(dev), None, cfg)
    if "dspark" in which:
        cfg = common.base_config(a.dspark_layers, a.dspark_intermediate or a.intermediate, a.dspark_block, vocab=V, hidden=Ht)
        nets["dspark"] = (common.KvInjectionNet(cfg, Ht).to(dev),
                          common.DSparkHeads(V, Ht, a.markov_rank).to(dev), cfg)
    init = dict(zip(["dflash", "dspark"], a.init.split(","))) if a.init else {}
    for k, (net, heads, _) in nets.items():
        # start the final norm at the target's, so the shared LM head sees its usual scale
        net.norm.weight.data.copy_(model.model.norm.weight.data)
        if init.get(k):
            load_into(init[k], net, heads)
            print(f"{k}: continuing from {init[k]}", flush=True)
        ps = list(net.parameters()) + (list(heads.parameters()) if heads is not None else [])
        params[k] = ps
        opts[k] = torch.optim.AdamW(ps, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
        print(f"{k}: {sum(p.numel() for p in ps) / 1e6:.2f}M trainable parameters", flush=True)

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    order_rng = random.Random(a.seed)
    order = list(range(n))
    order_rng.shuffle(order)
    val_idx = held_back(data, order, min(a.val_seqs, n // 10), a.val_by)  # at most a tenth
    held = set(val_idx)
    order = [i for i in order if i not in held]
    n_train = len(order)
    val = Validation(store, val_idx, a, dev) if val_idx else None
    best = {}
    cursor, epoch = 0, 0
    log, acc, val_log = [], {}, []
    t_start = time.time()
    step, A, anchors_seen = 0, a.anchors, 0
    cast = dict(device_type=dev.split(":")[0], dtype=torch.bfloat16, enabled=dev.startswith("cuda"))
    while step < a.max_steps:
        progress = max(step / a.max_steps, (time.time() - t_start) / a.budget_s)
        if progress >= 1.0:
            break
        if cursor + a.batch > n_train:
            order_rng.shuffle(order)
            cursor, epoch = 0, epoch + 1
        idx = order[cursor:cursor + a.batch]
        cursor += a.batch
        tok, lens, plens, flat = store.batch(idx)
        anchors, avalid = sample_anchors(gen, lens, plens, A)
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * common.cosine(progress)
        stats = {}
        try:
            for k, (net, heads, cfg) in nets.items():
                for group in opts[k].param_groups:
                    group["lr"] = lr
                e = emb_bf
                with torch.autocast(**cast):
                    if k == "dflash":
                        bs = a.dflash_alt_block if (a.dflash_alt_block and step % 2 == 1) else cfg["block_size"]
                        loss, st = dflash_loss(net, e, store, tok, flat, lens, anchors, avalid, bs,
                                               a.dflash_gamma, a.dflash_l1)
                    else:
                        loss, st = dspark_loss(net, heads, e, store, tok, flat, lens, anchors, avalid,
                                               cfg["block_size"], a.dspark_gamma)
                opts[k].zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params[k], 1.0)
                opts[k].step()
                stats.update(st)
        except torch.OutOfMemoryError:
            for o in opts.values():
                o.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            A = max(8, A // 2)
            print(f"out of memory at step {step}: anchors per sequence -> {A}", flush=True)
            continue
        anchors_seen += int(avalid.sum())
        for k2, v in stats.items():
            acc.setdefault(k2, []).append(v)
        step += 1
        if step % a.log_every == 0:
            row = {"step": step, "epoch": epoch, "seconds": round(time.time() - t_start, 1), "lr": lr,
                   **{k2: sum(v) / len(v) for k2, v in acc.items()}}
            if step == a.log_every and dev.startswith("cuda"):
                row["gpu_mem_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 1)
            acc = {}
            log.append(row)
            print(json.dumps(row), flush=True)
        if val is not None and step % a.val_every == 0:
            validate(val, nets, emb_bf, a, step, t_start, val_log, best)

    if val is not None:   # a last pass, then the best validation state of each drafter
        if not val_log or val_log[-1]["step"] != step:
            validate(val, nets, emb_bf, a, step, t_start, val_log, best)
        for k, (net, heads, _) in nets.items():
            if k not in best:
                continue
            net.load_state_dict(best[k]["net"])
            if heads is not None:
                heads.load_state_dict(best[k]["heads"])
            print(f"{k}: saving the weights of step {best[k]['step']} (validation tau {best[k]['tau']:.3f})",
                  flush=True)
    os.makedirs(a.out, exist_ok=True)
    summary = {"steps": step, "epochs": epoch + cursor / max(1, n_train), "train_seconds": round(time.time() - t_start, 1),
               "load_seconds": round(t_load, 1), "precompute_seconds": round(t_pre, 1),
               "sequences": n, "train_sequences": n_train, "val_sequences": len(val_idx),
               "best": {k: {"step": v["step"], "val_tau": v["tau"]} for k, v in best.items()},
               "tokens": store.N, "anchors_per_drafter": anchors_seen, "anchors_per_seq": A,
               "args": vars(a), "taps": common.TAPS, "mask_token_id": common.MASK_ID}
    for k, (net, heads, cfg) in nets.items():
        common.round_f16_(net)
        if heads is not None:
            common.round_f16_(heads)
        if k == "dflash":
            conf = common.dflash_config(cfg)
            sd = common.state_f16(net)
        else:
            conf = common.dspark_config(cfg, a.markov_rank)
            sd = common.state_f16(net, heads)
        meta = {"steps": str(step)}
        if k in best:
            meta["validation_best_step"] = str(best[k]["step"])
        common.save_drafter(os.path.join(a.out, k), conf, sd, meta)
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump({"summary": summary, "log": log, "val": val_log}, f, indent=1)
    print("saved", a.out, json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
