//! What a measured layout of an API table is ([`TableLayout`]: the
//! releases and versions that use it, every entry's offset, whether a
//! version is laid out so) and the version headers of the tables one
//! measured release hands its tools ([`ReleaseTables`]). The measured
//! layouts themselves are `layouts` (generated data of these types);
//! picking one for a live table by its version is `versions`.

use crate::table::ApiTableVersion;

/// Bytes of each entry of a table (a function pointer), after its
/// 16-byte version header.
pub(crate) const ENTRY_BYTES: u32 = 8;

/// One layout of an API table.
#[derive(Debug)]
pub struct TableLayout {
    /// The measured releases that use it (keys of the measured data).
    pub releases: &'static [&'static str],
    pub major_id: u32,
    /// The table sizes (minor_id) measured for it.
    pub measured_minor_ids: &'static [u32],
    /// Whether later releases only append entries: any minor_id from the
    /// smallest measured one on is read, each entry only where the table
    /// holds it.
    pub grows: bool,
    /// Every entry with its byte offset, in offset order.
    pub entries: &'static [(&'static str, u32)],
}

impl TableLayout {
    /// Where entry `name` is in a table of `minor_id` bytes, if it holds it.
    pub fn offset(&self, name: &str, minor_id: u32) -> Option<usize> {
        self.entries
            .iter()
            .find(|(n, _)| *n == name)
            .filter(|(_, at)| at + ENTRY_BYTES <= minor_id)
            .map(|(_, at)| *at as usize)
    }

    /// Whether a table of this version is laid out so.
    pub(crate) fn fits(&self, version: ApiTableVersion) -> bool {
        if version.major_id != self.major_id {
            return false;
        }
        if self.grows {
            self.measured_minor_ids
                .iter()
                .min()
                .is_some_and(|&smallest| version.minor_id >= smallest)
        } else {
            self.measured_minor_ids.contains(&version.minor_id)
        }
    }

    /// "1/400 (5.2.3, 5.3.0, 5.4.3)", for messages.
    pub(crate) fn describe(&self) -> String {
        let sizes: Vec<String> = self.measured_minor_ids.iter().map(u32::to_string).collect();
        let sizes = if self.grows {
            format!("{} or more", sizes[0])
        } else {
            sizes.join("|")
        };
        format!("{}/{sizes} ({})", self.major_id, self.releases.join(", "))
    }
}

/// The version headers of the tables one measured release hands its tools
/// (what its `HsaApiTableContainer` writes); `None` where the release has
/// no such table (tools_ from 6.1, pc_sampling_ext_ from 6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseTables {
    /// The key of the measured data ("5.2.3", "7.2.4", ...).
    pub release: &'static str,
    pub root: Option<ApiTableVersion>,
    pub core: Option<ApiTableVersion>,
    pub amd_ext: Option<ApiTableVersion>,
    pub finalizer_ext: Option<ApiTableVersion>,
    pub image_ext: Option<ApiTableVersion>,
    pub tools: Option<ApiTableVersion>,
    pub pc_sampling_ext: Option<ApiTableVersion>,
}
