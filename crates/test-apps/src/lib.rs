//! Test applications (in progress).
