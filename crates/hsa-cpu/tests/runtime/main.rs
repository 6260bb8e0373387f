//! Integration tests of the CPU HSA runtime through its exported functions
//! (the trampolines, so every call goes through the live API table). Tests
//! that need a fresh process (tools, IPC) re-run this binary with one
//! `#[ignore]`d child scenario selected.
#![allow(clippy::field_reassign_with_default)]
// RecordLog keeps kernarg blocks boxed: their addresses must not move.
#![allow(clippy::vec_box)]

mod alloc_count;
mod c_application;
mod common;
#[path = "../../../../tests/common/cpu_features.rs"]
mod cpu_features;
mod device_memory;
mod execution;
mod exports;
mod faults;
mod gpus;
mod intercept;
mod ipc;
mod kernels;
mod loader;
mod memory;
mod profiling;
mod queues;
mod served_abi;
mod signals;
mod tools;
mod vmem;
