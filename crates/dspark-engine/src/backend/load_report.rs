//! What loading did to each weight: the form it is kept in, its bytes as stored in the file and
//! as held in memory, and what was dequantized. Logged once per model load, so a user sees
//! when a quantized file costs f32 memory.

use std::collections::BTreeMap;

/// Per form (e.g. `packed Q4_1`, `dequantized Q4_1 -> F32`): tensors, stored and held bytes.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct LoadReport {
    pub forms: BTreeMap<String, (usize, u64, u64)>,
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

impl LoadReport {
    pub fn add(&mut self, form: impl Into<String>, stored: u64, held: u64) {
        let e = self.forms.entry(form.into()).or_default();
        e.0 += 1;
        e.1 += stored;
        e.2 += held;
    }

    /// Bytes the loaded weights hold in memory.
    pub fn held_bytes(&self) -> u64 {
        self.forms.values().map(|f| f.2).sum()
    }

    /// `(tensors, stored bytes, held bytes)` of the forms that were dequantized at load.
    pub fn dequantized(&self) -> (usize, u64, u64) {
        self.forms
            .iter()
            .filter(|(k, _)| k.starts_with("dequantized"))
            .fold((0, 0, 0), |a, (_, f)| (a.0 + f.0, a.1 + f.1, a.2 + f.2))
    }

    /// One line: every form with its tensor count and sizes.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .forms
            .iter()
            .map(|(k, (n, s, h))| {
                format!(
                    "{n} {k} ({:.1} MB in the file, {:.1} MB held)",
                    mb(*s),
                    mb(*h)
                )
            })
            .collect();
        format!(
            "weights: {}; {:.1} MB held in all",
            parts.join(", "),
            mb(self.held_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_forms_and_names_dequantized_ones() {
        let mut r = LoadReport::default();
        r.add("packed Q4_1", 20, 24);
        r.add("packed Q4_1", 20, 24);
        r.add("dequantized Q4_1 -> F32", 20, 128);
        assert_eq!(r.held_bytes(), 176);
        assert_eq!(r.dequantized(), (1, 20, 128));
        assert!(r.summary().contains("2 packed Q4_1"));
    }
}
