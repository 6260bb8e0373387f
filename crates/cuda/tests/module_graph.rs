//! The CUDA ABI crate's modules (types, entry points, status names, the
//! run-time loader) use each other in one direction only. A failure names
//! the circle.

#[path = "../../../tests/common/module_graph.rs"]
mod module_graph;

use module_graph::{find_circle, module_graph};
use std::path::Path;

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reading sees the uses it must see.
    for (from, to) in [("entries", "types"), ("status", "entries")] {
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
