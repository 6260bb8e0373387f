//! The protocol crate's modules (the messages, the framing that carries
//! them, the fds that ride with a frame, the fingerprint, the capture
//! selection) use each other in one direction only. A failure names the
//! circle.

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
            ("fd_passing", "framing"),
            ("framing", "messages"),
            ("selection", "messages"),
        ],
    );
    // The messages and the fingerprint are leaves: neither knows how
    // anything travels.
    for leaf in ["messages", "fingerprint"] {
        assert!(graph[leaf].is_empty(), "{leaf} uses {:?}", graph[leaf]);
    }
    assert_no_circle(&graph);
}
