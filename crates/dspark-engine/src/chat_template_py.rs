//! Python compatibility for chat templates: what Jinja2 under transformers prints and computes
//! where minijinja differs: the output formatter (floats as Python's `str`), transformers'
//! `tojson` (Python `json.dumps`), `repr(float)` and a small UTC `strftime`.

use std::fmt::Write as _;

use minijinja::value::{from_args, Kwargs, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{Error, ErrorKind};

/// `{{ x }}` as Jinja2 prints it: floats by Python's `str` (`1e-05`, not `0.00001`), the rest
/// as minijinja does (which already prints `True`, `None`, `2.0` the Python way).
pub(crate) fn py_formatter(
    out: &mut minijinja::Output,
    state: &mut minijinja::State,
    value: &Value,
) -> Result<(), Error> {
    if value.kind() == ValueKind::Number && !value.is_integer() {
        if let Ok(x) = f64::try_from(value.clone()) {
            let text = match x {
                x if x.is_nan() => "nan".to_owned(),
                x if x.is_infinite() => (if x > 0.0 { "inf" } else { "-inf" }).to_owned(),
                x => py_float_repr(x),
            };
            return out.write_str(&text).map_err(Error::from);
        }
    }
    minijinja::escape_formatter(out, state, value)
}

/// Options of Python's `json.dumps` that transformers' `tojson` exposes.
struct DumpOpts {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// `tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
pub(crate) fn py_tojson_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<String, Error> {
    type Args = (Option<Value>, Option<Value>, Option<Value>, Option<Value>);
    // Keyword arguments arrive as one trailing kwargs value.
    let mut positional = args.into_values();
    let kwargs = match positional.last() {
        Some(last) if last.is_kwargs() => Kwargs::try_from(positional.pop().unwrap_or_default())?,
        _ => Kwargs::from_iter(std::iter::empty::<(&str, Value)>()),
    };
    let (ensure_ascii, indent, separators, sort_keys): Args = from_args(&positional)?;
    let pick = |pos: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        let kw: Option<Value> = kwargs.get(name)?;
        Ok(kw.or(pos).filter(|v| !v.is_none() && !v.is_undefined()))
    };
    let ensure_ascii = pick(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match pick(indent, "indent")? {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_owned()),
        Some(v) => {
            let n = v.as_i64().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be int or str",
                )
            })?;
            Some(" ".repeat(n.max(0) as usize))
        }
    };
    let (item_sep, key_sep) = match pick(separators, "separators")? {
        Some(v) => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .filter(|p: &Vec<String>| p.len() == 2)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    )
                })?;
            (parts[0].clone(), parts[1].clone())
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let sort_keys = pick(sort_keys, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let opts = DumpOpts {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    dump(value, &opts, 0, &mut out)?;
    Ok(out)
}

fn newline_indent(opts: &DumpOpts, level: usize, out: &mut String) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

/// Writes `value` the way Python's `json.dumps` does.
fn dump(value: &Value, opts: &DumpOpts, level: usize, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                let n = i128::try_from(value.clone())?;
                let _ = write!(out, "{n}");
            } else {
                out.push_str(&py_float_repr(f64::try_from(value.clone())?));
            }
        }
        ValueKind::String => write_json_str(value.as_str().unwrap_or(""), opts.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline_indent(opts, level + 1, out);
                dump(item, opts, level + 1, out)?;
            }
            newline_indent(opts, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((map_key(&key)?, item));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline_indent(opts, level + 1, out);
                write_json_str(k, opts.ensure_ascii, out);
                out.push_str(&opts.key_sep);
                dump(v, opts, level + 1, out)?;
            }
            newline_indent(opts, level, out);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: object of kind {} is not JSON serializable",
                    value.kind()
                ),
            ))
        }
    }
    Ok(())
}

/// Python converts non-string keys: numbers by repr, True/False/None to JSON words.
fn map_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or("").to_owned(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
        ValueKind::None | ValueKind::Undefined => "null".to_owned(),
        ValueKind::Number if key.is_integer() => i128::try_from(key.clone())?.to_string(),
        ValueKind::Number => py_float_repr(f64::try_from(key.clone())?),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: keys must be str, int, float, bool or None",
            ))
        }
    })
}

/// JSON string literal as Python writes it (`ensure_ascii` escapes all non-ASCII).
fn write_json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form below 1e-4 or from
/// 1e16 on (`1e+16`, `2.5e-05`), `.0` on whole numbers, `NaN`/`Infinity`.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let sci = format!("{:e}", x.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    if x == 0.0 {
        return format!("{sign}0.0");
    }
    if !(-4..16).contains(&exp) {
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mant}e{esign}{:02}", exp.abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        let pad = "0".repeat(int_len - digits.len());
        format!("{sign}{digits}{pad}.0")
    } else {
        format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
    }
}

/// A small `strftime` over UTC time (the subset chat templates use).
pub(crate) fn strftime_utc(fmt: &str, unix_secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    let (h, mi, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let wday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{y}"),
            Some('y') => write!(out, "{:02}", y.rem_euclid(100)),
            Some('m') => write!(out, "{m:02}"),
            Some('d') => write!(out, "{d:02}"),
            Some('-') => match chars.next() {
                Some('d') => write!(out, "{d}"),
                Some('m') => write!(out, "{m}"),
                Some(o) => write!(out, "%-{o}"),
                None => write!(out, "%-"),
            },
            Some('B') => write!(out, "{month}"),
            Some('b') => write!(out, "{}", &month[..3]),
            Some('A') => write!(out, "{}", DAYS[wday]),
            Some('a') => write!(out, "{}", &DAYS[wday][..3]),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{h:02}"),
            Some('I') => write!(out, "{:02}", if h % 12 == 0 { 12 } else { h % 12 }),
            Some('p') => write!(out, "{}", if h < 12 { "AM" } else { "PM" }),
            Some('M') => write!(out, "{mi:02}"),
            Some('S') => write!(out, "{s:02}"),
            Some('%') => write!(out, "%"),
            Some(o) => write!(out, "%{o}"),
            None => write!(out, "%"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (2.5e-05, "2.5e-05"),
            (1.5e-07, "1.5e-07"),
            (1e16, "1e+16"),
            (1e22, "1e+22"),
            (0.1, "0.1"),
            (3.0, "3.0"),
            (-0.0, "-0.0"),
            (0.0001, "0.0001"),
            (123.456, "123.456"),
            (1e15, "1000000000000000.0"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn strftime_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(
            strftime_utc("%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %I%p %-d %%", t),
            "2024-02-29 13:05:09 Thu Thursday Feb February 060 24 01PM 29 %"
        );
        assert_eq!(strftime_utc("%d %b %Y", 0), "01 Jan 1970");
    }
}
