//! The text of a Triton IR function's signature: the parameter list of
//! its `tt.func` line, split into parameters. Owns that parsing alone;
//! `triton` reads the parameters' types, `triton_writes` their uses.

/// The parameters of the function whose `tt.func` line is `line` and
/// whose name with its opening parenthesis is `head`: each `%name: type
/// {attributes} loc(…)`, trimmed, in order.
pub(crate) fn param_list<'a>(line: &'a str, head: &str) -> Option<Vec<&'a str>> {
    let start = line.find(head)? + head.len();
    // The parameter list: up to the parenthesis that closes it.
    let mut depth = 1i32;
    let mut end = None;
    for (i, c) in line[start..].char_indices() {
        match c {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(start + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let list = &line[start..end?];
    Some(
        split_top_level_commas(list)
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect(),
    )
}

/// Splits at the commas outside `<>`, `()`, `{}` and `[]`.
fn split_top_level_commas(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '<' | '(' | '{' | '[' => depth += 1,
            '>' | ')' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}
