//! Whether a user's kernel query names a kernel. Exact comparison of whole
//! names only, never a substring: `reduce` does not name `reduce_sum`, and
//! `copyBuffer` never names CLR's blit kernel `__amd_rocclr_copyBuffer`
//! (the predecessor tool matched by substring and captured blits). A
//! pattern is explicit: `re:PATTERN` (`--kernel-regex`) is a regular
//! expression searched in the demangled signature.

use crate::names::KernelNames;
use std::sync::{Arc, Mutex};

/// The prefix that makes a query a regular expression.
pub const REGEX_PREFIX: &str = "re:";

/// The compiled pattern of a `re:` query, `Ok(None)` for a name; `Err`
/// says why the pattern is not a regular expression.
pub fn query_regex(query: &str) -> Result<Option<Arc<regex::Regex>>, String> {
    let Some(pattern) = query.trim().strip_prefix(REGEX_PREFIX) else {
        return Ok(None);
    };
    // One query per process: the last compiled pattern is kept.
    static LAST: Mutex<Option<(String, Arc<regex::Regex>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, re)) = last.as_ref()
        && p == pattern
    {
        return Ok(Some(re.clone()));
    }
    if pattern.is_empty() {
        return Err("the kernel regex is empty".into());
    }
    let re = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map(Arc::new)
        .map_err(|e| {
            // The parser's message ends with its one-line reason.
            let text = e.to_string();
            let reason = text.lines().last().unwrap_or_default();
            let reason = reason.trim().trim_start_matches("error: ");
            format!("the kernel regex {pattern:?} is not a regular expression: {reason}")
        })?;
    *last = Some((pattern.to_string(), re.clone()));
    Ok(Some(re))
}

/// Collapses whitespace so that `k<float>(float*,int)` and
/// `k<float>(float*, int)` compare equal: a space survives only between two
/// identifier characters (`unsigned int`).
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    for c in text.trim().chars() {
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space {
            let prev_ident = out
                .chars()
                .last()
                .is_some_and(|p| p.is_alphanumeric() || p == '_');
            if prev_ident && (c.is_alphanumeric() || c == '_') {
                out.push(' ');
            }
            pending_space = false;
        }
        out.push(c);
    }
    out
}

/// True when `query` names `kernel`: it equals the mangled name, the full
/// demangled signature (with or without the return type), the name with
/// template arguments (`scale_values<float>`), or the bare name
/// (`scale_values`, which names every instantiation). Qualified names are
/// compared as written: `ns::k` names `ns::k(float*)`, `k` does not.
pub fn matches(query: &str, kernel: &KernelNames) -> bool {
    let query = query.trim();
    if query.is_empty() {
        return false;
    }
    match query_regex(query) {
        Ok(Some(re)) => return re.is_match(&kernel.demangled),
        Err(_) => return false,
        Ok(None) => {}
    }
    if query == kernel.mangled || query.strip_suffix(".kd") == Some(kernel.mangled.as_str()) {
        return true;
    }
    let q = normalize(query);
    [
        &kernel.demangled,
        &kernel.signature,
        &kernel.name,
        &kernel.base_name,
    ]
    .into_iter()
    .any(|form| normalize(form) == q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regex_query_searches_the_demangled_signature() {
        let k = KernelNames::new("_Z13reduce_sum_v2PKfPfi");
        assert!(matches("re:reduce_sum", &k), "unanchored, like grep");
        assert!(matches("re:^reduce_sum_v[0-9]+\\(float const\\*", &k));
        assert!(!matches("re:^reduce_sum\\(", &k));
        // A name query stays exact.
        assert!(!matches("reduce_sum", &k));
        assert!(
            query_regex("re:(")
                .unwrap_err()
                .contains("not a regular expression")
        );
        assert!(query_regex("re:").unwrap_err().contains("empty"));
        assert!(query_regex("reduce_sum").unwrap().is_none());
        assert!(!matches("re:(", &k), "a bad pattern matches nothing");
    }

    fn k(symbol: &str) -> KernelNames {
        KernelNames::new(symbol)
    }

    #[test]
    fn bare_name_matches_every_template_instantiation() {
        assert!(matches(
            "scale_values",
            &k("_Z12scale_valuesIfEvPT_S1_S0_i")
        ));
        assert!(matches(
            "scale_values",
            &k("_Z12scale_valuesIdEvPT_S1_S0_i.kd")
        ));
    }

    #[test]
    fn template_arguments_select_one_instantiation() {
        assert!(matches(
            "scale_values<float>",
            &k("_Z12scale_valuesIfEvPT_S1_S0_i")
        ));
        assert!(!matches(
            "scale_values<float>",
            &k("_Z12scale_valuesIdEvPT_S1_S0_i")
        ));
        assert!(matches(
            "scale_values<double>",
            &k("_Z12scale_valuesIdEvPT_S1_S0_i")
        ));
    }

    #[test]
    fn full_signature_matches_with_or_without_return_type_and_spacing() {
        let f = k("_Z12scale_valuesIfEvPT_S1_S0_i");
        assert!(matches(
            "void scale_values<float>(float*, float*, float, int)",
            &f
        ));
        assert!(matches(
            "scale_values<float>(float*, float*, float, int)",
            &f
        ));
        assert!(matches("scale_values<float>(float*,float*,float,int)", &f));
        assert!(!matches("scale_values<float>(float*, float*, float)", &f));
        assert!(matches(
            "reduce_sum(float const*, float*, int)",
            &k("_Z10reduce_sumPKfPfi")
        ));
    }

    #[test]
    fn mangled_name_matches_with_or_without_kd() {
        let r = k("_Z10reduce_sumPKfPfi.kd");
        assert!(matches("_Z10reduce_sumPKfPfi", &r));
        assert!(matches("_Z10reduce_sumPKfPfi.kd", &r));
    }

    #[test]
    fn prefix_of_a_name_never_matches() {
        assert!(!matches("reduce", &k("_Z10reduce_sumPKfPfi")));
        assert!(!matches("reduce_su", &k("_Z10reduce_sumPKfPfi")));
        assert!(!matches("scale", &k("_Z12scale_valuesIfEvPT_S1_S0_i")));
        assert!(!matches("", &k("_Z10reduce_sumPKfPfi")));
    }

    #[test]
    fn blit_kernels_never_match_their_suffix() {
        assert!(!matches("copyBuffer", &k("__amd_rocclr_copyBuffer.kd")));
        assert!(!matches(
            "fillBufferAligned",
            &k("__amd_rocclr_fillBufferAligned.kd")
        ));
        assert!(matches(
            "__amd_rocclr_copyBuffer",
            &k("__amd_rocclr_copyBuffer.kd")
        ));
    }

    #[test]
    fn qualified_names_are_compared_as_written() {
        let nk = k("_ZN2ns1kEPfi");
        assert!(matches("ns::k", &nk));
        assert!(!matches("k", &nk));
        assert!(!matches("s::k", &nk));
    }

    #[test]
    fn extern_c_kernels_match_their_symbol_name_only() {
        let c = k("vector_add_c.kd");
        assert!(matches("vector_add_c", &c));
        assert!(!matches("vector_add", &c));
    }
}
