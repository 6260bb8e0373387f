//! ditto's snapshots, a leaf the `ditto` command, the fuzz targets and
//! the Python package's rules stand on: the store (a snapshot directory
//! written as dispatches arrive and read back, its manifest and journal),
//! the comparison of two snapshots with numeric tolerances, and what to
//! say when the kernel asked for was never captured. Never talks to a
//! socket, a runtime or a terminal.

pub mod compare;
pub mod diagnose;
pub mod store;
