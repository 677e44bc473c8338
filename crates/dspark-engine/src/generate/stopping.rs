//! The stopping rules every loop shares: an eos anywhere in a committed block ends generation
//! there (the eos is not emitted), and `max_new_tokens` is never exceeded.

use super::FinishReason;

pub struct Budget<'a> {
    max_new: usize,
    eos: &'a [u32],
    produced: usize,
}

impl<'a> Budget<'a> {
    pub fn new(max_new: usize, eos: &'a [u32]) -> Self {
        Budget {
            max_new,
            eos,
            produced: 0,
        }
    }

    pub fn produced(&self) -> usize {
        self.produced
    }

    /// Tokens still allowed.
    pub fn remaining(&self) -> usize {
        self.max_new - self.produced
    }

    /// Admits a committed block: how many leading tokens to emit, and whether generation ends.
    pub fn admit(&mut self, block: &[u32]) -> (usize, Option<FinishReason>) {
        for (i, t) in block.iter().enumerate() {
            if self.eos.contains(t) {
                return (i, Some(FinishReason::Stop));
            }
            self.produced += 1;
            if self.produced >= self.max_new {
                return (i + 1, Some(FinishReason::Length));
            }
        }
        (block.len(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eos_mid_block_cuts_there() {
        let mut b = Budget::new(10, &[9]);
        assert_eq!(b.admit(&[1, 2, 9, 4]), (2, Some(FinishReason::Stop)));
    }

    #[test]
    fn never_exceeds_max() {
        let mut b = Budget::new(3, &[9]);
        assert_eq!(b.admit(&[1, 2]), (2, None));
        assert_eq!(b.admit(&[3, 4, 5]), (1, Some(FinishReason::Length)));
        assert_eq!(b.produced(), 3);
    }

    #[test]
    fn eos_as_last_allowed_token_is_stop() {
        let mut b = Budget::new(2, &[9]);
        assert_eq!(b.admit(&[1]), (1, None));
        assert_eq!(b.admit(&[9]), (0, Some(FinishReason::Stop)));
    }
}
