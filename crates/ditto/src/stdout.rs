//! The command's results on standard output. A reader that left (a closed
//! pipe: `ditto inspect snap | head -1`) ends the command quietly: the
//! write returns [`ReaderLeft`], which `main` turns into exit 0 with
//! nothing on stderr, as `cat` behaves; any other write error is an error.

use std::io::Write;

/// Standard output was closed by its reader.
#[derive(Debug)]
pub struct ReaderLeft;

impl std::fmt::Display for ReaderLeft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed by its reader")
    }
}

impl std::error::Error for ReaderLeft {}

/// Writes `text` to standard output, whole, and flushes it.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ReaderLeft.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// `text` and a newline.
pub fn emit_line(text: &str) -> anyhow::Result<()> {
    emit(&format!("{text}\n"))
}
