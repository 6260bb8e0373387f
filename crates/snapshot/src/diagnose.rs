//! What to tell the user when the kernel they named was never captured:
//! the kernels the application did dispatch, with counts, and the names
//! closest to the query (edit distance over every form of each name).
//!
//! Owns only the wording and the ranking; it never reads files or sockets.

use crate::store::{DispatchedKernel, Manifest};
use ditto_kernels::KernelNames;

/// Every kernel the application dispatched, most dispatched first:
/// "A ×2 (mangled), B ×1 (mangled)".
pub fn every_kernel(m: &Manifest) -> String {
    let mut kernels = m.dispatched_kernels.clone();
    kernels.sort_by(|a, b| b.count.cmp(&a.count).then(a.demangled.cmp(&b.demangled)));
    kernels
        .iter()
        .map(|k| format!("{} ×{} ({})", k.demangled, k.count, k.mangled))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Levenshtein distance over characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// The names `--kernel` accepts for a kernel, shortest first: bare name,
/// name with template arguments, signature, mangled name.
fn query_forms(k: &DispatchedKernel) -> Vec<String> {
    let names = KernelNames::new(&k.mangled);
    let mut forms = vec![names.base_name, names.name, names.signature, names.mangled];
    forms.dedup();
    forms
}

/// Up to three dispatched kernels whose names are close to `query`, as the
/// name to pass to `--kernel`, closest first. "Close": an edit distance of
/// at most a third of the query's length (at least 2), or one name
/// containing the other.
pub fn closest_names(query: &str, kernels: &[DispatchedKernel]) -> Vec<String> {
    let limit = (query.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, String)> = kernels
        .iter()
        .filter_map(|k| {
            query_forms(k)
                .into_iter()
                .map(|form| {
                    let d = if form.contains(query) || query.contains(form.as_str()) {
                        1
                    } else {
                        edit_distance(query, &form)
                    };
                    (d, form)
                })
                .min_by_key(|(d, _)| *d)
        })
        .filter(|(d, _)| *d <= limit)
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, name)| name).collect()
}

/// The full list of what ran fits in an error line while it has at most
/// this many kernels and characters; past that the message is the short one.
const FULL_LIST_KERNELS: usize = 8;
const FULL_LIST_CHARS: usize = 1_000;
/// Names the short message shows.
const SHORT_LIST_NAMES: usize = 10;

/// "it dispatched: A ×2 (mangled), B ×1 (mangled); closest to "q": A; pass
/// one of these names ..." — what to say when `query` was never captured.
/// An application with many or long kernel names (a PyTorch program) gets
/// the short form instead: the closest names first, then the most
/// dispatched qualified names (without template arguments and
/// parameters) with counts; [`every_kernel`] is the full list (the CLI's
/// debug log has it).
pub fn what_ran(m: &Manifest) -> String {
    if m.runs.is_empty() {
        return "no application process connected to the collector (was the tool library preloaded? \
                run with DITTO_LOG=debug)"
            .into();
    }
    if m.dispatched_kernels.is_empty() {
        return "it reported no dispatched kernels at all (did it end before saying goodbye, or \
                does it launch nothing?)"
            .into();
    }
    let mut kernels = m.dispatched_kernels.clone();
    kernels.sort_by(|a, b| b.count.cmp(&a.count).then(a.demangled.cmp(&b.demangled)));
    let list: Vec<String> = kernels
        .iter()
        .map(|k| format!("{} ×{} ({})", k.demangled, k.count, k.mangled))
        .collect();
    let closest = closest_names(&m.kernel_query, &kernels);
    let quoted: Vec<String> = closest.iter().map(|c| format!("{c:?}")).collect();
    let full = list.join(", ");
    if kernels.len() <= FULL_LIST_KERNELS && full.chars().count() <= FULL_LIST_CHARS {
        let hint = if closest.is_empty() {
            String::new()
        } else {
            format!("; closest to {:?}: {}", m.kernel_query, quoted.join(", "))
        };
        return format!(
            "it dispatched: {full}{hint}; pass one of these names (or its mangled name) as --kernel"
        );
    }
    // Grouped by qualified name: (name, dispatches, instantiations).
    let mut groups: Vec<(String, u64, usize)> = Vec::new();
    for k in &kernels {
        let name = KernelNames::new(&k.mangled).base_name;
        match groups.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, count, kinds)) => {
                *count += k.count;
                *kinds += 1;
            }
            None => groups.push((name, k.count, 1)),
        }
    }
    groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let dispatches: u64 = kernels.iter().map(|k| k.count).sum();
    let shown: Vec<String> = groups
        .iter()
        .take(SHORT_LIST_NAMES)
        .map(|(name, count, kinds)| {
            if *kinds > 1 {
                format!("{name} ×{count} ({kinds} instantiations)")
            } else {
                format!("{name} ×{count}")
            }
        })
        .collect();
    let more = match groups.len().saturating_sub(SHORT_LIST_NAMES) {
        0 => String::new(),
        n => format!(" and {n} more name(s)"),
    };
    let closest = if quoted.is_empty() {
        String::new()
    } else {
        format!("closest to {:?}: {}; ", m.kernel_query, quoted.join(", "))
    };
    format!(
        "{closest}it dispatched {} kernel(s) {dispatches} time(s) under {} name(s), most often: \
         {}{more} (DITTO_LOG=debug lists every signature); pass one of these names as --kernel \
         (a bare name names every instantiation)",
        kernels.len(),
        groups.len(),
        shown.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(mangled: &str, count: u64) -> DispatchedKernel {
        let names = KernelNames::new(mangled);
        DispatchedKernel {
            mangled: mangled.into(),
            demangled: names.demangled,
            count,
        }
    }

    /// The manifest of one process that dispatched `kernels`, asked for `query`.
    fn manifest_of(query: &str, kernels: Vec<DispatchedKernel>) -> Manifest {
        Manifest {
            format: crate::store::SNAPSHOT_FORMAT,
            ditto_version: "0".into(),
            kernel_query: query.into(),
            runs: vec![crate::store::RunRecord {
                rank: 0,
                rank_source: "connection order".into(),
                pid: 1,
                run: "r".into(),
                command_line: vec![],
                working_directory: "/".into(),
                unaccounted: None,
                node: None,
                host_build: None,
            }],
            kernel: None,
            dispatches: vec![],
            dispatched_kernels: kernels,
            missing: vec![],
            job: None,
            collector: None,
        }
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("vector_add", "vector_add"), 0);
        assert_eq!(edit_distance("vector_ad", "vector_add"), 1);
        assert_eq!(edit_distance("vectr_add", "vector_add"), 1);
        assert_eq!(edit_distance("reduce_sum", "reduce_max"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn closest_names_rank_near_misses_and_drop_unrelated_kernels() {
        let kernels = [
            kernel("_Z10vector_addPKfS0_Pfi", 1),
            kernel("_Z12scale_valuesIfEvPT_S1_S0_i", 4),
            kernel("_Z10reduce_sumPKfPfi", 2),
        ];
        assert_eq!(closest_names("vectoradd", &kernels), ["vector_add"]);
        assert_eq!(closest_names("scale_value", &kernels), ["scale_values"]);
        // The bare name matches every instantiation, the float one included.
        assert_eq!(
            closest_names("scale_values<double>", &kernels),
            ["scale_values"]
        );
        assert_eq!(
            closest_names("scale_values<flaot>", &kernels),
            ["scale_values"]
        );
        assert!(closest_names("matmul_tiled", &kernels).is_empty());
    }

    #[test]
    fn many_long_template_names_give_a_short_message_with_the_closest_first() {
        // A PyTorch program: dozens of instantiations of long templates.
        let mut kernels = Vec::new();
        for i in 0..40 {
            // at::native::vectorized_elementwise_kernel<i, float>(int, float*)
            kernels.push(kernel(
                &format!("_ZN2at6native29vectorized_elementwise_kernelILi{i}EfEEviPf"),
                3,
            ));
        }
        for i in 0..30 {
            kernels.push(kernel(
                &format!("_ZN2at6native13reduce_kernelILi{i}ELi4EfEEvPf"),
                1,
            ));
        }
        kernels.push(kernel("_Z10vector_addPKfS0_Pfi", 1));
        let m = manifest_of("vectorized_elementwise_kernel", kernels);
        let text = what_ran(&m);
        assert!(text.len() < 600, "{} characters: {text}", text.len());
        assert!(
            text.starts_with(
                "closest to \"vectorized_elementwise_kernel\": \"at::native::vectorized_elementwise_kernel\""
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "it dispatched 71 kernel(s) 151 time(s) under 3 name(s), most often: \
                 at::native::vectorized_elementwise_kernel ×120 (40 instantiations), \
                 at::native::reduce_kernel ×30 (30 instantiations), vector_add ×1"
            ),
            "{text}"
        );
        assert!(
            text.contains("DITTO_LOG=debug lists every signature"),
            "{text}"
        );
    }

    #[test]
    fn what_ran_lists_kernels_by_count_and_the_closest_name() {
        let m = manifest_of(
            "reduce_summ",
            vec![
                kernel("_Z10vector_addPKfS0_Pfi", 1),
                kernel("_Z10reduce_sumPKfPfi", 2),
            ],
        );
        assert_eq!(
            what_ran(&m),
            "it dispatched: reduce_sum(float const*, float*, int) ×2 (_Z10reduce_sumPKfPfi), \
             vector_add(float const*, float const*, float*, int) ×1 (_Z10vector_addPKfS0_Pfi); \
             closest to \"reduce_summ\": \"reduce_sum\"; pass one of these names (or its mangled name) as --kernel"
        );
    }
}
