//! The kernels crate's modules (names, parameter types, layouts, code-object
//! metadata and DWARF, offload bundles, matching) use each other in one
//! direction only: a kernel's names read its parameter types, never the
//! reverse. A failure names the circle.

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
            ("names", "param_type"),
            ("layout", "param_type"),
            ("matching", "names"),
            ("metadata", "dwarf"),
        ],
    );
    assert_no_circle(&graph);
}
