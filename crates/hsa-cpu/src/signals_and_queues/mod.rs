//! Signals and queues: how work reaches the runtime and how its completion
//! is seen.
//! - `signals`          every signal object, its handle table, value and
//!   waiters (and the last dispatch's timestamps it carries)
//! - `async_events`     the runtime's async-events thread: signal handlers,
//!   intercept queues' async doorbells
//! - `aql_rings`        one ring of AQL packets: its memory, `hsa_queue_t`,
//!   indices and doorbell
//! - `packet_processor` the thread of each hardware queue: what it does with
//!   every packet, timestamps, completion
//! - `queues`           the registry of queues, queue sizes, create and
//!   destroy, index operations
//! - `intercept_queues` intercept queues as ROCr 5.2's InterceptQueue: proxy
//!   ring, interceptor chain, overflow (its retries on the async thread)
//! - `profiling`        `hsa_amd_profiling_*`: which queues record dispatch
//!   timestamps, how a tool reads them
//!
//! `intercept_queues` over `queues` over `packet_processor` over `aql_rings`
//! over `signals`; `intercept_queues` also over `async_events` (over
//! `signals`); `profiling` over `queues` and `signals`.

pub mod aql_rings;
pub mod async_events;
pub mod intercept_queues;
pub mod packet_processor;
pub mod profiling;
pub mod queues;
pub mod signals;
