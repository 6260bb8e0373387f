//! The vocabulary every part of ditto speaks: what a captured buffer's
//! elements are ([`DType`]), which kernel a dispatch ran ([`KernelName`]),
//! and what a caught panic said ([`panic_message`]).
//!
//! A leaf: it depends on nothing of ditto's, so that argument layout
//! (`ditto-kernels`), the wire format (`ditto-protocol`), the tool library
//! and the collector can share these names without depending on each
//! other. It never does I/O, framing or layout; types here carry serde
//! derives, and the wire encoding they give is pinned by `ditto-protocol`'s
//! tests.

pub mod dtype;
pub mod kernel_name;
pub mod panic;

pub use dtype::{ALL_DTYPES, DType};
pub use kernel_name::KernelName;
pub use panic::panic_message;
