//! Signals and queues: how work reaches the runtime and how its completion
//! is seen.
//! - `signals`          every signal object, its handle table, value and
//!   waiters (and the last dispatch's timestamps it carries)
//! - `async_events`     the runtime's async-events thread: signal handlers,
//!   intercept queues' async doorbells
//! - `queues`           AQL rings, the registry of queues, index operations,
//!   one packet processor per hardware queue
//! - `intercept_queues` intercept queues as ROCr 5.2's InterceptQueue: proxy
//!   ring, interceptor chain, overflow (its retries on the async thread)
//! - `profiling`        `hsa_amd_profiling_*`: which queues record dispatch
//!   timestamps, how a tool reads them
//!
//! `intercept_queues` over `queues` and `async_events`, both over `signals`;
//! `profiling` over `queues` and `signals`.

pub mod async_events;
pub mod intercept_queues;
pub mod profiling;
pub mod queues;
pub mod signals;
