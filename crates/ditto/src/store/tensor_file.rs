//! One dispatch's tensor file (safetensors) without a copy of its data in
//! memory: [`encode`] gives the file's header and the captured buffers in
//! the order the header places them, for the writer to write one after the
//! other; [`read_tensors`] reads the header, then each wanted tensor
//! straight from the file into its own buffer (one copy from the page
//! cache, nothing mapped). A gigabyte captured costs no second gigabyte in
//! the collector, and a gigabyte compared is read once.
//!
//! Owns the byte layout of a tensor file (through the safetensors crate's
//! own header code); knows nothing of manifests or directories.

use super::StoreError;
use safetensors::tensor::{Dtype, Metadata, View};
use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A zeroed buffer of `len` bytes; `None` when it cannot be allocated.
/// A large one asks for transparent huge pages (the kernel's `madvise`
/// mode): zeroing 1 GiB through 4 KiB page faults took a second on a VM,
/// more than reading it from the page cache. Used for every buffer the
/// collector copies into and every tensor read back.
pub fn zeroed_buffer(len: usize) -> Option<Vec<u8>> {
    const HUGE_PAGE: usize = 2 << 20;
    let mut data = Vec::new();
    data.try_reserve_exact(len).ok()?;
    let start = (data.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
    let end = (data.as_ptr() as usize + len) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: advice on whole pages inside the Vec's own allocation;
        // it changes no contents (a refusal only leaves small pages).
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    data.resize(len, 0);
    Some(data)
}

/// The largest header read back (safetensors' own limit).
const MAX_HEADER: u64 = 100_000_000;

/// A tensor whose data is not handed to the serializer: `serialize` then
/// produces the header alone, with the right offsets.
struct HeaderOnly {
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
}

impl View for &HeaderOnly {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// A tensor file to write: `header` (length prefix included), then each of
/// `data` in order.
pub struct Encoded<'a> {
    pub header: Vec<u8>,
    pub data: Vec<&'a [u8]>,
}

impl Encoded<'_> {
    pub fn len(&self) -> usize {
        self.header.len() + self.data.iter().map(|d| d.len()).sum::<usize>()
    }
}

/// Lays out `tensors` (name, dtype, 1-D data) as a safetensors file.
pub fn encode<'a>(tensors: &[(String, Dtype, &'a [u8])]) -> Result<Encoded<'a>, String> {
    let views: Vec<(String, HeaderOnly)> = tensors
        .iter()
        .map(|(name, dtype, data)| {
            let size = dtype.size();
            (
                name.clone(),
                HeaderOnly {
                    dtype: *dtype,
                    shape: vec![data.len() / size.max(1)],
                    len: data.len(),
                },
            )
        })
        .collect();
    let header = safetensors::tensor::serialize(views.iter().map(|(n, v)| (n, v)), &None)
        .map_err(|e| e.to_string())?;
    let metadata = parse_header(&header[8..]).map_err(|e| format!("own header: {e}"))?;
    let mut placed: Vec<(usize, &'a [u8])> = Vec::with_capacity(tensors.len());
    for (name, _, data) in tensors {
        let info = metadata
            .info(name)
            .ok_or_else(|| format!("own header lacks {name}"))?;
        placed.push((info.data_offsets.0, *data));
    }
    placed.sort_by_key(|(offset, _)| *offset);
    Ok(Encoded {
        header,
        data: placed.into_iter().map(|(_, d)| d).collect(),
    })
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

/// Reads the `wanted` tensors of the file at `path`, in that order.
pub fn read_tensors(path: &Path, wanted: &[Wanted]) -> Result<Vec<Vec<u8>>, StoreError> {
    let bad = |reason: String| StoreError::BadTensorFile {
        path: path.to_path_buf(),
        reason,
    };
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
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
    let mut out = Vec::with_capacity(wanted.len());
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
        let Some(mut bytes) = zeroed_buffer(end - start) else {
            return Err(bad(format!(
                "tensor {}: cannot allocate {} bytes to read it",
                w.name,
                end - start
            )));
        };
        file.read_exact_at(&mut bytes, data_start + start as u64)
            .map_err(io)?;
        out.push(bytes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::SafeTensors;

    #[test]
    fn an_encoded_file_is_what_the_safetensors_crate_writes_and_reads_back() {
        let a: Vec<u8> = (0..24).collect(); // 6 f32
        let b: Vec<u8> = (100..108).collect(); // 1 f64
        let c: Vec<u8> = vec![7, 8, 9]; // 3 u8
        let tensors = vec![
            ("arg2".to_string(), Dtype::F32, &a[..]),
            ("arg0".to_string(), Dtype::F64, &b[..]),
            ("arg1.before".to_string(), Dtype::U8, &c[..]),
        ];
        let encoded = encode(&tensors).unwrap();
        let mut file = encoded.header.clone();
        for d in &encoded.data {
            file.extend_from_slice(d);
        }
        assert_eq!(encoded.len(), file.len());
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
            &path,
            &[
                want("arg1.before", Dtype::U8, 3),
                want("arg2", Dtype::F32, 6),
                want("arg0", Dtype::F64, 1),
            ],
        )
        .unwrap();
        assert_eq!(got, vec![c.clone(), a.clone(), b.clone()]);
        // What the manifest does not say is refused.
        let err = read_tensors(&path, &[want("arg2", Dtype::F32, 5)]).unwrap_err();
        assert!(err.to_string().contains("but the manifest says"), "{err}");
        let err = read_tensors(&path, &[want("arg9", Dtype::F32, 6)]).unwrap_err();
        assert!(err.to_string().contains("not in the file"), "{err}");
        // A cut file.
        std::fs::write(&path, &file[..file.len() - 1]).unwrap();
        let err = read_tensors(&path, &[want("arg1.before", Dtype::U8, 3)]).unwrap_err();
        assert!(err.to_string().contains("data offsets"), "{err}");
    }
}
