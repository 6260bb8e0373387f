//! Writing a tensor file without a copy of its data in memory: [`encode`]
//! gives the file's header and the order in which the header places the
//! tensors; [`write_file`] writes the header, then each tensor from memory
//! or from a streamed source (a large IPC buffer goes from the attached
//! mapping into the file, [`TensorSource::Streamed`]). A gigabyte captured
//! costs no second gigabyte in the collector. Lays the header out as the
//! safetensors crate does; knows nothing of manifests or directories.

use crate::store::placement::{Filled, Refusal, TensorOut};
use safetensors::tensor::{Dtype, TensorInfo};
use std::io::Write;

/// Where one tensor's bytes come from when its file is written.
pub enum TensorSource<'a> {
    /// Bytes in memory.
    Bytes(&'a [u8]),
    /// Bytes produced while the file is written: the callback writes every
    /// byte of the tensor, in order, to the writer it is given, or refuses
    /// with its own error, and then nothing is stored. It may be called
    /// again (the store starts the file over where linking an unnamed file
    /// fails).
    Streamed(&'a mut dyn FnMut(&mut dyn TensorOut) -> Result<(), Refusal>),
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
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Io(std::io::Error),
    /// A streamed source refused (its own error), or gave another length
    /// ([`LengthMismatch`]).
    #[error(transparent)]
    Refused(Refusal),
}

/// A streamed source wrote another number of bytes than its tensor holds.
#[derive(Debug, thiserror::Error)]
#[error("tensor {name}: {written} bytes written for its {len} bytes")]
pub struct LengthMismatch {
    pub name: String,
    pub written: usize,
    pub len: usize,
}

/// Why a tensor file cannot be laid out.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("tensor {name}: the file would exceed the address space")]
    TooLarge { name: String },
    /// A name or a tensor's description that JSON cannot hold.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
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
pub fn encode(parts: &[TensorPart]) -> Result<Layout, LayoutError> {
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
            .ok_or_else(|| LayoutError::TooLarge {
                name: p.name.clone(),
            })?;
        let info = TensorInfo {
            dtype: p.dtype,
            shape: vec![p.len / p.dtype.size().max(1)],
            data_offsets: (offset, end),
        };
        if k > 0 {
            json.push(',');
        }
        json.push_str(&serde_json::to_string(&p.name)?);
        json.push(':');
        json.push_str(&serde_json::to_string(&info)?);
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
                    return Err(WriteError::Refused(Box::new(LengthMismatch {
                        name: part.name.clone(),
                        written: counted.written,
                        len: part.len,
                    })));
                }
            }
        }
    }
    Ok(())
}

/// A writer that counts the bytes written through it and keeps the first
/// error (a streamed source reports its own failures as its own errors;
/// the file's are told apart by this).
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
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), Refusal>,
    ) -> std::io::Result<Filled> {
        match self.out.fill_run(len, fill) {
            Ok(filled) => {
                if matches!(filled, Filled::Done) {
                    self.written += len;
                }
                Ok(filled)
            }
            Err(e) => Err(self.keep(e)),
        }
    }
}
