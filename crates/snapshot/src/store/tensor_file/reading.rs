//! Reading a tensor file back: [`read_tensors`] reads the header, then
//! gives each wanted tensor as [`TensorBytes`]: a read-only view of the
//! file mapped into memory (no copy: the pages are the page cache's, and
//! no fresh memory is zeroed), or, for a small file, bytes read into its
//! own buffer. A gigabyte compared is not copied at all. A tensor's data
//! need not be aligned to its element size in the file (nor in the
//! mapping): readers decode elements from bytes (`from_le_bytes`). Checks
//! every tensor against what the manifest says of it; never writes.

use super::zeroed::zeroed_buffer;
use crate::store::error::StoreError;
use safetensors::tensor::{Dtype, Metadata};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Files with at least this many bytes of wanted data are mapped; smaller
/// ones are read (a mapping costs two system calls and a page fault per
/// 64 KiB or so, a read of a few KiB less).
const MAP_FROM_BYTES: u64 = 1 << 20;

/// A whole file mapped read-only, unmapped on drop.
struct FileMap {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value alone; reading
// it from several threads is reading shared immutable memory.
unsafe impl Send for FileMap {}
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps the first `len` (> 0) bytes of `file`. Snapshot files are
    /// never truncated or rewritten in place once linked (a rewrite links a
    /// new file over the name), so the mapped pages stay valid.
    fn new(file: &File, len: usize) -> std::io::Result<FileMap> {
        // SAFETY: a fresh private read-only mapping of an open file; the
        // pointer is only used within `len` and unmapped once, on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileMap {
            ptr: ptr.cast(),
            len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` mapped readable bytes at `ptr`, alive as long as self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no slice of it
        // outlives self (every `TensorBytes` holds the Arc).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// One tensor's bytes as read back: a range of a mapped tensor file, or a
/// buffer of its own. Reads as `[u8]`; compares by contents.
#[derive(Clone)]
pub struct TensorBytes(Repr);

#[derive(Clone)]
enum Repr {
    Owned(Vec<u8>),
    Mapped {
        map: Arc<FileMap>,
        start: usize,
        len: usize,
    },
}

impl TensorBytes {
    /// Whether the bytes are a view of a mapped file (tests check which path ran).
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped { .. })
    }
}

impl std::ops::Deref for TensorBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v,
            Repr::Mapped { map, start, len } => &map.bytes()[*start..*start + *len],
        }
    }
}

impl From<Vec<u8>> for TensorBytes {
    fn from(v: Vec<u8>) -> Self {
        TensorBytes(Repr::Owned(v))
    }
}

impl FromIterator<u8> for TensorBytes {
    fn from_iter<I: IntoIterator<Item = u8>>(iter: I) -> Self {
        TensorBytes(Repr::Owned(iter.into_iter().collect()))
    }
}

impl std::fmt::Debug for TensorBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl PartialEq for TensorBytes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<u8>> for TensorBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == other[..]
    }
}

impl PartialEq<[u8]> for TensorBytes {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

/// The largest header read back (safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

fn parse_header(bytes: &[u8]) -> serde_json::Result<Metadata> {
    serde_json::from_slice(bytes)
}

/// One tensor to read: its name, and the dtype and element count the
/// manifest gives it (a file that says otherwise is an error).
pub struct Wanted<'a> {
    pub name: &'a str,
    pub dtype: Dtype,
    pub elements: usize,
    /// How the manifest names the argument, for errors.
    pub arg: u32,
    pub manifest_dtype: &'a str,
}

/// Reads the `wanted` tensors of `file` (opened from `path`, which
/// messages name), in that order.
pub fn read_tensors(
    file: &File,
    path: &Path,
    wanted: &[Wanted],
) -> Result<Vec<TensorBytes>, StoreError> {
    read_tensors_mapping_from(file, path, wanted, MAP_FROM_BYTES)
}

/// [`read_tensors`], mapping the file when the wanted data is at least
/// `map_from` bytes (tests map the smallest files).
pub(super) fn read_tensors_mapping_from(
    file: &File,
    path: &Path,
    wanted: &[Wanted],
    map_from: u64,
) -> Result<Vec<TensorBytes>, StoreError> {
    let bad = |reason: String| StoreError::BadTensorFile {
        path: path.to_path_buf(),
        reason,
    };
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        error: source,
    };
    let file_len = file.metadata().map_err(io)?.len();
    let mut prefix = [0u8; 8];
    if file_len < 8 {
        return Err(bad(format!(
            "{file_len} bytes: too short for a safetensors file"
        )));
    }
    file.read_exact_at(&mut prefix, 0).map_err(io)?;
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER || 8 + header_len > file_len {
        return Err(bad(format!(
            "header length {header_len} does not fit in the file's {file_len} bytes"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact_at(&mut header, 8).map_err(io)?;
    let metadata = parse_header(&header).map_err(|e| bad(format!("header: {e}")))?;
    let data_start = 8 + header_len;
    let data_len = file_len - data_start;
    let mut ranges = Vec::with_capacity(wanted.len());
    for w in wanted {
        let info = metadata.info(w.name).ok_or_else(|| {
            bad(format!(
                "tensor {} (argument {}): not in the file",
                w.name, w.arg
            ))
        })?;
        if info.dtype != w.dtype || info.shape != [w.elements] {
            return Err(bad(format!(
                "tensor {} is {:?}{:?} but the manifest says {}[{}]",
                w.name, info.dtype, info.shape, w.manifest_dtype, w.elements
            )));
        }
        let (start, end) = info.data_offsets;
        // A manifest's element count no file can hold is refused, never
        // multiplied past 64 bits.
        let expected = (w.elements as u64).checked_mul(w.dtype.size() as u64);
        if start > end || end as u64 > data_len || Some((end - start) as u64) != expected {
            let expected = expected.map_or("more than 2^64".to_string(), |e| e.to_string());
            return Err(bad(format!(
                "tensor {} (argument {}): data offsets {start}..{end} are not {expected} bytes \
                 inside the file's {data_len} bytes of data",
                w.name, w.arg
            )));
        }
        ranges.push((w.name, data_start as usize + start, end - start));
    }
    let wanted_bytes: u64 = ranges.iter().map(|(_, _, len)| *len as u64).sum();
    // A file system that cannot map files is read from instead.
    if wanted_bytes > 0
        && wanted_bytes >= map_from
        && let Ok(map) = FileMap::new(file, file_len as usize)
    {
        let map = Arc::new(map);
        return Ok(ranges
            .into_iter()
            .map(|(_, start, len)| {
                TensorBytes(Repr::Mapped {
                    map: map.clone(),
                    start,
                    len,
                })
            })
            .collect());
    }
    let mut out = Vec::with_capacity(ranges.len());
    for (name, start, len) in ranges {
        let Some(mut bytes) = zeroed_buffer(len) else {
            return Err(bad(format!(
                "tensor {name}: cannot allocate {len} bytes to read it"
            )));
        };
        file.read_exact_at(&mut bytes, start as u64).map_err(io)?;
        out.push(TensorBytes::from(bytes));
    }
    Ok(out)
}
