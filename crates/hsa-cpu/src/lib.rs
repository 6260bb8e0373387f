//! CPU HSA runtime (in progress).
