//! The functions a template may call: Go's builtins and the sprig functions cluster-registry's
//! users write most. Errors name types, never values.

use std::cmp::Ordering;

use super::{
    exec::Val,
    format::{self, go_type},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Func {
    // Go's builtins.
    And,
    Or,
    Not,
    Len,
    Index,
    Slice,
    Print,
    Printf,
    Println,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Html,
    Js,
    Urlquery,
    // Sprig's, with sprig's argument order (the string last, so that it can be piped).
    Lower,
    Upper,
    Trim,
    TrimPrefix,
    TrimSuffix,
    Replace,
    Default,
    Quote,
    Contains,
    HasPrefix,
    HasSuffix,
    B64enc,
    B64dec,
}

const ALL: &[(&str, Func)] = &[
    ("and", Func::And),
    ("or", Func::Or),
    ("not", Func::Not),
    ("len", Func::Len),
    ("index", Func::Index),
    ("slice", Func::Slice),
    ("print", Func::Print),
    ("printf", Func::Printf),
    ("println", Func::Println),
    ("eq", Func::Eq),
    ("ne", Func::Ne),
    ("lt", Func::Lt),
    ("le", Func::Le),
    ("gt", Func::Gt),
    ("ge", Func::Ge),
    ("html", Func::Html),
    ("js", Func::Js),
    ("urlquery", Func::Urlquery),
    ("lower", Func::Lower),
    ("upper", Func::Upper),
    ("trim", Func::Trim),
    ("trimPrefix", Func::TrimPrefix),
    ("trimSuffix", Func::TrimSuffix),
    ("replace", Func::Replace),
    ("default", Func::Default),
    ("quote", Func::Quote),
    ("contains", Func::Contains),
    ("hasPrefix", Func::HasPrefix),
    ("hasSuffix", Func::HasSuffix),
    ("b64enc", Func::B64enc),
    ("b64dec", Func::B64dec),
];

impl Func {
    pub(super) fn named(name: &str) -> Option<Func> {
        ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }

    pub(super) fn name(self) -> &'static str {
        ALL.iter().find(|(_, f)| *f == self).map_or("?", |(n, _)| n)
    }
}

/// Why a function failed.
#[derive(Debug)]
pub(super) enum Failure {
    Message(String),
    /// Its result would pass [`super::MAX_OUTPUT`].
    TooLong,
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Message(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::Message(message.to_string())
    }
}

type Result<T> = std::result::Result<T, Failure>;

fn exact<'a, const N: usize>(f: Func, args: Vec<Val<'a>>) -> Result<[Val<'a>; N]> {
    let got = args.len();
    args.try_into().map_err(|_| {
        Failure::Message(format!(
            "wrong number of args for {}: want {N} got {got}",
            f.name()
        ))
    })
}

/// A value as text, as sprig's `strval` does (nil is empty).
fn text(value: &Val<'_>) -> String {
    match value {
        Val::Str(s) => s.to_string(),
        Val::Missing | Val::Nil => String::new(),
        other => format::value(other),
    }
}

fn strings<const N: usize>(f: Func, args: Vec<Val<'_>>) -> Result<[String; N]> {
    Ok(exact::<N>(f, args)?.each_ref().map(text))
}

/// Calls `f`; `args` are evaluated, a piped value last.
#[expect(
    clippy::too_many_lines,
    reason = "the table of the template functions: one arm per function, each a few lines, read as one list like Go's builtins and sprig's"
)]
pub(super) fn call<'a>(f: Func, args: Vec<Val<'a>>) -> Result<Val<'a>> {
    let s = Val::string;
    Ok(match f {
        Func::And | Func::Or => unreachable!("evaluated lazily by the caller"),
        Func::Not => {
            let [v] = exact(f, args)?;
            Val::Bool(!v.truth())
        }
        Func::Len => {
            let [v] = exact(f, args)?;
            let n = match v {
                Val::Str(s) => s.len(),
                Val::List(items) => items.len(),
                Val::Map(map) => map.len(),
                _ => return Err("len: the value has no length".into()),
            };
            Val::Int(n as i64)
        }
        Func::Index => index(args)?,
        Func::Slice => slice(args)?,
        Func::Print => s(format::sprint(&args)),
        Func::Println => s(format::sprintln(&args)),
        Func::Printf => {
            let mut args = args.into_iter();
            let Some(Val::Str(spec)) = args.next() else {
                return Err("printf: the first argument must be a format string".into());
            };
            s(format::sprintf(&spec, &args.collect::<Vec<_>>())?)
        }
        Func::Eq => {
            let mut args = args.into_iter();
            let first = args.next().ok_or("missing argument for comparison")?;
            let rest: Vec<_> = args.collect();
            if rest.is_empty() {
                return Err("missing argument for comparison".into());
            }
            let mut truth = false;
            for other in &rest {
                if eq(&first, other)? {
                    truth = true;
                    break;
                }
            }
            Val::Bool(truth)
        }
        Func::Ne => {
            let [a, b] = exact(f, args)?;
            Val::Bool(!eq(&a, &b)?)
        }
        Func::Lt | Func::Le | Func::Gt | Func::Ge => {
            let [a, b] = exact(f, args)?;
            let order = compare(&a, &b)?;
            Val::Bool(match f {
                Func::Lt => order == Ordering::Less,
                Func::Le => order != Ordering::Greater,
                Func::Gt => order == Ordering::Greater,
                _ => order != Ordering::Less,
            })
        }
        Func::Html => s(format::html(&escaper_text(&args))),
        Func::Js => s(format::js(&escaper_text(&args))),
        Func::Urlquery => s(format::urlquery(&escaper_text(&args))),
        Func::Lower => {
            let [v] = strings(f, args)?;
            s(v.to_lowercase())
        }
        Func::Upper => {
            let [v] = strings(f, args)?;
            s(v.to_uppercase())
        }
        Func::Trim => {
            let [v] = strings(f, args)?;
            s(v.trim().to_string())
        }
        Func::TrimPrefix => {
            let [prefix, v] = strings(f, args)?;
            s(v.strip_prefix(prefix.as_str()).unwrap_or(&v).to_string())
        }
        Func::TrimSuffix => {
            let [suffix, v] = strings(f, args)?;
            s(v.strip_suffix(suffix.as_str()).unwrap_or(&v).to_string())
        }
        Func::Replace => {
            let [old, new, v] = strings(f, args)?;
            if old.is_empty() {
                // Go inserts `new` around every character: bound what that makes.
                let size = v.len() + (v.chars().count() + 1) * new.len();
                if size > super::MAX_OUTPUT {
                    return Err(Failure::TooLong);
                }
            } else if new.len() > old.len() {
                let size = v.len() + v.matches(old.as_str()).count() * (new.len() - old.len());
                if size > super::MAX_OUTPUT {
                    return Err(Failure::TooLong);
                }
            }
            s(go_replace(&v, &old, &new))
        }
        Func::Contains => {
            let [part, v] = strings(f, args)?;
            Val::Bool(v.contains(&part))
        }
        Func::HasPrefix => {
            let [prefix, v] = strings(f, args)?;
            Val::Bool(v.starts_with(&prefix))
        }
        Func::HasSuffix => {
            let [suffix, v] = strings(f, args)?;
            Val::Bool(v.ends_with(&suffix))
        }
        Func::Default => {
            let mut args = args.into_iter();
            match (args.next(), args.next(), args.next()) {
                (Some(fallback), None, None) => fallback,
                (Some(fallback), Some(given), None) => {
                    if empty(&given) {
                        fallback
                    } else {
                        given
                    }
                }
                _ => return Err("wrong number of args for default: want 1 or 2".into()),
            }
        }
        Func::Quote => s(args
            .iter()
            .filter(|a| !matches!(a, Val::Nil | Val::Missing))
            .map(|a| format::quote(&text(a)))
            .collect::<Vec<_>>()
            .join(" ")),
        Func::B64enc => {
            let [v] = strings(f, args)?;
            s(xcc_kube::wire::encode_base64(v))
        }
        Func::B64dec => {
            // Unlike sprig, which returns the error text as the value, a bad input fails the
            // rendering: an error message written into a copy would go unnoticed.
            let [v] = strings(f, args)?;
            let bytes =
                xcc_kube::wire::decode_base64(&v).map_err(|_| "b64dec: the value is not base64")?;
            s(String::from_utf8(bytes)
                .map_err(|_| "b64dec: the decoded value is not UTF-8 text")?)
        }
    })
}

/// Go's `strings.Replace` with n = -1 (an empty `old` matches around every character).
fn go_replace(v: &str, old: &str, new: &str) -> String {
    if !old.is_empty() {
        return v.replace(old, new);
    }
    let mut out = String::with_capacity(v.len() + (v.len() + 1) * new.len());
    out.push_str(new);
    for c in v.chars() {
        out.push(c);
        out.push_str(new);
    }
    out
}

/// Sprig's notion of empty: the zero value of its type.
fn empty(value: &Val<'_>) -> bool {
    match value {
        Val::Missing | Val::Nil => true,
        Val::Bool(b) => !b,
        Val::Int(i) => *i == 0,
        Val::Float(f) => *f == 0.0,
        Val::Str(s) => s.is_empty(),
        Val::List(items) => items.is_empty(),
        Val::Map(map) => map.is_empty(),
        Val::Struct(fields) => fields.is_empty(),
    }
}

/// The text html, js and urlquery escape: a lone string as it is, else Go's `fmt.Sprint`.
fn escaper_text(args: &[Val<'_>]) -> String {
    match args {
        [Val::Str(s)] => s.to_string(),
        _ => format::sprint(args),
    }
}

fn int_index(value: &Val<'_>, name: &str) -> Result<i64> {
    match value {
        Val::Int(i) => Ok(*i),
        Val::Missing | Val::Nil => Err(format!("{name}: cannot index with nil").into()),
        other => Err(format!(
            "{name}: cannot index with a value of type {}",
            go_type(other)
        )
        .into()),
    }
}

/// `index ITEM KEY...`: map keys, list and string positions.
fn index<'a>(args: Vec<Val<'a>>) -> Result<Val<'a>> {
    let mut args = args.into_iter();
    let mut item = args
        .next()
        .ok_or("wrong number of args for index: want at least 1 got 0")?;
    for key in args {
        item = match item {
            Val::Map(map) => match &key {
                Val::Str(k) => map.get(&**k).map_or(Val::Nil, Val::of),
                Val::Missing | Val::Nil => Val::Nil,
                other => {
                    return Err(format!(
                        "index: the key has type {}; should be string",
                        go_type(other)
                    )
                    .into());
                }
            },
            Val::List(items) => {
                let i = int_index(&key, "index")?;
                let item = usize::try_from(i)
                    .ok()
                    .and_then(|i| items.get(i))
                    .ok_or_else(|| Failure::Message(format!("index: index out of range: {i}")))?;
                Val::of(item)
            }
            Val::Str(s) => {
                let i = int_index(&key, "index")?;
                let byte = usize::try_from(i)
                    .ok()
                    .and_then(|i| s.as_bytes().get(i))
                    .ok_or_else(|| Failure::Message(format!("index: index out of range: {i}")))?;
                Val::Int(i64::from(*byte))
            }
            Val::Missing | Val::Nil => return Err("index of untyped nil".into()),
            other => {
                return Err(format!("can't index item of type {}", go_type(&other)).into());
            }
        };
    }
    Ok(item)
}

/// `slice ITEM [LOW [HIGH [MAX]]]` of a list or string.
fn slice<'a>(args: Vec<Val<'a>>) -> Result<Val<'a>> {
    let mut args = args.into_iter();
    let item = args
        .next()
        .ok_or("wrong number of args for slice: want at least 1 got 0")?;
    let indexes = args
        .map(|v| int_index(&v, "slice"))
        .collect::<Result<Vec<i64>>>()?;
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()).into());
    }
    let len = match &item {
        Val::List(items) => items.len(),
        Val::Str(s) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".into());
            }
            s.len()
        }
        Val::Missing | Val::Nil => return Err("slice of untyped nil".into()),
        other => return Err(format!("can't slice item of type {}", go_type(other)).into()),
    };
    let mut bounds = [0usize, len, len];
    for (i, &index) in indexes.iter().enumerate() {
        bounds[i] = usize::try_from(index)
            .ok()
            .filter(|&b| b <= len)
            .ok_or_else(|| Failure::Message(format!("slice: index out of range: {index}")))?;
    }
    if indexes.len() < 2 {
        bounds[1] = len;
    }
    let [low, high, max] = bounds;
    if low > high || high > max {
        return Err(format!("slice: invalid slice index: {low} > {high}").into());
    }
    Ok(match item {
        Val::List(items) => Val::List(&items[low..high]),
        Val::Str(s) => Val::string(
            s.get(low..high)
                .ok_or("slice: the indexes cut a multi-byte character")?
                .to_string(),
        ),
        _ => unreachable!("checked above"),
    })
}

/// Go's kinds for comparisons.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Kind {
    Bool,
    Int,
    Float,
    Str,
    Other,
}

fn kind(value: &Val<'_>) -> Kind {
    match value {
        Val::Bool(_) => Kind::Bool,
        Val::Int(_) => Kind::Int,
        Val::Float(_) => Kind::Float,
        Val::Str(_) => Kind::Str,
        _ => Kind::Other,
    }
}

fn is_nil(value: &Val<'_>) -> bool {
    matches!(value, Val::Missing | Val::Nil)
}

/// Go's `eq` of two values: basic values of one kind compare, nil equals only nil, and the rest
/// is an error.
fn eq(a: &Val<'_>, b: &Val<'_>) -> Result<bool> {
    let (ka, kb) = (kind(a), kind(b));
    if ka != kb {
        if is_nil(a) || is_nil(b) {
            return Ok(false);
        }
        return Err(format!(
            "incompatible types for comparison: {} and {}",
            go_type(a),
            go_type(b)
        )
        .into());
    }
    Ok(match (a, b) {
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Int(x), Val::Int(y)) => x == y,
        (Val::Float(x), Val::Float(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => **x == **y,
        _ if is_nil(a) || is_nil(b) => is_nil(a) && is_nil(b),
        _ => {
            return Err(format!("non-comparable types: {} and {}", go_type(a), go_type(b)).into());
        }
    })
}

/// Go's order of two values of one basic kind (not bool).
fn compare(a: &Val<'_>, b: &Val<'_>) -> Result<Ordering> {
    let (ka, kb) = (kind(a), kind(b));
    if matches!(ka, Kind::Bool | Kind::Other) || matches!(kb, Kind::Bool | Kind::Other) {
        return Err(format!(
            "invalid type for comparison: {} and {}",
            go_type(a),
            go_type(b)
        )
        .into());
    }
    if ka != kb {
        return Err(format!(
            "incompatible types for comparison: {} and {}",
            go_type(a),
            go_type(b)
        )
        .into());
    }
    Ok(match (a, b) {
        (Val::Int(x), Val::Int(y)) => x.cmp(y),
        (Val::Float(x), Val::Float(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Val::Str(x), Val::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
        _ => unreachable!("same basic kind"),
    })
}
