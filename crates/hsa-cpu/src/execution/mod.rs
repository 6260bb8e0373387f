//! Kernel execution on the host.
//! - `dispatch`      how a live kernel runs; running one kernel-dispatch
//!   packet (chunks of work-groups, cooperative grids, blit kernels)
//! - `group_workers` the work-group threads shared by every queue
//!   (DITTO_HSA_CPU_THREADS); knows nothing about kernels
//!
//! `dispatch` over `group_workers`; neither knows about queues.

pub mod dispatch;
pub mod group_workers;
