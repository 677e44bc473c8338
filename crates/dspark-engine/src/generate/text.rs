//! Turns committed tokens into streamed text: incremental detokenization, then stop strings.
//! Stopping on a stop string is reported back to the loop through [`Flow::StopString`].

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Flow, TokenSink};
use crate::detok::{StopFilter, StreamDecoder};
use crate::tokenizer::Tokenizer;

pub struct TextSink<'a, F: FnMut(&str)> {
    dec: StreamDecoder<'a>,
    stop: StopFilter,
    on_text: F,
    text: String,
    cancel: Option<&'a AtomicBool>,
    error: Option<String>,
}

impl<'a, F: FnMut(&str)> TextSink<'a, F> {
    pub fn new(tok: &'a Tokenizer, stops: Vec<String>, on_text: F) -> Self {
        TextSink {
            dec: StreamDecoder::new(tok, true),
            stop: StopFilter::new(stops),
            on_text,
            text: String::new(),
            cancel: None,
            error: None,
        }
    }

    /// Generation is abandoned at the next round once `flag` is set.
    pub fn with_cancel(mut self, flag: &'a AtomicBool) -> Self {
        self.cancel = Some(flag);
        self
    }

    fn emit(&mut self, s: &str) {
        if !s.is_empty() {
            self.text.push_str(s);
            (self.on_text)(s);
        }
    }

    /// Flushes held-back text; returns the whole text and whether a stop string matched.
    pub fn finish(mut self) -> (String, bool) {
        if !self.stop.stopped() {
            if let Ok(rest) = self.dec.flush() {
                let step = self.stop.push(&rest);
                self.emit(&step.emit);
            }
            let tail = self.stop.flush();
            self.emit(&tail);
        }
        (self.text, self.stop.stopped())
    }

    /// A detokenization error seen while streaming, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

impl<F: FnMut(&str)> TokenSink for TextSink<'_, F> {
    fn push(&mut self, ids: &[u32]) -> Flow {
        match self.dec.push(ids) {
            Ok(s) => {
                let step = self.stop.push(&s);
                self.emit(&step.emit);
                if step.stopped {
                    return Flow::StopString;
                }
            }
            Err(e) => self.error = Some(e.to_string()),
        }
        if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Flow::Cancel;
        }
        Flow::Continue
    }
}
