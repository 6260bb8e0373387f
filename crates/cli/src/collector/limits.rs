//! What the collector accepts of the strings and lists in a tool's
//! messages. The collector keeps many of them (kernel names in every
//! dispatch record, the Hello in the run record, details of missing
//! dispatches), so each is bounded: a name or other string at most
//! [`MAX_NAME_BYTES`], a command-line argument at most what Linux allows
//! one, IPC handles, buffers per dispatch and kernels per Goodbye far
//! above what a real one holds. Owns the limits, the checks (a
//! [`LimitError`] that names the field, its size and the limit; never the
//! text itself) and [`short`], the form in which a tool's name appears in
//! messages.

use ditto_protocol::{Dispatch, Goodbye, Hello, Missed, NeverLoaded};

/// Bytes of a kernel name (mangled or demangled) or another string.
pub const MAX_NAME_BYTES: usize = 64 << 10;
/// Bytes of one command-line argument (Linux's MAX_ARG_STRLEN).
pub const MAX_ARGUMENT_BYTES: usize = 128 << 10;
/// Arguments of a command line.
pub const MAX_ARGUMENTS: usize = 1 << 16;
/// Bytes of an IPC handle (HSA's are 32, CUDA's 64).
pub const MAX_HANDLE_BYTES: usize = 1 << 10;
/// Buffers of one dispatch (a kernel's pointer arguments, before and
/// after; CUDA's 32 KiB of parameters hold at most 4,095 pointers).
pub const MAX_BUFFERS: usize = 1 << 13;
/// Kernels a Goodbye lists.
pub const MAX_KERNELS: usize = 1 << 16;

/// A tool's text as messages quote it: whole when short, else its first
/// 120 characters and how long it was.
pub fn short(text: &str) -> String {
    const SHOWN: usize = 120;
    if text.len() <= SHOWN + 40 {
        return text.to_string();
    }
    let mut end = SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// A string or a list of a message past its limit: which, how large, and
/// the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("its {what} is {len} bytes long, more than the {limit} allowed")]
    TooLong {
        what: String,
        len: usize,
        limit: usize,
    },
    #[error("it holds {n} {what}, more than the {limit} allowed")]
    TooMany {
        what: &'static str,
        n: usize,
        limit: usize,
    },
    #[error(
        "argument {arg}'s IPC handle is {len} bytes long, more than the {MAX_HANDLE_BYTES} allowed"
    )]
    HandleTooLong { arg: u32, len: usize },
}

fn string(what: &str, text: &str, limit: usize) -> Result<(), LimitError> {
    if text.len() > limit {
        return Err(LimitError::TooLong {
            what: what.to_string(),
            len: text.len(),
            limit,
        });
    }
    Ok(())
}

fn count(what: &'static str, n: usize, limit: usize) -> Result<(), LimitError> {
    if n > limit {
        return Err(LimitError::TooMany { what, n, limit });
    }
    Ok(())
}

fn kernel(what: &str, k: &ditto_protocol::KernelName) -> Result<(), LimitError> {
    string(&format!("{what} (mangled)"), &k.mangled, MAX_NAME_BYTES)?;
    string(&format!("{what} (demangled)"), &k.demangled, MAX_NAME_BYTES)
}

/// Checks a Hello: "its kernel query is N bytes long, more than ...".
pub fn check_hello(h: &Hello) -> Result<(), LimitError> {
    string("run name", &h.run, MAX_NAME_BYTES)?;
    string("kernel query", &h.kernel_query, MAX_NAME_BYTES)?;
    string("working directory", &h.working_directory, MAX_NAME_BYTES)?;
    count(
        "command-line arguments",
        h.command_line.len(),
        MAX_ARGUMENTS,
    )?;
    for (i, a) in h.command_line.iter().enumerate() {
        string(&format!("command-line argument {i}"), a, MAX_ARGUMENT_BYTES)?;
    }
    Ok(())
}

/// Checks a Dispatch: its kernel's names, and its buffers' names and handles.
pub fn check_dispatch(d: &Dispatch) -> Result<(), LimitError> {
    kernel("kernel name", &d.kernel)?;
    count("buffers", d.buffers.len(), MAX_BUFFERS)?;
    for b in &d.buffers {
        if let Some(name) = &b.name {
            string(
                &format!("argument {}'s name", b.arg_index),
                name,
                MAX_NAME_BYTES,
            )?;
        }
        let handle = match &b.transport {
            ditto_protocol::Transport::Ipc { handle, .. }
            | ditto_protocol::Transport::CudaIpc { handle, .. } => handle.len(),
            _ => 0,
        };
        if handle > MAX_HANDLE_BYTES {
            return Err(LimitError::HandleTooLong {
                arg: b.arg_index,
                len: handle,
            });
        }
    }
    Ok(())
}

/// Checks a Goodbye's list of dispatched kernels.
pub fn check_goodbye(g: &Goodbye) -> Result<(), LimitError> {
    count("kernels", g.dispatched.len(), MAX_KERNELS)?;
    for (k, _) in &g.dispatched {
        kernel("kernel name", k)?;
    }
    Ok(())
}

pub fn check_missed(m: &Missed) -> Result<(), LimitError> {
    string("detail", &m.detail, MAX_NAME_BYTES)
}

pub fn check_never_loaded(n: &NeverLoaded) -> Result<(), LimitError> {
    string("runtime path", &n.runtime, MAX_NAME_BYTES)?;
    string("reason", &n.reason, MAX_NAME_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_and_long_text_is_cut_with_its_length() {
        assert_eq!(short("reduce_sum(float*)"), "reduce_sum(float*)");
        let long = "é".repeat(1000);
        let s = short(&long);
        assert!(s.ends_with("… (2000 bytes)"), "{s}");
        assert!(s.len() < 200, "{s}");
    }

    #[test]
    fn a_string_at_the_limit_passes_and_one_byte_more_is_refused_naming_field_and_sizes() {
        let mut h = ditto_protocol::Hello {
            version: ditto_protocol::PROTOCOL_VERSION,
            pid: 1,
            run: "r".repeat(MAX_NAME_BYTES),
            kernel_query: "k".into(),
            command_line: vec!["a".repeat(MAX_ARGUMENT_BYTES)],
            working_directory: "/".into(),
            rank: None,
            api: ditto_protocol::Api::Hsa,
        };
        assert_eq!(check_hello(&h), Ok(()));
        h.command_line.push("b".repeat(MAX_ARGUMENT_BYTES + 1));
        let check_hello = |h: &Hello| check_hello(h).map_err(|e| e.to_string());
        assert_eq!(
            check_hello(&h),
            Err(
                "its command-line argument 1 is 131073 bytes long, more than the 131072 allowed"
                    .into()
            )
        );
        h.run.push('r');
        assert_eq!(
            check_hello(&h),
            Err("its run name is 65537 bytes long, more than the 65536 allowed".into())
        );
    }
}
