"""The distillation loss of train.py (0.5 CE to the target's greedy token + 0.5 CE to the target's
softmax, plus l1w times the total-variation term ||p_d - p_t||_1, each row weighted) without
holding vocabulary-wide tensors across the step.

train.distill builds the drafter's log-softmax, the target's softmax and their product for every
row at once: [rows, 49152] f32 tensors several times over (about 9 GB each at batch 48 x 64
anchors x 15 rows), and autograd keeps two of them for the backward pass. The tenth run ran out
of memory with them and fell back to 32 anchors a sequence instead of 64.

Here the rows go through in chunks. Each chunk's gradient with respect to the logits z is known
in closed form,
  w * (p_d (1 + sum p_t) / 2 - onehot(greedy) / 2 - p_t / 2 + l1w p_d (s - <s, p_d>)),
s = sign(p_d - p_t), so it is formed in the forward pass and taken straight back through the
frozen head (and DSpark's Markov head, z = h emb^T + u W2^T): only [rows, hidden] and
[vocab, rank] gradients are kept. The matmuls and softmaxes are the same expressions as
train.distill's (so the same autocast dtypes); check_lean_distill.py compares loss, gradients,
argmaxes and the per-row term with autograd over those expressions.
"""
import torch

from common import target_probs


class LeanDistill(torch.autograd.Function):
    """sum_r w_r (D_r + l1w L1_r); returns (loss, argmax of z per row, L1 per row)."""

    @staticmethod
    def forward(ctx, h, emb, emb_t, hfin, tgt, w, u, w2, l1w, chunk):
        need = ctx.needs_input_grad
        markov = u is not None
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        am = torch.empty(h.shape[0], dtype=torch.long, device=h.device)
        l1_rows = torch.zeros(h.shape[0], dtype=torch.float32, device=h.device)
        gh = torch.empty_like(h) if need[0] else None
        gu = torch.empty_like(u) if markov and need[6] else None
        gw2 = torch.zeros_like(w2, dtype=torch.float32) if markov and need[7] else None
        for s in range(0, h.shape[0], chunk):
            e = min(s + chunk, h.shape[0])
            zr = h[s:e] @ emb.t()
            if markov:
                zr = zr + u[s:e] @ w2.t()
            z = zr.float()
            pt = target_probs(hfin[s:e], emb_t)
            pts = pt.sum(-1)
            lse = torch.logsumexp(z, dim=-1)
            t = tgt[s:e, None]
            hard = lse - z.gather(-1, t).squeeze(-1)
            soft = lse * pts - (pt * z).sum(-1)
            row = 0.5 * hard + 0.5 * soft
            p = torch.exp(z - lse[:, None])
            if l1w:
                diff = p - pt
                l1_rows[s:e] = diff.abs().sum(-1)
                sg = torch.sign(diff)
                del diff
                row = row + l1w * l1_rows[s:e]
            total += (row * w[s:e]).sum()
            am[s:e] = z.argmax(-1)
            if gh is None and gu is None and gw2 is None:
                continue
            g = p * (0.5 + 0.5 * pts[:, None]) - 0.5 * pt
            if l1w:
                g += l1w * p * (sg - (sg * p).sum(-1, keepdim=True))
                del sg
            g.scatter_add_(-1, t, torch.full_like(t, -0.5, dtype=g.dtype))
            g *= w[s:e, None]
            g = g.to(zr.dtype)
            if gh is not None:
                gh[s:e] = (g @ emb).to(h.dtype)
            if gu is not None:
                gu[s:e] = (g @ w2).to(u.dtype)
            if gw2 is not None:
                gw2 += (g.t() @ u[s:e].to(g.dtype)).float()
            del zr, z, pt, pts, p, g
        ctx.mark_non_differentiable(am, l1_rows)
        ctx.save_for_backward(*(x if x is not None else h.new_empty(0) for x in (gh, gu, gw2)))
        ctx.w2_dtype = w2.dtype if markov else None
        return total, am, l1_rows

    @staticmethod
    def backward(ctx, g_total, _g_am, _g_l1):
        gh, gu, gw2 = ctx.saved_tensors
        need = ctx.needs_input_grad
        out_h = gh * g_total.to(gh.dtype) if need[0] else None
        out_u = gu * g_total.to(gu.dtype) if need[6] else None
        out_w2 = (gw2 * g_total).to(ctx.w2_dtype) if need[7] else None
        return out_h, None, None, None, None, None, out_u, out_w2, None, None


def lean_distill(h, emb, emb_t, hfin, tgt, w, chunk=4096, u=None, w2=None, l1w=0.0):
    """h [R, H] drafter states, emb [V, H] the head the drafter shares, emb_t [V, H] the target's
    head (train.EMB), hfin [R, H] the target's final states, tgt [R] its greedy tokens, w [R] row
    weights (already divided by their sum); u [R, rank] and w2 [V, rank] DSpark's Markov head
    (w1[prev] and markov_w2.weight), l1w the total-variation term's weight.
    Returns (loss, argmax per row, ||p_d - p_t||_1 per row (zeros when l1w is 0))."""
    return LeanDistill.apply(h, emb, emb_t, hfin, tgt, w, u, w2, l1w, chunk)
