//! Bench prompt sets: MT-Bench first turns or HumanEval prompts from the fetched artefacts
//! (`scripts/fetch-artefacts.sh`), the same held-out sets the drafter evaluator uses
//! (scripts/train/evaluate.py), or a few built-in prompts when MT-Bench is missing.

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
        other => bail!("unknown prompt set {other:?}: expected mtbench or humaneval"),
    };
    v.truncate(n.max(1));
    Ok(v)
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
    fn lines_without_the_field_are_skipped() {
        let t = "{\"prompt\": \"a\"}\nnot json\n{\"other\": 1}\n{\"prompt\": \"b\"}\n";
        let v = field_of_lines(t, |q| q["prompt"].as_str().map(str::to_string));
        assert_eq!(v, ["a", "b"]);
    }
}
