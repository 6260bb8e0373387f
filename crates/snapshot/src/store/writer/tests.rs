//! The snapshot writer's tests: what a written snapshot loads back as,
//! the order and atomicity of its files, shared writers, and the accounting
//! of dispatches stored, refused and missing.

use super::super::fixtures::{captured, dispatch, file_names as names, hello};
use super::super::{Array, Snapshot};
use super::*;
use crate::store::{TensorSource, TransportKind};
use ditto_protocol::{DType, Hello};

#[test]
fn a_timeout_wins_over_the_late_copy_of_its_dispatch_in_the_writer_and_from_the_journal() {
    use ditto_protocol::MissReason;
    use missing::MissingRecord;
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut w = SnapshotWriter::create(&snap, "scale_values").unwrap();
    let rank = w.add_run(&hello("ref")).unwrap();
    w.flush().unwrap();
    let before = std::fs::read(snap.join(MANIFEST_FILE)).unwrap();
    for i in 0..2 {
        w.add_dispatch(rank, 77, &dispatch(i), &[captured(1, DType::U8, vec![1])])
            .unwrap();
    }
    let record = |reason, detail: &str| MissingRecord {
        rank,
        pid: 77,
        index: 1,
        count: 1,
        arg: None,
        phase: None,
        reason,
        detail: detail.into(),
    };
    // The collector's own error for the late copy, then the tool's timeout.
    w.add_missing(record(MissReason::Error, "fingerprint mismatch"))
        .unwrap();
    w.add_missing(record(MissReason::Timeout, "no Ack within 300 ms"))
        .unwrap();
    assert!(
        !snap.join(dispatch_file_name(rank, 1)).exists(),
        "the late copy's file is removed"
    );
    drop(w);
    let expect = |s: &Snapshot| {
        let indices: Vec<u64> = s.manifest.dispatches.iter().map(|d| d.index).collect();
        assert_eq!(indices, vec![0]);
        assert_eq!(
            s.manifest.missing,
            vec![record(MissReason::Timeout, "no Ack within 300 ms")],
            "the later record for the dispatch replaces the earlier"
        );
    };
    expect(&Snapshot::load(&snap).unwrap());
    // Killed before the manifest was rewritten: the journal says the same.
    std::fs::write(snap.join(MANIFEST_FILE), &before).unwrap();
    expect(&Snapshot::load(&snap).unwrap());
}

#[test]
fn written_dispatch_loads_back_with_values_and_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("snap");
    let mut w = SnapshotWriter::create(&snap, "scale_values").unwrap();
    let rank = w.add_run(&hello("ref")).unwrap();
    let floats: Vec<u8> = [1.0f32, 2.5, -3.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let raw = vec![9u8, 8, 7];
    let path = w
        .add_dispatch(
            rank,
            77,
            &dispatch(0),
            &[
                captured(1, DType::F32, floats.clone()),
                captured(3, DType::Bytes, raw.clone()),
            ],
        )
        .unwrap();
    assert_eq!(path, snap.join("dispatch-0-00000.safetensors"));
    w.add_goodbye(&Goodbye {
        dispatched: vec![(dispatch(0).kernel, 1)],
        matched: 1,
    })
    .unwrap();

    let s = Snapshot::load(&snap).unwrap();
    assert_eq!(s.manifest.runs[0].run, "ref");
    assert_eq!(
        s.manifest.kernel.as_ref().unwrap().mangled,
        "_Z12scale_valuesIfEvPT_S1_S0_i"
    );
    assert_eq!(s.manifest.dispatched_kernels[0].count, 1);
    let d = &s.manifest.dispatches[0];
    assert_eq!(d.buffers[0].elements, 3);
    assert_eq!(d.buffers[0].handle, Some("ab".repeat(32)));
    assert_eq!(d.buffers[0].transport, TransportKind::Ipc);
    assert_eq!(d.buffers[1].dtype, "bytes");
    let arrays = s.load_dispatch(d).unwrap();
    assert_eq!(
        arrays[0],
        (
            1,
            Array {
                dtype: DType::F32,
                bytes: floats.into()
            }
        )
    );
    assert_eq!(
        arrays[1],
        (
            3,
            Array {
                dtype: DType::Bytes,
                bytes: raw.into()
            }
        )
    );
    // No temporary file is left behind once the writer is done.
    drop(w);
    let names: Vec<String> = std::fs::read_dir(&snap)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".ditto-tmp")),
        "{names:?}"
    );
    assert_eq!(names.len(), 3, "manifest, journal, one dispatch: {names:?}");
}

#[test]
fn temporary_files_of_a_killed_writer_are_removed_when_the_directory_is_next_written() {
    // Killed mid-capture: a manifest, and a tensor file never renamed.
    let dir = tempfile::tempdir().unwrap();
    drop(SnapshotWriter::create(dir.path(), "k").unwrap());
    std::fs::write(dir.path().join(".ditto-tmp-cut"), b"half a tensor").unwrap();
    assert_eq!(
        Snapshot::load(dir.path())
            .unwrap()
            .manifest
            .dispatches
            .len(),
        0
    );
    drop(SnapshotWriter::create(dir.path(), "k").unwrap());
    assert_eq!(names(dir.path()), ["dispatches.jsonl", "manifest.json"]);
    // Killed before its first manifest: only the journal and a leftover.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".ditto-tmp-manifest"), b"{").unwrap();
    std::fs::write(dir.path().join(journal::JOURNAL_FILE), b"").unwrap();
    drop(SnapshotWriter::create(dir.path(), "k").unwrap());
    assert_eq!(names(dir.path()), ["dispatches.jsonl", "manifest.json"]);
}

#[test]
fn launcher_ranks_are_kept_and_unranked_processes_take_the_lowest_free_rank() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SnapshotWriter::create(dir.path(), "k").unwrap();
    let ranked = |r: u32| Hello {
        rank: Some(r),
        ..hello("mpi")
    };
    assert_eq!(w.add_run(&ranked(2)).unwrap(), 2);
    assert_eq!(w.add_run(&ranked(0)).unwrap(), 0);
    assert_eq!(w.add_run(&hello("mpi")).unwrap(), 1);
    assert_eq!(w.add_run(&hello("mpi")).unwrap(), 3);
    let err = w.add_run(&ranked(2)).unwrap_err().to_string();
    assert!(err.contains("rank 2") && err.contains("already"), "{err}");
    let sources: Vec<&str> = w
        .manifest()
        .runs
        .iter()
        .map(|r| r.rank_source.as_str())
        .collect();
    assert_eq!(
        sources,
        [
            "launcher",
            "launcher",
            "connection order",
            "connection order"
        ]
    );
}

/// A streamed source that writes `bytes` and, while it does, runs `meanwhile`.
fn streaming<'a>(
    bytes: &'a [u8],
    mut meanwhile: impl FnMut() + 'a,
) -> impl FnMut(&mut dyn super::super::TensorOut) -> Result<(), super::super::Refusal> + 'a {
    move |out| {
        meanwhile();
        out.write_all(bytes).map_err(super::super::Refusal::from)
    }
}

#[test]
fn a_shared_writer_is_not_locked_while_a_tensor_file_is_written_and_a_dispatch_in_flight_is_not_written_twice()
 {
    let dir = tempfile::tempdir().unwrap();
    let writer = Mutex::new(SnapshotWriter::create(dir.path(), "k").unwrap());
    let large = captured(0, DType::U8, vec![7; 4096]);
    let mut seen = Vec::new();
    let mut fill = streaming(&large.data, || {
        // Another connection's dispatch is stored meanwhile, and the
        // same dispatch again is refused while this one is written.
        let other = captured(0, DType::U8, vec![1; 8]);
        let stored = writer
            .try_lock()
            .map(|mut w| w.add_dispatch(1, 78, &dispatch(0), &[other]))
            .expect("the writer is not locked while a tensor file is written");
        seen.push(stored.map(|p| p.file_name().unwrap().to_owned()));
        let again = captured(0, DType::U8, vec![2; 8]);
        seen.push(
            writer
                .lock()
                .unwrap()
                .add_dispatch(0, 77, &dispatch(0), &[again])
                .map(|p| p.file_name().unwrap().to_owned()),
        );
    });
    let mut tensors = [TensorToStore {
        buffer: &large.buffer,
        source: TensorSource::Streamed(&mut fill),
    }];
    let path =
        SnapshotWriter::add_dispatch_shared(&writer, 0, 77, &dispatch(0), &mut tensors).unwrap();
    drop(fill);
    assert_eq!(path, dir.path().join("dispatch-0-00000.safetensors"));
    assert_eq!(
        seen[0].as_ref().unwrap(),
        "dispatch-1-00000.safetensors",
        "{seen:?}"
    );
    let refused = seen[1].as_ref().unwrap_err().to_string();
    assert!(refused.contains("already stored"), "{refused}");
    drop(writer);
    let s = Snapshot::load(dir.path()).unwrap();
    let stored: Vec<(u32, u64)> = s
        .manifest
        .dispatches
        .iter()
        .map(|d| (d.rank, d.index))
        .collect();
    assert_eq!(stored, [(1, 0), (0, 0)]);
    let arrays = s.load_dispatch(&s.manifest.dispatches[1]).unwrap();
    assert_eq!(
        arrays[0].1.bytes,
        vec![7u8; 4096],
        "the streamed bytes, not the refused ones"
    );
}

#[test]
fn a_refused_stream_into_a_shared_writer_stores_nothing_and_gives_its_dispatch_back() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Mutex::new(SnapshotWriter::create(dir.path(), "k").unwrap());
    let large = captured(0, DType::U8, vec![7; 4096]);
    let mut refuse = |_: &mut dyn super::super::TensorOut| {
        Err(super::super::Refusal::from("fingerprint mismatch"))
    };
    let mut tensors = [TensorToStore {
        buffer: &large.buffer,
        source: TensorSource::Streamed(&mut refuse),
    }];
    let err = SnapshotWriter::add_dispatch_shared(&writer, 0, 77, &dispatch(3), &mut tensors)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Refused(ref r) if r.to_string() == "fingerprint mismatch"),
        "{err}"
    );
    // The room kept for the manifest is there while the writer is.
    assert_eq!(
        names(dir.path()),
        [".ditto-tmp-room", "dispatches.jsonl", "manifest.json"]
    );
    // The dispatch is not held reserved: its next copy is stored.
    let path = writer
        .lock()
        .unwrap()
        .add_dispatch(0, 77, &dispatch(3), std::slice::from_ref(&large))
        .unwrap();
    assert_eq!(path, dir.path().join("dispatch-0-00003.safetensors"));
    assert_eq!(writer.lock().unwrap().manifest().dispatches.len(), 1);
}

#[test]
fn a_second_dispatch_with_the_same_rank_and_index_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SnapshotWriter::create(dir.path(), "k").unwrap();
    w.add_dispatch(0, 1, &dispatch(2), &[]).unwrap();
    assert!(w.add_dispatch(0, 1, &dispatch(2), &[]).is_err());
    assert_eq!(w.manifest().dispatches.len(), 1);
}

#[test]
fn an_older_snapshot_is_replaced_and_a_foreign_directory_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = SnapshotWriter::create(dir.path(), "k").unwrap();
    w.add_dispatch(0, 1, &dispatch(0), &[captured(0, DType::U8, vec![1])])
        .unwrap();
    drop(w);
    let w2 = SnapshotWriter::create(dir.path(), "k").unwrap();
    assert!(w2.replaced_previous());
    assert!(!dir.path().join("dispatch-0-00000.safetensors").exists());

    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(foreign.path().join("notes.txt"), "mine").unwrap();
    let err = SnapshotWriter::create(foreign.path(), "k").unwrap_err();
    assert!(matches!(err, StoreError::ForeignDirectory { .. }));
}
