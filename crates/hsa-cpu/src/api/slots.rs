//! Slots: how an exported symbol finds its entry. A slot is the address of
//! an entry's word in the served table, resolved by name once (before main),
//! or the address of a stub word where the served release has no such entry;
//! a trampoline calls through it ([`through_slot!`]), so one exported symbol
//! serves every layout. Owns the stub entries and their words; knows no
//! entry by name (the declaration lists hand it theirs).

use crate::tools::api_tables::ServedTables;
use hsa::versions::Table;
use hsa::*;
use std::sync::atomic::{AtomicPtr, Ordering};

/// What every entry we do not implement holds.
unsafe extern "C" fn unimplemented_entry() -> hsa_status_t {
    HSA_STATUS_ERROR
}

/// What every image-table entry holds: our agents support no images (ROCr
/// on an agent without them answers the same way).
unsafe extern "C" fn no_images_entry() -> hsa_status_t {
    HSA_STATUS_ERROR_INVALID_ARGUMENT
}

/// The word a slot points at when the served release has no such entry.
pub(crate) static STUB_WORD: unsafe extern "C" fn() -> hsa_status_t = unimplemented_entry;
/// The same for the image table's entries.
pub(crate) static NO_IMAGES_WORD: unsafe extern "C" fn() -> hsa_status_t = no_images_entry;

/// A slot that points at `word` until the constructor resolves it.
pub(crate) const fn unresolved(
    word: &'static unsafe extern "C" fn() -> hsa_status_t,
) -> AtomicPtr<usize> {
    AtomicPtr::new(word as *const _ as *mut usize)
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Position of `name` in a declaration list (compile time).
pub(crate) const fn index_of(names: &[(Table, &str, &str)], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        if same(names[i].2, name) {
            return i;
        }
        i += 1;
    }
    panic!("not in the declaration list")
}

/// Points every slot of a declaration list at its served entry.
pub(crate) fn resolve(
    tables: &ServedTables,
    slots: &[AtomicPtr<usize>],
    names: &[(Table, &str, &str)],
) {
    for (slot, &(table, field, _)) in slots.iter().zip(names) {
        let fallback = match table {
            Table::ImageExt => &NO_IMAGES_WORD,
            _ => &STUB_WORD,
        } as *const _ as *mut usize;
        slot.store(
            tables.slot(table, field).unwrap_or(fallback),
            Ordering::Release,
        );
    }
}

/// Calls through a slot: the entry's current word (a tool's wrap or ours).
macro_rules! through_slot {
    ($slot:expr, ($($arg:ident : $ty:ty),*), $ret:ty) => {{
        let slot = $slot.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: a slot points at a word of a served table (never freed)
        // or at a stub word; read as one word, as tools write it.
        let word = unsafe { std::ptr::read_volatile(slot) };
        if word == 0 {
            <$ret as $crate::api::entry_guard::FailValue>::fail()
        } else {
            // SAFETY: the word is the entry's function (ours or a tool's
            // wrap of it), of the entry's C signature.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(word) };
            // SAFETY: forwarding the caller's arguments.
            unsafe { f($($arg),*) }
        }
    }};
}

macro_rules! table_of {
    (core) => {
        hsa::versions::Table::Core
    };
    (amd) => {
        hsa::versions::Table::AmdExt
    };
    (image) => {
        hsa::versions::Table::ImageExt
    };
}
