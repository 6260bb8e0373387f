//! ditto tool library (in progress).
