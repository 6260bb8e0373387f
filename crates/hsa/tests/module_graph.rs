//! The HSA ABI crate's modules use each other in one direction only: the
//! generated layouts (`layouts`) use the layout types (`table_layout`),
//! which know nothing of the data; `versions` reads both. A failure names
//! the circle.

#[path = "../../../tests/common/module_graph.rs"]
mod module_graph;

use module_graph::{find_circle, module_graph};
use std::path::Path;

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reading sees the uses it must see.
    for (from, to) in [
        ("layouts", "table_layout"),
        ("versions", "layouts"),
        ("versions", "table_layout"),
        ("table", "signatures"),
        ("signatures", "types"),
        ("versions", "entry_names"),
    ] {
        assert!(
            graph[from].contains(to),
            "{from} -> {to} not seen: {graph:#?}"
        );
    }
    // The layout types are a leaf below the data and its reader.
    for from in [
        "table_layout",
        "table",
        "signatures",
        "entry_names",
        "types",
    ] {
        for to in ["layouts", "versions"] {
            assert!(
                !graph[from].contains(to),
                "{from} uses {to}, which uses it: {graph:#?}"
            );
        }
    }
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "modules use each other in a circle: {}",
            circle.join(" -> ")
        );
    }
}
