//! A drafter wrapper that logs what each round feeds the target's verify forward
//! (`[pending] + drafts`), for the round-by-round reference cross-checks (spec_golden*).

use std::cell::RefCell;
use std::rc::Rc;

use dspark_engine::backend::Backend;
use dspark_engine::error::EngineError;
use dspark_engine::model::transformer::Transformer;
use dspark_engine::sampling::SamplingParams;
use dspark_engine::spec::{Drafter, DrafterState, Proposal, SpecParams};
use rand::RngCore;

/// Forwards every call to `inner` and records each proposal as `[pending, drafts...]`.
pub struct Recorder<'a, B: Backend> {
    pub inner: &'a mut dyn Drafter<B>,
    pub log: Rc<RefCell<Vec<Vec<u32>>>>,
}

impl<'a, B: Backend> Recorder<'a, B> {
    pub fn new(inner: &'a mut dyn Drafter<B>) -> Self {
        Self {
            inner,
            log: Rc::default(),
        }
    }

    /// The rounds logged so far.
    pub fn rounds(&self) -> Vec<Vec<u32>> {
        self.log.borrow().clone()
    }
}

impl<B: Backend> Drafter<B> for Recorder<'_, B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn block_len(&self) -> usize {
        self.inner.block_len()
    }
    fn taps(&self) -> &[usize] {
        self.inner.taps()
    }
    fn prefill(
        &mut self,
        t: &[u32],
        s: usize,
        taps: Option<&<B as Backend>::Tensor>,
    ) -> Result<(), EngineError> {
        self.inner.prefill(t, s, taps)
    }
    fn propose(
        &mut self,
        target: &Transformer<B>,
        pending: u32,
        pos: usize,
        max: usize,
        spec: &SpecParams,
        sampling: &SamplingParams,
        rng: &mut dyn RngCore,
    ) -> Result<Proposal, EngineError> {
        let p = self
            .inner
            .propose(target, pending, pos, max, spec, sampling, rng)?;
        let mut fed = vec![pending];
        fed.extend_from_slice(&p.tokens);
        self.log.borrow_mut().push(fed);
        Ok(p)
    }
    fn commit(
        &mut self,
        t: &[u32],
        pos: usize,
        taps: Option<&<B as Backend>::Tensor>,
    ) -> Result<(), EngineError> {
        self.inner.commit(t, pos, taps)
    }
    fn draft_vocab_len(&self) -> Option<usize> {
        self.inner.draft_vocab_len()
    }
    fn fit_prompt(&mut self, target: &Transformer<B>, prompt: &[u32]) -> Result<(), EngineError> {
        self.inner.fit_prompt(target, prompt)
    }
    fn truncate(&mut self, len: usize) {
        self.inner.truncate(len)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn take_state(&mut self) -> DrafterState<B> {
        self.inner.take_state()
    }
    fn put_state(&mut self, s: DrafterState<B>) {
        self.inner.put_state(s)
    }
}
