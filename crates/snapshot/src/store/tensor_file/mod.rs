//! One dispatch's tensor file (safetensors) without a copy of its data in
//! memory: a gigabyte captured costs no second gigabyte in the collector,
//! and a gigabyte compared is not copied at all. Owns the byte layout of a
//! tensor file (through the safetensors crate's own header code); knows
//! nothing of manifests or directories.
//!
//! This file is the module map and its re-exports only:
//! - [`writing`]: the header laid out ([`encode`]) and the file written
//!   from memory or from streamed sources ([`write_file`]);
//! - [`reading`]: the wanted tensors read back, mapped or read
//!   ([`read_tensors`], [`TensorBytes`]);
//! - [`zeroed`]: zeroed buffers for bytes on their way in or out
//!   ([`zeroed_buffer`]).

mod reading;
mod writing;
mod zeroed;

pub use reading::{TensorBytes, Wanted, read_tensors};
pub use writing::{Layout, TensorPart, TensorSource, WriteError, encode, write_file};
pub use zeroed::zeroed_buffer;

#[cfg(test)]
use reading::read_tensors_mapping_from;

#[cfg(test)]
mod tests;
