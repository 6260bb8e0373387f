//! Kernel execution on the host: the engine's (crates/gpu-engine), shared
//! with the model GPU, under the paths the rest of the runtime uses.
//! - `dispatch`      how a live kernel runs; running one kernel-dispatch packet
//! - `group_workers` the work-group threads shared by every queue
//! - `kernel_faults` the fault signal handlers

pub use gpu_engine::{dispatch, group_workers, kernel_faults};
