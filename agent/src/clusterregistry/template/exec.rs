//! Runs a parsed template over data, as Go's `text/template` does over
//! `map[string]interface{}` and structs. Bounded: every step is counted, every string made is
//! measured, and recursion follows the tree, whose depth the parser bounds.

use std::{collections::BTreeMap, ops::Deref, rc::Rc};

use super::{
    MAX_OUTPUT, MAX_STEPS, Pos, TemplateError,
    format::{self, go_type},
    funcs,
    parse::{Cmd, Node, Operand, Pipe, Term, Tree},
};

/// The data a template runs over: JSON values, and structs (whose misspelt fields are errors,
/// where a missing map key is `<no value>`).
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Data>),
    Map(BTreeMap<String, Data>),
    Struct(Vec<(&'static str, Data)>),
}

impl From<&serde_json::Value> for Data {
    /// As Kubernetes decodes unstructured objects: integers as int64, other numbers as float64.
    fn from(value: &serde_json::Value) -> Data {
        use serde_json::Value;
        match value {
            Value::Null => Data::Nil,
            Value::Bool(b) => Data::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Data::Int(i),
                None => Data::Float(n.as_f64().unwrap_or_default()),
            },
            Value::String(s) => Data::Str(s.clone()),
            Value::Array(items) => Data::List(items.iter().map(Data::from).collect()),
            Value::Object(map) => Data::Map(
                map.iter()
                    .map(|(k, v)| (k.clone(), Data::from(v)))
                    .collect(),
            ),
        }
    }
}

/// Text borrowed from the template or data, or made while rendering.
#[derive(Debug, Clone)]
pub(super) enum Text<'a> {
    Ref(&'a str),
    Own(Rc<str>),
}

impl Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Text::Ref(s) => s,
            Text::Own(s) => s,
        }
    }
}

/// A value while rendering.
#[derive(Debug, Clone)]
pub(super) enum Val<'a> {
    /// What a missing map key gives (Go's invalid value): prints as `<no value>`.
    Missing,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Text<'a>),
    List(&'a [Data]),
    Map(&'a BTreeMap<String, Data>),
    Struct(&'a [(&'static str, Data)]),
}

impl<'a> Val<'a> {
    pub(super) fn of(data: &'a Data) -> Val<'a> {
        match data {
            Data::Nil => Val::Nil,
            Data::Bool(b) => Val::Bool(*b),
            Data::Int(i) => Val::Int(*i),
            Data::Float(f) => Val::Float(*f),
            Data::Str(s) => Val::Str(Text::Ref(s)),
            Data::List(items) => Val::List(items),
            Data::Map(map) => Val::Map(map),
            Data::Struct(fields) => Val::Struct(fields),
        }
    }

    pub(super) fn string(s: String) -> Val<'a> {
        Val::Str(Text::Own(Rc::from(s)))
    }

    /// Go's truth: false, 0, nil and empty are false; structs are true.
    pub(super) fn truth(&self) -> bool {
        match self {
            Val::Missing | Val::Nil => false,
            Val::Bool(b) => *b,
            Val::Int(i) => *i != 0,
            Val::Float(f) => *f != 0.0,
            Val::Str(s) => !s.is_empty(),
            Val::List(items) => !items.is_empty(),
            Val::Map(map) => !map.is_empty(),
            Val::Struct(_) => true,
        }
    }
}

/// Renders `tree` over `data`.
pub(super) fn render(tree: &Tree, data: &Data) -> Result<String, TemplateError> {
    let root = Val::of(data);
    let mut state = State {
        out: String::new(),
        steps: 0,
        vars: vec![("$", root.clone())],
    };
    state.list(&root, &tree.nodes)?;
    Ok(state.out)
}

/// What a list of nodes asks of the enclosing range.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Next,
    Break,
    Continue,
}

struct State<'a> {
    out: String,
    steps: u64,
    vars: Vec<(&'a str, Val<'a>)>,
}

/// Runs `iteration` of a range on each `(key, element)` of `items` until one breaks or fails.
fn each<'a>(
    state: &mut State<'a>,
    iteration: &mut impl FnMut(&mut State<'a>, Val<'a>, Val<'a>) -> Result<Flow, TemplateError>,
    items: impl Iterator<Item = (Val<'a>, Val<'a>)>,
) -> Result<(), TemplateError> {
    for (key, elem) in items {
        if iteration(state, key, elem)? == Flow::Break {
            break;
        }
    }
    Ok(())
}

fn exec_error(at: Pos, message: impl Into<String>) -> TemplateError {
    TemplateError::Exec {
        at,
        message: message.into(),
    }
}

impl<'a> State<'a> {
    fn step(&mut self, at: Pos, cost: u64) -> Result<(), TemplateError> {
        self.steps += cost;
        if self.steps > MAX_STEPS {
            return Err(TemplateError::TooManySteps { at });
        }
        Ok(())
    }

    /// Counts the work of handling `len` bytes of text.
    fn bytes(&mut self, at: Pos, len: usize) -> Result<(), TemplateError> {
        if len > MAX_OUTPUT {
            return Err(TemplateError::TooLong { at });
        }
        self.step(at, (len / 256) as u64)
    }

    fn write(&mut self, at: Pos, text: &str) -> Result<(), TemplateError> {
        if self.out.len() + text.len() > MAX_OUTPUT {
            return Err(TemplateError::TooLong { at });
        }
        self.bytes(at, text.len())?;
        self.out.push_str(text);
        Ok(())
    }

    fn list(&mut self, dot: &Val<'a>, nodes: &'a [Node]) -> Result<Flow, TemplateError> {
        for node in nodes {
            let flow = self.node(dot, node)?;
            if flow != Flow::Next {
                return Ok(flow);
            }
        }
        Ok(Flow::Next)
    }

    fn node(&mut self, dot: &Val<'a>, node: &'a Node) -> Result<Flow, TemplateError> {
        match node {
            Node::Text { at, text } => {
                self.step(*at, 1)?;
                self.write(*at, text)?;
            }
            Node::Action(pipe) => {
                self.step(pipe.at, 1)?;
                let value = self.pipe(dot, pipe)?;
                if pipe.decl.is_empty() {
                    let text = format::print(&value);
                    self.write(pipe.at, &text)?;
                }
            }
            Node::If {
                with,
                branches,
                otherwise,
            } => {
                let scope = self.vars.len();
                let mut taken = None;
                for (pipe, body) in branches {
                    self.step(pipe.at, 1)?;
                    let value = self.pipe(dot, pipe)?;
                    if value.truth() {
                        taken = Some((value, body));
                        break;
                    }
                }
                let flow = match taken {
                    Some((value, body)) if *with => self.list(&value, body)?,
                    Some((_, body)) => self.list(dot, body)?,
                    None => self.list(dot, otherwise)?,
                };
                self.vars.truncate(scope);
                return Ok(flow);
            }
            Node::Range {
                pipe,
                body,
                otherwise,
            } => return self.range(dot, pipe, body, otherwise),
            Node::Break(_) => return Ok(Flow::Break),
            Node::Continue(_) => return Ok(Flow::Continue),
        }
        Ok(Flow::Next)
    }

    fn range(
        &mut self,
        dot: &Val<'a>,
        pipe: &'a Pipe,
        body: &'a [Node],
        otherwise: &'a [Node],
    ) -> Result<Flow, TemplateError> {
        self.step(pipe.at, 1)?;
        let scope = self.vars.len();
        let value = self.commands(dot, pipe)?;
        // Declared variables live for the whole range; the body's own ones per iteration.
        if !pipe.assign {
            for name in &pipe.decl {
                self.vars.push((name, Val::Missing));
            }
        }
        let mut ran = false;
        let mut iteration = |state: &mut State<'a>, key: Val<'a>, elem: Val<'a>| {
            ran = true;
            state.step(pipe.at, 1)?;
            match pipe.decl.as_slice() {
                [] => {}
                [v] => state.set(v, elem.clone(), false),
                [k, v] => {
                    state.set(k, key, false);
                    state.set(v, elem.clone(), false);
                }
                _ => unreachable!("the parser allows two variables at most"),
            }
            let inner = state.vars.len();
            let flow = state.list(&elem, body);
            state.vars.truncate(inner);
            flow
        };
        match &value {
            Val::List(items) => each(
                self,
                &mut iteration,
                (items.iter().enumerate()).map(|(i, item)| (Val::Int(i as i64), Val::of(item))),
            )?,
            Val::Map(map) => each(
                self,
                &mut iteration,
                (map.iter()).map(|(key, item)| (Val::Str(Text::Ref(key)), Val::of(item))),
            )?,
            Val::Int(_) if pipe.decl.len() > 1 => {
                return Err(exec_error(
                    pipe.at,
                    "can't use two variables to range over an integer",
                ));
            }
            Val::Int(n) => each(
                self,
                &mut iteration,
                (0..*n).map(|i| (Val::Int(i), Val::Int(i))),
            )?,
            Val::Missing | Val::Nil => {}
            other => {
                return Err(exec_error(
                    pipe.at,
                    format!(
                        "range can't iterate over a value of type {}",
                        go_type(other)
                    ),
                ));
            }
        }
        let flow = if ran {
            Flow::Next
        } else {
            self.list(dot, otherwise)?
        };
        self.vars.truncate(scope);
        // break and continue end at their range; one in `else` belongs to an outer range.
        Ok(if ran { Flow::Next } else { flow })
    }

    /// Declares (`push`) or assigns the innermost variable `name`.
    fn set(&mut self, name: &'a str, value: Val<'a>, declare: bool) {
        if declare {
            self.vars.push((name, value));
        } else if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| *n == name) {
            slot.1 = value;
        }
    }

    /// A pipeline's value, with its declarations made.
    fn pipe(&mut self, dot: &Val<'a>, pipe: &'a Pipe) -> Result<Val<'a>, TemplateError> {
        let value = self.commands(dot, pipe)?;
        for name in &pipe.decl {
            self.set(name, value.clone(), !pipe.assign);
        }
        Ok(value)
    }

    /// A pipeline's value: each command's value is the last argument of the next.
    fn commands(&mut self, dot: &Val<'a>, pipe: &'a Pipe) -> Result<Val<'a>, TemplateError> {
        let mut value = None;
        for cmd in &pipe.cmds {
            value = Some(self.command(dot, cmd, value)?);
        }
        Ok(value.unwrap_or(Val::Missing))
    }

    fn command(
        &mut self,
        dot: &Val<'a>,
        cmd: &'a Cmd,
        piped: Option<Val<'a>>,
    ) -> Result<Val<'a>, TemplateError> {
        self.step(cmd.at, 1)?;
        let first = &cmd.args[0];
        let has_args = cmd.args.len() > 1 || piped.is_some();
        match &first.term {
            Term::Func(f) => return self.call(dot, *f, first.at, &cmd.args[1..], piped),
            Term::Nil => return Err(exec_error(first.at, "nil is not a command")),
            Term::Field(fields) | Term::Var(_, fields) | Term::Pipe(_, fields)
                if has_args && !fields.is_empty() =>
            {
                let name = fields.last().expect("not empty");
                return Err(exec_error(
                    first.at,
                    format!("{name} is not a method but has arguments"),
                ));
            }
            _ if has_args => {
                return Err(exec_error(
                    first.at,
                    "can't give argument to non-function: only functions take arguments",
                ));
            }
            _ => {}
        }
        self.operand(dot, first)
    }

    /// Value of an operand. A function as an operand is called without arguments.
    fn operand(&mut self, dot: &Val<'a>, operand: &'a Operand) -> Result<Val<'a>, TemplateError> {
        let at = operand.at;
        Ok(match &operand.term {
            Term::Dot => dot.clone(),
            Term::Nil => Val::Nil,
            Term::Bool(b) => Val::Bool(*b),
            Term::Int(i) => Val::Int(*i),
            Term::Float(f) => Val::Float(*f),
            Term::Str(s) => Val::Str(Text::Ref(s)),
            Term::Field(fields) => self.fields(dot.clone(), fields, at)?,
            Term::Var(name, fields) => {
                let value = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| exec_error(at, format!("undefined variable {name:?}")))?;
                self.fields(value, fields, at)?
            }
            Term::Pipe(pipe, fields) => {
                let value = self.pipe(dot, pipe)?;
                self.fields(value, fields, at)?
            }
            Term::Func(f) => self.call(dot, *f, at, &[], None)?,
        })
    }

    fn fields(
        &mut self,
        mut value: Val<'a>,
        fields: &'a [String],
        at: Pos,
    ) -> Result<Val<'a>, TemplateError> {
        for name in fields {
            value = match value {
                Val::Map(map) => map.get(name.as_str()).map_or(Val::Missing, Val::of),
                Val::Struct(items) => items
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| Val::of(v))
                    .ok_or_else(|| exec_error(at, format!("can't evaluate field {name}")))?,
                Val::Missing => Val::Missing,
                Val::Nil => {
                    return Err(exec_error(at, format!("nil pointer evaluating .{name}")));
                }
                other => {
                    return Err(exec_error(
                        at,
                        format!("can't evaluate field {name} in type {}", go_type(&other)),
                    ));
                }
            };
        }
        Ok(value)
    }

    fn call(
        &mut self,
        dot: &Val<'a>,
        f: funcs::Func,
        at: Pos,
        args: &'a [Operand],
        piped: Option<Val<'a>>,
    ) -> Result<Val<'a>, TemplateError> {
        if matches!(f, funcs::Func::And | funcs::Func::Or) {
            // Go evaluates these lazily, and returns the argument that decided.
            let and = f == funcs::Func::And;
            if args.is_empty() && piped.is_none() {
                return Err(exec_error(
                    at,
                    format!(
                        "wrong number of args for {}: want at least 1 got 0",
                        f.name()
                    ),
                ));
            }
            let mut last = Val::Missing;
            for arg in args {
                last = self.operand(dot, arg)?;
                if last.truth() != and {
                    return Ok(last);
                }
            }
            return Ok(piped.unwrap_or(last));
        }
        let mut values = Vec::with_capacity(args.len() + 1);
        for arg in args {
            values.push(self.operand(dot, arg)?);
        }
        values.extend(piped);
        let mut size = 0;
        for value in &mut values {
            // A missing value is passed to functions as nil, as Go does.
            if let Val::Missing = value {
                *value = Val::Nil;
            }
            if let Val::Str(s) = value {
                size += s.len();
            }
        }
        self.bytes(at, size.min(MAX_OUTPUT))?;
        let result = funcs::call(f, values).map_err(|failure| match failure {
            funcs::Failure::Message(message) => exec_error(at, message),
            funcs::Failure::TooLong => TemplateError::TooLong { at },
        })?;
        if let Val::Str(s) = &result {
            self.bytes(at, s.len())?;
        }
        Ok(result)
    }
}
