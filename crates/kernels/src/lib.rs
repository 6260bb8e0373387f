//! Kernel names and argument layouts (in progress).
