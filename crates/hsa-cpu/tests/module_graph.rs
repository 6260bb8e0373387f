//! The crate's modules use each other in one direction only: the graph of
//! `crate::<module>` paths between its modules (tests/common/module_graph.rs
//! of the workspace root reads it) has no cycle. A failure names one circle.
//! Modules in folders are named by their path (`memory::ipc`); a folder's
//! `mod.rs` is the folder's module.

#[path = "../../../tests/common/module_graph.rs"]
mod module_graph;

use module_graph::{
    Graph, assert_no_circle, assert_uses_seen, code_only, find_circle, module_graph, paths_after,
};
use std::path::Path;

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reading sees the uses it must see (so no circle is missed).
    assert_uses_seen(
        &graph,
        &[
            ("api", "runtime"),
            // Kernel execution is the engine's (crates/gpu-engine): the
            // runtime reaches it through `execution`.
            ("signals_and_queues::packet_processor", "execution"),
            ("memory::ipc", "memory::allocations"),
            ("signals_and_queues::packet_processor", "system_events"),
            ("system_events", "agents"),
            ("memory::allocations", "memory::pool_memfd"),
            ("api", "api::slots"),
            ("api::unimplemented_exports", "api::slots"),
            (
                "signals_and_queues::async_events",
                "signals_and_queues::signals",
            ),
        ],
    );
    assert_no_circle(&graph);
}

#[test]
fn a_circle_is_found_and_named() {
    let mut graph = Graph::new();
    let edge = |g: &mut Graph, a: &str, b: &str| {
        g.entry(a.into()).or_default().insert(b.into());
        g.entry(b.into()).or_default();
    };
    edge(&mut graph, "a", "b");
    edge(&mut graph, "b", "c");
    assert_eq!(find_circle(&graph), None);
    edge(&mut graph, "c", "b");
    assert_eq!(
        find_circle(&graph),
        Some(vec!["b".into(), "c".into(), "b".into()])
    );
}

#[test]
fn only_code_names_modules() {
    let code = code_only(
        "use crate::{a, b::{c, d}, e as f};\n// crate::g\n/* crate::h */ let s = \"crate::i\";\n\
         let c = '\"'; crate::k::l(); let r = r#\"crate::m\"#; fn n<'a>() {}",
    );
    let paths: Vec<String> = paths_after(&code, "crate::")
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(paths, ["a", "b::c", "b::d", "e", "k::l"]);
}
