//! Go's `text/template` lexer: the text cut into plain text and the tokens of actions, with the
//! `{{-`/`-}}` trimming applied and comments dropped. One pass, no recursion.

use super::{Pos, TemplateError, error::syntax};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok<'s> {
    /// Plain text between actions, already trimmed.
    Text(&'s str),
    /// `{{`
    Open,
    /// `}}`
    Close,
    /// Spaces inside an action: they separate operands.
    Space,
    /// `.name` (one element of a field chain)
    Field(&'s str),
    /// `.` alone
    Dot,
    /// `$` or `$name`
    Var(&'s str),
    /// A function name.
    Ident(&'s str),
    Keyword(Keyword),
    Bool(bool),
    Nil,
    /// The text of a number, checked by the parser.
    Number(&'s str),
    /// A character constant such as `'a'`: a number.
    Char(char),
    /// A quoted or raw string, escapes resolved.
    Str(String),
    LParen,
    RParen,
    Pipe,
    /// `:=`
    Declare,
    /// `=`
    Assign,
    Comma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keyword {
    If,
    Else,
    End,
    Range,
    With,
    Break,
    Continue,
    Define,
    Template,
    Block,
}

impl Keyword {
    pub(super) fn name(self) -> &'static str {
        match self {
            Keyword::If => "if",
            Keyword::Else => "else",
            Keyword::End => "end",
            Keyword::Range => "range",
            Keyword::With => "with",
            Keyword::Break => "break",
            Keyword::Continue => "continue",
            Keyword::Define => "define",
            Keyword::Template => "template",
            Keyword::Block => "block",
        }
    }
}

impl Tok<'_> {
    /// How the token is named in an error message.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Text(_) => "text".into(),
            Tok::Open => "{{".into(),
            Tok::Close => "}}".into(),
            Tok::Space => "space".into(),
            Tok::Field(name) => format!("field .{name}"),
            Tok::Dot => "\".\"".into(),
            Tok::Var(name) => format!("variable {name}"),
            Tok::Ident(name) => format!("{name:?}"),
            Tok::Keyword(k) => format!("keyword {:?}", k.name()),
            Tok::Bool(b) => format!("{b}"),
            Tok::Nil => "nil".into(),
            Tok::Number(n) => format!("number {n}"),
            Tok::Char(_) => "character constant".into(),
            Tok::Str(_) => "string".into(),
            Tok::LParen => "\"(\"".into(),
            Tok::RParen => "\")\"".into(),
            Tok::Pipe => "\"|\"".into(),
            Tok::Declare => "\":=\"".into(),
            Tok::Assign => "\"=\"".into(),
            Tok::Comma => "\",\"".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token<'s> {
    pub tok: Tok<'s>,
    pub at: Pos,
}

/// The token of a word: a constant, a keyword or an identifier.
fn word_token(word: &str) -> Tok<'_> {
    match word {
        "true" => Tok::Bool(true),
        "false" => Tok::Bool(false),
        "nil" => Tok::Nil,
        "if" => Tok::Keyword(Keyword::If),
        "else" => Tok::Keyword(Keyword::Else),
        "end" => Tok::Keyword(Keyword::End),
        "range" => Tok::Keyword(Keyword::Range),
        "with" => Tok::Keyword(Keyword::With),
        "break" => Tok::Keyword(Keyword::Break),
        "continue" => Tok::Keyword(Keyword::Continue),
        "define" => Tok::Keyword(Keyword::Define),
        "template" => Tok::Keyword(Keyword::Template),
        "block" => Tok::Keyword(Keyword::Block),
        word => Tok::Ident(word),
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Line and column of byte offsets, asked in increasing order: linear over the whole text.
struct Cursor<'s> {
    src: &'s str,
    offset: usize,
    pos: Pos,
}

impl Cursor<'_> {
    fn at(&mut self, offset: usize) -> Pos {
        if offset < self.offset {
            // Not expected; start over rather than be wrong.
            self.offset = 0;
            self.pos = Pos { line: 1, col: 1 };
        }
        for c in self.src[self.offset..offset].chars() {
            if c == '\n' {
                self.pos.line += 1;
                self.pos.col = 1;
            } else {
                self.pos.col += 1;
            }
        }
        self.offset = offset;
        self.pos
    }
}

struct Lexer<'s> {
    src: &'s str,
    /// Byte offset of the next character.
    i: usize,
    cursor: Cursor<'s>,
    tokens: Vec<Token<'s>>,
}

/// Cuts `src` into tokens.
pub(super) fn lex(src: &str) -> Result<Vec<Token<'_>>, TemplateError> {
    let mut lexer = Lexer {
        src,
        i: 0,
        cursor: Cursor {
            src,
            offset: 0,
            pos: Pos { line: 1, col: 1 },
        },
        tokens: Vec::new(),
    };
    lexer.run()?;
    Ok(lexer.tokens)
}

impl<'s> Lexer<'s> {
    fn pos(&mut self, offset: usize) -> Pos {
        self.cursor.at(offset)
    }

    fn push(&mut self, tok: Tok<'s>, offset: usize) {
        let at = self.pos(offset);
        self.tokens.push(Token { tok, at });
    }

    fn error(&mut self, offset: usize, message: impl Into<String>) -> TemplateError {
        syntax(self.pos(offset), message)
    }

    fn rest(&self) -> &'s str {
        &self.src[self.i..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    /// At a right delimiter with a trim marker (` -}}`)?
    fn at_trimmed_close(&self) -> bool {
        let rest = self.rest().as_bytes();
        rest.len() >= 4
            && is_space(rest[0] as char)
            && rest[1] == b'-'
            && rest[2] == b'}'
            && rest[3] == b'}'
    }

    fn run(&mut self) -> Result<(), TemplateError> {
        let mut trim_next = false;
        loop {
            let rest = self.rest();
            let (mut text, open) = match rest.find("{{") {
                Some(open) => (&rest[..open], Some(self.i + open)),
                None => (rest, None),
            };
            if trim_next {
                text = text.trim_start_matches(is_space);
            }
            let Some(open) = open else {
                if !text.is_empty() {
                    let offset = self.src.len() - text.len();
                    self.push(Tok::Text(text), offset);
                }
                return Ok(());
            };
            let after = &self.src[open + 2..];
            let trim_before = after.starts_with('-') && after[1..].starts_with(is_space);
            if trim_before {
                text = text.trim_end_matches(is_space);
            }
            if !text.is_empty() {
                let offset = text.as_ptr() as usize - self.src.as_ptr() as usize;
                self.push(Tok::Text(text), offset);
            }
            self.i = open + 2 + if trim_before { 2 } else { 0 };
            trim_next = if self.rest().starts_with("/*") {
                self.comment(open)?
            } else {
                self.push(Tok::Open, open);
                self.action(open)?
            };
        }
    }

    /// A comment, from its `/*`; returns whether it ends with a trim marker.
    fn comment(&mut self, open: usize) -> Result<bool, TemplateError> {
        let Some(end) = self.rest()[2..].find("*/") else {
            return Err(self.error(open, "unclosed comment: expected */}}"));
        };
        self.i += 2 + end + 2;
        if self.at_trimmed_close() {
            self.i += 4;
            Ok(true)
        } else if self.rest().starts_with("}}") {
            self.i += 2;
            Ok(false)
        } else {
            Err(self.error(
                self.i,
                "comment ends before closing delimiter: expected */}}",
            ))
        }
    }

    /// The tokens of one action, up to and including its `}}`; returns whether that one trims.
    fn action(&mut self, open: usize) -> Result<bool, TemplateError> {
        loop {
            let start = self.i;
            if self.at_trimmed_close() {
                self.push(Tok::Close, start + 1);
                self.i += 4;
                return Ok(true);
            }
            if self.rest().starts_with("}}") {
                self.push(Tok::Close, start);
                self.i += 2;
                return Ok(false);
            }
            let Some(c) = self.peek() else {
                return Err(self.error(open, "unclosed action: expected }}"));
            };
            self.i += c.len_utf8();
            let tok = match c {
                c if is_space(c) => {
                    while self.peek().is_some_and(is_space) && !self.at_trimmed_close() {
                        self.i += 1;
                    }
                    Tok::Space
                }
                '=' => Tok::Assign,
                ':' => {
                    if self.peek() != Some('=') {
                        return Err(self.error(start, "expected := after :"));
                    }
                    self.i += 1;
                    Tok::Declare
                }
                '|' => Tok::Pipe,
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                ',' => Tok::Comma,
                '"' => Tok::Str(self.quoted(start)?),
                '\'' => Tok::Char(self.char_constant(start)?),
                '`' => {
                    let Some(end) = self.rest().find('`') else {
                        return Err(self.error(start, "unterminated raw quoted string"));
                    };
                    let raw = &self.rest()[..end];
                    self.i += end + 1;
                    Tok::Str(raw.replace('\r', ""))
                }
                '$' => {
                    self.word();
                    Tok::Var(&self.src[start..self.i])
                }
                '.' if self.peek().is_some_and(|c| c.is_ascii_digit()) => {
                    self.number();
                    Tok::Number(&self.src[start..self.i])
                }
                '.' => {
                    self.word();
                    if self.i == start + 1 {
                        Tok::Dot
                    } else {
                        Tok::Field(&self.src[start + 1..self.i])
                    }
                }
                '+' | '-' | '0'..='9' => {
                    self.i = start;
                    self.number();
                    Tok::Number(&self.src[start..self.i])
                }
                c if is_alphanumeric(c) => {
                    self.word();
                    word_token(&self.src[start..self.i])
                }
                c => {
                    return Err(self.error(
                        start,
                        format!("unexpected {c:?} in action: expected an operand, | or }}}}"),
                    ));
                }
            };
            self.push(tok, start);
        }
    }

    fn word(&mut self) {
        let len = self
            .rest()
            .find(|c: char| !is_alphanumeric(c))
            .unwrap_or(self.rest().len());
        self.i += len;
    }

    /// A number as Go's lexer takes it: a sign, then digits, letters, `_` and `.`, and a sign
    /// right after an exponent mark. The parser checks the syntax.
    fn number(&mut self) {
        if matches!(self.peek(), Some('+' | '-')) {
            self.i += 1;
        }
        let hex = {
            let r = self.rest().as_bytes();
            r.len() > 1 && r[0] == b'0' && (r[1] | 0x20) == b'x'
        };
        let mut previous = ' ';
        while let Some(c) = self.peek() {
            let exponent = if hex {
                matches!(previous, 'p' | 'P')
            } else {
                matches!(previous, 'e' | 'E' | 'p' | 'P')
            };
            if !(c.is_ascii_alphanumeric()
                || c == '_'
                || c == '.'
                || (exponent && (c == '+' || c == '-')))
            {
                break;
            }
            previous = c;
            self.i += 1;
        }
    }

    /// The text up to `close` not preceded by an odd number of backslashes, on this line; reads
    /// past `close`. `None` (nothing read) when the line or the input ends first.
    fn until_unescaped(&mut self, close: char) -> Option<&'s str> {
        let rest = self.rest();
        let mut escaped = false;
        for (i, c) in rest.char_indices() {
            match c {
                '\n' => return None,
                '\\' => escaped = !escaped,
                c if c == close && !escaped => {
                    self.i += i + c.len_utf8();
                    return Some(&rest[..i]);
                }
                _ => escaped = false,
            }
        }
        None
    }

    /// The rest of a double-quoted string (the `"` is read), unescaped.
    fn quoted(&mut self, start: usize) -> Result<String, TemplateError> {
        let Some(body) = self.until_unescaped('"') else {
            return Err(self.error(start, "unterminated quoted string: expected \""));
        };
        unescape(body, '"').map_err(|m| self.error(start, m))
    }

    /// The rest of a character constant (the `'` is read).
    fn char_constant(&mut self, start: usize) -> Result<char, TemplateError> {
        let Some(body) = self.until_unescaped('\'') else {
            return Err(self.error(start, "unterminated character constant: expected '"));
        };
        let text = unescape(body, '\'').map_err(|m| self.error(start, m))?;
        let mut chars = text.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(self.error(start, "a character constant holds exactly one character")),
        }
    }
}

/// Go's escapes in a quoted string or character constant.
fn unescape(body: &str, quote: char) -> Result<String, String> {
    if !body.contains('\\') {
        return Ok(body.to_string());
    }
    let mut out: Vec<u8> = Vec::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let e = chars.next().ok_or("a string ends in a lone \\")?;
        let simple = match e {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            c if c == quote => Some(c as u8),
            _ => None,
        };
        if let Some(b) = simple {
            out.push(b);
            continue;
        }
        let (digits, radix) = match e {
            '0'..='7' => (3, 8),
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            other => return Err(format!("unknown escape sequence \\{other}")),
        };
        let mut text = String::new();
        if radix == 8 {
            text.push(e);
        }
        while text.len() < digits {
            text.push(chars.next().ok_or("escape sequence is too short")?);
        }
        let value = u32::from_str_radix(&text, radix)
            .map_err(|_| format!("invalid escape sequence \\{e}"))?;
        if matches!(e, 'u' | 'U') {
            let c = char::from_u32(value).ok_or("escape sequence is not a valid character")?;
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        } else {
            out.push(u8::try_from(value).map_err(|_| "octal escape value above 255")?);
        }
    }
    String::from_utf8(out).map_err(|_| "the escapes make text that is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trimming_comments_and_escapes() {
        let toks: Vec<Tok<'_>> =
            lex("a  {{- 1 -}}  b{{/* c */}} {{- /* d */ -}} e\n{{\"\\x41\\u00e9\\101\"}}")
                .unwrap()
                .into_iter()
                .map(|t| t.tok)
                .collect();
        assert_eq!(
            toks,
            vec![
                Tok::Text("a"),
                Tok::Open,
                Tok::Number("1"),
                Tok::Close,
                Tok::Text("b"),
                Tok::Text("e\n"),
                Tok::Open,
                Tok::Str("AéA".into()),
                Tok::Close
            ]
        );
    }
}
