//! What can go wrong with a template, and the bounds that keep a hostile one harmless.

use std::fmt;

/// Deepest nesting of `if`/`range`/`with` blocks, and of parentheses in one action.
pub const MAX_DEPTH: usize = 32;
/// Longest text a rendering (or any string made on the way) may produce, in bytes.
pub const MAX_OUTPUT: usize = 1 << 20;
/// Most evaluation steps of one rendering: actions, commands, loop iterations, and a step per
/// 256 bytes of text handled by functions.
pub const MAX_STEPS: u64 = 200_000;
/// Most variables in scope at one place of a template (each lookup searches them).
pub const MAX_VARIABLES: usize = 1000;
/// Widest width or precision a `printf` verb may ask for.
pub const MAX_WIDTH: usize = 1000;

/// A place in the template text: line and column (in characters), both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// Why a template does not parse or does not render. Messages name types and positions, never
/// the values of the data: an object may be a Secret, and errors go to logs and Events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The text is not a template: what was found at `at`, and what was expected there.
    #[error("{at}: {message}")]
    Syntax { at: Pos, message: String },
    /// Blocks or parentheses nest deeper than [`MAX_DEPTH`].
    #[error("{at}: {what} are nested more than {MAX_DEPTH} deep")]
    TooDeep { at: Pos, what: &'static str },
    /// The template parsed but failed on this data; `at` is the action that failed. The message
    /// reads as Go's, without the position, as override errors always have.
    #[error("{message}")]
    Exec { at: Pos, message: String },
    /// The output, or a string made on the way, would pass [`MAX_OUTPUT`].
    #[error("{at}: the output would be longer than {MAX_OUTPUT} bytes")]
    TooLong { at: Pos },
    /// The rendering took more than [`MAX_STEPS`] steps.
    #[error("{at}: the rendering takes more than {MAX_STEPS} steps")]
    TooManySteps { at: Pos },
}

impl TemplateError {
    /// Where in the template text the error is. Override errors keep the text they always had,
    /// which names no position for a failed rendering; this is for the tests and future callers.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "override errors keep their text without it")
    )]
    pub fn position(&self) -> Pos {
        match self {
            TemplateError::Syntax { at, .. }
            | TemplateError::TooDeep { at, .. }
            | TemplateError::Exec { at, .. }
            | TemplateError::TooLong { at }
            | TemplateError::TooManySteps { at } => *at,
        }
    }
}

pub(super) fn syntax(at: Pos, message: impl Into<String>) -> TemplateError {
    TemplateError::Syntax {
        at,
        message: message.into(),
    }
}
