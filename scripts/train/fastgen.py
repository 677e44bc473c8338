"""Batched generation for the Llama-shaped target with a preallocated KV cache (bf16 on the GPU).

transformers' `generate` spends most of its time outside the model at the batch sizes data
generation wants; this loop runs the target's own weights (taken from the loaded HF model) with
one fused QKV and one fused gate/up matrix per layer, a cache written in place, grouped-query
attention through SDPA, and per-row greedy or temperature / top-p sampling in one batch. Rows
that reach an eos stop producing; the batch is compacted when most rows are done.

Used only to make training data: the drafters' labels are recomputed by the f32 target in
train.py, so generating in bf16 changes which contexts the data holds, not what is learned.
`check_fastgen.py` compares it with transformers' greedy generation in f32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class FastLM:
    def __init__(self, model, dtype=torch.bfloat16, theta=100000.0, max_pos=2048):
        m, c = model.model, model.config
        self.dtype = dtype
        self.nh, self.nkv = c.num_attention_heads, c.num_key_value_heads
        self.hd = getattr(c, "head_dim", None) or c.hidden_size // self.nh
        self.eps = c.rms_norm_eps
        self.emb = m.embed_tokens.weight.detach().to(dtype)
        self.head = model.get_output_embeddings().weight.detach().to(dtype)
        self.norm = m.norm.weight.detach().to(dtype)
        self.layers = []
        for layer in m.layers:
            a, p = layer.self_attn, layer.mlp
            assert a.q_proj.bias is None and p.gate_proj.bias is None
            self.layers.append((
                layer.input_layernorm.weight.detach().to(dtype),
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0).detach().to(dtype),
                a.o_proj.weight.detach().to(dtype),
                layer.post_attention_layernorm.weight.detach().to(dtype),
                torch.cat([p.gate_proj.weight, p.up_proj.weight], 0).detach().to(dtype),
                p.down_proj.weight.detach().to(dtype),
            ))
        dev = self.emb.device
        inv = 1.0 / (theta ** (torch.arange(0, self.hd, 2, device=dev, dtype=torch.float64) / self.hd))
        ang = (torch.arange(max_pos, device=dev, dtype=torch.float64)[:, None] * inv).float()
        self.cos, self.sin = ang.cos(), ang.sin()

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(self.dtype) * w

    def rope(self, x, cos, sin):
        """x [B, L, h, d]; cos/sin [B, L, 1, d/2] of the positions: rotate-half RoPE."""
        d = self.hd // 2
        x1, x2 = x[..., :d].float(), x[..., d:].float()
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(self.dtype)

    def forward(self, ids, pos, ck, cv, s0, mask):
        """ids/pos [B, L] written at cache slots s0..s0+L-1; mask [B, 1, L, s0+L] (True = attend).
        Returns the final-normed hidden state of the last position [B, H]."""
        B, L = ids.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        g = nh // nkv
        h = self.emb[ids]
        gmask = mask[:, :, None].expand(B, 1, g, L, mask.shape[-1]).reshape(B, 1, g * L, -1)
        cos, sin = self.cos[pos][:, :, None], self.sin[pos][:, :, None]   # once for all layers
        for i, (w_in, wqkv, wo, w_post, wgu, wd) in enumerate(self.layers):
            qkv = self.rms(h, w_in) @ wqkv.t()
            # q and k heads are adjacent in the fused output: one RoPE call for both
            qk = self.rope(qkv[..., :(nh + nkv) * hd].reshape(B, L, nh + nkv, hd), cos, sin).transpose(1, 2)
            q = qk[:, :nh]
            ck[i, :, :, s0:s0 + L] = qk[:, nh:]
            cv[i, :, :, s0:s0 + L] = qkv[..., (nh + nkv) * hd:].view(B, L, nkv, hd).transpose(1, 2)
            # grouped-query attention: the g query heads of one kv head ride along the query axis
            qg = q.reshape(B, nkv, g * L, hd)
            o = F.scaled_dot_product_attention(qg, ck[i, :, :, :s0 + L], cv[i, :, :, :s0 + L], attn_mask=gmask)
            o = o.reshape(B, nh, L, hd).transpose(1, 2).reshape(B, L, nh * hd)
            h = h + o @ wo.t()
            gate, up = (self.rms(h, w_post) @ wgu.t()).chunk(2, -1)
            h = h + (F.silu(gate) * up) @ wd.t()
        return self.rms(h[:, -1], self.norm)


def _pick(logits, temps, top_p, gen, top_k=256):
    """Greedy where temps == 0, else temperature + top-p sampling (per row), the nucleus taken
    within the top_k most likely tokens (a partial sort instead of a sort of the vocabulary)."""
    greedy = logits.argmax(-1)
    samp = temps > 0
    if not bool(samp.any()):
        return greedy
    lg = logits[samp] / temps[samp, None]
    top, si = lg.topk(top_k, -1)
    sp = torch.exp(top - torch.logsumexp(lg, -1, keepdim=True))   # full-vocabulary probabilities
    keep = (sp.cumsum(-1) - sp) < top_p
    sp = sp * keep
    choice = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=gen).squeeze(-1)
    out = greedy.clone()
    out[samp] = si.gather(-1, choice[:, None]).squeeze(-1)
    return out


@torch.no_grad()
def generate(lm: FastLM, prompts, temps, max_new, eos_ids, pad_id, top_p=0.9, gen=None):
    """New tokens for each prompt (cut after its first eos, which is kept). temps[i] == 0: greedy."""
    dev = lm.emb.device
    B = len(prompts)
    L = max(len(p) for p in prompts)
    S = L + max_new
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    valid = torch.zeros((B, S), dtype=torch.bool)
    for r, p in enumerate(prompts):
        ids[r, L - len(p):] = torch.tensor(p)
        valid[r, L - len(p):L] = True
    ids, valid = ids.to(dev), valid.to(dev)
    plen = torch.tensor([len(p) for p in prompts], device=dev)
    pos = (valid[:, :L].long().cumsum(-1) - 1).clamp(min=0)
    temps = torch.as_tensor(temps, dtype=torch.float32, device=dev)
    eos = torch.tensor(eos_ids, device=dev)
    shape = (len(lm.layers), B, lm.nkv, S, lm.hd)
    ck = torch.zeros(shape, dtype=lm.dtype, device=dev)
    cv = torch.zeros(shape, dtype=lm.dtype, device=dev)
    causal = torch.ones((L, L), dtype=torch.bool, device=dev).tril()
    eye = torch.eye(L, dtype=torch.bool, device=dev)
    # pad rows see themselves only, so no query row is left without a key (no NaN in the cache)
    mask = ((valid[:, None, :L] & causal) | eye)[:, None]
    hid = lm.forward(ids, pos, ck, cv, 0, mask)
    rows = torch.arange(B, device=dev)            # original index of each live row
    out = torch.full((B, max_new), -1, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    for t in range(max_new):
        nxt = _pick((hid @ lm.head.t()).float(), temps, top_p, gen)
        out[rows, t] = torch.where(done, torch.full_like(nxt, -1), nxt)
        done = done | torch.isin(nxt, eos)
        if t + 1 == max_new:
            break
        if t % 16 == 15:
            if bool(done.all()):
                break
            live = (~done).nonzero().squeeze(-1)
            if live.numel() < 0.6 * done.numel():
                rows, done, nxt, temps, plen = rows[live], done[live], nxt[live], temps[live], plen[live]
                ck, cv, valid = ck[:, live], cv[:, live], valid[live]
        s = L + t
        valid[:, s] = True
        hid = lm.forward(nxt[:, None], (plen + t)[:, None], ck, cv, s, valid[:, None, None, :s + 1])
    res = []
    for row in out.tolist():
        cut = []
        for tkn in row:
            if tkn < 0:
                break
            cut.append(tkn)
            if tkn in eos_ids:
                break
        res.append(cut)
    return res
