//! Kernels the application loaded: kernel_object → what ditto knows about
//! it (names, kernarg size, whether it is the target and its argument
//! layout, from the code object's metadata when there is one), plus a
//! dispatch counter per kernel for the Goodbye. Filled at
//! executable freeze, read on every dispatch. Lookups never lock and never
//! allocate: the packet callback loads an immutable snapshot of the map
//! (`arc-swap`: atomics only), finds the kernel and clones its `Arc` (one
//! atomic increment). Loaders, rare, build a new map and publish it whole,
//! one at a time under the loader lock.

use arc_swap::ArcSwap;
use ditto_kernels::{CodeObjectKernel, KernelNames, KernelSignature, ParamType, matches};
use ditto_protocol::{Goodbye, KernelName};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub struct KernelInfo {
    pub name: KernelName,
    /// The runtime's KERNARG_SEGMENT_SIZE: bytes copied from each dispatch.
    pub kernarg_size: u32,
    /// The query names this kernel.
    pub is_target: bool,
    /// Argument layout, present only for a target that can be captured.
    pub signature: Option<KernelSignature>,
    dispatches: AtomicU64,
}

impl KernelInfo {
    /// What ditto knows about the kernel whose code-object symbol is `symbol`,
    /// laid out from its name alone. The second value explains why a target
    /// cannot be captured.
    pub fn new(
        symbol: &str,
        kernarg_size: u32,
        query: Option<&str>,
        arg_types: Option<&[ParamType]>,
    ) -> (KernelInfo, Option<String>) {
        KernelInfo::from_code_object(symbol, kernarg_size, query, arg_types, None)
    }

    /// As [`KernelInfo::new`], with the kernel's entry in its code object's
    /// metadata when the code object has one: offsets and sizes then come
    /// from there (hidden arguments included in the segment size), types
    /// from `arg_types` or the name. The second value is, for a target
    /// without a signature, why it cannot be captured; for a target with
    /// one, a warning to show (an extern "C" kernel captured as raw bytes).
    pub fn from_code_object(
        symbol: &str,
        kernarg_size: u32,
        query: Option<&str>,
        arg_types: Option<&[ParamType]>,
        metadata: Option<&CodeObjectKernel>,
    ) -> (KernelInfo, Option<String>) {
        let names = KernelNames::new(symbol);
        let is_target = query.is_some_and(|q| matches(q, &names));
        let mut problem = None;
        let signature = if is_target {
            // The one layout function `ditto kernels` shows too.
            match KernelSignature::for_capture(
                &names.mangled,
                kernarg_size as u64,
                arg_types,
                metadata,
            ) {
                Ok((sig, warning)) => {
                    problem = warning;
                    Some(sig)
                }
                Err(e) => {
                    problem = Some(e.to_string());
                    None
                }
            }
        } else {
            None
        };
        let info = KernelInfo {
            name: KernelName {
                mangled: names.mangled,
                demangled: names.demangled,
            },
            kernarg_size,
            is_target,
            signature,
            dispatches: AtomicU64::new(0),
        };
        (info, problem)
    }

    pub fn count_dispatch(&self) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dispatches(&self) -> u64 {
        self.dispatches.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
pub struct KernelTable {
    /// What a dispatch packet's kernel_object names now: a snapshot never
    /// changed once published, replaced whole by each load.
    by_object: ArcSwap<HashMap<u64, Arc<KernelInfo>>>,
    /// The loader lock. Holds the kernels whose kernel object was taken
    /// over by a later load: kept only for their counts in the Goodbye,
    /// reachable by no packet.
    retired: Mutex<Vec<Arc<KernelInfo>>>,
}

impl KernelTable {
    pub fn new() -> KernelTable {
        KernelTable::default()
    }

    /// Records the kernel at `kernel_object`. A kernel object seen again (an
    /// executable destroyed and its descriptor address reused) is replaced;
    /// its old counts move to the retired list so the Goodbye keeps them.
    pub fn insert(&self, kernel_object: u64, info: KernelInfo) -> Arc<KernelInfo> {
        self.insert_all([(kernel_object, info)])
            .pop()
            .expect("one kernel in, one out")
    }

    /// Records the kernels of one load (an executable's freeze) and
    /// publishes them in one new snapshot; returns them in the given order.
    /// Lookups running meanwhile see the old snapshot or the new one, whole.
    pub fn insert_all(
        &self,
        kernels: impl IntoIterator<Item = (u64, KernelInfo)>,
    ) -> Vec<Arc<KernelInfo>> {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::clone(&self.by_object.load());
        let mut added = Vec::new();
        for (kernel_object, info) in kernels {
            let info = Arc::new(info);
            if let Some(old) = next.insert(kernel_object, info.clone()) {
                retired.push(old);
            }
            added.push(info);
        }
        self.by_object.store(Arc::new(next));
        added
    }

    /// The kernel a dispatch packet names. Hot path: no lock, no
    /// allocation; a snapshot load and an `Arc` clone (atomics only).
    pub fn get(&self, kernel_object: u64) -> Option<Arc<KernelInfo>> {
        self.by_object.load().get(&kernel_object).cloned()
    }

    /// Every kernel dispatched at least once, with its count, merged by
    /// name (the same kernel may be loaded by several executables).
    pub fn goodbye(&self) -> Goodbye {
        let retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.by_object.load();
        let mut merged: Vec<(KernelName, u64)> = Vec::new();
        for info in current.values().chain(retired.iter()) {
            let n = info.dispatches();
            if n == 0 {
                continue;
            }
            match merged.iter_mut().find(|(k, _)| *k == info.name) {
                Some((_, count)) => *count += n,
                None => merged.push((info.name.clone(), n)),
            }
        }
        merged.sort_by(|a, b| a.0.mangled.cmp(&b.0.mangled));
        Goodbye { dispatched: merged }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_kernel_gets_a_layout_and_others_do_not() {
        let (t, problem) = KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, Some("reduce_sum"), None);
        assert!(t.is_target && problem.is_none());
        assert_eq!(t.signature.as_ref().unwrap().params.len(), 3);
        assert_eq!(t.name.mangled, "_Z10reduce_sumPKfPfi");
        let (o, _) = KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, Some("reduce_sum"), None);
        assert!(!o.is_target && o.signature.is_none());
        let (blit, _) = KernelInfo::new("__amd_rocclr_copyBuffer.kd", 64, Some("copyBuffer"), None);
        assert!(!blit.is_target);
    }

    #[test]
    fn extern_c_target_without_arg_types_is_not_capturable_and_says_why() {
        let (t, problem) = KernelInfo::new("vector_add_c.kd", 28, Some("vector_add_c"), None);
        assert!(t.is_target && t.signature.is_none());
        assert!(problem.unwrap().contains("--arg-types"));
    }

    #[test]
    fn a_v5_target_is_laid_out_from_metadata_despite_its_hidden_argument_segment() {
        let co = include_bytes!("../crates/kernels/tests/fixtures/templates-v5.co");
        let kernels = ditto_kernels::parse_code_object(co).unwrap().unwrap();
        let meta = kernels
            .iter()
            .find(|k| k.symbol == "_Z12scale_valuesIfEvPT_S1_S0_i.kd")
            .unwrap();
        let symbol = "_Z12scale_valuesIfEvPT_S1_S0_i.kd";
        // Without metadata, the runtime's 280 bytes (hidden args included)
        // do not match the 24 bytes of the declared arguments.
        let (by_name, problem) = KernelInfo::new(symbol, 280, Some("scale_values"), None);
        assert!(by_name.signature.is_none());
        assert!(problem.unwrap().contains("280"));
        let (t, problem) =
            KernelInfo::from_code_object(symbol, 280, Some("scale_values"), None, Some(meta));
        assert_eq!(problem, None);
        let sig = t.signature.unwrap();
        assert_eq!(sig.params.len(), 4);
        assert_eq!((sig.params[3].offset, sig.params[3].size), (20, 4));
    }

    #[test]
    fn an_extern_c_target_with_metadata_is_captured_as_bytes_with_a_warning() {
        let co = include_bytes!("../crates/kernels/tests/fixtures/extern_c-v4.co");
        let kernels = ditto_kernels::parse_code_object(co).unwrap().unwrap();
        let (t, warning) = KernelInfo::from_code_object(
            "vector_add_c.kd",
            28,
            Some("vector_add_c"),
            None,
            Some(&kernels[0]),
        );
        assert_eq!(t.signature.unwrap().params.len(), 4);
        assert!(
            warning
                .unwrap()
                .contains("--arg-types 'const f32*,f32*,i32'")
        );
    }

    #[test]
    fn goodbye_merges_counts_by_kernel_and_skips_undispatched() {
        let table = KernelTable::new();
        let a = table.insert(
            0x10,
            KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, None, None).0,
        );
        let b = table.insert(
            0x20,
            KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, None, None).0,
        );
        table.insert(
            0x30,
            KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, None, None).0,
        );
        a.count_dispatch();
        a.count_dispatch();
        b.count_dispatch();
        let g = table.goodbye();
        assert_eq!(g.dispatched.len(), 1);
        assert_eq!(
            g.dispatched[0].0.demangled,
            "reduce_sum(float const*, float*, int)"
        );
        assert_eq!(g.dispatched[0].1, 3);
        assert!(Arc::ptr_eq(&table.get(0x10).unwrap(), &a));
        assert!(table.get(0x40).is_none());
    }

    #[test]
    fn replaced_kernel_object_keeps_its_old_counts_for_the_goodbye() {
        let table = KernelTable::new();
        let old = table.insert(
            0x10,
            KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, None, None).0,
        );
        old.count_dispatch();
        let new = table.insert(
            0x10,
            KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, None, None).0,
        );
        new.count_dispatch();
        assert!(Arc::ptr_eq(&table.get(0x10).unwrap(), &new));
        assert_eq!(table.goodbye().dispatched.len(), 2);
    }

    #[test]
    fn one_load_publishes_all_its_kernels_and_lookups_meanwhile_see_earlier_ones() {
        let table = KernelTable::new();
        let first = table.insert(
            0x10,
            KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, None, None).0,
        );
        std::thread::scope(|s| {
            s.spawn(|| {
                for load in 0..100u64 {
                    let added = table.insert_all((0..8).map(|k| {
                        let info = KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, None, None).0;
                        (0x1000 + load * 8 + k, info)
                    }));
                    assert_eq!(added.len(), 8);
                }
            });
            for _ in 0..10_000 {
                let seen = table.get(0x10).expect("loaded before every other load");
                assert!(Arc::ptr_eq(&seen, &first));
            }
        });
        for object in 0x1000..0x1000 + 800 {
            assert!(table.get(object).is_some(), "0x{object:x}");
        }
        assert!(table.get(0x1000 + 800).is_none());
    }

    #[test]
    fn a_replaced_kernel_is_reachable_by_no_kernel_object() {
        let table = KernelTable::new();
        table.insert(
            0x10,
            KernelInfo::new("_Z10reduce_sumPKfPfi.kd", 20, None, None).0,
        );
        table.insert(
            0x10,
            KernelInfo::new("_Z10vector_addPKfS0_Pfi.kd", 28, None, None).0,
        );
        for object in [u64::MAX, u64::MAX - 1, 0] {
            assert!(table.get(object).is_none(), "0x{object:x}");
        }
    }
}
