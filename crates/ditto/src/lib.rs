//! ditto CLI library (in progress).
