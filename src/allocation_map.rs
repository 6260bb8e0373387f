//! Live device allocations of the application: base → size, fed by the
//! pool allocate/free wraps. Owns the interval lookup that turns any
//! pointer argument into its containing allocation (IPC handles must cover
//! a whole allocation). Never calls the runtime; the runtime's
//! `pointer_info` fallback lives with the backend.

use std::collections::BTreeMap;
use std::sync::RwLock;

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

#[derive(Debug, Default)]
pub struct AllocationMap {
    by_base: RwLock<BTreeMap<u64, u64>>,
}

impl AllocationMap {
    pub fn new() -> AllocationMap {
        AllocationMap::default()
    }

    /// Records an allocation; a base seen again replaces the old record
    /// (the runtime reused the address after a free we did not see).
    pub fn insert(&self, base: u64, size: u64) {
        self.by_base
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(base, size);
    }

    /// Forgets the allocation starting at `base`, returning it if known.
    pub fn remove(&self, base: u64) -> Option<Allocation> {
        let size = self
            .by_base
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&base)?;
        Some(Allocation { base, size })
    }

    /// The allocation containing `address` (its base or any interior byte).
    pub fn find(&self, address: u64) -> Option<Allocation> {
        let map = self.by_base.read().unwrap_or_else(|e| e.into_inner());
        let (&base, &size) = map.range(..=address).next_back()?;
        let a = Allocation { base, size };
        a.contains(address).then_some(a)
    }

    pub fn len(&self) -> usize {
        self.by_base.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        assert_eq!(m.len(), 1);
    }
}
