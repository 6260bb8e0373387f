//! Kernel execution on the host.
//! - `dispatch`      how a live kernel runs; running one kernel-dispatch
//!   packet (chunks of work-groups, cooperative grids, blit kernels)
//! - `group_workers` the work-group threads shared by every queue
//!   (DITTO_HSA_CPU_THREADS); knows nothing about kernels
//! - `kernel_faults` the fault signal handlers: a kernel's SIGSEGV, SIGBUS,
//!   SIGILL or SIGFPE parks its thread and is handed to a reporter; every
//!   other fault goes to the action installed before
//!
//! `dispatch` over `group_workers` and `kernel_faults`; none knows about
//! queues (a queue is an opaque id to `kernel_faults`).

pub mod dispatch;
pub mod group_workers;
pub mod kernel_faults;
