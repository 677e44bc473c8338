//! Splits generated text into reasoning and content: `<think>…</think>` at the start of the
//! output goes to `reasoning_content`, never into `content`. Streaming-safe: a tag split across
//! rounds is held back until it is decided.

/// One push's output per channel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet: a `<think>` may open.
    Start,
    Thinking,
    Content,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

pub struct ThinkSplitter {
    state: State,
    buf: String,
    /// Drop whitespace at the start of the next segment.
    trim: bool,
}

/// Length of the longest prefix of `buf` that cannot be the start of any of `tags`.
pub(crate) fn safe_len(buf: &str, tags: &[&str]) -> usize {
    let mut cut = buf.len();
    for tag in tags {
        for (i, _) in buf.char_indices().rev().take(tag.len()) {
            if i < cut && tag.starts_with(&buf[i..]) {
                cut = i;
            }
        }
    }
    cut
}

/// True when a rendered prompt leaves the model inside an open `<think>` block.
pub fn prompt_opens_thinking(rendered: &str) -> bool {
    match (rendered.rfind(OPEN), rendered.rfind(CLOSE)) {
        (Some(o), Some(c)) => o > c,
        (Some(_), None) => true,
        _ => false,
    }
}

impl ThinkSplitter {
    pub fn new(start_in_thinking: bool) -> Self {
        let state = if start_in_thinking {
            State::Thinking
        } else {
            State::Start
        };
        ThinkSplitter {
            state,
            buf: String::new(),
            trim: true,
        }
    }

    fn emit(&mut self, out: &mut Split, text: &str) {
        let text = if self.trim { text.trim_start() } else { text };
        if text.is_empty() {
            return;
        }
        self.trim = false;
        match self.state {
            State::Thinking => out.reasoning.push_str(text),
            _ => out.content.push_str(text),
        }
    }

    pub fn push(&mut self, text: &str) -> Split {
        let mut out = Split::default();
        self.buf.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    let t = self.buf.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.buf = rest.to_owned();
                        self.state = State::Thinking;
                        self.trim = true;
                    } else if OPEN.starts_with(t) {
                        return out; // undecided (or only whitespace)
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Thinking => match self.buf.find(CLOSE) {
                    Some(i) => {
                        let before = self.buf[..i].trim_end().to_owned();
                        self.emit(&mut out, &before);
                        self.buf.drain(..i + CLOSE.len());
                        self.state = State::Content;
                        self.trim = true;
                    }
                    None => {
                        // trailing whitespace waits: it is dropped if `</think>` follows
                        let k = safe_len(&self.buf, &[CLOSE]);
                        let k = self.buf[..k].trim_end().len();
                        let now: String = self.buf.drain(..k).collect();
                        self.emit(&mut out, &now);
                        return out;
                    }
                },
                State::Content => {
                    let now = std::mem::take(&mut self.buf);
                    self.emit(&mut out, &now);
                    return out;
                }
            }
        }
    }

    /// Releases anything held back.
    pub fn finish(&mut self) -> Split {
        let mut out = Split::default();
        if self.state == State::Start {
            self.state = State::Content;
        }
        let rest = std::mem::take(&mut self.buf);
        self.emit(&mut out, &rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` and returns (reasoning, content).
    fn run(start: bool, chunks: &[&str]) -> (String, String) {
        let mut s = ThinkSplitter::new(start);
        let (mut r, mut c) = (String::new(), String::new());
        for ch in chunks {
            let o = s.push(ch);
            r += &o.reasoning;
            c += &o.content;
        }
        let o = s.finish();
        (r + &o.reasoning, c + &o.content)
    }

    #[test]
    fn think_block_goes_to_reasoning_even_when_tags_are_split() {
        let want = ("I ponder.".to_owned(), "Answer.".to_owned());
        assert_eq!(
            run(false, &["<think>\nI ponder.\n</think>\n\nAnswer."]),
            want
        );
        assert_eq!(
            run(
                false,
                &["<th", "ink>I pon", "der.</th", "ink>", "\n\nAns", "wer."]
            ),
            want
        );
        assert_eq!(
            run(
                false,
                &[
                    "<",
                    "t",
                    "h",
                    "i",
                    "n",
                    "k",
                    ">I ponder.<",
                    "/",
                    "think",
                    ">Answer."
                ]
            ),
            want
        );
    }

    #[test]
    fn no_think_is_all_content() {
        assert_eq!(
            run(false, &["Hello ", "<b>", " world"]),
            (String::new(), "Hello <b> world".into())
        );
        assert_eq!(run(false, &["<thin"]), (String::new(), "<thin".into()));
    }

    #[test]
    fn later_think_tags_stay_content() {
        assert_eq!(run(false, &["Use <think> tags"]).1, "Use <think> tags");
    }

    #[test]
    fn prompt_left_open_starts_in_reasoning() {
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thinking("assistant\n<think>\n\n</think>\n\n"));
        assert_eq!(
            run(true, &["deep thought</think>42"]),
            ("deep thought".into(), "42".into())
        );
    }

    #[test]
    fn unclosed_thinking_stays_reasoning() {
        assert_eq!(
            run(false, &["<think>still going"]),
            ("still going".into(), String::new())
        );
    }

    #[test]
    fn safe_len_holds_back_tag_prefixes() {
        assert_eq!(safe_len("abc</th", &["</think>"]), 3);
        assert_eq!(safe_len("abc", &["</think>"]), 3);
        assert_eq!(safe_len("ab<", &["<think>", "<|tool_call>"]), 2);
        assert_eq!(safe_len("héllo<|to", &["<|tool_call>"]), 6);
    }
}
