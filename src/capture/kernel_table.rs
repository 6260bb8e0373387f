//! Kernels the application loaded: kernel_object → what ditto knows about
//! it (names, kernarg size, whether it is the target and its argument
//! layout, from the code object's metadata when there is one), plus a
//! dispatch counter per kernel for the Goodbye. Filled at
//! executable freeze, read on every dispatch. Lookups never lock and never
//! allocate. The packet callback's [`KernelTable::lookup`] first asks a
//! small per-thread cache, keyed by the table's snapshot generation: a hit
//! costs two loads and no atomic read-modify-write; a miss loads the
//! immutable snapshot of the map (`arc-swap`: atomics only) and fills the
//! cache. [`KernelTable::get`] (capture paths) clones the kernel's `Arc`.
//! Loaders, rare, build a new map and publish it whole, one at a time under
//! the loader lock, with a generation no table ever had before.
//!
//! Every kernel ever inserted lives as long as its table: it stays in the
//! current snapshot or, once its kernel object is taken over, in the
//! retired list (never emptied). That is what lets the cache hold plain
//! pointers: one filled from a snapshot of this table is used only while
//! that snapshot's generation is the table's current one.

use crate::capture::address_hash::AddressMap;
use crate::capture::kernel_code::KernelCode;
use arc_swap::ArcSwap;
use ditto_kernels::{
    CodeObjectKernel, KernelError, KernelNames, KernelSignature, ParamType, matches,
};
use ditto_protocol::{CaptureSet, Goodbye, KernelName};
use std::cell::Cell;
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
    /// For a target without a layout: why it cannot be captured (what each
    /// of its dispatches is reported missing with).
    pub why_not: Option<String>,
    /// Its code object and module variables, kept for a replay capture
    /// of a target (`--capture replay`); `None` otherwise.
    pub code: Option<Arc<KernelCode>>,
    dispatches: AtomicU64,
    /// What its dispatches showed of their outputs ([`KernelInfo::wants_before_images`]).
    outputs: std::sync::atomic::AtomicU8,
}

/// No dispatch of the kernel was described yet.
const OUTPUTS_UNKNOWN: u8 = 0;
/// An output was an interior pointer of a larger allocation without
/// `--arg-sizes`: compared by what the kernels wrote.
const OUTPUTS_INTERIOR: u8 = 1;
/// Every output was the start of its allocation, or sized.
const OUTPUTS_WHOLE: u8 = 2;

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
        // The one layout function `ditto kernels` shows too.
        KernelInfo::laid_out(symbol, kernarg_size, query, |mangled| {
            KernelSignature::for_capture(mangled, kernarg_size as u64, arg_types, metadata)
        })
    }

    /// A CUDA kernel, laid out from the driver's parameter layout (offset
    /// and size of each parameter): [`KernelSignature::from_driver_layout`].
    pub fn from_driver_layout(
        symbol: &str,
        layout: &[(u64, u64)],
        query: Option<&str>,
        arg_types: Option<&[ParamType]>,
    ) -> (KernelInfo, Option<String>) {
        let total = layout.iter().map(|(o, s)| o + s).max().unwrap_or(0);
        KernelInfo::laid_out(symbol, total as u32, query, |mangled| {
            KernelSignature::from_driver_layout(mangled, layout, arg_types).map(|s| (s, None))
        })
    }

    /// The kernel of `symbol`, its signature from `lay_out` (given the
    /// mangled name) when it is a target of `query`.
    fn laid_out(
        symbol: &str,
        kernarg_size: u32,
        query: Option<&str>,
        lay_out: impl FnOnce(&str) -> Result<(KernelSignature, Option<String>), KernelError>,
    ) -> (KernelInfo, Option<String>) {
        let names = KernelNames::new(symbol);
        let is_target = query.is_some_and(|q| matches(q, &names));
        let mut problem = None;
        let signature = if is_target {
            match lay_out(&names.mangled) {
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
        let why_not = (is_target && signature.is_none()).then(|| {
            problem
                .clone()
                .unwrap_or_else(|| "it has no argument layout".to_string())
        });
        let info = KernelInfo {
            name: KernelName {
                mangled: names.mangled,
                demangled: names.demangled,
            },
            kernarg_size,
            is_target,
            signature,
            why_not,
            code: None,
            dispatches: AtomicU64::new(0),
            outputs: std::sync::atomic::AtomicU8::new(OUTPUTS_UNKNOWN),
        };
        (info, problem)
    }

    pub fn count_dispatch(&self) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a dispatch of this target should have its outputs taken
    /// before it runs too: until a dispatch showed every output to be
    /// the start of its allocation (or sized by `--arg-sizes`), and for
    /// good once one showed an interior pointer (a caching allocator's
    /// slice, captured to the end of its segment: compared by what the
    /// kernels wrote).
    pub fn wants_before_images(&self) -> bool {
        self.outputs.load(Ordering::Relaxed) != OUTPUTS_WHOLE
    }

    /// Whether a target dispatch of this kernel is snapshotted before it
    /// runs: its inputs are asked for (`capture`), or its outputs may need
    /// their images before it (`interior_outputs_before` and
    /// [`KernelInfo::wants_before_images`]).
    pub fn is_taken_before(&self, capture: CaptureSet, interior_outputs_before: bool) -> bool {
        capture.takes_inputs() || (interior_outputs_before && self.wants_before_images())
    }

    /// What a described dispatch showed of its outputs.
    pub fn learn_outputs(&self, interior: bool) {
        if interior {
            self.outputs.store(OUTPUTS_INTERIOR, Ordering::Relaxed);
        } else {
            let _ = self.outputs.compare_exchange(
                OUTPUTS_UNKNOWN,
                OUTPUTS_WHOLE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    pub fn dispatches(&self) -> u64 {
        self.dispatches.load(Ordering::Relaxed)
    }
}

/// Kernel object → kernel (kernel objects are descriptor addresses).
type ObjectMap = AddressMap<Arc<KernelInfo>>;

/// One published state of the table: never changed once published.
#[derive(Debug, Default)]
struct Snapshot {
    /// Unique across every table of the process (0: the empty start).
    generation: u64,
    by_object: ObjectMap,
}

/// Generations count up from 1 and are never reused, by any table, so a
/// cache entry can never answer for another table or another snapshot.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Entries of the per-thread lookup cache (direct-mapped by kernel object).
const CACHE_ENTRIES: usize = 8;

/// (generation, kernel object, kernel). Generation 0 is an empty entry.
type CacheEntry = (u64, u64, *const KernelInfo);

thread_local! {
    static LOOKUP_CACHE: [Cell<CacheEntry>; CACHE_ENTRIES] =
        const { [const { Cell::new((0, 0, std::ptr::null())) }; CACHE_ENTRIES] };
}

fn cache_slot(kernel_object: u64) -> usize {
    // Descriptors are 64-byte aligned: the bits above those pick the slot.
    ((kernel_object >> 6) as usize) % CACHE_ENTRIES
}

#[derive(Debug, Default)]
pub struct KernelTable {
    /// What a dispatch packet's kernel_object names now: a snapshot never
    /// changed once published, replaced whole by each load.
    snapshot: ArcSwap<Snapshot>,
    /// The generation of `snapshot`, stored after it: a cache entry of this
    /// generation describes the current snapshot (or the one just replaced,
    /// as a lookup running during a load may see).
    generation: AtomicU64,
    /// The loader lock. Holds the kernels whose kernel object was taken
    /// over by a later load: kept only for their counts in the Goodbye,
    /// reachable by no packet, and never dropped before the table (cached
    /// pointers rely on it).
    retired: Mutex<Vec<Arc<KernelInfo>>>,
}

/// A kernel of a [`KernelTable`], borrowed for as long as the table lives.
#[derive(Clone, Copy, Debug)]
pub struct KernelRef<'a>(&'a KernelInfo);

impl KernelRef<'_> {
    /// The kernel's `Arc` (one atomic increment), for the capture path.
    pub fn to_arc(self) -> Arc<KernelInfo> {
        let ptr: *const KernelInfo = self.0;
        // SAFETY: a KernelRef is made only from a pointer that `Arc::as_ptr`
        // returned for an Arc its table still holds (see the module
        // header), so the allocation is live and counted.
        unsafe {
            Arc::increment_strong_count(ptr);
            Arc::from_raw(ptr)
        }
    }
}

impl std::ops::Deref for KernelRef<'_> {
    type Target = KernelInfo;
    fn deref(&self) -> &KernelInfo {
        self.0
    }
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
        let mut next = ObjectMap::clone(&self.snapshot.load().by_object);
        let mut added = Vec::new();
        for (kernel_object, info) in kernels {
            let info = Arc::new(info);
            if let Some(old) = next.insert(kernel_object, info.clone()) {
                retired.push(old);
            }
            added.push(info);
        }
        let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        self.snapshot.store(Arc::new(Snapshot {
            generation,
            by_object: next,
        }));
        self.generation.store(generation, Ordering::Release);
        added
    }

    /// The kernel a dispatch packet names (the capture paths' lookup): a
    /// snapshot load and an `Arc` clone, no lock, no allocation.
    pub fn get(&self, kernel_object: u64) -> Option<Arc<KernelInfo>> {
        self.snapshot.load().by_object.get(&kernel_object).cloned()
    }

    /// The kernel a dispatch packet names, for the packet callback: from
    /// this thread's cache when the table has not changed since it was
    /// filled (two loads, no read-modify-write), otherwise as `get` without
    /// the `Arc` clone, filling the cache. Kernel objects the table does not
    /// know are not cached (a later load may add them).
    pub fn lookup(&self, kernel_object: u64) -> Option<KernelRef<'_>> {
        let generation = self.generation.load(Ordering::Acquire);
        let slot = cache_slot(kernel_object);
        let cached = LOOKUP_CACHE.with(|c| c[slot].get());
        if generation != 0 && cached.0 == generation && cached.1 == kernel_object {
            // SAFETY: filled below from an Arc of the snapshot of this
            // generation; generations are unique to one table, and its
            // kernels live as long as it does (module header).
            return Some(KernelRef(unsafe { &*cached.2 }));
        }
        let snapshot = self.snapshot.load();
        let info = snapshot.by_object.get(&kernel_object)?;
        let ptr = Arc::as_ptr(info);
        if snapshot.generation != 0 {
            LOOKUP_CACHE.with(|c| c[slot].set((snapshot.generation, kernel_object, ptr)));
        }
        // SAFETY: `info` is held by this table for its whole life (module header).
        Some(KernelRef(unsafe { &*ptr }))
    }

    /// Every kernel dispatched at least once, with its count, merged by
    /// name (the same kernel may be loaded by several executables), and
    /// how many dispatches matched the target (`matched`, the caller's count).
    pub fn goodbye(&self, matched: u64) -> Goodbye {
        let retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.snapshot.load();
        let mut merged: Vec<(KernelName, u64)> = Vec::new();
        for info in current.by_object.values().chain(retired.iter()) {
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
        Goodbye {
            dispatched: merged,
            matched,
        }
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
        let co = include_bytes!("../../crates/kernels/tests/fixtures/templates-v5.co");
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
        let co = include_bytes!("../../crates/kernels/tests/fixtures/extern_c-v4.co");
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
        let g = table.goodbye(0);
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
        assert_eq!(table.goodbye(0).dispatched.len(), 2);
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

    fn kernel(symbol: &str, query: Option<&str>) -> KernelInfo {
        KernelInfo::new(symbol, 20, query, None).0
    }

    #[test]
    fn a_cached_lookup_sees_a_kernel_object_taken_over_at_once() {
        let table = KernelTable::new();
        let old = table.insert(0x40, kernel("_Z10reduce_sumPKfPfi.kd", Some("reduce_sum")));
        let seen = table.lookup(0x40).expect("loaded");
        assert!(seen.is_target && std::ptr::eq(&*seen, &*old));
        // Cached now; a later load takes the kernel object over.
        let new = table.insert(
            0x40,
            kernel("_Z10vector_addPKfS0_Pfi.kd", Some("reduce_sum")),
        );
        let seen = table.lookup(0x40).expect("loaded");
        assert!(!seen.is_target && std::ptr::eq(&*seen, &*new));
        assert!(std::ptr::eq(&*table.lookup(0x40).unwrap(), &*new));
    }

    #[test]
    fn a_lookup_cached_for_one_table_never_answers_for_another() {
        let first = KernelTable::new();
        first.insert(0x40, kernel("_Z10reduce_sumPKfPfi.kd", None));
        assert!(first.lookup(0x40).is_some());
        let second = KernelTable::new();
        let other = second.insert(0x40, kernel("_Z10vector_addPKfS0_Pfi.kd", None));
        assert!(std::ptr::eq(&*second.lookup(0x40).unwrap(), &*other));
        assert!(KernelTable::new().lookup(0x40).is_none());
    }

    #[test]
    fn kernel_objects_sharing_a_cache_entry_each_find_their_own_kernel() {
        let table = KernelTable::new();
        let step = 64 * CACHE_ENTRIES as u64;
        assert_eq!(cache_slot(0x1000), cache_slot(0x1000 + step));
        let a = table.insert(0x1000, kernel("_Z10reduce_sumPKfPfi.kd", None));
        let b = table.insert(0x1000 + step, kernel("_Z10vector_addPKfS0_Pfi.kd", None));
        for _ in 0..3 {
            assert!(std::ptr::eq(&*table.lookup(0x1000).unwrap(), &*a));
            assert!(std::ptr::eq(&*table.lookup(0x1000 + step).unwrap(), &*b));
        }
        // Unknown objects are not cached: a later load finds them.
        assert!(table.lookup(0x9000).is_none());
        let c = table.insert(0x9000, kernel("_Z10reduce_sumPKfPfi.kd", None));
        assert!(std::ptr::eq(&*table.lookup(0x9000).unwrap(), &*c));
    }

    #[test]
    fn counts_through_lookup_reach_the_goodbye_and_to_arc_shares_the_kernel() {
        let table = KernelTable::new();
        let a = table.insert(0x40, kernel("_Z10reduce_sumPKfPfi.kd", None));
        let held = Arc::strong_count(&a);
        for _ in 0..5 {
            table.lookup(0x40).unwrap().count_dispatch();
        }
        let arc = table.lookup(0x40).unwrap().to_arc();
        assert!(Arc::ptr_eq(&arc, &a));
        assert_eq!(Arc::strong_count(&a), held + 1);
        drop(arc);
        assert_eq!(Arc::strong_count(&a), held);
        assert_eq!(table.goodbye(0).dispatched[0].1, 5);
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
