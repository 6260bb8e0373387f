//! The module graph of a crate's `src/`, for tests that pin which way its
//! modules use each other: every file is a module (`a/b.rs` and
//! `a/b/mod.rs` are `a::b`; lib.rs, main.rs and `tests.rs` files are not),
//! and a module uses another when its code names it through `crate::…`, or
//! through `super::…` outside its tests (after the file's first
//! `#[cfg(test)]`, `super` may be the module itself). A use of a module's
//! own ancestor is no edge (declaring and re-exporting children is what a
//! parent does). Included by the tests that need it with `#[path]`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The source with comments, string and character literals blanked, so
/// only code is searched.
pub fn code_only(source: &str) -> String {
    let s: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < s.len() {
        let at = |k: usize| s.get(k).copied();
        if s[i] == '/' && at(i + 1) == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if s[i] == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if s[i] == 'r'
            && matches!(at(i + 1), Some('"' | '#'))
            && (i == 0 || !(s[i - 1].is_alphanumeric() || s[i - 1] == '_'))
        {
            // Raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while s.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if s.get(j) != Some(&'"') {
                out.push(s[i]);
                i += 1;
                continue;
            }
            j += 1;
            while j < s.len() {
                if s[j] == '"' && (1..=hashes).all(|h| s.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
            out.push_str("\"\"");
        } else if s[i] == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if s[i] == '\'' && at(i + 1) == Some('\\') {
            // '\n', '\'', '\u{…}'
            i += 2;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if s[i] == '\'' && at(i + 2) == Some('\'') {
            i += 3;
            out.push_str("' '");
        } else {
            // Also a lifetime's quote.
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// Every path that follows `prefix` (`crate::` or `super::`) in `code`,
/// as its segments, with `{…}` groups expanded (`crate::a::{b, c::d}` is
/// `a::b` and `a::c::d`); a glob ends its path.
pub fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        expand(&code[at + prefix.len()..], Vec::new(), &mut paths);
    }
    paths
}

/// Reads one path (with groups) from the start of `rest` onto `base`.
fn expand(rest: &str, mut base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut rest = rest;
    loop {
        rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        item.push(c);
                    }
                    '}' if depth == 0 => break,
                    '}' => {
                        depth -= 1;
                        item.push(c);
                    }
                    ',' if depth == 0 => {
                        expand(&item, base.clone(), out);
                        item.clear();
                    }
                    _ => item.push(c),
                }
            }
            if !item.trim().is_empty() {
                expand(&item, base, out);
            }
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        if name != "self" {
            base.push(name);
        }
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => break,
        }
    }
    if !base.is_empty() {
        out.push(base);
    }
}

/// The modules of the crate whose sources are in `src`, and per module the
/// others it uses.
pub fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect_files(src, src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = Graph::new();
    for (module, path) in &files {
        let source =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let code = code_only(&source);
        let outside_tests = code.split("#[cfg(test)]").next().unwrap_or_default();
        let parent: Vec<String> = {
            let mut p: Vec<String> = module.split("::").map(str::to_string).collect();
            p.pop();
            p
        };
        let mut used = BTreeSet::new();
        let from_crate = paths_after(&code, "crate::");
        let from_super = paths_after(outside_tests, "super::")
            .into_iter()
            .map(|p| parent.iter().cloned().chain(p).collect::<Vec<_>>());
        for path in from_crate.into_iter().chain(from_super) {
            let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let ancestor = module.starts_with(&format!("{target}::"));
            if target != *module && !ancestor {
                used.insert(target);
            }
        }
        graph.insert(module.clone(), used);
    }
    graph
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(String, std::path::PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(root, &path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(root).unwrap().with_extension("");
        let mut segments: Vec<String> = relative
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let crate_root = segments == ["lib"] || segments == ["main"];
        if crate_root || segments.last().is_some_and(|s| s == "tests") {
            continue;
        }
        if segments.last().is_some_and(|s| s == "mod") {
            segments.pop();
        }
        out.push((segments.join("::"), path));
    }
}

/// One circle of `graph`, as the modules along it, if there is any.
pub fn find_circle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path
                    .iter()
                    .position(|p| p == m)
                    .expect("open is on the path");
                let mut circle = path[start..].to_vec();
                circle.push(m.to_string());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(m.to_string(), Mark::Open);
        path.push(m.to_string());
        for next in &graph[m] {
            if let Some(circle) = visit(next, graph, marks, path) {
                return Some(circle);
            }
        }
        path.pop();
        marks.insert(m.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut marks, &mut Vec::new()))
}

/// Fails naming each expected use (`from` uses `to`) that the reading of
/// `graph` does not see: a check that the reading works at all.
pub fn assert_uses_seen(graph: &Graph, expected: &[(&str, &str)]) {
    for (from, to) in expected {
        assert!(
            graph[*from].contains(*to),
            "{from} -> {to} not seen: {graph:#?}"
        );
    }
}

/// Fails naming the circle, if the modules of `graph` use each other in one.
pub fn assert_no_circle(graph: &Graph) {
    if let Some(circle) = find_circle(graph) {
        panic!(
            "modules use each other in a circle: {}",
            circle.join(" -> ")
        );
    }
}
