//! Signals and queues: how work reaches the runtime and how its completion
//! is seen.
//! - `signals`          every signal object, its handle table, value and
//!   waiters, dispatch timestamps, the async-events thread
//! - `queues`           AQL rings, the registry of queues, index operations,
//!   one packet processor per hardware queue
//! - `intercept_queues` intercept queues as ROCr 5.2's InterceptQueue: proxy
//!   ring, interceptor chain, overflow, the runtime's async thread
//!
//! `intercept_queues` over `queues` over `signals`.

pub mod intercept_queues;
pub mod queues;
pub mod signals;
