"""The distillation loss of train.py (0.5 CE to the target's greedy token + 0.5 CE to the target's
softmax, each row weighted) without holding vocabulary-wide tensors across the step.

train.distill builds the drafter's log-softmax, the target's softmax and their product for every
row at once: [rows, 49152] f32 tensors several times over (about 9 GB each at batch 48 x 64
anchors x 15 rows), and autograd keeps two of them for the backward pass. The tenth run ran out
of memory with them and fell back to 32 anchors a sequence instead of 64.

Here the rows go through in chunks. Each chunk's gradient with respect to the logits is known in
closed form, w * (softmax(z) - 0.5 onehot(greedy) - 0.5 p_t), so it is formed in the forward pass
and taken straight back through the (frozen) head: only a [rows, hidden] gradient is kept. The
matmuls and softmaxes are the same expressions as train.distill's (so the same autocast dtypes),
and tests (check_lean_distill.py) compare loss, gradients and argmaxes with it.
"""
import torch


class LeanDistill(torch.autograd.Function):
    """sum_r w_r D_r over rows r, D = 0.5 CE(z, greedy) + 0.5 CE(z, softmax(hfin @ emb_t^T)),
    z = h @ emb^T. Returns (loss, argmax of z per row); only h gets a gradient."""

    @staticmethod
    def forward(ctx, h, emb, emb_t, hfin, tgt, w, chunk):
        need_grad = ctx.needs_input_grad[0]   # False under no_grad (validation)
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        am = torch.empty(h.shape[0], dtype=torch.long, device=h.device)
        grad = torch.empty_like(h) if need_grad else None
        for s in range(0, h.shape[0], chunk):
            e = min(s + chunk, h.shape[0])
            zr = h[s:e] @ emb.t()
            z = zr.float()
            pt = torch.softmax(hfin[s:e].float() @ emb_t.t().float(), dim=-1)
            lse = torch.logsumexp(z, dim=-1)
            t = tgt[s:e, None]
            hard = lse - z.gather(-1, t).squeeze(-1)
            soft = lse * pt.sum(-1) - (pt * z).sum(-1)
            total += ((0.5 * hard + 0.5 * soft) * w[s:e]).sum()
            am[s:e] = z.argmax(-1)
            if need_grad:
                g = torch.exp(z - lse[:, None]) * (0.5 + 0.5 * pt.sum(-1, keepdim=True)) - 0.5 * pt
                g.scatter_add_(-1, t, torch.full_like(t, -0.5, dtype=g.dtype))
                g *= w[s:e, None]
                grad[s:e] = (g.to(zr.dtype) @ emb).to(h.dtype)
            del zr, z, pt
        ctx.mark_non_differentiable(am)
        ctx.save_for_backward(grad if need_grad else h.new_empty(0))
        return total, am

    @staticmethod
    def backward(ctx, g_total, _g_am):
        (grad,) = ctx.saved_tensors
        return (grad * g_total.to(grad.dtype)), None, None, None, None, None, None


def lean_distill(h, emb, emb_t, hfin, tgt, w, chunk=4096):
    """h [R, H] drafter states, emb [V, H] the head the drafter shares, emb_t [V, H] the target's
    head (train.EMB), hfin [R, H] the target's final states, tgt [R] its greedy tokens, w [R] row
    weights (already divided by their sum). Returns (loss, argmax per row)."""
    return LeanDistill.apply(h, emb, emb_t, hfin, tgt, w, chunk)
