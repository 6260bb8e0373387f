//! Live device allocations of the application: base → size, fed by the
//! pool allocate/free wraps. Owns the interval lookup that turns any
//! pointer argument into its containing allocation (IPC handles must cover
//! a whole allocation). Never calls the runtime; the runtime's
//! `pointer_info` fallback lives with the backend.
//!
//! The wraps run on every allocate and free of the application (HIP-like
//! runtimes may allocate kernel arguments per dispatch), so they cost one
//! hash-map operation under one uncontended lock. The ordered index that
//! interior pointers need is brought up to date only when a lookup needs
//! it (or when too many changes wait), from the list of bases changed
//! since: an application that allocates and frees the same addresses over
//! and over, as a kernarg allocator does, never touches the index at all
//! until something is captured. A pointer that is an allocation's base is
//! found without the index.

use crate::capture::address_hash::AddressMap;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One allocation as the runtime handed it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Allocation {
    pub base: u64,
    pub size: u64,
}

impl Allocation {
    pub fn contains(&self, address: u64) -> bool {
        address >= self.base
            && (address - self.base < self.size || (self.size == 0 && address == self.base))
    }
}

/// Changed bases that may wait before the index is brought up to date
/// (this bounds the memory freed allocations keep, and one update's work).
const PENDING_LIMIT: usize = 4096;

/// A base as the wraps last saw it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// None: freed (kept only until the index has forgotten it).
    size: Option<u64>,
    /// Listed in `pending`: the index may not show this entry yet.
    pending: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// Every live allocation, and the freed ones still `pending`.
    by_base: AddressMap<Entry>,
    /// The live allocations as of the last update; wrong only for `pending` bases.
    index: BTreeMap<u64, u64>,
    /// Bases changed since the last update, each once.
    pending: Vec<u64>,
    live: usize,
}

impl Inner {
    /// Lists `base` in `pending` unless `entry` (its entry) already is.
    fn mark_pending(pending: &mut Vec<u64>, entry: &mut Entry, base: u64) {
        if !entry.pending {
            entry.pending = true;
            pending.push(base);
        }
    }

    /// Applies every pending change to the index and drops freed entries.
    fn update_index(&mut self) {
        for base in std::mem::take(&mut self.pending) {
            let Some(entry) = self.by_base.get_mut(&base) else {
                continue;
            };
            entry.pending = false;
            match entry.size {
                Some(size) => {
                    self.index.insert(base, size);
                }
                None => {
                    self.index.remove(&base);
                    self.by_base.remove(&base);
                }
            }
        }
    }

    fn after_change(&mut self) {
        if self.pending.len() > PENDING_LIMIT {
            self.update_index();
        }
    }
}

#[derive(Debug, Default)]
pub struct AllocationMap {
    inner: Mutex<Inner>,
}

impl AllocationMap {
    pub fn new() -> AllocationMap {
        AllocationMap::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an allocation; a base seen again replaces the old record
    /// (the runtime reused the address after a free we did not see).
    pub fn insert(&self, base: u64, size: u64) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let entry = inner.by_base.entry(base).or_insert(Entry {
            size: None,
            pending: false,
        });
        if entry.size.replace(size).is_none() {
            inner.live += 1;
        }
        Inner::mark_pending(&mut inner.pending, entry, base);
        inner.after_change();
    }

    /// Forgets the allocation starting at `base`, returning it if known.
    pub fn remove(&self, base: u64) -> Option<Allocation> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let entry = inner.by_base.get_mut(&base)?;
        let size = entry.size.take()?;
        inner.live -= 1;
        Inner::mark_pending(&mut inner.pending, entry, base);
        inner.after_change();
        Some(Allocation { base, size })
    }

    /// The allocation containing `address` (its base or any interior byte).
    pub fn find(&self, address: u64) -> Option<Allocation> {
        let mut inner = self.lock();
        if let Some(Entry {
            size: Some(size), ..
        }) = inner.by_base.get(&address)
        {
            return Some(Allocation {
                base: address,
                size: *size,
            });
        }
        inner.update_index();
        let (&base, &size) = inner.index.range(..=address).next_back()?;
        let a = Allocation { base, size };
        a.contains(address).then_some(a)
    }

    /// Every live allocation, by base address.
    pub fn all(&self) -> Vec<Allocation> {
        let mut inner = self.lock();
        inner.update_index();
        inner
            .index
            .iter()
            .map(|(&base, &size)| Allocation { base, size })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().live
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bases whose change the index has not taken in yet (tests).
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.lock().pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_pointers_resolve_to_their_allocation() {
        let m = AllocationMap::new();
        m.insert(0x1000, 0x100);
        m.insert(0x2000, 0x40);
        assert_eq!(
            m.find(0x1000),
            Some(Allocation {
                base: 0x1000,
                size: 0x100
            })
        );
        assert_eq!(
            m.find(0x10ff),
            Some(Allocation {
                base: 0x1000,
                size: 0x100
            })
        );
        assert_eq!(
            m.find(0x2020),
            Some(Allocation {
                base: 0x2000,
                size: 0x40
            })
        );
    }

    #[test]
    fn pointers_between_or_past_allocations_resolve_to_nothing() {
        let m = AllocationMap::new();
        m.insert(0x1000, 0x100);
        assert_eq!(m.find(0x1100), None);
        assert_eq!(m.find(0xfff), None);
        assert_eq!(m.find(0x5000), None);
    }

    #[test]
    fn freed_allocations_are_forgotten() {
        let m = AllocationMap::new();
        m.insert(0x1000, 0x100);
        assert_eq!(
            m.remove(0x1000),
            Some(Allocation {
                base: 0x1000,
                size: 0x100
            })
        );
        assert_eq!(m.find(0x1010), None);
        assert_eq!(m.remove(0x1000), None);
        assert!(m.is_empty());
    }

    #[test]
    fn a_reused_base_takes_the_new_size() {
        let m = AllocationMap::new();
        m.insert(0x1000, 0x100);
        m.insert(0x1000, 0x10);
        assert_eq!(m.find(0x1050), None);
        assert_eq!(
            m.find(0x1008),
            Some(Allocation {
                base: 0x1000,
                size: 0x10
            })
        );
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn interior_lookups_see_every_change_made_after_the_last_lookup() {
        let m = AllocationMap::new();
        m.insert(0x1000, 0x100);
        assert_eq!(m.find(0x1010).map(|a| a.base), Some(0x1000));
        // Freed and replaced by a smaller one just below: the index still
        // holds 0x1000 until a lookup brings it up to date.
        m.remove(0x1000);
        m.insert(0x0f00, 0x20);
        assert_eq!(m.find(0x1010), None);
        assert_eq!(m.find(0x0f10).map(|a| a.base), Some(0x0f00));
        m.insert(0x1000, 0x40);
        assert_eq!(m.find(0x1030).map(|a| a.base), Some(0x1000));
        assert_eq!(m.find(0x1040), None);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn an_allocator_reusing_its_addresses_keeps_one_pending_change_per_address() {
        let m = AllocationMap::new();
        m.insert(0x10_0000, 0x1000);
        for _ in 0..10_000 {
            for k in 0..8u64 {
                m.insert(0x1000 * (k + 1), 0x100);
            }
            for k in 0..8u64 {
                assert!(m.remove(0x1000 * (k + 1)).is_some());
            }
        }
        assert_eq!(m.pending(), 9);
        assert_eq!(m.len(), 1);
        assert_eq!(m.find(0x10_0010).map(|a| a.base), Some(0x10_0000));
        assert_eq!(m.pending(), 0);
        assert_eq!(m.find(0x1010), None);
        assert!(
            m.lock().by_base.len() == 1,
            "freed entries dropped once indexed"
        );
    }

    #[test]
    fn changes_to_ever_new_addresses_are_indexed_before_too_many_wait() {
        let m = AllocationMap::new();
        for k in 0..3 * PENDING_LIMIT as u64 {
            m.insert(0x1000 * (k + 1), 0x10);
            m.remove(0x1000 * (k + 1));
            assert!(m.pending() <= PENDING_LIMIT + 1);
            assert!(m.lock().by_base.len() <= PENDING_LIMIT + 1);
        }
        assert!(m.is_empty());
    }

    #[test]
    fn a_zero_size_allocation_is_found_at_its_base_only() {
        let m = AllocationMap::new();
        m.insert(0x1000, 0);
        assert_eq!(
            m.find(0x1000),
            Some(Allocation {
                base: 0x1000,
                size: 0
            })
        );
        assert_eq!(m.find(0x1001), None);
    }
}
