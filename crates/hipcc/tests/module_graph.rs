//! `ditto hipcc`'s modules (arguments, the host build, registration,
//! embedding, headers) use each other in one direction only. A failure
//! names the circle.

#[path = "../../../tests/common/module_graph.rs"]
mod module_graph;

use module_graph::{assert_no_circle, module_graph};
use std::path::Path;

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() >= 6, "the modules are read: {graph:#?}");
    assert_no_circle(&graph);
}
