//! The HSA backend: how the tool gets into an HSA application and what it
//! does there. `registration` (OnLoad/OnUnload, start-up state machine),
//! `tool` (the one state object and its runtime services for the worker),
//! `wraps` (API-table entries ditto replaces), `packet` (the intercept
//! queue's packet callback: the held-barrier rewrite).
//!
//! Every runtime call goes through the ORIGINAL table entries saved at
//! OnLoad, never through the live table, so the tool never re-enters its
//! own wraps and needs no per-thread reentrancy flag.

pub mod packet;
pub mod registration;
pub mod tool;
pub mod wraps;

pub use tool::HsaTool;
