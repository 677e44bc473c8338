#!/usr/bin/env python3
"""Trains a DFlash and a DSpark drafter for SmolLM2-135M-Instruct together, on the target's own
responses (scripts/train/gen_data.py), sharing one frozen target forward per batch.

Architectures are the ones crates/dspark-engine runs (see common.py), geometry of the target's
layers (hidden 576, 9 heads / 3 kv heads x 64, MLP 1536), taps common.TAPS, mask id
common.MASK_ID, both sharing the target's embedding and LM head (not stored).

DFlash (z-lab): block 16, `[pending, mask x 15]` predicts the 15 tokens after the anchor;
  loss = cross-entropy on the target's tokens, position k weighted exp(-(k-1)/7).
DSpark (DeepSpec): block 7, rows 0..6 predict the 7 tokens after the anchor; a rank-R Markov
  head adds w2(w1[prev]) (teacher-forced prev); loss per row k (weight exp(-(k-1)/4)):
  0.1 CE + 0.9 ||p_d - p_t||_1 + 1.0 BCE(c_k, 1 - ||p_d - p_t||_1 / 2), p_t = target softmax.
  The confidence head sigmoid(proj([h_k; w1[prev_k]])) is trained on detached inputs.
Anchors: random response positions (the pending token), A per sequence per step; context = the
  target's tapped states of every earlier position. AdamW, cosine schedule over a time budget.

  python scripts/train/train.py --gguf-dir DIR --data /tmp/w/data.pt --out /tmp/w/ckpt --budget-s 420
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def batch_of(data, idx, device, max_len):
    seqs = [data["seqs"][i][:max_len] for i in idx]
    plens = torch.tensor([min(data["plens"][i], max_len - 2) for i in idx], device=device)
    lens = torch.tensor([len(s) for s in seqs], device=device)
    T = int(lens.max())
    tok = torch.full((len(seqs), T), common.PAD_ID, dtype=torch.long)
    for i, s in enumerate(seqs):
        tok[i, :len(s)] = torch.tensor(s)
    tok = tok.to(device)
    attn = (torch.arange(T, device=device)[None] < lens[:, None]).long()
    return tok, attn, lens, plens


def sample_anchors(gen, lens, plens, A):
    """A anchors per row, uniform over response positions a with a+1 < len."""
    lo = plens.float()
    span = (lens - 1 - plens).clamp(min=1).float()
    u = torch.rand((lens.shape[0], A), generator=gen, device=lens.device)
    return (lo[:, None] + (u * span[:, None]).floor()).long()


def dflash_loss(net, emb, fused, tok, lens, anchors, bs, gamma):
    logits = common.dflash_logits(net, emb, fused, tok, anchors, bs)
    labels, valid = common.shifted(tok, lens, anchors, torch.arange(1, bs, device=tok.device))
    w = common.decay_weights(bs - 1, gamma, tok.device)[None, None] * valid
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view_as(w)
    loss = (ce * w).sum() / w.sum()
    with torch.no_grad():
        hit = (logits.argmax(-1) == labels) & valid
        acc1 = hit[:, :, 0].float().sum() / valid[:, :, 0].float().sum().clamp(min=1)
        run = torch.cumprod(hit.float(), dim=-1).sum(-1)  # accepted drafts at this anchor
    return loss, {"dflash_loss": loss.item(), "dflash_acc1": acc1.item(), "dflash_tau": 1 + run.mean().item()}


def dspark_loss(net, heads, emb, fused, hfin, tok, lens, anchors, g, gamma):
    h, u, prev = common.dspark_forward(net, heads, emb, fused, tok, lens, anchors, g)
    logits = u + heads.markov_head(prev)
    labels, valid = common.shifted(tok, lens, anchors, torch.arange(1, g + 1, device=tok.device))
    with torch.no_grad():
        rows = anchors[:, :, None] + torch.arange(g, device=tok.device)
        rows = rows.clamp(max=tok.shape[1] - 1)
        B, A, _ = rows.shape
        ht = hfin.gather(1, rows.view(B, A * g, 1).expand(-1, -1, hfin.shape[-1])).view(B, A, g, -1)
        pt = torch.softmax(ht @ emb.t(), dim=-1)
    pd = torch.softmax(logits, dim=-1)
    l1 = (pd - pt).abs().sum(-1)
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view_as(l1)
    conf_in = torch.cat([h.detach(), heads.markov_head.markov_w1(prev).detach()], dim=-1)
    conf = heads.confidence_head.proj(conf_in).squeeze(-1)
    bce = F.binary_cross_entropy_with_logits(conf, (1 - 0.5 * l1).detach().clamp(0, 1), reduction="none")
    w = common.decay_weights(g, gamma, tok.device)[None, None] * valid
    main = ((0.1 * ce + 0.9 * l1) * w).sum() / w.sum()
    cl = (bce * w).sum() / w.sum()
    with torch.no_grad():
        hit = (logits.argmax(-1) == labels) & valid
        run = torch.cumprod(hit.float(), dim=-1).sum(-1)
    return main + cl, {"dspark_loss": main.item(), "dspark_conf_bce": cl.item(), "dspark_ce": (ce * w).sum().item()
                       / w.sum().item(), "dspark_tau": 1 + run.mean().item()}


def load_data(path):
    """gen_data.py's torch file, or its compact form (data_u16.npz: tokens, lens, plens)."""
    if not path.endswith(".npz"):
        return torch.load(path)
    import numpy as np
    z = np.load(path)
    tokens, lens = z["tokens"].astype(np.int64), z["lens"]  # read each array once (npz is lazy)
    ends = np.cumsum(lens)
    seqs = [tokens[e - n:e].tolist() for e, n in zip(ends, lens)]
    return {"seqs": seqs, "plens": z["plens"].tolist()}


def load_into(path, net, heads):
    """Loads a saved drafter directory (f16 safetensors) into the modules."""
    from safetensors.torch import load_file
    sd = load_file(os.path.join(path, "model.safetensors"))
    own = {k: v for k, v in sd.items() if not k.startswith(("markov_head", "confidence_head"))}
    net.load_state_dict({k: v.float() for k, v in own.items()}, strict=True)
    if heads is not None:
        heads.load_state_dict({k: v.float() for k, v in sd.items() if k not in own}, strict=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--budget-s", type=float, default=420.0, help="training time (schedule follows it)")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=704)
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dflash-layers", type=int, default=1)
    ap.add_argument("--dspark-layers", type=int, default=1)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--dflash-block", type=int, default=16)
    ap.add_argument("--dspark-block", type=int, default=7)
    ap.add_argument("--markov-rank", type=int, default=16)
    ap.add_argument("--which", default="dflash,dspark")
    ap.add_argument("--init", default="", help="DFLASH_DIR,DSPARK_DIR: continue from saved drafters")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast for the target and drafter forwards")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

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
    n = len(data["seqs"])
    print(f"target + {n} sequences loaded in {time.time() - t0:.1f}s", flush=True)

    V, Ht = emb.shape
    nets, opts, params = {}, {}, {}
    if "dflash" in which:
        cfg = common.base_config(a.dflash_layers, a.intermediate, a.dflash_block, vocab=V, hidden=Ht)
        nets["dflash"] = (common.KvInjectionNet(cfg, Ht).to(dev), None, cfg)
    if "dspark" in which:
        cfg = common.base_config(a.dspark_layers, a.intermediate, a.dspark_block, vocab=V, hidden=Ht)
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
    cursor, epoch = 0, 0
    log, acc = [], {}
    t_start = time.time()
    step = 0
    while step < a.max_steps:
        progress = max(step / a.max_steps, (time.time() - t_start) / a.budget_s)
        if progress >= 1.0:
            break
        if cursor + a.batch > n:
            order_rng.shuffle(order)
            cursor, epoch = 0, epoch + 1
        idx = order[cursor:cursor + a.batch]
        cursor += a.batch
        tok, attn, lens, plens = batch_of(data, idx, dev, a.max_len)
        with torch.autocast(device_type=dev.split(":")[0], dtype=torch.bfloat16, enabled=a.bf16):
            fused, hfin = common.target_states(model, taps, tok, attn)
        fused, hfin = fused.float(), hfin.float()
        anchors = sample_anchors(gen, lens, plens, a.anchors)
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * common.cosine(progress)
        stats = {}
        for k, (net, heads, cfg) in nets.items():
            for group in opts[k].param_groups:
                group["lr"] = lr
            with torch.autocast(device_type=dev.split(":")[0], dtype=torch.bfloat16, enabled=a.bf16):
                if k == "dflash":
                    loss, st = dflash_loss(net, emb, fused, tok, lens, anchors, cfg["block_size"], 7.0)
                else:
                    loss, st = dspark_loss(net, heads, emb, fused, hfin, tok, lens, anchors, cfg["block_size"],
                                           4.0)
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params[k], 1.0)
            opts[k].step()
            stats.update(st)
        for k2, v in stats.items():
            acc.setdefault(k2, []).append(v)
        step += 1
        if step % a.log_every == 0:
            row = {"step": step, "epoch": epoch, "seconds": round(time.time() - t_start, 1), "lr": lr,
                   **{k2: sum(v) / len(v) for k2, v in acc.items()}}
            acc = {}
            log.append(row)
            print(json.dumps(row), flush=True)

    os.makedirs(a.out, exist_ok=True)
    summary = {"steps": step, "epochs": epoch + cursor / n, "train_seconds": round(time.time() - t_start, 1),
               "sequences": n, "args": vars(a), "taps": common.TAPS, "mask_token_id": common.MASK_ID}
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
        common.save_drafter(os.path.join(a.out, k), conf, sd, {"steps": str(step)})
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump({"summary": summary, "log": log}, f, indent=1)
    print("saved", a.out, json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
