//! The CUDA backend: the same capture as for HSA applications, in CUDA
//! applications, through CUPTI's driver-API launch callbacks. Nothing CUDA
//! is linked: libcuda.so.1 and libcupti are loaded at run time.
//!
//! - `injection` — `InitializeInjection` (CUDA_INJECTION64_PATH), start-up,
//!   the CUPTI callback entry and its re-entry guard, Goodbye at exit.
//! - `cupti`     — finding libcupti, subscribing to the launch callbacks.
//! - `driver`    — the driver entry points the capture path calls (their
//!   types and signatures, and dlopen, are `cuda_abi`'s).
//! - `launch`    — callback and launch-parameter layouts, argument packing.
//! - `kernel_times` — each captured launch's GPU time, from CUPTI's
//!   activity records.
//! - `modules`   — the cubins of target kernels, from CUPTI's module-loaded
//!   callback (replay captures only).
//! - `hold`      — a target launch held inside its launch call: stream
//!   synchronised, buffers described and exported, Dispatch sent, Ack
//!   awaited;
//! - `access`    — the driver as the capture core reads buffers through it.
//!
//! Options come only through [`crate::options::Options`].

pub mod access;
pub mod cupti;
pub mod driver;
pub mod hold;
pub mod injection;
pub mod kernel_times;
pub mod launch;
pub mod modules;
