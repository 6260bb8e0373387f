//! The tool library's modules use each other in one direction only, and
//! the folders keep to the plan of src/lib.rs: the backend-neutral core
//! (`capture`) uses neither backend, and neither backend uses the other.
//! A failure names the circle or the use.

use crate::common::module_graph::{assert_no_circle, assert_uses_seen, module_graph};
use std::path::Path;

#[test]
fn the_core_uses_no_backend_and_no_module_is_in_a_circle() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reading sees the uses it must see, through `crate::` and `super::`.
    assert_uses_seen(
        &graph,
        &[
            ("hsa::queues", "hsa::packet"),
            ("hsa::wraps", "hsa::tool"),
            ("capture::describe", "capture::access"),
            ("cuda::hold", "capture::describe"),
            ("hsa::worker", "capture::accounting"),
        ],
    );
    let folder = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    for (module, used) in &graph {
        for target in used {
            let forbidden = match folder(module).as_str() {
                "capture" => ["hsa", "cuda"].contains(&folder(target).as_str()),
                "hsa" => folder(target) == "cuda",
                "cuda" => folder(target) == "hsa",
                _ => ["hsa", "cuda"].contains(&folder(target).as_str()),
            };
            assert!(!forbidden, "{module} uses {target}");
        }
    }
    assert_no_circle(&graph);
}
