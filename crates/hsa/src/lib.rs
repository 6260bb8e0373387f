//! The HSA ABI as ditto sees it: types, constants, packets and the API tables
//! handed to tools. Hand-written from ROCm 5.2's headers and the single source
//! of truth for every ditto crate; no crate declares an HSA type of its own.

pub mod loader;
pub mod packet;
pub mod table;
pub mod types;

pub use loader::*;
pub use packet::*;
pub use table::*;
pub use types::*;
