//! What tools are served and how they are loaded, and the test trace.
//! - `served_abi` which ROCm release's ABI the runtime serves
//!   (DITTO_HSA_CPU_ABI, default 7.2) and how that release loads tools
//! - `api_tables` the served API tables, laid out as that release's (by
//!   name, from crates/hsa's measured layouts)
//! - `loading`    HSA_TOOLS_LIB and HSA_AMD_TOOL_PRIORITY discovery,
//!   OnLoad/OnUnload (ROCr `Runtime::LoadTools`)
//! - `trace`      DITTO_HSA_CPU_TRACE: packets and signal calls, for tests
//!
//! `api_tables` over `served_abi`; `loading` and `trace` use no other
//! module of the crate.

pub mod api_tables;
pub mod loading;
pub mod served_abi;
pub mod trace;
