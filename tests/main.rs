//! ditto's end-to-end tests, one test binary: each module is one subject
//! (a command, a capture mode, a failure the tool must survive) and runs
//! the real `ditto`, tool library, CPU runtime and test apps that
//! `cargo build --workspace` left beside this executable (`common`).
//! One binary instead of one per file: the shared helpers compile and the
//! test executable links once. `packet_path_allocations` stays a binary
//! of its own: it installs a counting global allocator.

mod common;
mod kill_trials;

mod accounting;
mod allocation_exports;
mod application_killed;
mod capture_modes;
mod child_processes;
mod cli_help;
mod cli_robustness;
mod collector_killed;
mod concurrency;
mod copy_transport;
mod cuda_injection;
mod cuda_ranks;
mod diagnostics;
mod discrete_gpu;
mod dispatch_selection;
mod fail_open;
mod foreign_collector;
mod hipcc;
mod inspect_and_progress;
mod ipc_mappings;
mod kernel_times;
mod logging;
mod manifest;
mod mcp_http;
mod mcp_server;
mod model_gpu;
mod model_gpu_faults;
mod model_gpu_modes;
mod model_gpu_replay;
mod module_graph;
mod nodes;
mod non_target;
mod out_directory;
mod queue_churn;
mod ranks;
mod ranks_large_buffers;
mod ranks_on_gpus;
mod real_hip;
mod reliability;
mod replay;
mod replay_corrupt;
mod replay_files;
mod replay_stop;
mod rocm_abis;
mod rocm_releases;
mod seed_regression;
mod staging;
mod stale_mapping;
mod sub_allocations;
mod tool_loading;
mod validate;
mod zero_configuration;
