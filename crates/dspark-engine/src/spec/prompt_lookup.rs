//! Prompt lookup after the drafter's first draft: where the context through that draft ends
//! in a pair of tokens that occurred earlier, the drafts after it are the tokens that followed
//! the latest earlier occurrence, instead of the drafter's own.
//!
//! Why this rule: `scripts/train/lookup_walk.py` measured it with the trained demo drafters
//! (`bench-results/smollm2-lookup-walk.json`). Replacing the drafter wherever a match exists
//! loses up to 0.17 tokens a round at 1-3 drafts; keeping the drafter's first draft never
//! loses at one draft and gains most at full blocks (+0.13 to +0.35 at 7 drafts), where
//! verifying them costs little (GPUs).
//!
//! Exactness: a lookup draft is a function of the context, so its draft distribution is one-hot
//! (`q(d) = 1`). Verification then accepts it with probability `p(d)` and, on rejection, samples
//! from `p` without `d`: exact, as for any draft. Greedy verification compares ids as always.

use super::Proposal;

/// Tokens matched before the continuation is copied.
pub const NGRAM: usize = 2;

/// The tokens that followed the latest earlier occurrence of `ctx`'s last [`NGRAM`] tokens, at
/// most `max` of them and never past the end of `ctx` (empty when there is no occurrence).
pub fn continuation(ctx: &[u32], max: usize) -> &[u32] {
    let n = ctx.len();
    if n <= NGRAM || max == 0 {
        return &[];
    }
    let key = &ctx[n - NGRAM..];
    // the latest start s < n - NGRAM with ctx[s..s + NGRAM] == key
    match (0..n - NGRAM).rev().find(|&s| &ctx[s..s + NGRAM] == key) {
        Some(s) => {
            let from = s + NGRAM;
            &ctx[from..(from + max).min(n)]
        }
        None => &[],
    }
}

/// `proposal` with its drafts after the first replaced by the lookup's continuation of `ctx`
/// (the committed tokens, the pending one last) plus that first draft, up to `max` drafts in
/// all; unchanged where there is no match. Sampled proposals get a one-hot draft distribution
/// over `vocab` ids for each lookup draft. Returns whether the lookup supplied drafts.
pub fn after_first(ctx: &mut Vec<u32>, proposal: &mut Proposal, max: usize, vocab: usize) -> bool {
    let Some(&first) = proposal.tokens.first() else {
        return false;
    };
    if max < 2 {
        return false;
    }
    ctx.push(first);
    let found = continuation(ctx, max - 1).to_vec();
    ctx.pop();
    if found.is_empty() {
        return false;
    }
    proposal.tokens.truncate(1);
    proposal.tokens.extend_from_slice(&found);
    if let Some(q) = proposal.q.as_mut() {
        q.truncate(1);
        q.extend(found.iter().map(|&t| one_hot(t, vocab)));
    }
    true
}

fn one_hot(t: u32, vocab: usize) -> Vec<f32> {
    let mut q = vec![0.0; vocab];
    q[t as usize] = 1.0;
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_copies_what_followed_the_latest_earlier_pair() {
        // "5 6" occurred at 1 and at 5; the latest earlier one is at 5, followed by 9 1
        let ctx = [4, 5, 6, 7, 8, 5, 6, 9, 1, 5, 6];
        assert_eq!(continuation(&ctx, 4), &[9, 1, 5, 6]);
        assert_eq!(continuation(&ctx, 2), &[9, 1]);
        // cut at the end of the context
        let ctx = [3, 5, 6, 2, 5, 6];
        assert_eq!(continuation(&ctx, 8), &[2, 5, 6]);
        // the pair overlapping itself: 7 7 7 -> the pair at 1 is followed by 7
        assert_eq!(continuation(&[7, 7, 7], 3), &[7]);
        // no earlier occurrence, too short, or nothing wanted
        assert!(continuation(&[1, 2, 3, 4], 4).is_empty());
        assert!(continuation(&[1, 2], 4).is_empty());
        assert!(continuation(&[1, 2, 1, 2], 0).is_empty());
        // one token of the pair alone is no match
        assert!(continuation(&[1, 9, 2, 1, 3, 2], 4).is_empty());
    }

    #[test]
    fn after_first_keeps_the_first_draft_and_replaces_the_rest() {
        // context ... 8 5 | pending 5 ; first draft 6 -> "5 6" occurred, followed by 7 8
        let mut ctx = vec![1, 5, 6, 7, 8, 5];
        let mut p = Proposal {
            tokens: vec![6, 2, 2, 2],
            q: Some(vec![vec![0.25; 10]; 4]),
        };
        assert!(after_first(&mut ctx, &mut p, 4, 10));
        assert_eq!(ctx, vec![1, 5, 6, 7, 8, 5], "the context is left as it was");
        assert_eq!(p.tokens, vec![6, 7, 8, 5]);
        let q = p.q.unwrap();
        assert_eq!(q.len(), 4);
        assert_eq!(q[0], vec![0.25; 10], "the drafter's own first distribution");
        for (row, &t) in q[1..].iter().zip(&[7u32, 8, 5]) {
            assert_eq!(row.iter().sum::<f32>(), 1.0);
            assert_eq!(row[t as usize], 1.0);
        }
        // capped by max
        let mut p = Proposal {
            tokens: vec![6, 2, 2, 2],
            q: None,
        };
        assert!(after_first(&mut ctx, &mut p, 2, 10));
        assert_eq!(p.tokens, vec![6, 7]);
    }

    #[test]
    fn after_first_leaves_proposals_it_cannot_extend() {
        let mut ctx = vec![1, 2, 3];
        let orig = Proposal {
            tokens: vec![4, 5, 6],
            q: None,
        };
        // no match
        let mut p = orig.clone();
        assert!(!after_first(&mut ctx, &mut p, 3, 10));
        assert_eq!(p.tokens, orig.tokens);
        // one draft wanted, or no drafts at all
        let mut ctx = vec![4, 1, 2, 3];
        let mut p = orig.clone();
        assert!(!after_first(&mut ctx, &mut p, 1, 10));
        assert_eq!(p.tokens, orig.tokens);
        let mut p = Proposal::default();
        assert!(!after_first(&mut ctx, &mut p, 3, 10));
        assert!(p.tokens.is_empty());
    }
}
