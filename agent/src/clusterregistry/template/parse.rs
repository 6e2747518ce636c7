//! Go's `text/template` grammar, from tokens to a tree. Recursion is bounded by [`MAX_DEPTH`]
//! (blocks, and parentheses within an action).

use super::{
    MAX_DEPTH, MAX_VARIABLES, Pos, TemplateError,
    error::syntax,
    funcs::Func,
    lex::{Keyword, Tok, Token, lex},
};

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tree {
    pub nodes: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Text {
        at: Pos,
        text: String,
    },
    /// `{{ pipeline }}`: prints its value, unless it declares or assigns variables.
    Action(Pipe),
    /// `if`/`with` with their `else if`/`else with` branches, and the final `else`.
    If {
        with: bool,
        branches: Vec<(Pipe, Vec<Node>)>,
        otherwise: Vec<Node>,
    },
    Range {
        pipe: Pipe,
        body: Vec<Node>,
        otherwise: Vec<Node>,
    },
    Break(Pos),
    Continue(Pos),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pipe {
    pub at: Pos,
    /// Variables declared (`:=`) or assigned (`=`): one, or two in a `range`.
    pub decl: Vec<String>,
    pub assign: bool,
    pub cmds: Vec<Cmd>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cmd {
    pub at: Pos,
    pub args: Vec<Operand>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Operand {
    pub at: Pos,
    pub term: Term,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Term {
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `.a.b`: fields of dot.
    Field(Vec<String>),
    /// `$x.a.b` (`$` alone is the data).
    Var(String, Vec<String>),
    /// `(pipeline).a.b`
    Pipe(Box<Pipe>, Vec<String>),
    Func(Func),
}

impl Term {
    /// A literal or dot, which cannot take arguments.
    pub(super) fn is_constant(&self) -> bool {
        matches!(
            self,
            Term::Dot | Term::Nil | Term::Bool(_) | Term::Int(_) | Term::Float(_) | Term::Str(_)
        )
    }
}

/// Parses `text`.
pub(super) fn parse(text: &str) -> Result<Tree, TemplateError> {
    let tokens = lex(text)?;
    let mut parser = Parser {
        tokens,
        i: 0,
        vars: vec!["$".to_string()],
        depth: 0,
        parens: 0,
        ranges: 0,
        end: Pos::default(),
    };
    parser.end = parser
        .tokens
        .last()
        .map(|t| t.at)
        .unwrap_or(Pos { line: 1, col: 1 });
    let (nodes, stop) = parser.list()?;
    match stop {
        Stop::Eof => Ok(Tree { nodes }),
        Stop::End(at) => Err(syntax(
            at,
            "unexpected {{ end }}: no if, range or with is open",
        )),
        Stop::Else(at) => Err(syntax(
            at,
            "unexpected {{ else }}: no if, range or with is open",
        )),
    }
}

/// Why a list of nodes ended.
enum Stop {
    Eof,
    End(Pos),
    Else(Pos),
}

struct Parser<'s> {
    tokens: Vec<Token<'s>>,
    i: usize,
    /// Variables in scope, innermost last.
    vars: Vec<String>,
    depth: usize,
    parens: usize,
    /// How many `range` bodies enclose the current position.
    ranges: usize,
    /// Where the text ends, for errors there.
    end: Pos,
}

impl<'s> Parser<'s> {
    fn peek(&self) -> Option<&Token<'s>> {
        self.tokens.get(self.i)
    }

    fn next(&mut self) -> Option<Token<'s>> {
        let token = self.tokens.get(self.i).cloned();
        self.i += 1;
        token
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(|t| t.tok == Tok::Space) {
            self.i += 1;
        }
    }

    fn peek_non_space(&mut self) -> Option<&Token<'s>> {
        self.skip_spaces();
        self.peek()
    }

    /// Position of the next token, or of the end of the text.
    fn here(&self) -> Pos {
        self.peek().map_or(self.end, |t| t.at)
    }

    /// Nodes up to an `{{ end }}`, an `{{ else`, or the end of the text.
    fn list(&mut self) -> Result<(Vec<Node>, Stop), TemplateError> {
        let mut nodes = Vec::new();
        loop {
            let Some(token) = self.next() else {
                return Ok((nodes, Stop::Eof));
            };
            match token.tok {
                Tok::Text(text) => nodes.push(Node::Text {
                    at: token.at,
                    text: text.to_string(),
                }),
                Tok::Open => match self.action()? {
                    Ok(node) => nodes.push(node),
                    Err(stop) => return Ok((nodes, stop)),
                },
                other => {
                    return Err(syntax(
                        token.at,
                        format!("unexpected {} outside an action", other.describe()),
                    ));
                }
            }
        }
    }

    /// One action, its `{{` read: a node, or the `end`/`else` that stops the current list.
    fn action(&mut self) -> Result<Result<Node, Stop>, TemplateError> {
        let Some(token) = self.peek_non_space().cloned() else {
            return Err(syntax(self.end, "unclosed action: expected }}"));
        };
        let Tok::Keyword(keyword) = token.tok else {
            let pipe = self.pipeline("command", &Tok::Close)?;
            return Ok(Ok(Node::Action(pipe)));
        };
        self.i += 1;
        match keyword {
            Keyword::If | Keyword::With | Keyword::Range => self.control(keyword, token.at).map(Ok),
            Keyword::Else => Ok(Err(Stop::Else(token.at))),
            Keyword::End => {
                self.close("end")?;
                Ok(Err(Stop::End(token.at)))
            }
            Keyword::Break | Keyword::Continue => {
                let name = keyword.name();
                if self.ranges == 0 {
                    return Err(syntax(
                        token.at,
                        format!("{{{{ {name} }}}} is only allowed inside a range"),
                    ));
                }
                self.close(name)?;
                Ok(Ok(if keyword == Keyword::Break {
                    Node::Break(token.at)
                } else {
                    Node::Continue(token.at)
                }))
            }
            Keyword::Define | Keyword::Template | Keyword::Block => Err(syntax(
                token.at,
                format!(
                    "{{{{ {} }}}} is not supported in override values: there are no named \
                     templates",
                    keyword.name()
                ),
            )),
        }
    }

    /// The `}}` that must follow a keyword such as `end`.
    fn close(&mut self, after: &str) -> Result<(), TemplateError> {
        let at = self.here();
        match self.peek_non_space().map(|t| &t.tok) {
            Some(Tok::Close) => {
                self.i += 1;
                Ok(())
            }
            Some(other) => Err(syntax(
                at,
                format!(
                    "unexpected {} after {after}: expected }}}}",
                    other.describe()
                ),
            )),
            None => Err(syntax(at, "unclosed action: expected }}")),
        }
    }

    /// `if`, `with` or `range`, its keyword read, up to its `{{ end }}`.
    fn control(&mut self, keyword: Keyword, at: Pos) -> Result<Node, TemplateError> {
        let name = keyword.name();
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(TemplateError::TooDeep { at, what: "blocks" });
        }
        let scope = self.vars.len();
        let mut branches = Vec::new();
        let mut otherwise = Vec::new();
        let unclosed = || {
            syntax(
                at,
                format!("the {{{{ {name} }}}} here has no {{{{ end }}}}: the text ended first"),
            )
        };
        loop {
            let pipe = self.pipeline(name, &Tok::Close)?;
            if keyword == Keyword::Range {
                self.ranges += 1;
            }
            let (body, stop) = self.list()?;
            if keyword == Keyword::Range {
                self.ranges -= 1;
            }
            branches.push((pipe, body));
            match stop {
                Stop::Eof => return Err(unclosed()),
                Stop::End(_) => break,
                Stop::Else(else_at) => {
                    if self.else_chains(keyword, else_at)? {
                        continue;
                    }
                    let (list, stop) = self.list()?;
                    otherwise = list;
                    match stop {
                        Stop::Eof => return Err(unclosed()),
                        Stop::End(_) => break,
                        Stop::Else(again) => {
                            return Err(syntax(
                                again,
                                format!(
                                    "a second {{{{ else }}}} in this {{{{ {name} }}}}: expected \
                                     {{{{ end }}}}"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        self.vars.truncate(scope);
        self.depth -= 1;
        Ok(match keyword {
            Keyword::Range => {
                let (pipe, body) = branches.pop().expect("a range has its branch");
                Node::Range {
                    pipe,
                    body,
                    otherwise,
                }
            }
            _ => Node::If {
                with: keyword == Keyword::With,
                branches,
                otherwise,
            },
        })
    }

    /// After an `else` of `keyword` at `else_at`: whether an `if` (`with`) of the same keyword
    /// chains on (read), else reads the `}}` that must follow.
    fn else_chains(&mut self, keyword: Keyword, else_at: Pos) -> Result<bool, TemplateError> {
        let next = self.peek_non_space().cloned();
        match next.map(|t| t.tok) {
            Some(Tok::Keyword(k @ (Keyword::If | Keyword::With))) if k == keyword => {
                self.i += 1;
                Ok(true)
            }
            Some(Tok::Close) => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(syntax(
                else_at,
                format!(
                    "expected }}}} after else{}",
                    match keyword {
                        Keyword::If => " (or else if)",
                        Keyword::With => " (or else with)",
                        _ => "",
                    }
                ),
            )),
        }
    }

    /// A pipeline with its declarations, up to and including `end` (`}}` or `)`).
    fn pipeline(&mut self, context: &str, end: &Tok<'_>) -> Result<Pipe, TemplateError> {
        let at = self.here();
        let (decl, assign) = self.declarations(context)?;
        let mut cmds = Vec::new();
        loop {
            let (cmd, more) = self.command(context, end)?;
            cmds.push(cmd);
            if !more {
                break;
            }
        }
        // The end token, checked by `command`.
        self.i += 1;
        for (stage, cmd) in cmds.iter().enumerate().skip(1) {
            if cmd.args[0].term.is_constant() {
                return Err(syntax(
                    cmd.at,
                    format!(
                        "non executable command in pipeline stage {}: expected a function",
                        stage + 1
                    ),
                ));
            }
        }
        if !assign {
            if self.vars.len() + decl.len() > MAX_VARIABLES {
                return Err(syntax(
                    at,
                    format!("more than {MAX_VARIABLES} variables in scope"),
                ));
            }
            self.vars.extend(decl.iter().cloned());
        }
        Ok(Pipe {
            at,
            decl,
            assign,
            cmds,
        })
    }

    /// `$x :=`, `$x =`, or in a range `$i, $v :=`; nothing when the pipeline starts otherwise.
    fn declarations(&mut self, context: &str) -> Result<(Vec<String>, bool), TemplateError> {
        let start = self.i;
        let Some(Token {
            tok: Tok::Var(first),
            at,
        }) = self.peek_non_space().cloned()
        else {
            return Ok((Vec::new(), false));
        };
        self.i += 1;
        let mut names = vec![first.to_string()];
        if self.peek_non_space().map(|t| &t.tok) == Some(&Tok::Comma) {
            if context != "range" {
                return Err(syntax(
                    at,
                    format!("too many declarations in {context}: only range takes two variables"),
                ));
            }
            self.i += 1;
            match self.peek_non_space().cloned() {
                Some(Token {
                    tok: Tok::Var(second),
                    ..
                }) => {
                    self.i += 1;
                    names.push(second.to_string());
                }
                _ => {
                    return Err(syntax(
                        at,
                        "range can only initialize variables: expected a second $variable",
                    ));
                }
            }
        }
        let assign = match self.peek_non_space().map(|t| &t.tok) {
            Some(Tok::Declare) => false,
            Some(Tok::Assign) => true,
            _ if names.len() == 1 => {
                // Not a declaration: the variable is an operand.
                self.i = start;
                return Ok((Vec::new(), false));
            }
            _ => return Err(syntax(at, "expected := or = after the range variables")),
        };
        self.i += 1;
        for name in &names {
            if name == "$" {
                return Err(syntax(at, "$ cannot be declared or assigned"));
            }
            if assign && !self.vars.iter().rev().any(|v| v == name) {
                return Err(syntax(at, format!("undefined variable {name:?}")));
            }
        }
        Ok((names, assign))
    }

    /// One command; returns whether a `|` followed it (read), else stops before `end`.
    fn command(&mut self, context: &str, end: &Tok<'_>) -> Result<(Cmd, bool), TemplateError> {
        let at = self.here();
        let mut args = Vec::new();
        loop {
            let Some(token) = self.peek_non_space().cloned() else {
                return Err(syntax(self.end, "unclosed action: expected }}"));
            };
            if &token.tok == end || token.tok == Tok::Pipe {
                break;
            }
            args.push(self.operand(end)?);
            match self.peek().map(|t| &t.tok) {
                Some(Tok::Space) => {}
                Some(t) if t == end || *t == Tok::Pipe => {}
                Some(other) => {
                    return Err(syntax(
                        self.here(),
                        format!(
                            "unexpected {} in operand: expected a space, | or {}",
                            other.describe(),
                            end.describe()
                        ),
                    ));
                }
                None => return Err(syntax(self.end, "unclosed action: expected }}")),
            }
        }
        if args.is_empty() {
            return Err(syntax(
                at,
                if context == "command" {
                    "missing value for command: expected an operand".to_string()
                } else {
                    format!("missing value for {context}: expected a pipeline")
                },
            ));
        }
        let more = self.peek().is_some_and(|t| t.tok == Tok::Pipe);
        if more {
            self.i += 1;
        }
        Ok((Cmd { at, args }, more))
    }

    /// `.a.b` right after a term, with no space between.
    fn fields(&mut self) -> Vec<String> {
        let mut fields = Vec::new();
        while let Some(Token {
            tok: Tok::Field(name),
            ..
        }) = self.peek()
        {
            fields.push(name.to_string());
            self.i += 1;
        }
        fields
    }

    fn operand(&mut self, end: &Tok<'_>) -> Result<Operand, TemplateError> {
        let token = self.next().expect("checked by the caller");
        let at = token.at;
        let term = match token.tok {
            Tok::Dot => Term::Dot,
            Tok::Nil => Term::Nil,
            Tok::Bool(b) => Term::Bool(b),
            Tok::Str(s) => Term::Str(s),
            Tok::Char(c) => Term::Int(i64::from(u32::from(c))),
            Tok::Number(text) => number(text).map_err(|m| syntax(at, m))?,
            Tok::Field(first) => {
                let mut fields = vec![first.to_string()];
                fields.extend(self.fields());
                return Ok(Operand {
                    at,
                    term: Term::Field(fields),
                });
            }
            Tok::Var(name) => {
                if !self.vars.iter().rev().any(|v| v == name) {
                    return Err(syntax(at, format!("undefined variable {name:?}")));
                }
                let fields = self.fields();
                return Ok(Operand {
                    at,
                    term: Term::Var(name.to_string(), fields),
                });
            }
            Tok::Ident(name) => Term::Func(
                Func::named(name)
                    .ok_or_else(|| syntax(at, format!("function {name:?} not defined")))?,
            ),
            Tok::LParen => {
                self.parens += 1;
                if self.parens > MAX_DEPTH {
                    return Err(TemplateError::TooDeep {
                        at,
                        what: "parentheses",
                    });
                }
                let pipe = self.pipeline("parenthesized pipeline", &Tok::RParen)?;
                self.parens -= 1;
                let fields = self.fields();
                return Ok(Operand {
                    at,
                    term: Term::Pipe(Box::new(pipe), fields),
                });
            }
            Tok::RParen => return Err(syntax(at, "unexpected \")\": no ( is open")),
            Tok::Close if *end == Tok::RParen => {
                return Err(syntax(at, "unclosed left paren: expected )"));
            }
            other => {
                return Err(syntax(
                    at,
                    format!("unexpected {}: expected an operand", other.describe()),
                ));
            }
        };
        if let Some(Token {
            tok: Tok::Field(_),
            at,
        }) = self.peek()
        {
            return Err(syntax(
                *at,
                "unexpected . after a term: fields are taken of ., $variables and (pipelines)",
            ));
        }
        Ok(Operand { at, term })
    }
}

/// A number literal as Go reads one: an integer unless it has a fraction or an exponent.
fn number(text: &str) -> Result<Term, String> {
    let bad = || format!("bad number syntax: {text:?}");
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.ends_with('i') {
        return Err(format!("{text:?}: complex numbers are not supported"));
    }
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(b) = lower.strip_prefix("0x") {
        (16, b)
    } else if let Some(b) = lower.strip_prefix("0o") {
        (8, b)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b)
    } else if lower.len() > 1
        && lower.starts_with('0')
        && lower.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return Err(bad());
    }
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    let float = radix == 10 && clean.contains(['.', 'e']);
    if float {
        if clean.starts_with(['e']) || clean.contains("_") {
            return Err(bad());
        }
        let value: f64 = clean.parse().map_err(|_| bad())?;
        if !value.is_finite() {
            return Err(format!("{text:?}: the number is too large"));
        }
        return Ok(Term::Float(if negative { -value } else { value }));
    }
    if radix == 16 && clean.contains(['.', 'p']) {
        return Err(format!(
            "{text:?}: hexadecimal floating-point numbers are not supported"
        ));
    }
    let magnitude = u64::from_str_radix(&clean, radix).map_err(|_| bad())?;
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    match value {
        Some(v) => Ok(Term::Int(v)),
        // Go would take it as an unsigned or a float; both are rare in an override value.
        None => Ok(Term::Float(if negative {
            -(magnitude as f64)
        } else {
            magnitude as f64
        })),
    }
}
