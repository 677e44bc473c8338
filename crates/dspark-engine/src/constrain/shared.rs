//! How the generation loops reach a request's [`Constraint`]: it rides in
//! [`SamplingParams::constraint`] as a [`Shared`] state, reset at the start of each
//! generation, so the baseline, the verifier and the drafters (which see the sampling
//! parameters) all read and move the same state. One worker thread runs one generation at a
//! time, so the lock is never contended.
//!
//! Positions: [`Shared::mask`] masks the row that follows everything committed so far;
//! [`Shared::mask_block`] masks verification rows `0..=m` (row j after drafts `0..j`) and
//! rolls back; [`Shared::commit`] moves past emitted tokens; [`Drafting`] masks a drafter's
//! rows one by one and rolls back when dropped.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{Constraint, ConstraintError};
use crate::error::EngineError;
use crate::sampling::SamplingParams;

/// A request's grammar state, shared by the loops of one generation.
#[derive(Clone, Debug)]
pub struct Shared(Arc<Mutex<Constraint>>);

impl PartialEq for Shared {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<Constraint> for Shared {
    fn from(c: Constraint) -> Self {
        Shared(Arc::new(Mutex::new(c)))
    }
}

fn engine_err(e: ConstraintError) -> EngineError {
    EngineError::Invalid(format!("constrained decoding: {e}"))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Constraint> {
        // a panic while holding the lock leaves a state we reset at the next start anyway
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Back to the grammar's start (called at the start of every generation).
    pub fn reset(&self) -> Result<(), EngineError> {
        self.lock().reset().map_err(engine_err)
    }

    /// Masks the row of the next position.
    pub fn mask(&self, row: &mut [f32]) -> Result<(), EngineError> {
        self.lock().mask(row).map_err(engine_err)
    }

    /// Moves past emitted tokens, up to the first eos id (which ends the output).
    pub fn commit(&self, tokens: &[u32]) -> Result<(), EngineError> {
        let mut c = self.lock();
        for &t in tokens {
            if c.is_eos(t) {
                // the output ends here; what a block holds after it is never emitted
                break;
            }
            if !c.advance(t).map_err(engine_err)? {
                return Err(engine_err(ConstraintError::State(format!(
                    "token {t} was emitted but the grammar does not allow it"
                ))));
            }
        }
        Ok(())
    }

    /// Masks `rows` (`m + 1` rows of `v` logits for `m` drafts): row j with the state after
    /// drafts `0..j`. Rows after a draft the grammar refuses (or an eos) are left as they are:
    /// verification rejects at or before that draft, so they are never used.
    pub fn mask_block(
        &self,
        rows: &mut [f32],
        v: usize,
        drafts: &[u32],
    ) -> Result<(), EngineError> {
        let mut c = self.lock();
        let mut advanced = 0;
        for (j, row) in rows.chunks_exact_mut(v).enumerate() {
            c.mask(row).map_err(engine_err)?;
            match drafts.get(j) {
                Some(&d) if c.advance(d).map_err(engine_err)? => advanced += 1,
                _ => break,
            }
        }
        c.rollback(advanced).map_err(engine_err)
    }

    /// Whether the output so far is complete under the grammar.
    pub fn is_accepting(&self) -> bool {
        self.lock().is_accepting()
    }
}

/// A drafter's pass over its rows: each row is masked with the state after the drafts chosen
/// before it; the state is rolled back on drop.
pub struct Drafting<'a> {
    state: Option<MutexGuard<'a, Constraint>>,
    advanced: usize,
    /// A draft the grammar refused or an eos was chosen: later rows cannot be masked.
    done: bool,
}

impl<'a> Drafting<'a> {
    pub fn new(sampling: &'a SamplingParams) -> Self {
        Drafting {
            state: sampling.constraint.as_ref().map(|s| s.lock()),
            advanced: 0,
            done: false,
        }
    }

    /// Whether more drafts can be masked (always true without a grammar).
    pub fn open(&self) -> bool {
        !self.done
    }

    /// Masks the row of the next draft.
    pub fn mask(&mut self, row: &mut [f32]) -> Result<(), EngineError> {
        match self.state.as_mut() {
            Some(c) => c.mask(row).map_err(engine_err),
            None => Ok(()),
        }
    }

    /// Records the chosen draft.
    pub fn chose(&mut self, tok: u32) -> Result<(), EngineError> {
        if let Some(c) = self.state.as_mut() {
            if c.advance(tok).map_err(engine_err)? {
                self.advanced += 1;
            } else {
                self.done = true;
            }
        }
        Ok(())
    }
}

impl Drop for Drafting<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.state.as_mut() {
            // rollback of tokens this pass consumed cannot fail short of an engine bug; a
            // failure leaves an error state that the next mask reports
            let _ = c.rollback(self.advanced);
        }
    }
}

/// [`Shared::reset`] when `s` carries a grammar.
pub fn begin(s: &SamplingParams) -> Result<(), EngineError> {
    s.constraint.as_ref().map_or(Ok(()), Shared::reset)
}

/// [`Shared::mask`] when `s` carries a grammar.
pub fn mask(s: &SamplingParams, row: &mut [f32]) -> Result<(), EngineError> {
    s.constraint.as_ref().map_or(Ok(()), |c| c.mask(row))
}

/// [`Shared::commit`] when `s` carries a grammar.
pub fn commit(s: &SamplingParams, tokens: &[u32]) -> Result<(), EngineError> {
    s.constraint.as_ref().map_or(Ok(()), |c| c.commit(tokens))
}

/// [`Shared::mask_block`] when `s` carries a grammar.
pub fn mask_block(
    s: &SamplingParams,
    rows: &mut [f32],
    v: usize,
    drafts: &[u32],
) -> Result<(), EngineError> {
    s.constraint
        .as_ref()
        .map_or(Ok(()), |c| c.mask_block(rows, v, drafts))
}
