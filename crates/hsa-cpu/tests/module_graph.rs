//! The crate's modules use each other in one direction only: the graph of
//! `crate::<module>` paths between the modules that lib.rs declares has no
//! cycle (lib.rs declaring them is no edge; `super::` inside a module's own
//! tests is no edge either). A failure names one circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The source with comments, string and character literals blanked, so
/// only code is searched.
fn code_only(source: &str) -> String {
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

/// The first path segment of every `crate::…` path in `code`, with each
/// top-level name of a `crate::{…}` group.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut top = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    _ if depth == 0 => top.push(c),
                    _ => {}
                }
            }
            for part in top.split(',') {
                names.push(identifier(part.trim_start()));
            }
        } else {
            names.push(identifier(rest));
        }
    }
    names
}

fn identifier(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The modules lib.rs declares and, per module, the others it names.
fn module_graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let modules: BTreeSet<String> = code_only(&lib)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            Some(
                l.strip_prefix("mod ")?
                    .strip_suffix(';')?
                    .trim()
                    .to_string(),
            )
        })
        .collect();
    let mut graph = Graph::new();
    for m in &modules {
        let path = src.join(format!("{m}.rs"));
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (modules are single files)", path.display()));
        let used = crate_paths(&code_only(&source))
            .into_iter()
            .filter(|n| n != m && modules.contains(n))
            .collect();
        graph.insert(m.clone(), used);
    }
    graph
}

/// One circle of `graph`, as the modules along it, if there is any.
fn find_circle(graph: &Graph) -> Option<Vec<String>> {
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

#[test]
fn modules_use_each_other_in_one_direction_only() {
    let graph = module_graph();
    // The reading sees the uses it must see (so no circle is missed).
    for (from, to) in [
        ("api", "runtime"),
        ("queues", "dispatch"),
        ("ipc", "memory"),
    ] {
        assert!(
            graph[from].contains(to),
            "{from} -> {to} not seen: {graph:?}"
        );
    }
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "modules import each other in a circle: {}",
            circle.join(" -> ")
        );
    }
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
    assert_eq!(crate_paths(&code), ["a", "b", "e", "k"]);
}
