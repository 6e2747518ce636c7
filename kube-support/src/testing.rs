//! Helpers for the tests of the xcc crates (feature `test-util`).

use std::sync::{Arc, Mutex};

/// The lines a tracing subscriber wrote: give a clone to the subscriber (`with_writer`), read
/// them with [`Lines::text`] or [`Lines::matching`].
#[derive(Clone, Debug, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// How many lines contain `text`.
    pub fn matching(&self, text: &str) -> usize {
        self.text().lines().filter(|l| l.contains(text)).count()
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Lines {
    type Writer = Lines;
    fn make_writer(&'w self) -> Lines {
        self.clone()
    }
}
