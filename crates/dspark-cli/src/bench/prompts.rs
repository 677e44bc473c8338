//! Bench prompt sets: MT-Bench first turns or HumanEval prompts from the fetched artefacts
//! (`scripts/fetch-artefacts.sh`), the same held-out sets the drafter evaluator uses
//! (scripts/train/evaluate.py), a few built-in prompts when MT-Bench is missing, or a file of
//! the user's own prompts.

use std::io::Read;

use anyhow::{bail, Context, Result};

const BUILTIN: [&str; 6] = [
    "Explain how rainbows form, in a few sentences.",
    "Write a Python function that checks whether a number is prime.",
    "What are the main differences between a list and a tuple in Python?",
    "Summarize the plot of Romeo and Juliet in three sentences.",
    "Give me three tips for staying focused while studying.",
    "Describe the water cycle to a ten-year-old.",
];

/// The first `n` (at least one) prompts of `set`: "mtbench" (first turns; the built-in prompts
/// when the artefact is missing) or "humaneval" (each task's prompt, sent as the user turn).
pub fn load(set: &str, n: usize) -> Result<Vec<String>> {
    let dir = dspark_hub::paths::artefact_dir();
    let mut v: Vec<String> = match set {
        "mtbench" => {
            let from_file = std::fs::read_to_string(dir.join("mtbench/question.jsonl"))
                .map(|t| field_of_lines(&t, |q| q["turns"][0].as_str().map(str::to_string)))
                .unwrap_or_default();
            if from_file.is_empty() {
                BUILTIN.iter().map(|s| s.to_string()).collect()
            } else {
                from_file
            }
        }
        "humaneval" => {
            let path = dir.join("humaneval/HumanEval.jsonl.gz");
            let f = std::fs::File::open(&path).with_context(|| {
                format!(
                    "{}: HumanEval is not fetched (scripts/fetch-artefacts.sh)",
                    path.display()
                )
            })?;
            let mut text = String::new();
            flate2::read::GzDecoder::new(f)
                .read_to_string(&mut text)
                .with_context(|| format!("{}: not a gzip of JSON lines", path.display()))?;
            let v = field_of_lines(&text, |q| q["prompt"].as_str().map(str::to_string));
            if v.is_empty() {
                bail!("{}: no prompts", path.display());
            }
            v
        }
        other if std::path::Path::new(other).is_file() => {
            let text =
                std::fs::read_to_string(other).with_context(|| format!("reading {other}"))?;
            let v = from_prompt_file(&text);
            if v.is_empty() {
                bail!("{other}: no prompts (one per line, or JSON lines with a \"prompt\" field)");
            }
            v
        }
        other => bail!(
            "unknown prompt set {other:?}: expected mtbench, humaneval or a prompt file's path"
        ),
    };
    v.truncate(n.max(1));
    Ok(v)
}

/// A prompt file's prompts: JSON lines with a `"prompt"` field where the line parses as
/// such, else the line itself; blank lines skipped.
fn from_prompt_file(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|q| q["prompt"].as_str().map(str::to_string))
                .unwrap_or_else(|| l.to_string())
        })
        .collect()
}

fn field_of_lines(text: &str, f: impl Fn(&serde_json::Value) -> Option<String>) -> Vec<String> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|q| f(&q))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_sets_are_refused_by_name() {
        let e = load("gsm8k", 3).unwrap_err().to_string();
        assert!(e.contains("gsm8k") && e.contains("humaneval"), "{e}");
    }

    #[test]
    fn prompt_files_take_plain_lines_and_json_lines() {
        let v = from_prompt_file("plain one\n\n{\"prompt\": \"json two\"}\n[1, 2]\n");
        assert_eq!(v, ["plain one", "json two", "[1, 2]"]);
        let dir = std::env::temp_dir().join(format!("dspark-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.txt");
        std::fs::write(&f, "a\nb\nc\n").unwrap();
        assert_eq!(load(f.to_str().unwrap(), 2).unwrap(), ["a", "b"]);
        std::fs::write(&f, "\n \n").unwrap();
        let e = load(f.to_str().unwrap(), 2).unwrap_err().to_string();
        assert!(e.contains("no prompts"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_without_the_field_are_skipped() {
        let t = "{\"prompt\": \"a\"}\nnot json\n{\"other\": 1}\n{\"prompt\": \"b\"}\n";
        let v = field_of_lines(t, |q| q["prompt"].as_str().map(str::to_string));
        assert_eq!(v, ["a", "b"]);
    }
}
