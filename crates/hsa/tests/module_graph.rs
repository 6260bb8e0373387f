//! The HSA ABI crate's modules use each other in one direction only: the
//! generated layouts (`layouts`) use the layout types (`table_layout`),
//! which know nothing of the data; `versions` reads both. A failure names
//! the circle.

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
            ("layouts", "table_layout"),
            ("versions", "layouts"),
            ("versions", "table_layout"),
            ("table", "signatures"),
            ("signatures", "types"),
            ("versions", "entry_names"),
        ],
    );
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
    assert_no_circle(&graph);
}
