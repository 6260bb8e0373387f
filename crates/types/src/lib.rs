//! The vocabulary every part of ditto speaks: what a captured buffer's
//! elements are ([`DType`]), which kernel a dispatch ran ([`KernelName`]),
//! what a caught panic said ([`panic_message`]), and how much ditto logs
//! ([`LogLevel`], `DITTO_LOG`, one level for the tool library and the CLI).
//!
//! A leaf: it depends on nothing of ditto's, so that argument layout
//! (`ditto-kernels`), the wire format (`ditto-protocol`), the tool library
//! and the collector can share these names without depending on each
//! other. It never does I/O, framing or layout; types here carry serde
//! derives, and the wire encoding they give is pinned by `ditto-protocol`'s
//! tests.

pub mod dtype;
pub mod kernel_name;
pub mod log_level;
pub mod panic;

pub use dtype::{ALL_DTYPES, DType};
pub use kernel_name::KernelName;
pub use log_level::LogLevel;
pub use panic::panic_message;
