//! Whether a user's kernel query names a kernel. Exact comparison of whole
//! names only, never a substring: `reduce` does not name `reduce_sum`, and
//! `copyBuffer` never names CLR's blit kernel `__amd_rocclr_copyBuffer`
//! (the predecessor tool matched by substring and captured blits). A
//! pattern is explicit: `re:PATTERN` (`--kernel-regex`) is a regular
//! expression searched in the demangled signature.
//!
//! Owns [`KernelQuery`], the query parsed once, with its text form (the
//! one place the `re:` prefix means anything), and the matching rules.

use crate::names::KernelNames;
use std::fmt;
use std::sync::{Arc, Mutex};

/// The prefix that makes a query's text a regular expression: the text
/// form of [`KernelQuery::Regex`] (`DITTO_KERNEL=re:PATTERN`, `--kernel
/// re:PATTERN`, an MCP client's `kernel`).
pub const REGEX_PREFIX: &str = "re:";

/// Why a kernel query's pattern is not a regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelQueryError {
    #[error("the kernel regex is empty")]
    EmptyRegex,
    #[error("the kernel regex {pattern:?} is not a regular expression: {reason}")]
    NotARegex { pattern: String, reason: String },
}

/// A user's kernel query, parsed once: a name matched exactly (see
/// [`KernelQuery::matches`]) or a regular expression searched in the
/// demangled signature. Its text form ([`fmt::Display`], read back by
/// [`KernelQuery::parse`]) is what crosses into the application
/// (`DITTO_KERNEL`) and what a snapshot records as its query.
#[derive(Debug, Clone)]
pub enum KernelQuery {
    /// A name, as given (compared with its surrounding spaces trimmed).
    Name(String),
    /// `--kernel-regex RE` or `re:RE`.
    Regex(Arc<regex::Regex>),
}

impl KernelQuery {
    /// The query of `text`: `re:PATTERN` is a regular expression, anything
    /// else a name. `Err` says why the pattern is not a regular expression.
    pub fn parse(text: &str) -> Result<KernelQuery, KernelQueryError> {
        match text.trim().strip_prefix(REGEX_PREFIX) {
            Some(pattern) => compiled(pattern).map(KernelQuery::Regex),
            None => Ok(KernelQuery::Name(text.to_string())),
        }
    }

    /// The regular expression `pattern` (`--kernel-regex`), searched in the
    /// demangled signature; trailing spaces are not part of it.
    pub fn regex(pattern: &str) -> Result<KernelQuery, KernelQueryError> {
        compiled(pattern.trim_end()).map(KernelQuery::Regex)
    }

    /// A name with nothing but spaces: it names no kernel.
    pub fn is_blank(&self) -> bool {
        matches!(self, KernelQuery::Name(name) if name.trim().is_empty())
    }

    /// True when this query names `kernel`: a regex found in its demangled
    /// signature, or a name that equals the mangled name, the full
    /// demangled signature (with or without the return type), the name
    /// with template arguments (`scale_values<float>`), or the function's
    /// name: bare, without namespace or template arguments (`scale_values`
    /// names every instantiation; `vectorized_elementwise_kernel` names
    /// `at::native::vectorized_elementwise_kernel<4, …>`, as Nsight
    /// Compute's `--kernel-name` does by default), or qualified by its
    /// innermost scopes (`native::vectorized_elementwise_kernel`,
    /// `at::native::vectorized_elementwise_kernel`). A scope is matched
    /// whole: `s::k` does not name `ns::k`.
    pub fn matches(&self, kernel: &KernelNames) -> bool {
        match self {
            KernelQuery::Regex(re) => re.is_match(&kernel.demangled),
            KernelQuery::Name(name) => name_matches(name.trim(), kernel),
        }
    }
}

/// Two queries are equal when their kinds and texts are.
impl PartialEq for KernelQuery {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (KernelQuery::Name(a), KernelQuery::Name(b)) => a == b,
            (KernelQuery::Regex(a), KernelQuery::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// The text form: the name as given, or `re:PATTERN`.
impl fmt::Display for KernelQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelQuery::Name(name) => f.write_str(name),
            KernelQuery::Regex(re) => write!(f, "{REGEX_PREFIX}{}", re.as_str()),
        }
    }
}

/// `pattern` compiled; the last one compiled is kept, since the tool
/// matches one query's text against every kernel of every code object.
fn compiled(pattern: &str) -> Result<Arc<regex::Regex>, KernelQueryError> {
    static LAST: Mutex<Option<(String, Arc<regex::Regex>)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, re)) = last.as_ref()
        && p == pattern
    {
        return Ok(re.clone());
    }
    if pattern.is_empty() {
        return Err(KernelQueryError::EmptyRegex);
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
            KernelQueryError::NotARegex {
                pattern: pattern.to_string(),
                reason: reason.to_string(),
            }
        })?;
    *last = Some((pattern.to_string(), re.clone()));
    Ok(re)
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

/// True when the query whose text is `query` ([`KernelQuery::parse`])
/// names `kernel`; a pattern that is not a regular expression names none.
/// For callers that hold the text form (the tool reads `DITTO_KERNEL`).
pub fn matches(query: &str, kernel: &KernelNames) -> bool {
    KernelQuery::parse(query).is_ok_and(|q| q.matches(kernel))
}

/// Whether the (trimmed) name `query` names `kernel`; see [`KernelQuery::matches`].
fn name_matches(query: &str, kernel: &KernelNames) -> bool {
    if query.is_empty() {
        return false;
    }
    if query == kernel.mangled || query.strip_suffix(".kd") == Some(kernel.mangled.as_str()) {
        return true;
    }
    let q = normalize(query);
    if [&kernel.demangled, &kernel.signature, &kernel.name]
        .into_iter()
        .any(|form| normalize(form) == q)
    {
        return true;
    }
    // The function's name, bare or qualified by its innermost scopes: the
    // last components of the name without template arguments.
    let query_scopes = split_scopes(&q);
    let base = normalize(&kernel.base_name);
    let scopes = split_scopes(&base);
    !query_scopes.is_empty()
        && query_scopes.len() <= scopes.len()
        && scopes[scopes.len() - query_scopes.len()..] == query_scopes[..]
}

/// `a::b<c::d>::e` → [`a`, `b<c::d>`, `e`]: split at the `::` outside
/// template arguments and parentheses (a lambda's scope carries both).
fn split_scopes(name: &str) -> Vec<&str> {
    let bytes = name.as_bytes();
    let mut depth = 0i32;
    let (mut start, mut i) = (0, 0);
    let mut parts = Vec::new();
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                parts.push(&name[start..i]);
                i += 2;
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&name[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_back_from_its_text_form() {
        let re = KernelQuery::regex("^reduce_sum_v[0-9]+\\( ").unwrap();
        assert_eq!(re.to_string(), "re:^reduce_sum_v[0-9]+\\(");
        let again = KernelQuery::parse(&re.to_string()).unwrap();
        assert_eq!(again.to_string(), re.to_string());
        assert!(matches!(again, KernelQuery::Regex(_)));
        let name = KernelQuery::parse("scale_values<float>").unwrap();
        assert_eq!(name.to_string(), "scale_values<float>");
        assert!(KernelQuery::parse("  ").unwrap().is_blank());
        assert_eq!(
            KernelQuery::regex("  ").unwrap_err(),
            KernelQueryError::EmptyRegex
        );
    }

    #[test]
    fn a_regex_query_searches_the_demangled_signature() {
        let k = KernelNames::new("_Z13reduce_sum_v2PKfPfi");
        assert!(matches("re:reduce_sum", &k), "unanchored, like grep");
        assert!(matches("re:^reduce_sum_v[0-9]+\\(float const\\*", &k));
        assert!(!matches("re:^reduce_sum\\(", &k));
        // A name query stays exact.
        assert!(!matches("reduce_sum", &k));
        assert!(
            KernelQuery::parse("re:(")
                .unwrap_err()
                .to_string()
                .contains("not a regular expression")
        );
        assert!(
            KernelQuery::parse("re:")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(matches!(
            KernelQuery::parse("reduce_sum"),
            Ok(KernelQuery::Name(_))
        ));
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
    fn a_qualified_function_is_named_bare_or_by_its_innermost_scopes() {
        let nk = k("_ZN2ns1kEPfi");
        assert!(matches("ns::k", &nk));
        assert!(
            matches("k", &nk),
            "the bare name, as Nsight Compute's default"
        );
        assert!(!matches("s::k", &nk), "a scope is matched whole");
        assert!(!matches("ns", &nk));
        assert!(!matches("other::k", &nk));
        assert!(!matches("::k", &nk));
    }

    /// PyTorch's elementwise kernel as `nm -C` and Nsight Systems show it: a
    /// template in at::native whose arguments hold a lambda of an anonymous
    /// namespace (`at::native::vectorized_elementwise_kernel<4,
    /// at::native::FillFunctor<float>, std::array<char*, 1ul>>(int,
    /// at::native::FillFunctor<float>, std::array<char*, 1ul>)`).
    const VECTORIZED_FILL: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
    /// The same kernel template instantiated with a lambda (`…<4,
    /// at::native::(anonymous namespace)::launch_clamp_scalar(…)::{lambda()#1}
    /// ::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1},
    /// std::array<char*, 2ul>>`) and an unrelated kernel of the same base name
    /// in another namespace.
    const VECTORIZED_CLAMP: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_12_GLOBAL__N_119launch_clamp_scalarERNS_18TensorIteratorBaseEN3c106ScalarES6_NS0_6detail11ClampLimitsEENKUlvE_clEvENKUlvE4_clEvEUlfE_St5arrayIPcLm2EEEEviT0_T1_";

    #[test]
    fn pytorch_s_templated_kernels_are_named_by_their_function_name() {
        for symbol in [VECTORIZED_FILL, VECTORIZED_CLAMP] {
            let names = k(symbol);
            assert_eq!(
                names.base_name, "at::native::vectorized_elementwise_kernel",
                "{symbol}"
            );
            for query in [
                "vectorized_elementwise_kernel",
                "native::vectorized_elementwise_kernel",
                "at::native::vectorized_elementwise_kernel",
            ] {
                assert!(matches(query, &names), "{query} / {}", names.demangled);
            }
            for query in [
                "elementwise_kernel",
                "at::vectorized_elementwise_kernel",
                "vectorized_elementwise",
                "FillFunctor",
                "at::native",
            ] {
                assert!(!matches(query, &names), "{query} / {}", names.demangled);
            }
        }
        // Template arguments (as the demangler writes them) select one
        // instantiation.
        let (fill, clamp) = (k(VECTORIZED_FILL), k(VECTORIZED_CLAMP));
        assert_eq!(
            fill.name,
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, \
             std::array<char*, (unsigned long)1> >"
        );
        assert!(matches(&fill.name, &fill));
        assert!(!matches(&fill.name, &clamp));
    }

    #[test]
    fn extern_c_kernels_match_their_symbol_name_only() {
        let c = k("vector_add_c.kd");
        assert!(matches("vector_add_c", &c));
        assert!(!matches("vector_add", &c));
    }
}
