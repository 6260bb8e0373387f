//! The tensor file written and read back: byte for byte what the
//! safetensors crate writes, streamed parts, refusals, mapped and read
//! tensors.

use super::*;
use crate::store::placement::{Plain, Refusal, TensorOut};
use safetensors::SafeTensors;
use safetensors::tensor::Dtype;
use std::fs::File;

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
    let mut put_once =
        |out: &mut dyn TensorOut| -> Result<(), Refusal> { out.put(&long).map_err(Refusal::from) };
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
    let mut fill = |out: &mut dyn TensorOut| -> Result<(), Refusal> {
        for piece in big.chunks(1 << 20) {
            out.write_all(piece).map_err(Refusal::from)?;
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
    let mut refuse = |_: &mut dyn TensorOut| -> Result<(), Refusal> { Err("mismatch".into()) };
    let mut parts = vec![part("arg1", big.len(), TensorSource::Streamed(&mut refuse))];
    let layout = encode(&parts).unwrap();
    match write_file(&mut Plain(&mut Vec::new()), &layout, &mut parts) {
        Err(WriteError::Refused(m)) => assert_eq!(m.to_string(), "mismatch"),
        _ => panic!("a refusal is a refusal"),
    }
    // One byte short.
    let mut short = |out: &mut dyn TensorOut| -> Result<(), Refusal> {
        out.write_all(&big[1..]).map_err(Refusal::from)
    };
    let mut parts = vec![part("arg1", big.len(), TensorSource::Streamed(&mut short))];
    match write_file(&mut Plain(&mut Vec::new()), &layout, &mut parts) {
        Err(WriteError::Refused(m)) => assert!(m.to_string().contains("bytes written"), "{m}"),
        _ => panic!("a short tensor is refused"),
    }
    // The file's own error wins over the source's message.
    let mut full = [0u8; 100];
    let mut fill = |out: &mut dyn TensorOut| -> Result<(), Refusal> {
        out.write_all(&big).map_err(Refusal::from)
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
        let got = read_tensors_mapping_from(&File::open(&path).unwrap(), &path, &wanted, map_from)
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
