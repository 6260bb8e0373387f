//! The command's results on standard output. A reader that left (a closed
//! pipe: `ditto inspect snap | head -1`, `ditto compare A B | true`) is not
//! an error and changes nothing else: what would have been written is
//! dropped, the command goes on to its end, and its exit status is its
//! verdict, as if the reader had stayed. Any other write error is an error.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output's reader has left: later results are dropped.
static READER_LEFT: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output, whole, and flushes it; nothing when
/// the reader has left.
pub fn emit(text: &str) -> anyhow::Result<()> {
    if READER_LEFT.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            READER_LEFT.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// `text` and a newline.
pub fn emit_line(text: &str) -> anyhow::Result<()> {
    emit(&format!("{text}\n"))
}
