//! The snapshot crate's modules (the store's, the comparison's and what to
//! say when a kernel was never captured) use each other in one direction
//! only. A failure names the circle.

#[path = "../../../tests/common/module_graph.rs"]
mod module_graph;

use module_graph::{assert_no_circle, assert_uses_seen, module_graph};
use std::path::Path;

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reading sees the uses it must see.
    assert_uses_seen(
        &graph,
        &[
            ("store::missing", "store::manifest"),
            ("store::writer", "store::dir_handle"),
            ("store::writer", "store::dispatch_file"),
            ("store::dispatch_file", "store::tensor_file"),
            ("store::tensor_file::reading", "store::error"),
            ("store::tensor_file::writing", "store::placement"),
            ("compare::scan", "compare::closeness"),
            ("diagnose", "store"),
        ],
    );
    assert_no_circle(&graph);
}
