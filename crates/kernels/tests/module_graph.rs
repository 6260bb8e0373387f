//! The kernels crate's modules (names, parameter types, layouts, code-object
//! metadata and DWARF, offload bundles, matching) use each other in one
//! direction only: a kernel's names read its parameter types, never the
//! reverse. A failure names the circle.

#[path = "../../../tests/common/module_graph.rs"]
mod module_graph;

use module_graph::{find_circle, module_graph};
use std::path::Path;

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reading sees the uses it must see.
    for (from, to) in [
        ("names", "param_type"),
        ("layout", "param_type"),
        ("matching", "names"),
        ("metadata", "dwarf"),
    ] {
        assert!(
            graph[from].contains(to),
            "{from} -> {to} not seen: {graph:#?}"
        );
    }
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "modules use each other in a circle: {}",
            circle.join(" -> ")
        );
    }
}
