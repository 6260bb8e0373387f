//! One dispatch's tensor file (safetensors) without a copy of its data in
//! memory: [`encode`] gives the file's header and the order in which the
//! header places the tensors; [`write_file`] writes the header, then each
//! tensor from memory or from a streamed source (a large IPC buffer goes
//! from the attached mapping into the file, [`TensorSource::Streamed`]);
//! [`read_tensors`] reads the header, then gives each wanted tensor
//! as [`TensorBytes`]: a read-only view of the file mapped into memory (no
//! copy: the pages are the page cache's, and no fresh memory is zeroed),
//! or, for a small file, bytes read into its own buffer. A gigabyte
//! captured costs no second gigabyte in the collector, and a gigabyte
//! compared is not copied at all.
//!
//! Owns the byte layout of a tensor file (through the safetensors crate's
//! own header code); knows nothing of manifests or directories. A tensor's
//! data need not be aligned to its element size in the file (nor in the
//! mapping): readers decode elements from bytes (`from_le_bytes`).

use super::error::StoreError;
use super::placement::{Filled, TensorOut};
use safetensors::tensor::{Dtype, Metadata, TensorInfo};
use std::fs::File;
use std::io::Write;
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

/// A zeroed buffer of `len` bytes; `None` when it cannot be allocated.
/// Taken zeroed from the allocator (for a large one, fresh pages the
/// kernel zeroes as they are first touched: no second pass writing zeros),
/// and a large one asks for transparent huge pages (the kernel's `madvise`
/// mode) before any page is touched: zeroing 1 GiB through 4 KiB page
/// faults took a second on a VM, more than reading it from the page cache.
/// Used for every buffer the collector copies into and every small tensor
/// read back.
pub fn zeroed_buffer(len: usize) -> Option<Vec<u8>> {
    const HUGE_PAGE: usize = 2 << 20;
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: a layout of non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: advice on whole pages inside this allocation; it changes
        // no contents (a refusal only leaves small pages).
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    // SAFETY: allocated by the global allocator with the layout of a
    // `Vec<u8>` of capacity `len`, and all `len` bytes are initialised (zero).
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// The largest header read back (safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

/// Where one tensor's bytes come from when its file is written.
pub enum TensorSource<'a> {
    /// Bytes in memory.
    Bytes(&'a [u8]),
    /// Bytes produced while the file is written: the callback writes every
    /// byte of the tensor, in order, to the writer it is given, or refuses
    /// with a message, and then nothing is stored. It may be called again
    /// (the store starts the file over where linking an unnamed file fails).
    Streamed(&'a mut dyn FnMut(&mut dyn TensorOut) -> Result<(), String>),
}

/// One tensor of a file to write: its name, dtype, length in bytes and
/// where its bytes come from.
pub struct TensorPart<'a> {
    pub name: String,
    pub dtype: Dtype,
    pub len: usize,
    pub source: TensorSource<'a>,
}

/// Why a tensor file was not written.
pub enum WriteError {
    Io(std::io::Error),
    /// A streamed source refused (its message), or gave another length.
    Refused(String),
}

/// The header of a tensor file (length prefix included) and the order in
/// which the file holds the parts it was made from (indices into them).
pub struct Layout {
    pub header: Vec<u8>,
    pub order: Vec<usize>,
}

/// Lays out `parts` (1-D tensors) as a safetensors file, as the
/// safetensors crate's `serialize` does (tensors by descending dtype, then
/// by name; the JSON header padded with spaces to a multiple of 8 bytes),
/// without its buffer of the whole file: a tensor's length costs nothing
/// here, however large.
pub fn encode(parts: &[TensorPart]) -> Result<Layout, String> {
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&l, &r| {
        parts[r]
            .dtype
            .cmp(&parts[l].dtype)
            .then(parts[l].name.cmp(&parts[r].name))
    });
    let mut json = String::from("{");
    let mut offset = 0usize;
    for (k, &i) in order.iter().enumerate() {
        let p = &parts[i];
        let end = offset
            .checked_add(p.len)
            .ok_or_else(|| format!("tensor {}: the file would exceed the address space", p.name))?;
        let info = TensorInfo {
            dtype: p.dtype,
            shape: vec![p.len / p.dtype.size().max(1)],
            data_offsets: (offset, end),
        };
        if k > 0 {
            json.push(',');
        }
        json.push_str(&serde_json::to_string(&p.name).map_err(|e| e.to_string())?);
        json.push(':');
        json.push_str(&serde_json::to_string(&info).map_err(|e| e.to_string())?);
        offset = end;
    }
    json.push('}');
    let mut body = json.into_bytes();
    body.resize(body.len().next_multiple_of(8), b' ');
    let mut header = (body.len() as u64).to_le_bytes().to_vec();
    header.extend_from_slice(&body);
    Ok(Layout { header, order })
}

/// Files up to this size, all of whose bytes are in memory, are written
/// with one write call.
const ONE_WRITE_BYTES: usize = 1 << 20;

/// Writes a tensor file to `out`: the layout's header, then each part in
/// the layout's order, exactly its `len` bytes (a streamed part that
/// writes another number of bytes is refused).
pub fn write_file(
    out: &mut dyn TensorOut,
    layout: &Layout,
    parts: &mut [TensorPart],
) -> Result<(), WriteError> {
    let total = layout.header.len() + parts.iter().map(|p| p.len).sum::<usize>();
    fn in_memory<'p>(p: &TensorPart<'p>) -> Option<&'p [u8]> {
        match p.source {
            TensorSource::Bytes(b) => Some(b),
            TensorSource::Streamed(_) => None,
        }
    }
    if total <= ONE_WRITE_BYTES && parts.iter().all(|p| in_memory(p).is_some()) {
        let mut joined = Vec::with_capacity(total);
        joined.extend_from_slice(&layout.header);
        for &i in &layout.order {
            joined.extend_from_slice(in_memory(&parts[i]).expect("all in memory"));
        }
        return out.write_all(&joined).map_err(WriteError::Io);
    }
    out.write_all(&layout.header).map_err(WriteError::Io)?;
    for &i in &layout.order {
        let part = &mut parts[i];
        match &mut part.source {
            TensorSource::Bytes(b) => out.put(b).map_err(WriteError::Io)?,
            TensorSource::Streamed(fill) => {
                let mut counted = Counted {
                    out: &mut *out,
                    written: 0,
                    error: None,
                };
                let filled = fill(&mut counted);
                if let Some(e) = counted.error {
                    return Err(WriteError::Io(e));
                }
                filled.map_err(WriteError::Refused)?;
                if counted.written != part.len {
                    return Err(WriteError::Refused(format!(
                        "tensor {}: {} bytes written for its {} bytes",
                        part.name, counted.written, part.len
                    )));
                }
            }
        }
    }
    Ok(())
}

/// A writer that counts the bytes written through it and keeps the first
/// error (a streamed source reports its own failures as text; the file's
/// are told apart by this).
struct Counted<'w> {
    out: &'w mut dyn TensorOut,
    written: usize,
    error: Option<std::io::Error>,
}

impl Counted<'_> {
    /// Keeps a copy of `e` unless an earlier error is kept; returns `e`.
    fn keep(&mut self, e: std::io::Error) -> std::io::Error {
        self.error
            .get_or_insert(std::io::Error::new(e.kind(), e.to_string()));
        e
    }
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.out.write(buf) {
            Ok(0) if !buf.is_empty() => {
                Err(self.keep(std::io::Error::from(std::io::ErrorKind::WriteZero)))
            }
            Ok(n) => {
                self.written += n;
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(e) => Err(self.keep(e)),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A run put at once (a file places a long one with several threads).
impl TensorOut for Counted<'_> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self.out.put(bytes) {
            Ok(()) => {
                self.written += bytes.len();
                Ok(())
            }
            Err(e) => Err(self.keep(e)),
        }
    }

    fn fill_run(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), String>,
    ) -> std::io::Result<Filled> {
        match self.out.fill_run(len, fill) {
            Ok(filled) => {
                if filled == Filled::Done {
                    self.written += len;
                }
                Ok(filled)
            }
            Err(e) => Err(self.keep(e)),
        }
    }
}

fn parse_header(bytes: &[u8]) -> Result<Metadata, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
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
fn read_tensors_mapping_from(
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
        let expected = w.elements as u64 * w.dtype.size() as u64;
        if start > end || end as u64 > data_len || (end - start) as u64 != expected {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::placement::Plain;
    use safetensors::SafeTensors;

    #[test]
    fn an_encoded_file_is_what_the_safetensors_crate_writes_and_reads_back() {
        let a: Vec<u8> = (0..24).collect(); // 6 f32
        let b: Vec<u8> = (100..108).collect(); // 1 f64
        let c: Vec<u8> = vec![7, 8, 9]; // 3 u8
        let tensors = [
            ("arg2".to_string(), Dtype::F32, &a[..]),
            ("arg0".to_string(), Dtype::F64, &b[..]),
            ("arg1.before".to_string(), Dtype::U8, &c[..]),
        ];
        let mut parts: Vec<TensorPart> = tensors
            .iter()
            .map(|(name, dtype, data)| TensorPart {
                name: name.clone(),
                dtype: *dtype,
                len: data.len(),
                source: TensorSource::Bytes(data),
            })
            .collect();
        let layout = encode(&parts).unwrap();
        let mut file = Vec::new();
        assert!(write_file(&mut Plain(&mut file), &layout, &mut parts).is_ok());
        assert_eq!(
            layout.header.len() + a.len() + b.len() + c.len(),
            file.len()
        );
        // Byte for byte what the crate's serialize gives with the data.
        let views: Vec<_> = tensors
            .iter()
            .map(|(n, t, d)| {
                let shape = vec![d.len() / t.size()];
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(*t, shape, d).unwrap(),
                )
            })
            .collect();
        assert_eq!(file, safetensors::tensor::serialize(views, &None).unwrap());
        let read = SafeTensors::deserialize(&file).unwrap();
        assert_eq!(read.tensor("arg2").unwrap().data(), &a[..]);
        assert_eq!(read.tensor("arg0").unwrap().data(), &b[..]);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        std::fs::write(&path, &file).unwrap();
        let want = |name, dtype, elements| Wanted {
            name,
            dtype,
            elements,
            arg: 0,
            manifest_dtype: "x",
        };
        let got = read_tensors(
            &File::open(&path).unwrap(),
            &path,
            &[
                want("arg1.before", Dtype::U8, 3),
                want("arg2", Dtype::F32, 6),
                want("arg0", Dtype::F64, 1),
            ],
        )
        .unwrap();
        assert_eq!(got, vec![c.clone(), a.clone(), b.clone()]);
        assert!(got.iter().all(|t| !t.is_mapped()), "a small file is read");
        // The same tensors through a mapping of the file.
        let mapped = read_tensors_mapping_from(
            &File::open(&path).unwrap(),
            &path,
            &[
                want("arg1.before", Dtype::U8, 3),
                want("arg2", Dtype::F32, 6),
                want("arg0", Dtype::F64, 1),
            ],
            0,
        )
        .unwrap();
        assert!(mapped.iter().all(|t| t.is_mapped()));
        assert_eq!(mapped, got);
        // What the manifest does not say is refused.
        let err = read_tensors(
            &File::open(&path).unwrap(),
            &path,
            &[want("arg2", Dtype::F32, 5)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("but the manifest says"), "{err}");
        let err = read_tensors(
            &File::open(&path).unwrap(),
            &path,
            &[want("arg9", Dtype::F32, 6)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("not in the file"), "{err}");
        // A cut file.
        std::fs::write(&path, &file[..file.len() - 1]).unwrap();
        let err = read_tensors(
            &File::open(&path).unwrap(),
            &path,
            &[want("arg1.before", Dtype::U8, 3)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("data offsets"), "{err}");
    }

    #[test]
    fn a_long_run_put_into_a_file_lands_between_the_header_and_the_next_tensor_exactly() {
        let long: Vec<u8> = (0..super::super::placement::PLACE_FROM_BYTES + 4100)
            .map(|i| (i % 251) as u8)
            .collect();
        let small: Vec<u8> = (0..12).collect();
        let mut put_once = |out: &mut dyn TensorOut| -> Result<(), String> {
            out.put(&long).map_err(|e| e.to_string())
        };
        let mut parts = vec![
            TensorPart {
                name: "arg1".into(),
                dtype: Dtype::F32,
                len: long.len(),
                source: TensorSource::Streamed(&mut put_once),
            },
            TensorPart {
                name: "arg0".into(),
                dtype: Dtype::U8,
                len: small.len(),
                source: TensorSource::Bytes(&small),
            },
        ];
        let layout = encode(&parts).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        assert!(write_file(&mut file, &layout, &mut parts).is_ok());
        let mut back = Vec::new();
        use std::io::{Read, Seek};
        file.rewind().unwrap();
        file.read_to_end(&mut back).unwrap();
        let read = SafeTensors::deserialize(&back).unwrap();
        assert!(read.tensor("arg1").unwrap().data() == &long[..]);
        assert_eq!(read.tensor("arg0").unwrap().data(), &small[..]);
        assert_eq!(back.len(), layout.header.len() + long.len() + small.len());
    }

    #[test]
    fn a_streamed_tensor_is_written_as_its_bytes_would_be_and_a_refusal_or_short_write_fails() {
        let small: Vec<u8> = (0..12).collect();
        let big: Vec<u8> = (0..(3usize << 20)).map(|i| (i % 253) as u8).collect();
        let part = |name: &str, len, source| TensorPart {
            name: name.into(),
            dtype: Dtype::F32,
            len,
            source,
        };
        let mut from_memory = vec![
            part("arg1", big.len(), TensorSource::Bytes(&big)),
            part("arg0", small.len(), TensorSource::Bytes(&small)),
        ];
        let layout = encode(&from_memory).unwrap();
        assert_eq!(layout.order, [1, 0]);
        let mut expected = Vec::new();
        assert!(write_file(&mut Plain(&mut expected), &layout, &mut from_memory).is_ok());
        // In pieces, as the collector streams from a mapping.
        let mut fill = |out: &mut dyn TensorOut| -> Result<(), String> {
            for piece in big.chunks(1 << 20) {
                out.write_all(piece).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        let mut streamed = vec![
            part("arg1", big.len(), TensorSource::Streamed(&mut fill)),
            part("arg0", small.len(), TensorSource::Bytes(&small)),
        ];
        let mut file = Vec::new();
        assert!(write_file(&mut Plain(&mut file), &layout, &mut streamed).is_ok());
        assert!(file == expected, "a streamed file differs");
        // Refused: its message.
        let mut refuse = |_: &mut dyn TensorOut| -> Result<(), String> { Err("mismatch".into()) };
        let mut parts = vec![part("arg1", big.len(), TensorSource::Streamed(&mut refuse))];
        let layout = encode(&parts).unwrap();
        match write_file(&mut Plain(&mut Vec::new()), &layout, &mut parts) {
            Err(WriteError::Refused(m)) => assert_eq!(m, "mismatch"),
            _ => panic!("a refusal is a refusal"),
        }
        // One byte short.
        let mut short = |out: &mut dyn TensorOut| -> Result<(), String> {
            out.write_all(&big[1..]).map_err(|e| e.to_string())
        };
        let mut parts = vec![part("arg1", big.len(), TensorSource::Streamed(&mut short))];
        match write_file(&mut Plain(&mut Vec::new()), &layout, &mut parts) {
            Err(WriteError::Refused(m)) => assert!(m.contains("bytes written"), "{m}"),
            _ => panic!("a short tensor is refused"),
        }
        // The file's own error wins over the source's message.
        let mut full = [0u8; 100];
        let mut fill = |out: &mut dyn TensorOut| -> Result<(), String> {
            out.write_all(&big).map_err(|e| e.to_string())
        };
        let mut parts = vec![part("arg1", big.len(), TensorSource::Streamed(&mut fill))];
        match write_file(&mut Plain(&mut &mut full[..]), &layout, &mut parts) {
            Err(WriteError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::WriteZero),
            _ => panic!("a full file is an I/O error"),
        }
        // A tensor's length costs no memory when laid out.
        let huge = [part("arg9", 1 << 62, TensorSource::Bytes(&[]))];
        assert!(encode(&huge).unwrap().header.len() < 200);
    }

    #[test]
    fn a_zeroed_buffer_is_zero_and_exactly_as_long_as_asked() {
        for len in [0, 1, 4095, (6 << 20) + 3] {
            let b = zeroed_buffer(len).unwrap();
            assert_eq!((b.len(), b.capacity()), (len, len));
            assert!(b.iter().all(|&x| x == 0));
        }
        assert!(zeroed_buffer(usize::MAX).is_none());
    }

    #[test]
    fn a_tensor_at_an_offset_not_aligned_to_its_elements_reads_back_mapped_or_read() {
        // Written by another tool: 3 bytes of U8 first, so the F32 tensor
        // starts at data offset 3 (and the header is not padded to 8).
        let header = br#"{"u":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"f":{"dtype":"F32","shape":[2],"data_offsets":[3,11]}}"#;
        let floats: Vec<u8> = [1.5f32, -2.25]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header);
        file.extend_from_slice(&[1, 2, 3]);
        file.extend_from_slice(&floats);
        assert_ne!((8 + header.len() + 3) % 4, 0, "the F32 data is misaligned");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        std::fs::write(&path, &file).unwrap();
        let wanted = [Wanted {
            name: "f",
            dtype: Dtype::F32,
            elements: 2,
            arg: 1,
            manifest_dtype: "f32",
        }];
        for map_from in [0, u64::MAX] {
            let got =
                read_tensors_mapping_from(&File::open(&path).unwrap(), &path, &wanted, map_from)
                    .unwrap();
            assert_eq!(got[0].is_mapped(), map_from == 0);
            assert_eq!(got[0], floats);
            let values: Vec<f32> = got[0]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(values, vec![1.5, -2.25]);
        }
    }
}
