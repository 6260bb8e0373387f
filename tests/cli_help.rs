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
        Some("hsa-env"),
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

/// Every option of every command says what it takes: in `--help`, each
/// option's line is followed by its description (or carries it).
#[test]
fn every_option_says_what_it_takes() {
    for sub in [
        "run", "validate", "compare", "inspect", "replay", "kernels", "collect", "hsa-env", "mcp",
    ] {
        let out = ditto(&[sub, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{sub}");
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            // An option's own line: `  -x, --name <V>` or `      --name`.
            if !(line.starts_with("  ") && trimmed.starts_with('-')) || trimmed.starts_with("- ") {
                continue;
            }
            let inline = trimmed.split("  ").skip(1).any(|t| !t.trim().is_empty());
            let next = lines.get(i + 1).map_or("", |l| l.trim());
            assert!(
                inline
                    || (!next.is_empty() && !next.starts_with('-') && next != "Possible values:"),
                "`ditto {sub}`: {trimmed:?} has no description:\n{text}"
            );
        }
    }
}
