//! The API tables the runtime serves: the root `HsaApiTable` and the core,
//! AMD-extension, finalizer, image, tools and PC-sampling tables it points
//! at, each laid out and versioned as the served release's (`served_abi`; layouts
//! and version headers from crates/hsa's measured data, never typed here).
//! Owns where every entry lives: [`ServedTables::slot`] is the address of
//! an entry's word, found BY NAME in the served layout, or `None` where
//! that release has no such entry. Allocated once, never moved or freed:
//! tools keep pointers into them.
//!
//! Every word that holds no implementation holds a stub, never null (ROCr
//! fills every slot; tools copy tables unconditionally). Uses only `served_abi`:
//! the implementations and stubs are handed in.

use crate::tools::served_abi::Abi;
use hsa::versions::{ReleaseTables, Table, TableLayout, layout_of, release_tables};
use hsa::{ApiTableVersion, HsaApiTable};

/// Bytes of every table's version header; 8-byte entries follow.
const HEADER_BYTES: usize = 16;

/// One implemented entry: its table, its name in the layouts
/// (`hsa_init_fn`), the function's address.
pub type Implementation = (Table, &'static str, usize);

/// One served table: its words (header first), version and layout.
struct Served {
    words: &'static mut [usize],
    version: ApiTableVersion,
    /// How entries are found by name; `None` for the tables served as
    /// stubs only (finalizer, tools, PC sampling).
    layout: Option<&'static TableLayout>,
    /// What its unimplemented entries hold.
    stub: usize,
}

impl Served {
    fn new(version: ApiTableVersion, layout: Option<&'static TableLayout>, stub: usize) -> Self {
        let words = vec![0usize; version.minor_id as usize / 8].leak();
        Served {
            words,
            version,
            layout,
            stub,
        }
    }

    fn base(&self) -> *mut usize {
        self.words.as_ptr() as *mut usize
    }

    /// The header and a stub in every entry.
    fn reset(&self) {
        let header = self.version.major_id as usize | ((self.version.minor_id as usize) << 32);
        let step = self.version.step_id as usize;
        // SAFETY: the table is minor_id bytes; written as whole words, which
        // is how tools read and write them.
        unsafe {
            self.base().write_volatile(header);
            self.base().add(1).write_volatile(step);
            for i in HEADER_BYTES / 8..self.words.len() {
                self.base().add(i).write_volatile(self.stub);
            }
        }
    }

    fn slot(&self, name: &str) -> Option<*mut usize> {
        let at = self.layout?.offset(name, self.version.minor_id)?;
        // SAFETY: `offset` only returns entries inside minor_id bytes.
        Some(unsafe { self.base().add(at / 8) })
    }
}

/// The tables of one served ABI.
pub struct ServedTables {
    abi: Abi,
    root: Served,
    core: Served,
    amd_ext: Served,
    finalizer_ext: Served,
    image_ext: Served,
    tools: Option<Served>,
    pc_sampling_ext: Option<Served>,
}

// SAFETY: the tables are leaked and never freed; every access is a
// word-sized volatile load or store, as tools and ROCr do.
unsafe impl Send for ServedTables {}
// SAFETY: as above.
unsafe impl Sync for ServedTables {}

fn raised(version: ApiTableVersion, by: u32) -> ApiTableVersion {
    ApiTableVersion::new(version.major_id + by, version.minor_id, version.step_id)
}

/// Why the tables of an ABI cannot be laid out (the measured data lacks
/// what the ABI needs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TablesError {
    #[error("no measured tables of ROCm {0}")]
    NoMeasuredTables(&'static str),
    #[error("ROCm {release} has no {what} table")]
    NoTable {
        release: &'static str,
        what: &'static str,
    },
    #[error("no version")]
    NoVersion,
    /// crates/hsa's layout lookup failed (its message).
    #[error("{0}")]
    Layout(String),
}

impl ServedTables {
    /// The tables `served_abi` serves, with `stub` in every entry and `image_stub`
    /// in the image table's; the implementations are placed by [`fill`].
    ///
    /// [`fill`]: ServedTables::fill
    pub fn new(abi: Abi, stub: usize, image_stub: usize) -> Result<ServedTables, TablesError> {
        let release: &ReleaseTables = release_tables(abi.measured_release())
            .ok_or(TablesError::NoMeasuredTables(abi.measured_release()))?;
        let raise = abi.major_raise();
        let version = |v: Option<ApiTableVersion>, what: &'static str| {
            v.map(|v| raised(v, raise)).ok_or(TablesError::NoTable {
                release: release.release,
                what,
            })
        };
        // Layouts are looked up by the release's own versions: a raised
        // major is one no layout describes, which is the point.
        let layout =
            |table, v: Option<ApiTableVersion>| -> Result<&'static TableLayout, TablesError> {
                layout_of(table, v.ok_or(TablesError::NoVersion)?)
                    .map_err(|e| TablesError::Layout(e.to_string()))
            };
        let served = |table: Option<Table>, v: Option<ApiTableVersion>, what, stub| {
            let layout = match table {
                Some(t) => Some(layout(t, v)?),
                None => None,
            };
            Ok::<Served, TablesError>(Served::new(version(v, what)?, layout, stub))
        };
        let optional = |v: Option<ApiTableVersion>, what| match v {
            Some(_) => served(None, v, what, stub).map(Some),
            None => Ok(None),
        };
        let tables = ServedTables {
            abi,
            root: served(None, release.root, "root", 0)?,
            core: served(Some(Table::Core), release.core, "core", stub)?,
            amd_ext: served(Some(Table::AmdExt), release.amd_ext, "AMD extension", stub)?,
            finalizer_ext: served(None, release.finalizer_ext, "finalizer", stub)?,
            image_ext: served(
                Some(Table::ImageExt),
                release.image_ext,
                "image",
                image_stub,
            )?,
            tools: optional(release.tools, "tools")?,
            pc_sampling_ext: optional(release.pc_sampling_ext, "PC sampling")?,
        };
        Ok(tables)
    }

    pub fn abi(&self) -> Abi {
        self.abi
    }

    /// The root table handed to tools.
    pub fn root(&self) -> *mut HsaApiTable {
        self.root.base() as *mut HsaApiTable
    }

    /// Headers, stubs, then every implementation its layout holds, in every
    /// table; the root's pointers. Also what puts our entries back after
    /// tools unloaded.
    pub fn fill(&self, implementations: &[Implementation]) {
        for table in self.all() {
            table.reset();
        }
        // The root holds pointers, not stubs, after its header.
        let root_pointers = self.root.words.len() - HEADER_BYTES / 8;
        for (i, table) in self.pointed().take(root_pointers).enumerate() {
            // SAFETY: inside the root's minor_id bytes.
            unsafe {
                self.root
                    .base()
                    .add(HEADER_BYTES / 8 + i)
                    .write_volatile(table.base() as usize)
            };
        }
        for &(table, name, address) in implementations {
            if let Some(slot) = self.slot(table, name) {
                // SAFETY: a word of a served table.
                unsafe { slot.write_volatile(address) };
            }
        }
    }

    /// The tables the root points at, in HsaApiTable's order.
    fn pointed(&self) -> impl Iterator<Item = &Served> {
        [
            Some(&self.core),
            Some(&self.amd_ext),
            Some(&self.finalizer_ext),
            Some(&self.image_ext),
            self.tools.as_ref(),
            self.pc_sampling_ext.as_ref(),
        ]
        .into_iter()
        .flatten()
    }

    fn all(&self) -> impl Iterator<Item = &Served> {
        std::iter::once(&self.root).chain(self.pointed())
    }

    fn table(&self, table: Table) -> &Served {
        match table {
            Table::Core => &self.core,
            Table::AmdExt => &self.amd_ext,
            Table::ImageExt => &self.image_ext,
        }
    }

    /// The word of entry `name` of `table`; `None` when the served release
    /// has no such entry.
    pub fn slot(&self, table: Table, name: &str) -> Option<*mut usize> {
        self.table(table).slot(name)
    }

    /// The version header `table` is served with.
    pub fn version(&self, table: Table) -> ApiTableVersion {
        self.table(table).version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STUB: usize = 0x5705;
    const IMAGE_STUB: usize = 0x1_5705;

    fn words(t: &Served) -> &[usize] {
        t.words
    }

    #[test]
    fn each_abi_serves_its_release_s_sizes_and_versions() {
        for (abi, root, amd, image, tools) in [
            (Abi::Rocm5_2, (1, 48, 0), (1, 400, 0), 120, false),
            (Abi::Rocm5_5, (1, 48, 0), (1, 424, 0), 120, false),
            (Abi::Rocm5_6, (1, 48, 0), (1, 456, 0), 120, false),
            (Abi::Rocm6_4, (3, 64, 1), (2, 592, 5), 128, true),
            (Abi::Rocm7_2, (3, 64, 1), (2, 624, 8), 128, true),
            (Abi::Rocm10, (3, 64, 1), (2, 744, 18), 128, true),
            (Abi::NextMajor, (4, 64, 1), (3, 624, 8), 128, true),
        ] {
            let t = ServedTables::new(abi, STUB, IMAGE_STUB).unwrap();
            t.fill(&[]);
            let v = |s: &Served| (s.version.major_id, s.version.minor_id, s.version.step_id);
            assert_eq!(v(&t.root), root, "{abi:?}");
            assert_eq!(v(&t.amd_ext), amd, "{abi:?}");
            assert_eq!(t.core.words.len() * 8, 1016);
            assert_eq!(t.image_ext.words.len() * 8, image);
            assert_eq!(t.tools.is_some(), tools, "{abi:?}");
            // The root points at every table, in HsaApiTable's order.
            let root = words(&t.root);
            assert_eq!(root[2], t.core.base() as usize);
            assert_eq!(root[3], t.amd_ext.base() as usize);
            assert_eq!(root[5], t.image_ext.base() as usize);
            if let Some(tools) = &t.tools {
                assert_eq!(root[6], tools.base() as usize);
            }
            // No entry is null: a stub everywhere nothing is implemented.
            assert!(words(&t.amd_ext)[2..].iter().all(|w| *w == STUB));
            assert!(words(&t.image_ext)[2..].iter().all(|w| *w == IMAGE_STUB));
        }
    }

    #[test]
    fn an_implementation_lands_at_its_release_s_offset_by_name() {
        let intercept = (Table::AmdExt, "hsa_amd_queue_intercept_create_fn", 0xabc);
        let on_engine = (
            Table::AmdExt,
            "hsa_amd_memory_async_copy_on_engine_fn",
            0xdef,
        );
        for (abi, at, engine_at) in [
            (Abi::Rocm5_2, 296, None),
            (Abi::Rocm5_5, 296, None),
            (Abi::Rocm5_6, 312, Some(144)),
            (Abi::Rocm7_2, 312, Some(144)),
        ] {
            let t = ServedTables::new(abi, STUB, IMAGE_STUB).unwrap();
            t.fill(&[intercept, on_engine]);
            let amd = words(&t.amd_ext);
            assert_eq!(amd[at / 8], 0xabc, "{abi:?}");
            assert_eq!(
                t.slot(Table::AmdExt, "hsa_amd_memory_async_copy_on_engine_fn")
                    .map(|s| s as usize - t.amd_ext.base() as usize),
                engine_at,
                "{abi:?}"
            );
            // Nothing else was written.
            let written = amd.iter().filter(|w| **w != STUB).count();
            assert_eq!(written, 2 + 1 + usize::from(engine_at.is_some()), "{abi:?}");
        }
    }
}
