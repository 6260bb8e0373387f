//! The `ditto` command's modules use each other in one direction only
//! (the collector's and the commands' helpers included). A failure names
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
            ("collector::connection", "collector::capture"),
            ("collector::connection", "collector::frame_reader"),
            ("collector::connection", "collector::miss_accounting"),
            ("collector::capture", "collector::attachment"),
            ("collector::capture", "collector::copy_files"),
            ("collector::capture", "collector::capture_error"),
            ("collector::listener", "collector::connection"),
            ("collector::hsa", "collector::hsa_runtime"),
            ("collector::cuda", "collector::cuda_driver"),
            ("commands", "collector::hsa"),
            ("commands", "runtime_choice"),
            ("kernel_list", "units"),
            ("commands", "run_outcome"),
            ("commands", "stop_signals"),
            ("commands", "program_file"),
            ("run_outcome", "collector"),
            ("stop_signals", "launch"),
        ],
    );
    assert_no_circle(&graph);
}
