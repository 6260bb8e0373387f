//! The host build's copy of a HIP source: the two constructs of HIP that
//! g++ cannot parse, rewritten so that the copy compiles with the same line
//! numbers. The user's file and its hipcc build are never touched.
//!
//! - `kernel<<<grid, block, shmem, stream>>>(args)` becomes `kernel(args)`:
//!   a plain call that type-checks the arguments (and instantiates a
//!   template kernel from them, as the launch does) but is never made, since
//!   the host part of a host build never runs.
//! - `extern __shared__ T name[];` (dynamic shared memory) becomes a pointer
//!   to the running group's dynamic shared memory: at block scope a local
//!   `T* name`, at namespace scope a macro for the same expression (the
//!   pointer changes per group, so it is read where it is used).
//!
//! Comments, string and character literals (raw strings included) are
//! copied unchanged; a `<<<` inside them is not a launch.

/// What a rewrite did, for messages, and the named namespaces the text
/// opens (qualified, in order of appearance: `a`, `a::b`), so that a
/// registration appended to it can find an extern "C" kernel declared in
/// one of them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rewrites {
    pub launches: usize,
    pub dynamic_shared: usize,
    pub namespaces: Vec<String>,
}

/// The rewritten text (same number of lines as `text`).
pub fn rewrite(text: &str) -> (String, Rewrites) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut done = Rewrites::default();
    // Brace stack: Some(name) for a namespace's braces (an empty name for an
    // anonymous namespace or extern "C"), None for any other braces.
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut pending_namespace: Option<String> = None;
    let mut i = 0;
    let mut copied = 0;
    let mut line = 1usize;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' {
            line += 1;
            i += 1;
            continue;
        }
        if let Some(end) = skip_literal_or_comment(bytes, i) {
            line += count_newlines(&bytes[i..end]);
            i = end;
            continue;
        }
        if b == b'{' {
            if let Some(name) = &pending_namespace
                && !name.is_empty()
            {
                let mut path: Vec<&str> = braces
                    .iter()
                    .flatten()
                    .filter(|n| !n.is_empty())
                    .map(String::as_str)
                    .collect();
                path.push(name);
                let qualified = path.join("::");
                if !done.namespaces.contains(&qualified) {
                    done.namespaces.push(qualified);
                }
            }
            braces.push(pending_namespace.take());
        } else if b == b'}' {
            braces.pop();
        } else if b == b';' {
            pending_namespace = None;
        }
        if is_ident_start(b) && (i == 0 || !is_ident_char(bytes[i - 1])) {
            let end = ident_end(bytes, i);
            let word = &text[i..end];
            match word {
                "namespace" => pending_namespace = Some(namespace_name(text, end)),
                "extern" => {
                    // extern "C" { ... } counts as namespace scope.
                    let next = skip_space(bytes, end);
                    if bytes.get(next) == Some(&b'"') {
                        pending_namespace = Some(String::new());
                    } else if let Some((stmt_end, replacement)) =
                        dynamic_shared(text, i, end, braces.iter().all(Option::is_some), line)
                    {
                        out.push_str(&text[copied..i]);
                        out.push_str(&replacement);
                        line += count_newlines(&bytes[i..stmt_end]);
                        done.dynamic_shared += 1;
                        i = stmt_end;
                        copied = i;
                        continue;
                    }
                }
                _ => {}
            }
            i = end;
            continue;
        }
        if bytes[i..].starts_with(b"<<<")
            && let Some(close) = launch_config_end(bytes, i + 3)
        {
            out.push_str(&text[copied..i]);
            // Keep the config's line breaks so that lines stay put.
            for _ in 0..count_newlines(&bytes[i..close]) {
                out.push('\n');
            }
            line += count_newlines(&bytes[i..close]);
            done.launches += 1;
            i = close;
            copied = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    (out, done)
}

/// The name after `namespace` at `from`: `a`, `a::b` (C++17), or empty
/// for an anonymous namespace.
fn namespace_name(text: &str, from: usize) -> String {
    let bytes = text.as_bytes();
    let mut name = String::new();
    let mut i = skip_space(bytes, from);
    while i < bytes.len() && is_ident_start(bytes[i]) {
        let end = ident_end(bytes, i);
        name.push_str(&text[i..end]);
        i = skip_space(bytes, end);
        if bytes[i..].starts_with(b"::") {
            name.push_str("::");
            i = skip_space(bytes, i + 2);
        } else {
            break;
        }
    }
    name
}

fn count_newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn ident_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && is_ident_char(bytes[i]) {
        i += 1;
    }
    i
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of a comment or literal starting at `i`, or None when none does.
fn skip_literal_or_comment(bytes: &[u8], i: usize) -> Option<usize> {
    let rest = &bytes[i..];
    if rest.starts_with(b"//") {
        // A line comment ends at the newline (a backslash continues it).
        let mut j = i + 2;
        while j < bytes.len() && bytes[j] != b'\n' {
            if bytes[j] == b'\\' && j + 1 < bytes.len() {
                j += 1;
            }
            j += 1;
        }
        return Some(j);
    }
    if rest.starts_with(b"/*") {
        let mut j = i + 2;
        while j + 1 < bytes.len() && !(bytes[j] == b'*' && bytes[j + 1] == b'/') {
            j += 1;
        }
        return Some((j + 2).min(bytes.len()));
    }
    // Raw string: R"delim( ... )delim", with an optional encoding prefix.
    if rest.starts_with(b"R\"") && (i == 0 || !is_ident_char(bytes[i - 1]) || raw_prefix(bytes, i))
    {
        let open = i + 2;
        let paren = bytes[open..].iter().position(|&b| b == b'(')? + open;
        let delim = &bytes[open..paren];
        let mut close = Vec::with_capacity(delim.len() + 2);
        close.push(b')');
        close.extend_from_slice(delim);
        close.push(b'"');
        let body = paren + 1;
        let end = bytes[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map(|p| body + p + close.len())
            .unwrap_or(bytes.len());
        return Some(end);
    }
    let quote = rest[0];
    if quote == b'"' || quote == b'\'' {
        // A digit separator (1'000'000) is not a character literal.
        if quote == b'\'' && i > 0 && bytes[i - 1].is_ascii_hexdigit() && number_before(bytes, i) {
            return None;
        }
        let mut j = i + 1;
        while j < bytes.len() && bytes[j] != quote && bytes[j] != b'\n' {
            if bytes[j] == b'\\' {
                j += 1;
            }
            j += 1;
        }
        return Some((j + 1).min(bytes.len()));
    }
    None
}

/// Whether the `R` at `i` ends an encoding prefix (u8R, uR, UR, LR).
fn raw_prefix(bytes: &[u8], i: usize) -> bool {
    let start = bytes[..i]
        .iter()
        .rposition(|&b| !is_ident_char(b))
        .map_or(0, |p| p + 1);
    matches!(&bytes[start..i], b"u8" | b"u" | b"U" | b"L")
}

/// Whether the characters before `i` end a number (a pp-number starting
/// with a digit), so that a `'` there is a digit separator.
fn number_before(bytes: &[u8], i: usize) -> bool {
    let start = bytes[..i]
        .iter()
        .rposition(|&b| !(is_ident_char(b) || b == b'.' || b == b'\''))
        .map_or(0, |p| p + 1);
    bytes.get(start).is_some_and(|b| b.is_ascii_digit())
}

/// The index just past the `>>>` that closes a launch configuration opened
/// before `from`, when a `(` follows it; None for anything else.
fn launch_config_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut i = from;
    while i < bytes.len() {
        if let Some(end) = skip_literal_or_comment(bytes, i) {
            i = end;
            continue;
        }
        match bytes[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            b';' => return None,
            b'>' if depth == 0 && bytes[i..].starts_with(b">>>") => {
                let after = skip_space(bytes, i + 3);
                return (bytes.get(after) == Some(&b'(')).then_some(i + 3);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `extern __shared__ [attributes] T name[];` starting at `start` (the
/// `extern` keyword ends at `word_end`): the end of the declaration and its
/// replacement, or None when this `extern` declares something else.
fn dynamic_shared(
    text: &str,
    start: usize,
    word_end: usize,
    namespace_scope: bool,
    line: usize,
) -> Option<(usize, String)> {
    let bytes = text.as_bytes();
    let stmt_end = bytes[word_end..].iter().position(|&b| b == b';')? + word_end + 1;
    let decl = &text[word_end..stmt_end - 1];
    let mut tokens = Vec::new();
    let mut rest = decl;
    let mut saw_shared = false;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let b = rest.as_bytes()[0];
        if is_ident_start(b) {
            let end = ident_end(rest.as_bytes(), 0);
            let word = &rest[..end];
            rest = &rest[end..];
            match word {
                "__shared__" => saw_shared = true,
                // Attributes that say where or how it is aligned: the host
                // build's dynamic shared memory is 16-byte aligned.
                "__align__" | "alignas" | "__attribute__" | "__declspec" => {
                    rest = skip_parens(rest.trim_start())?;
                }
                "HIP_DYNAMIC_SHARED_ATTRIBUTE" => {}
                _ => tokens.push(word.to_string()),
            }
            continue;
        }
        if rest.starts_with("[[") {
            let close = rest.find("]]")?;
            rest = &rest[close + 2..];
            continue;
        }
        if rest.starts_with("::") {
            tokens.push("::".to_string());
            rest = &rest[2..];
            continue;
        }
        if rest.starts_with('<') {
            // Template arguments of the element type: copy balanced.
            let end = balanced_angle(rest)?;
            tokens.push(rest[..end].to_string());
            rest = &rest[end..];
            continue;
        }
        if rest.starts_with('*') {
            tokens.push("*".to_string());
            rest = &rest[1..];
            continue;
        }
        if let Some(inside) = rest.strip_prefix('[') {
            // The unsized array: `[]` and nothing after it.
            let after = inside.trim_start();
            if !after.starts_with(']') || !after[1..].trim().is_empty() {
                return None;
            }
            break;
        }
        return None;
    }
    if !saw_shared || tokens.len() < 2 {
        return None;
    }
    let name = tokens.pop()?;
    if !name.as_bytes().first().copied().is_some_and(is_ident_start) {
        return None;
    }
    let element = join_type(&tokens);
    let pointer = format!("reinterpret_cast<{element}*>(::ditto::detail::t_dynamic_shared)");
    let newlines = count_newlines(&bytes[start..stmt_end]);
    let replacement = if namespace_scope {
        // A macro line of its own, then the line numbering put back.
        format!("\n#define {name} ({pointer})\n#line {}\n", line + newlines)
    } else {
        format!("{element}* {name} = {pointer};{}", "\n".repeat(newlines))
    };
    Some((stmt_end, replacement))
}

/// Type tokens as C++ text: words apart, `::`, `<...>` and `*` joined.
fn join_type(tokens: &[String]) -> String {
    let mut text = String::new();
    let mut glue = true;
    for token in tokens {
        let attaches = token == "::" || token.starts_with('<') || token == "*";
        if !glue && !attaches {
            text.push(' ');
        }
        text.push_str(token);
        glue = token == "::";
    }
    text
}

fn skip_parens(text: &str) -> Option<&str> {
    if !text.starts_with('(') {
        return Some(text);
    }
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[i + 1..]);
                }
            }
            _ => {}
        }
    }
    None
}

fn balanced_angle(text: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            ';' => return None,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> usize {
        text.matches('\n').count()
    }

    #[test]
    fn the_named_namespaces_a_source_opens_are_listed_qualified() {
        let text = "namespace a {\nnamespace b { int x; }\n}\nnamespace { namespace hidden { } }\n\
                    namespace c::d { }\nusing namespace std;\nnamespace e = a::b;\n\
                    // namespace commented { }\nextern \"C\" { }\nnamespace a { }\n";
        let (_, done) = rewrite(text);
        assert_eq!(done.namespaces, vec!["a", "a::b", "hidden", "c::d"]);
    }

    #[test]
    fn a_launch_becomes_a_plain_call_on_the_same_lines() {
        let src = "void f() {\n  scale<float><<<dim3(n / 256, 1),\n     256, 0, stream>>>(in, out, 2.0f);\n}\n";
        let (out, done) = rewrite(src);
        assert_eq!(out, "void f() {\n  scale<float>\n(in, out, 2.0f);\n}\n");
        assert_eq!(done.launches, 1);
        assert_eq!(lines(&out), lines(src));
    }

    #[test]
    fn launch_brackets_in_comments_and_strings_stay() {
        let src = "// k<<<1, 1>>>(x);\nconst char* s = \"k<<<1,1>>>(x)\";\n/* k<<<1,1>>>() */ auto r = R\"(k<<<1,1>>>())\";\nk<<<g, b>>>(x);\n";
        let (out, done) = rewrite(src);
        assert_eq!(done.launches, 1);
        assert!(out.contains("// k<<<1, 1>>>(x);"));
        assert!(out.contains("\"k<<<1,1>>>(x)\""));
        assert!(out.contains("R\"(k<<<1,1>>>())\""));
        assert!(out.ends_with("k(x);\n"));
    }

    #[test]
    fn a_digit_separator_is_not_a_character_literal() {
        let src = "int n = 1'000'000; k<<<n / 256, 256>>>(p);\n";
        let (out, done) = rewrite(src);
        assert_eq!(done.launches, 1);
        assert_eq!(out, "int n = 1'000'000; k(p);\n");
    }

    #[test]
    fn dynamic_shared_memory_in_a_kernel_is_a_pointer_to_the_group_s_memory() {
        let src = "__global__ void k(float* x) {\n  extern __shared__ float tile[];\n  tile[threadIdx.x] = x[0];\n}\n";
        let (out, done) = rewrite(src);
        assert_eq!(done.dynamic_shared, 1);
        assert!(
            out.contains(
                "float* tile = reinterpret_cast<float*>(::ditto::detail::t_dynamic_shared);"
            ),
            "{out}"
        );
        assert_eq!(lines(&out), lines(src));
    }

    #[test]
    fn aligned_and_templated_dynamic_shared_declarations_are_understood() {
        let (out, _) =
            rewrite("void k() { extern __shared__ __align__(16) unsigned char smem[]; }");
        assert!(
            out.contains("unsigned char* smem = reinterpret_cast<unsigned char*>"),
            "{out}"
        );
        let (out, _) = rewrite(
            "template <class T> void k() { extern __shared__ HIP_DYNAMIC_SHARED_ATTRIBUTE ns::vec<T, 4> v[]; }",
        );
        assert!(
            out.contains("ns::vec<T, 4>* v = reinterpret_cast<ns::vec<T, 4>*>"),
            "{out}"
        );
    }

    #[test]
    fn namespace_scope_dynamic_shared_memory_is_a_macro_and_lines_stay() {
        let src = "namespace a {\nextern __shared__ double sdata[];\n}\nint x;\n";
        let (out, done) = rewrite(src);
        assert_eq!(done.dynamic_shared, 1);
        assert!(out.contains("\n#define sdata (reinterpret_cast<double*>(::ditto::detail::t_dynamic_shared))\n#line 2\n"), "{out}");
        // `}` of the namespace follows on line 3, as in the source.
        assert!(out.ends_with("#line 2\n\n}\nint x;\n"), "{out}");
    }

    #[test]
    fn other_extern_declarations_are_left_alone() {
        let src = "extern int n;\nextern \"C\" { __global__ void k(); }\nextern __shared__ int fixed[16];\n";
        let (out, done) = rewrite(src);
        assert_eq!(out, src);
        assert_eq!(done, Rewrites::default());
    }

    #[test]
    fn shift_operators_are_not_launches() {
        let src = "int a = b << 3; c = d >> 2; e = f<<<g;\n";
        let (out, done) = rewrite(src);
        assert_eq!(out, src);
        assert_eq!(done.launches, 0);
    }
}
