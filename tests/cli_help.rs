//! Every `--help` ends with a worked example.

use crate::common::*;

#[test]
fn every_help_ends_with_a_worked_example() {
    for sub in [
        None,
        Some("run"),
        Some("compare"),
        Some("validate"),
        Some("inspect"),
        Some("collect"),
        Some("kernels"),
        Some("mcp"),
    ] {
        let mut args: Vec<&str> = sub.into_iter().collect();
        args.push("--help");
        let out = ditto(&args);
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        let tail: Vec<&str> = text.trim_end().lines().rev().take(4).collect();
        let example_at = text
            .rfind("Example:")
            .unwrap_or_else(|| panic!("{sub:?}: {text}"));
        assert!(
            text[example_at..]
                .lines()
                .any(|l| l.starts_with("  ditto ")),
            "{sub:?} help ends with: {tail:?}"
        );
        if let Some(sub) = sub {
            assert!(
                text[example_at..].contains(&format!("ditto {sub}")),
                "{sub}: {text}"
            );
        }
    }
}
