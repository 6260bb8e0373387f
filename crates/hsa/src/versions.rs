//! Reading and writing the runtime's API tables by their version. ROCr's
//! `AmdExtTable` changed its layout in the middle twice while its major_id
//! stayed 1 (ROCm 5.5 and 5.6 inserted entries; only minor_id, the table's
//! size, tells them apart); from major_id 2 (ROCm 6.0) tables only grow at
//! the end. The Rust structs of this crate ([`CoreApiTable`],
//! [`AmdExtTable`]) are ROCm 5.2's layout, the *canonical* one: a tool
//! copies the live table into it entry by entry, each found BY NAME in the
//! layout its version picks ([`crate::layouts`], generated from measured
//! data), and writes its wraps back the same way. No entry is read or
//! written at an offset the table's version does not define; a version no
//! measured layout has is refused. What a layout is ([`TableLayout`],
//! [`ReleaseTables`]) is `table_layout`'s, which the generated data uses.

use crate::entry_names::{AMD_EXT_TABLE_ENTRIES, CORE_API_TABLE_ENTRIES};
use crate::layouts::{
    AMD_EXT_TABLE_LAYOUTS, CORE_API_TABLE_LAYOUTS, IMAGE_EXT_TABLE_LAYOUTS, RELEASE_TABLES,
};
use crate::table::{AmdExtTable, ApiTableVersion, CoreApiTable};
use crate::table_layout::ENTRY_BYTES;
// What a layout and a release's tables are, named here as where they are read.
pub use crate::table_layout::{ReleaseTables, TableLayout};

/// Bytes of a table's version header; entries follow, 8 bytes each.
const HEADER_BYTES: usize = 16;

/// The AMD-extension entries added after ROCm 5.2 (so not in the canonical
/// [`AmdExtTable`]) that a tool uses, read by name
/// ([`LiveTable::amd_ext_additions`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdExtAdditions {
    /// ROCm 10's batch queue creation.
    pub hsa_amd_queue_create_fn: Option<crate::queue_create::HsaAmdQueueCreateFn>,
    /// Virtual memory (ROCm 6.0 on): mapping a handle into a reserved range.
    pub hsa_amd_vmem_map_fn: Option<crate::vmem::HsaAmdVmemMapFn>,
    /// Virtual memory (ROCm 6.0 on): unmapping it.
    pub hsa_amd_vmem_unmap_fn: Option<crate::vmem::HsaAmdVmemUnmapFn>,
}

/// The tables of measured release `release` (a key of the measured data).
pub fn release_tables(release: &str) -> Option<&'static ReleaseTables> {
    RELEASE_TABLES.iter().find(|r| r.release == release)
}

/// Every measured release, oldest first.
pub fn measured_releases() -> &'static [ReleaseTables] {
    RELEASE_TABLES
}

/// Which API table a version belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Core,
    AmdExt,
    /// The image extension table: read and written by name only (it has no
    /// canonical struct here).
    ImageExt,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Core => "core",
            Table::AmdExt => "AMD extension",
            Table::ImageExt => "image extension",
        }
    }

    fn layouts(self) -> &'static [TableLayout] {
        match self {
            Table::Core => CORE_API_TABLE_LAYOUTS,
            Table::AmdExt => AMD_EXT_TABLE_LAYOUTS,
            Table::ImageExt => IMAGE_EXT_TABLE_LAYOUTS,
        }
    }

    /// The entries of the canonical struct, in order (none for the image
    /// table, which has no canonical struct).
    pub fn canonical_entries(self) -> &'static [&'static str] {
        match self {
            Table::Core => CORE_API_TABLE_ENTRIES,
            Table::AmdExt => AMD_EXT_TABLE_ENTRIES,
            Table::ImageExt => &[],
        }
    }
}

/// A table whose version no measured layout has: it names the version and
/// the versions known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the runtime's {table} table is version {}/{} (major_id/minor_id, step {}), which no \
     ROCm release ditto knows has; known: {}",
    .version.major_id,
    .version.minor_id,
    .version.step_id,
    .known.join("; ")
)]
pub struct UnknownTableVersion {
    /// The table's name ([`Table::name`]).
    pub table: &'static str,
    pub version: ApiTableVersion,
    /// Every measured layout of that table, described.
    pub known: Vec<String>,
}

/// The layout of a `table` of `version`; `Err` names the version and the
/// versions known.
pub fn layout_of(
    table: Table,
    version: ApiTableVersion,
) -> Result<&'static TableLayout, UnknownTableVersion> {
    table
        .layouts()
        .iter()
        .find(|l| l.fits(version))
        .ok_or_else(|| UnknownTableVersion {
            table: table.name(),
            version,
            known: table.layouts().iter().map(TableLayout::describe).collect(),
        })
}

/// A live table of the runtime, with the layout its version picked.
#[derive(Debug, Clone, Copy)]
pub struct LiveTable {
    base: *mut u8,
    version: ApiTableVersion,
    layout: &'static TableLayout,
}

impl LiveTable {
    /// The live table at `base`, laid out as its version header says.
    ///
    /// # Safety
    /// `base` points at a table of `table`'s kind, valid for its
    /// `minor_id` bytes.
    pub unsafe fn new(table: Table, base: *mut u8) -> Result<LiveTable, UnknownTableVersion> {
        // SAFETY: every table begins with its version header.
        let version = unsafe { *(base as *const ApiTableVersion) };
        Ok(LiveTable {
            base,
            version,
            layout: layout_of(table, version)?,
        })
    }

    pub fn version(&self) -> ApiTableVersion {
        self.version
    }

    pub fn layout(&self) -> &'static TableLayout {
        self.layout
    }

    /// The entry called `name`, as a raw word (0: unset); `None` when this
    /// version has no such entry.
    ///
    /// # Safety
    /// The table is still valid (see [`LiveTable::new`]).
    pub unsafe fn read(&self, name: &str) -> Option<usize> {
        let at = self.layout.offset(name, self.version.minor_id)?;
        // SAFETY: `at + 8 <= minor_id`: inside the table.
        Some(unsafe { std::ptr::read_unaligned(self.base.add(at) as *const usize) })
    }

    /// Writes `value` into the entry called `name`; false when this version
    /// has no such entry (nothing written).
    ///
    /// # Safety
    /// As [`LiveTable::read`]; the runtime expects tools to write their
    /// wraps into its table while it loads them.
    pub unsafe fn write(&self, name: &str, value: usize) -> bool {
        let Some(at) = self.layout.offset(name, self.version.minor_id) else {
            return false;
        };
        // SAFETY: `at + 8 <= minor_id`: inside the table.
        unsafe { std::ptr::write_unaligned(self.base.add(at) as *mut usize, value) };
        true
    }

    /// The table copied into its canonical struct `T` (of `table`'s kind),
    /// entry by entry by name; entries this version lacks stay unset.
    ///
    /// # Safety
    /// As [`LiveTable::read`]; `T` is `table`'s canonical struct.
    unsafe fn canonical<T: Copy>(&self, table: Table) -> T {
        // SAFETY: every table struct is Copy and all-zero is valid (None
        // entries, a zero version).
        let mut copy: T = unsafe { std::mem::zeroed() };
        let out = &mut copy as *mut T as *mut u8;
        // SAFETY: the header is the first 16 bytes of both.
        unsafe { std::ptr::write_unaligned(out as *mut ApiTableVersion, self.version) };
        for (i, name) in table.canonical_entries().iter().enumerate() {
            // SAFETY: as above.
            if let Some(word) = unsafe { self.read(name) } {
                let slot = HEADER_BYTES + i * ENTRY_BYTES as usize;
                debug_assert!(slot + 8 <= std::mem::size_of::<T>());
                // SAFETY: entry i of the canonical struct lies at 16 + 8i.
                unsafe { std::ptr::write_unaligned(out.add(slot) as *mut usize, word) };
            }
        }
        copy
    }

    /// The core table in the canonical layout.
    ///
    /// # Safety
    /// As [`LiveTable::read`]; this is a core table.
    pub unsafe fn core(&self) -> CoreApiTable {
        // SAFETY: the caller's contract.
        unsafe { self.canonical(Table::Core) }
    }

    /// The entries of an AMD extension table that ROCm 5.2's canonical
    /// struct has no place for and a tool uses; unset where this version
    /// has none.
    ///
    /// # Safety
    /// As [`LiveTable::read`]; this is an AMD extension table.
    pub unsafe fn amd_ext_additions(&self) -> AmdExtAdditions {
        // SAFETY: the caller's contract.
        let word = |name: &str| unsafe { self.read(name) }.filter(|w| *w != 0);
        // SAFETY (each transmute): the entry of that name has this
        // signature in every release that has it.
        AmdExtAdditions {
            hsa_amd_queue_create_fn: word("hsa_amd_queue_create_fn").map(|w| unsafe {
                std::mem::transmute::<usize, crate::queue_create::HsaAmdQueueCreateFn>(w)
            }),
            hsa_amd_vmem_map_fn: word("hsa_amd_vmem_map_fn")
                .map(|w| unsafe { std::mem::transmute::<usize, crate::vmem::HsaAmdVmemMapFn>(w) }),
            hsa_amd_vmem_unmap_fn: word("hsa_amd_vmem_unmap_fn").map(|w| unsafe {
                std::mem::transmute::<usize, crate::vmem::HsaAmdVmemUnmapFn>(w)
            }),
        }
    }

    /// The AMD extension table in the canonical layout.
    ///
    /// # Safety
    /// As [`LiveTable::read`]; this is an AMD extension table.
    pub unsafe fn amd_ext(&self) -> AmdExtTable {
        // SAFETY: the caller's contract.
        unsafe { self.canonical(Table::AmdExt) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(major_id: u32, minor_id: u32) -> ApiTableVersion {
        ApiTableVersion::new(major_id, minor_id, 0)
    }

    #[test]
    fn the_canonical_structs_are_rocm_5_2s_layout() {
        for (table, size) in [
            (Table::Core, std::mem::size_of::<CoreApiTable>()),
            (Table::AmdExt, std::mem::size_of::<AmdExtTable>()),
        ] {
            let layout = layout_of(table, version(1, size as u32)).unwrap();
            assert!(layout.releases.contains(&"5.2.3"), "{layout:?}");
            let canonical: Vec<(&str, u32)> = table
                .canonical_entries()
                .iter()
                .enumerate()
                .map(|(i, n)| (*n, (HEADER_BYTES + i * 8) as u32))
                .collect();
            assert_eq!(canonical, layout.entries, "{}", table.name());
            assert_eq!(HEADER_BYTES + canonical.len() * 8, size);
        }
    }

    #[test]
    fn the_amd_tables_of_rocm_5_pick_by_size_and_6_on_grow() {
        let pick =
            |major, minor| layout_of(Table::AmdExt, version(major, minor)).map(|l| l.releases[0]);
        assert_eq!(pick(1, 400), Ok("5.2.3"));
        assert_eq!(pick(1, 424), Ok("5.5.0"));
        assert_eq!(pick(1, 456), Ok("5.6.0"));
        assert_eq!(pick(2, 552), Ok("6.0.0"));
        assert_eq!(pick(2, 624), Ok("6.0.0"));
        // A later 6.x/7.x table that grew again is read up to what is known.
        assert_eq!(pick(2, 640), Ok("6.0.0"));
        // A size no 5.x release had, a smaller 6.x table, a newer major.
        for (major, minor) in [(1, 432), (2, 544), (3, 640)] {
            let e = pick(major, minor).unwrap_err().to_string();
            assert!(e.contains(&format!("version {major}/{minor}")), "{e}");
            assert!(e.contains("1/400 (5.2.3, 5.3.0, 5.4.3)"), "{e}");
        }
    }

    #[test]
    fn an_entry_is_found_only_where_the_version_holds_it() {
        let l = layout_of(Table::AmdExt, version(2, 552)).unwrap();
        // ROCm 6.4.3's intercept entries (compiled probe: 312 and 320).
        assert_eq!(
            l.offset("hsa_amd_queue_intercept_create_fn", 592),
            Some(312)
        );
        assert_eq!(
            l.offset("hsa_amd_queue_intercept_register_fn", 592),
            Some(320)
        );
        // 7.2.4's last entry is past a 6.0 table's end; ROCm 10's
        // queue_create past 7.2.4's.
        assert_eq!(l.offset("hsa_amd_ais_file_read_fn", 624), Some(616));
        assert_eq!(l.offset("hsa_amd_ais_file_read_fn", 552), None);
        assert_eq!(l.offset("hsa_amd_queue_create_fn", 744), Some(704));
        assert_eq!(l.offset("hsa_amd_queue_create_fn", 624), None);
        assert_eq!(l.offset("no_such_entry_fn", 624), None);
        let five_two = layout_of(Table::AmdExt, version(1, 400)).unwrap();
        assert_eq!(
            five_two.offset("hsa_amd_queue_intercept_create_fn", 400),
            Some(296)
        );
        assert_eq!(
            five_two.offset("hsa_amd_memory_async_copy_on_engine_fn", 400),
            None
        );
    }

    /// A live table of `layout`'s version whose entry at each offset holds
    /// the offset itself.
    fn numbered_table(layout: &TableLayout, minor_id: u32) -> Vec<u64> {
        let mut words = vec![0u64; minor_id as usize / 8];
        words[0] = layout.major_id as u64 | ((minor_id as u64) << 32);
        for (_, at) in layout.entries {
            if at + 8 <= minor_id {
                words[*at as usize / 8] = *at as u64;
            }
        }
        words
    }

    #[test]
    fn a_rocm_6_4_table_is_read_into_the_canonical_layout_by_name() {
        let layout = layout_of(Table::AmdExt, version(2, 592)).unwrap();
        let mut words = numbered_table(layout, 592);
        // SAFETY: `words` is a whole table of 592 bytes.
        let live = unsafe { LiveTable::new(Table::AmdExt, words.as_mut_ptr() as *mut u8) }.unwrap();
        // SAFETY: as above.
        let amd = unsafe { live.amd_ext() };
        // SAFETY: the canonical struct read back as its words.
        let canonical = unsafe {
            std::slice::from_raw_parts(&amd as *const AmdExtTable as *const u64, 400 / 8)
        };
        assert_eq!(
            canonical[296 / 8],
            312,
            "read from 6.4.3's offset, not 5.2's 296"
        );
        assert_eq!((amd.version.major_id, amd.version.minor_id), (2, 592));
        // Every canonical entry holds the word of its own name in 6.4.3.
        for (i, name) in AMD_EXT_TABLE_ENTRIES.iter().enumerate() {
            let expected = layout.offset(name, 592).unwrap_or(0) as u64;
            assert_eq!(canonical[2 + i], expected, "{name}");
        }
        // A write lands at the version's offset.
        // SAFETY: as above.
        assert!(unsafe { live.write("hsa_amd_queue_intercept_register_fn", 0xabc) });
        assert_eq!(words[320 / 8], 0xabc);
        // SAFETY: as above.
        assert!(!unsafe { live.write("no_such_entry_fn", 1) });
    }
}
