//! Streaming text output: an incremental detokenizer that never splits a UTF-8 character
//! across pushes, and a stop-string filter that never leaks a partial stop string.

use crate::tokenizer::{Tokenizer, TokenizerError};

/// Incremental detokenizer: push ids, get newly-complete text. A character whose bytes
/// span several tokens is held back until complete (no U+FFFD for it), and the
/// concatenation of all outputs plus `flush` equals `decode(all ids)`.
///
/// Works on a sliding window (`prefix..`) so that decoders which treat the first token
/// specially (e.g. SentencePiece's leading space) still produce the right difference.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special: bool,
    ids: Vec<u32>,
    /// Start of the decode window (tokens before it are fully emitted context).
    prefix: usize,
    /// End of the emitted part: text of `ids[prefix..read]` has been emitted.
    read: usize,
}

impl<'a> StreamDecoder<'a> {
    pub fn new(tok: &'a Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tok,
            skip_special,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
        }
    }

    /// Adds ids and returns the text that became complete.
    pub fn push(&mut self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.ids.extend_from_slice(ids);
        self.step(false)
    }

    /// Returns whatever is still held back (an incomplete trailing character decodes with
    /// U+FFFD, exactly as a full `decode` would).
    pub fn flush(&mut self) -> Result<String, TokenizerError> {
        self.step(true)
    }

    /// All ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    fn step(&mut self, force: bool) -> Result<String, TokenizerError> {
        if self.read == self.ids.len() {
            return Ok(String::new());
        }
        let prefix_text = self
            .tok
            .decode(&self.ids[self.prefix..self.read], self.skip_special)?;
        let new_text = self
            .tok
            .decode(&self.ids[self.prefix..], self.skip_special)?;
        let complete = !new_text.ends_with('\u{FFFD}');
        if !(complete || force) {
            return Ok(String::new());
        }
        let emitted = match new_text.strip_prefix(prefix_text.as_str()) {
            Some(rest) => rest.to_owned(),
            // The window text changed retroactively (should not happen for byte-level or
            // SentencePiece decoders); fall back to the part after the common prefix.
            None => {
                let common = new_text
                    .char_indices()
                    .zip(prefix_text.chars())
                    .find(|((_, a), b)| a != b)
                    .map_or(new_text.len().min(prefix_text.len()), |((i, _), _)| i);
                new_text[common..].to_owned()
            }
        };
        if emitted.is_empty() && !force {
            // e.g. a skipped special token: keep the window, wait for real text.
            return Ok(String::new());
        }
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(emitted)
    }
}

/// Result of one `StopFilter::push`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopStep {
    /// Text safe to send now.
    pub emit: String,
    /// A stop string was found; nothing more will be emitted.
    pub stopped: bool,
}

/// Stop-string filter over streamed text. The earliest match in the text wins and the
/// stop string itself is not emitted; a tail that could be the start of a stop string is
/// held back so a partial stop never leaks across pushes.
#[derive(Debug, Clone)]
pub struct StopFilter {
    stops: Vec<String>,
    held: String,
    stopped: bool,
    /// Which stop string matched, once stopped.
    matched: Option<usize>,
}

impl StopFilter {
    /// Empty stop strings are ignored.
    pub fn new(stops: Vec<String>) -> Self {
        StopFilter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    pub fn push(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(text);
        let earliest = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|pos| (pos, i)))
            .min();
        if let Some((pos, i)) = earliest {
            self.held.truncate(pos);
            self.stopped = true;
            self.matched = Some(i);
            return StopStep {
                emit: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep = self.partial_tail_len();
        let cut = self.held.len() - keep;
        let rest = self.held.split_off(cut);
        StopStep {
            emit: std::mem::replace(&mut self.held, rest),
            stopped: false,
        }
    }

    /// Releases the held-back tail at end of stream (nothing if stopped).
    pub fn flush(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The stop string that ended the stream, if any.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// Length of the longest suffix of `held` that is a proper prefix of some stop string.
    fn partial_tail_len(&self) -> usize {
        let held = self.held.as_str();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let start_min = held.len().saturating_sub(longest.saturating_sub(1));
        held.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= start_min)
            .find(|&i| {
                let tail = &held[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > tail.len() && s.starts_with(tail))
            })
            .map_or(0, |i| held.len() - i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::artefact_dir;

    fn qwen3() -> Tokenizer {
        let dir = artefact_dir().join("qwen3-tokenizer");
        assert!(
            dir.join("tokenizer.json").is_file(),
            "missing {}: run scripts/fetch-artefacts.sh",
            dir.display()
        );
        Tokenizer::from_dir(&dir).expect("load qwen3 tokenizer")
    }

    fn stream_all(tok: &Tokenizer, ids: &[u32], chunk: usize, skip: bool) -> (String, Vec<String>) {
        let mut dec = StreamDecoder::new(tok, skip);
        let mut pieces = Vec::new();
        for c in ids.chunks(chunk) {
            pieces.push(dec.push(c).unwrap());
        }
        pieces.push(dec.flush().unwrap());
        (pieces.concat(), pieces)
    }

    #[test]
    fn multibyte_one_id_at_a_time() {
        let tok = qwen3();
        let text = "Emoji: 🎉👍🏽👨‍👩‍👧 CJK: 你好，世界！ 日本語のテキスト. Ελληνικά ✓ — ok";
        let ids = tok.encode(text, false).unwrap();
        // The emoji are split over several byte-level tokens.
        assert!(ids.len() > text.chars().count() / 2);
        let mut split_char = false;
        for &id in &ids {
            split_char |= tok.decode(&[id], false).unwrap().contains('\u{FFFD}');
        }
        assert!(
            split_char,
            "test text should contain a char split across tokens"
        );
        for chunk in [1, 2, 3, 7] {
            let (all, pieces) = stream_all(&tok, &ids, chunk, false);
            assert_eq!(all, tok.decode(&ids, false).unwrap());
            assert_eq!(all, text);
            for p in &pieces {
                assert!(!p.contains('\u{FFFD}'), "chunk {chunk}: piece {p:?}");
            }
        }
    }

    #[test]
    fn stream_with_special_tokens() {
        let tok = qwen3();
        let ids = tok
            .encode(
                "<|im_start|>assistant\n<think>\nhmm 🤔\n</think>\n\nDone.<|im_end|>",
                false,
            )
            .unwrap();
        for skip in [false, true] {
            let (all, _) = stream_all(&tok, &ids, 1, skip);
            assert_eq!(all, tok.decode(&ids, skip).unwrap(), "skip={skip}");
        }
        // A dangling partial character comes out on flush, like a full decode.
        let emoji = ["🫠", "🦩", "𝔘", "ꙮ"]
            .iter()
            .map(|c| tok.encode(c, false).unwrap())
            .find(|ids| ids.len() > 1)
            .expect("a char split over several tokens");
        let mut dec = StreamDecoder::new(&tok, false);
        assert_eq!(dec.push(&emoji[..1]).unwrap(), "");
        assert_eq!(
            dec.flush().unwrap(),
            tok.decode(&emoji[..1], false).unwrap()
        );
    }

    fn run(stops: &[&str], pushes: &[&str]) -> (String, bool) {
        let mut f = StopFilter::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pushes {
            let step = f.push(p);
            out.push_str(&step.emit);
            assert_eq!(step.stopped, f.stopped());
        }
        out.push_str(&f.flush());
        (out, f.stopped())
    }

    #[test]
    fn stop_split_across_pushes() {
        let mut f = StopFilter::new(vec!["STOP".into()]);
        assert_eq!(f.push("abST").emit, "ab");
        let step = f.push("OPcd");
        assert_eq!(
            step,
            StopStep {
                emit: String::new(),
                stopped: true
            }
        );
        assert_eq!(f.flush(), "");
        assert_eq!(f.matched(), Some("STOP"));
        assert_eq!(run(&["STOP"], &["abST", "OPcd"]), ("ab".into(), true));
        assert_eq!(
            run(&["STOP"], &["S", "T", "O", "X"]),
            ("STOX".into(), false)
        );
    }

    #[test]
    fn earliest_stop_wins() {
        assert_eq!(
            run(&["world", "lo w"], &["hello world"]),
            ("hel".into(), true)
        );
        assert_eq!(run(&["xyz", "b"], &["a", "bxyz"]), ("a".into(), true));
        assert_eq!(run(&["abcd", "bc"], &["ab", "c"]), ("a".into(), true));
        assert_eq!(run(&["é!"], &["caf", "é", "!x"]), ("caf".into(), true));
    }

    #[test]
    fn no_stops_passes_everything() {
        assert_eq!(run(&[], &["a", "b", "🎉"]), ("ab🎉".into(), false));
        assert_eq!(run(&[""], &["a"]), ("a".into(), false));
        let mut f = StopFilter::new(vec!["END".into()]);
        assert_eq!(f.push("partial E").emit, "partial ");
        assert_eq!(f.flush(), "E");
    }
}
