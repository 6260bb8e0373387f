//! The CUDA driver ABI as ditto sees it, and loading a library at run
//! time: the single declaration of every CUDA driver type, constant and
//! entry-point signature that ditto's tool library (`src/cuda/`) and its
//! collector (`crates/cli/src/collector/cuda*.rs`) use, as `crates/hsa` is
//! for HSA. Nothing CUDA is linked: each side dlopens libcuda.so.1 and reads
//! the entry points it needs ([`Library`], [`as_fn`]).
//!
//! - `types`   — handles, pointers, the IPC handle and UUID, constants.
//! - `entries` — the signatures of the driver entry points ditto calls.
//! - `status`  — a CUDA status in words, and the error of a failed call.
//! - `library` — dlopen, dlsym and the dynamic loader's error text (also
//!   what the collector says when the HSA runtime does not load).
//!
//! Used inside applications (the tool library is preloaded into them): no
//! function here panics, and it depends on nothing of ditto's.

pub mod entries;
pub mod library;
pub mod status;
pub mod types;

pub use entries::*;
pub use library::{Library, OpenError, as_fn, dlerror_text};
pub use status::{CallFailed, check, status_name};
pub use types::*;
