//! Splits generated text into reasoning and content: a thinking block at the start of the
//! output goes to `reasoning_content`, never into `content`. Two syntaxes, chosen from the
//! rendered prompt (the template that made it): Qwen's `<think>…</think>` and Gemma 4's
//! `<|channel>thought\n…<channel|>`. Streaming-safe: a marker split across rounds is held back
//! until it is decided.

/// One push's output per channel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen yet: a thinking block may open.
    Start,
    Thinking,
    Content,
}

/// How a model's template marks thinking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThinkSyntax {
    /// `<think>…</think>` (Qwen3, DeepSeek-R1 style templates).
    #[default]
    Think,
    /// `<|channel>thought\n…<channel|>` (Gemma 4).
    GemmaChannel,
}

/// Gemma 4's turn opener: every Gemma 4 chat prompt has it, no other template writes it.
const GEMMA4_TURN: &str = "<|turn>";

impl ThinkSyntax {
    /// The syntax of the template that rendered `prompt`.
    pub fn of_prompt(prompt: &str) -> Self {
        if prompt.contains(GEMMA4_TURN) {
            ThinkSyntax::GemmaChannel
        } else {
            ThinkSyntax::Think
        }
    }

    /// The opening marker (the newline after Gemma's channel name is trimmed as whitespace).
    pub fn open(self) -> &'static str {
        match self {
            ThinkSyntax::Think => "<think>",
            ThinkSyntax::GemmaChannel => "<|channel>thought",
        }
    }

    pub fn close(self) -> &'static str {
        match self {
            ThinkSyntax::Think => "</think>",
            ThinkSyntax::GemmaChannel => "<channel|>",
        }
    }
}

/// How a chat generation's text is split: the syntax, and whether the prompt left the model
/// inside an open thinking block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thinking {
    pub syntax: ThinkSyntax,
    pub open: bool,
}

impl Thinking {
    /// Read from a rendered chat prompt.
    pub fn of_prompt(prompt: &str) -> Self {
        let syntax = ThinkSyntax::of_prompt(prompt);
        Thinking {
            syntax,
            open: prompt_opens_thinking(prompt, syntax),
        }
    }
}

pub struct ThinkSplitter {
    syntax: ThinkSyntax,
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

/// True when a rendered prompt leaves the model inside an open thinking block of `syntax`.
pub fn prompt_opens_thinking(rendered: &str, syntax: ThinkSyntax) -> bool {
    match (
        rendered.rfind(syntax.open()),
        rendered.rfind(syntax.close()),
    ) {
        (Some(o), Some(c)) => o > c,
        (Some(_), None) => true,
        _ => false,
    }
}

impl ThinkSplitter {
    pub fn new(thinking: Thinking) -> Self {
        let state = if thinking.open {
            State::Thinking
        } else {
            State::Start
        };
        ThinkSplitter {
            syntax: thinking.syntax,
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
        let (open, close) = (self.syntax.open(), self.syntax.close());
        loop {
            match self.state {
                State::Start => {
                    let t = self.buf.trim_start();
                    if let Some(rest) = t.strip_prefix(open) {
                        self.buf = rest.to_owned();
                        self.state = State::Thinking;
                        self.trim = true;
                    } else if open.starts_with(t) {
                        return out; // undecided (or only whitespace)
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Thinking => match self.buf.find(close) {
                    Some(i) => {
                        let before = self.buf[..i].trim_end().to_owned();
                        self.emit(&mut out, &before);
                        self.buf.drain(..i + close.len());
                        self.state = State::Content;
                        self.trim = true;
                    }
                    None => {
                        // trailing whitespace waits: it is dropped if the close marker follows
                        let k = safe_len(&self.buf, &[close]);
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

    /// Feeds `chunks` (Qwen syntax) and returns (reasoning, content).
    fn run(start: bool, chunks: &[&str]) -> (String, String) {
        let syntax = ThinkSyntax::Think;
        run_with(
            Thinking {
                syntax,
                open: start,
            },
            chunks,
        )
    }

    fn run_with(thinking: Thinking, chunks: &[&str]) -> (String, String) {
        let mut s = ThinkSplitter::new(thinking);
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
        assert!(Thinking::of_prompt("<|im_start|>assistant\n<think>\n").open);
        assert!(!Thinking::of_prompt("assistant\n<think>\n\n</think>\n\n").open);
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

    const GEMMA: Thinking = Thinking {
        syntax: ThinkSyntax::GemmaChannel,
        open: false,
    };

    /// Every split of `text` into two and into three chunks at byte positions (char
    /// boundaries) gives `want`.
    fn every_split(thinking: Thinking, text: &str, want: (&str, &str)) {
        let want = (want.0.to_owned(), want.1.to_owned());
        assert_eq!(run_with(thinking, &[text]), want, "whole");
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &i in &cuts {
            let got = run_with(thinking, &[&text[..i], &text[i..]]);
            assert_eq!(got, want, "cut at {i}");
            for &j in cuts.iter().filter(|&&j| j >= i) {
                let got = run_with(thinking, &[&text[..i], &text[i..j], &text[j..]]);
                assert_eq!(got, want, "cut at {i} and {j}");
            }
        }
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(run_with(thinking, &refs), want, "one char per chunk");
    }

    #[test]
    fn gemma_channel_goes_to_reasoning_at_every_split() {
        every_split(
            GEMMA,
            "<|channel>thought\nI pönder.\n<channel|>Answer: 42.",
            ("I pönder.", "Answer: 42."),
        );
        // whitespace before the channel, a blank line after it
        every_split(
            GEMMA,
            " <|channel>thought\nA\nB\n<channel|>\n\nC",
            ("A\nB", "C"),
        );
        // an empty channel (what the thinking-off prompt ends with) gives no reasoning
        every_split(GEMMA, "<|channel>thought\n<channel|>Hi", ("", "Hi"));
        // unclosed: all reasoning
        every_split(GEMMA, "<|channel>thought\nstill going", ("still going", ""));
    }

    #[test]
    fn gemma_text_without_a_channel_is_untouched() {
        for text in [
            "Plain answer, <b>bold</b>.",
            "<|chan",
            "<|channel>other\nnot thought<channel|>",
            "Use <|channel>thought\nx<channel|> later",
            "<think>qwen tags are text for Gemma</think>",
        ] {
            every_split(GEMMA, text, ("", text));
        }
    }

    #[test]
    fn qwen_think_at_every_split() {
        let qwen = Thinking::default();
        every_split(
            qwen,
            "<think>\nI ponder.\n</think>\n\nAnswer.",
            ("I ponder.", "Answer."),
        );
        every_split(
            qwen,
            "<|channel>thought\nx<channel|>",
            ("", "<|channel>thought\nx<channel|>"),
        );
    }

    #[test]
    fn gemma_prompts_pick_the_channel_syntax() {
        // thinking off: the generation prompt ends in an empty, closed channel
        let off = "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>";
        assert_eq!(Thinking::of_prompt(off), GEMMA);
        // thinking on: the model opens the channel itself
        let on = "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n";
        assert_eq!(Thinking::of_prompt(on), GEMMA);
        // a prompt left inside the channel starts in reasoning
        let inside = format!("{on}<|channel>thought\n");
        let t = Thinking::of_prompt(&inside);
        assert_eq!(
            t,
            Thinking {
                open: true,
                ..GEMMA
            }
        );
        assert_eq!(
            run_with(t, &["deep<chan", "nel|>42"]),
            ("deep".into(), "42".into())
        );
        // other templates keep `<think>`
        let qwen = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(Thinking::of_prompt(qwen), Thinking::default());
    }
}
