//! Values as text the way Go's `fmt` writes them (`%v`, `print`, `printf`), and the escapers.

use std::fmt::Write as _;

use super::{MAX_OUTPUT, MAX_WIDTH, exec::Val};

/// Go's name of a value's type, for messages and `%T`.
pub(super) fn go_type(value: &Val<'_>) -> &'static str {
    match value {
        Val::Missing | Val::Nil => "<nil>",
        Val::Bool(_) => "bool",
        Val::Int(_) => "int",
        Val::Float(_) => "float64",
        Val::Str(_) => "string",
        Val::List(_) => "[]interface {}",
        Val::Map(_) => "map[string]interface {}",
        Val::Struct(_) => "struct",
    }
}

/// What an action prints: nil and missing values are `<no value>`, as in Go.
pub(super) fn print(value: &Val<'_>) -> String {
    match value {
        Val::Missing | Val::Nil => "<no value>".into(),
        other => self::value(other),
    }
}

/// `%v`.
pub(super) fn value(value: &Val<'_>) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Val<'_>) {
    if out.len() > MAX_OUTPUT {
        // The caller refuses the result; stop making it.
        return;
    }
    match value {
        Val::Missing | Val::Nil => out.push_str("<nil>"),
        Val::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Val::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Val::Float(f) => out.push_str(&float_g(*f, None, false)),
        Val::Str(s) => out.push_str(s),
        Val::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, &Val::of(item));
            }
            out.push(']');
        }
        Val::Map(map) => {
            out.push_str("map[");
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                write_value(out, &Val::of(item));
            }
            out.push(']');
        }
        Val::Struct(fields) => {
            out.push('{');
            for (i, (_, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, &Val::of(item));
            }
            out.push('}');
        }
    }
}

/// Go's `fmt.Sprint`: spaces between operands when neither is a string.
pub(super) fn sprint(args: &[Val<'_>]) -> String {
    let mut out = String::new();
    let mut previous_string = false;
    for (i, arg) in args.iter().enumerate() {
        let string = matches!(arg, Val::Str(_));
        if i > 0 && !string && !previous_string {
            out.push(' ');
        }
        write_value(&mut out, arg);
        previous_string = string;
    }
    out
}

/// Go's `fmt.Sprintln`: spaces between all operands, and a newline.
pub(super) fn sprintln(args: &[Val<'_>]) -> String {
    let mut out = String::new();
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_value(&mut out, arg);
    }
    out.push('\n');
    out
}

#[derive(Default, Clone, Copy)]
struct Flags {
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
}

/// A width or precision, bounded.
fn bound(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<Option<usize>, String> {
    if chars.peek() == Some(&'*') {
        return Err("printf: * for a width or precision is not supported".into());
    }
    let mut n: Option<usize> = None;
    while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
        chars.next();
        n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
    }
    match n {
        Some(n) if n > MAX_WIDTH => Err(format!(
            "printf: width or precision {n} is over the limit of {MAX_WIDTH}"
        )),
        n => Ok(n),
    }
}

/// Go's `fmt.Sprintf` for the verbs template users write. Where Go would write an error into
/// the text (`%!d(string=...)`), this fails, without the value.
pub(super) fn sprintf(spec: &str, args: &[Val<'_>]) -> Result<String, String> {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = Flags::default();
        while let Some(&c) = chars.peek() {
            match c {
                '-' => flags.minus = true,
                '+' => flags.plus = true,
                '#' => flags.sharp = true,
                ' ' => flags.space = true,
                '0' => flags.zero = true,
                _ => break,
            }
            chars.next();
        }
        let width = bound(&mut chars)?;
        let precision = if chars.peek() == Some(&'.') {
            chars.next();
            Some(bound(&mut chars)?.unwrap_or(0))
        } else {
            None
        };
        let Some(verb) = chars.next() else {
            return Err("printf: the format ends with a lone %".into());
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        if !"vsqdboOxXcUeEfFgGtT".contains(verb) {
            return Err(format!("printf: %{verb} is not a verb printf knows"));
        }
        let arg = args
            .next()
            .ok_or_else(|| format!("printf: %{verb} has no value to format"))?;
        let text = one(verb, flags, precision, arg)
            .ok_or_else(|| format!("printf: %{verb} does not fit the value given"))?;
        let numeric = matches!(arg, Val::Int(_) | Val::Float(_)) && verb != 'c' && verb != 'q';
        pad(&mut out, &text, width, flags, numeric);
        if out.len() > MAX_OUTPUT {
            // The caller refuses a result this long.
            return Ok(out);
        }
    }
    if args.next().is_some() {
        return Err("printf: more values than verbs in the format".into());
    }
    Ok(out)
}

fn pad(out: &mut String, text: &str, width: Option<usize>, flags: Flags, numeric: bool) {
    let len = text.chars().count();
    let fill = width.unwrap_or(0).saturating_sub(len);
    if fill == 0 {
        out.push_str(text);
    } else if flags.minus {
        out.push_str(text);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if flags.zero && numeric {
        // Zeros go after the sign.
        let (sign, digits) = match text.as_bytes().first() {
            Some(b'-' | b'+' | b' ') => text.split_at(1),
            _ => ("", text),
        };
        out.push_str(sign);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(digits);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(text);
    }
}

fn sign(negative: bool, flags: Flags) -> &'static str {
    if negative {
        "-"
    } else if flags.plus {
        "+"
    } else if flags.space {
        " "
    } else {
        ""
    }
}

/// One verb of `printf`; None when the value does not fit it.
fn one(verb: char, flags: Flags, precision: Option<usize>, arg: &Val<'_>) -> Option<String> {
    Some(match (verb, arg) {
        ('T', v) => go_type(v).to_string(),
        ('v', Val::Float(f)) => with_sign(float_g(*f, precision, false), *f, flags),
        ('v', Val::Int(i)) => format!("{}{}", sign(*i < 0, flags), i.unsigned_abs()),
        ('v', v) => value(v),
        ('s', Val::Str(s)) => match precision {
            Some(p) => s.chars().take(p).collect(),
            None => s.to_string(),
        },
        ('s', v @ (Val::List(_) | Val::Map(_) | Val::Struct(_))) => value(v),
        ('q', Val::Str(s)) => go_quote(s),
        ('q', Val::Int(i)) => {
            let c = u32::try_from(*i).ok().and_then(char::from_u32)?;
            let inner = match c {
                '\'' => "\\'".to_string(),
                '"' => "\"".to_string(),
                c => {
                    let quoted = go_quote(&c.to_string());
                    quoted[1..quoted.len() - 1].to_string()
                }
            };
            format!("'{inner}'")
        }
        ('d', Val::Int(i)) => format!("{}{}", sign(*i < 0, flags), i.unsigned_abs()),
        ('b' | 'o' | 'O' | 'x' | 'X', Val::Int(i)) => radix(verb, *i, flags),
        ('x' | 'X', Val::Str(s)) => hex_bytes(verb, s, flags),
        ('c', Val::Int(i)) => u32::try_from(*i)
            .ok()
            .and_then(char::from_u32)
            .unwrap_or('\u{fffd}')
            .to_string(),
        ('U', Val::Int(i)) => format!("U+{:04X}", i),
        ('e' | 'E', Val::Float(f)) => {
            let text = with_sign(float_e(*f, precision.unwrap_or(6)), *f, flags);
            if verb == 'E' {
                text.to_uppercase()
            } else {
                text
            }
        }
        ('f' | 'F', Val::Float(f)) => with_sign(float_f(*f, precision.unwrap_or(6)), *f, flags),
        ('g' | 'G', Val::Float(f)) => {
            let text = with_sign(float_g(*f, precision, flags.sharp), *f, flags);
            if verb == 'G' {
                text.to_uppercase()
            } else {
                text
            }
        }
        ('t', Val::Bool(b)) => b.to_string(),
        _ => return None,
    })
}

/// Integer `i` in the base of `verb` (`b`, `o`, `O`, `x`, `X`), with its prefix when `#` or `O`.
fn radix(verb: char, i: i64, flags: Flags) -> String {
    let n = i.unsigned_abs();
    let (digits, prefix) = match verb {
        'b' => (format!("{n:b}"), "0b"),
        'o' => (format!("{n:o}"), "0"),
        'O' => (format!("{n:o}"), "0o"),
        'x' => (format!("{n:x}"), "0x"),
        _ => (format!("{n:X}"), "0X"),
    };
    let prefix = if flags.sharp || verb == 'O' {
        prefix
    } else {
        ""
    };
    format!("{}{prefix}{digits}", sign(i < 0, flags))
}

/// The bytes of `s` in hexadecimal (`x` or `X`), spaced and prefixed as the flags say.
fn hex_bytes(verb: char, s: &str, flags: Flags) -> String {
    let mut out = String::new();
    for (i, b) in s.bytes().enumerate() {
        if i > 0 && flags.space {
            out.push(' ');
        }
        if flags.sharp && (i == 0 || flags.space) {
            out.push_str(if verb == 'x' { "0x" } else { "0X" });
        }
        let _ = if verb == 'x' {
            write!(out, "{b:02x}")
        } else {
            write!(out, "{b:02X}")
        };
    }
    out
}

fn with_sign(text: String, f: f64, flags: Flags) -> String {
    if text.starts_with('-') || f.is_nan() && !flags.plus {
        text
    } else {
        format!("{}{text}", sign(false, flags))
    }
}

fn special(f: f64) -> Option<String> {
    if f.is_nan() {
        Some("NaN".into())
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" }.into())
    } else {
        None
    }
}

/// Go's exponent: a sign and at least two digits.
fn exponent(e: i32) -> String {
    format!("e{}{:02}", if e < 0 { '-' } else { '+' }, e.unsigned_abs())
}

fn float_f(f: f64, precision: usize) -> String {
    special(f).unwrap_or_else(|| format!("{f:.precision$}"))
}

fn float_e(f: f64, precision: usize) -> String {
    if let Some(s) = special(f) {
        return s;
    }
    let text = format!("{f:.precision$e}");
    let (mantissa, e) = text.split_once('e').expect("Rust's exponent form");
    format!("{mantissa}{}", exponent(e.parse().unwrap_or(0)))
}

/// `%g`: the shortest text that reads back as `f` when `precision` is None (Go's `%v`), in
/// exponent form for exponents below -4 or from the precision (6 when shortest) up.
pub(super) fn float_g(f: f64, precision: Option<usize>, sharp: bool) -> String {
    if let Some(s) = special(f) {
        return s;
    }
    let text = match precision {
        None => format!("{:e}", f.abs()),
        Some(p) => format!("{:.*e}", p.max(1) - 1, f.abs()),
    };
    let (mantissa, e) = text.split_once('e').expect("Rust's exponent form");
    let exp: i32 = e.parse().unwrap_or(0);
    let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !sharp {
        while digits.len() > 1 && digits.ends_with('0') {
            digits.pop();
        }
    }
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let mut eprec = match precision {
        None => 6,
        Some(p) => p.max(1) as i32,
    };
    if precision.is_some() && eprec > nd && nd >= dp {
        eprec = nd;
    }
    let negative = if f.is_sign_negative() { "-" } else { "" };
    if exp < -4 || exp >= eprec {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        return format!("{negative}{first}{point}{rest}{}", exponent(exp));
    }
    let body = if dp <= 0 {
        format!("0.{}{digits}", "0".repeat(dp.unsigned_abs() as usize))
    } else if dp >= nd {
        format!("{digits}{}", "0".repeat((dp - nd) as usize))
    } else {
        let (int, frac) = digits.split_at(dp as usize);
        format!("{int}.{frac}")
    };
    format!("{negative}{body}")
}

/// Go's `strconv.Quote`.
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = if (c as u32) < 0x10000 {
                    write!(out, "\\u{:04x}", c as u32)
                } else {
                    write!(out, "\\U{:08x}", c as u32)
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Sprig's `quote` of one value.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `template.HTMLEscapeString`.
pub(super) fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscapeString`.
pub(super) fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
pub(super) fn urlquery(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}
