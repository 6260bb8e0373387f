//! Test doubles for the collector: a fake `BufferSource` that serves
//! "remote allocations" from memory and counts attaches, and a minimal tool
//! client speaking the protocol over the collector's real Unix socket.
#![allow(dead_code)]

use ditto_cli::collector::{BufferSource, Mapping, SourceError};
use ditto_protocol::{
    Ack, Buffer, CollectorMessage, DType, Dispatch, Goodbye, Hello, KernelName, PROTOCOL_VERSION,
    ToolMessage, Transport, fingerprint, read_frame, write_frame,
};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Allocations keyed by their 32-byte handle.
#[derive(Default)]
pub struct FakeSource {
    pub allocations: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    /// Handles whose mapping shows different bytes than the owner holds.
    pub stale: Mutex<Vec<Vec<u8>>>,
    /// Handles whose copy fails.
    pub copy_fails: Mutex<Vec<Vec<u8>>>,
    /// Handles whose copy panics (a bug in a buffer source).
    pub copy_panics: Mutex<Vec<Vec<u8>>>,
    pub live: AtomicUsize,
    /// The most bytes one copy asked for.
    pub largest_copy: AtomicUsize,
    /// Bytes copied, all copies together.
    pub copied: AtomicUsize,
    pub attaches: AtomicUsize,
    pub detaches: AtomicUsize,
    mapped: Mutex<HashMap<usize, Vec<u8>>>,
    next: AtomicUsize,
}

impl FakeSource {
    /// Adds an allocation and returns its handle.
    pub fn allocate(&self, bytes: Vec<u8>) -> Vec<u8> {
        let id = self.next.fetch_add(1, Ordering::SeqCst) as u8;
        let handle = vec![id + 1; 32];
        self.allocations
            .lock()
            .unwrap()
            .insert(handle.clone(), bytes);
        handle
    }
}

impl BufferSource for FakeSource {
    fn attach(
        &self,
        handle: &[u8],
        alloc_size: u64,
        _owner_node: Option<u32>,
    ) -> Result<Mapping, SourceError> {
        let mut bytes = self
            .allocations
            .lock()
            .unwrap()
            .get(handle)
            .cloned()
            .ok_or_else(|| SourceError::other("no such IPC handle"))?;
        if bytes.len() as u64 != alloc_size {
            return Err(SourceError::other(format!(
                "size {alloc_size} differs from the allocation's {}",
                bytes.len()
            )));
        }
        if self.stale.lock().unwrap().iter().any(|h| h == handle) {
            bytes.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        }
        let address = 0x1000 * (1 + self.attaches.fetch_add(1, Ordering::SeqCst));
        self.live.fetch_add(1, Ordering::SeqCst);
        let failing = self.copy_fails.lock().unwrap().iter().any(|h| h == handle);
        let panicking = self.copy_panics.lock().unwrap().iter().any(|h| h == handle);
        let key = address | failing as usize | (panicking as usize) << 1;
        self.mapped.lock().unwrap().insert(key, bytes);
        Ok(Mapping {
            address: key,
            len: alloc_size,
            gpu: None,
        })
    }

    fn copy(&self, mapping: &Mapping, offset: u64, dst: &mut [u8]) -> Result<(), SourceError> {
        if mapping.address & 1 == 1 {
            return Err(SourceError::other("simulated copy failure"));
        }
        if mapping.address & 2 == 2 {
            panic!("simulated bug in the buffer source");
        }
        self.largest_copy.fetch_max(dst.len(), Ordering::SeqCst);
        self.copied.fetch_add(dst.len(), Ordering::SeqCst);
        let mapped = self.mapped.lock().unwrap();
        let bytes = mapped
            .get(&mapping.address)
            .ok_or_else(|| SourceError::other("copy from a detached mapping"))?;
        dst.copy_from_slice(&bytes[offset as usize..offset as usize + dst.len()]);
        Ok(())
    }

    fn detach(&self, mapping: Mapping) -> Result<(), SourceError> {
        self.mapped
            .lock()
            .unwrap()
            .remove(&mapping.address)
            .ok_or_else(|| SourceError::other("double detach"))?;
        self.live.fetch_sub(1, Ordering::SeqCst);
        self.detaches.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

pub fn kernel() -> KernelName {
    KernelName {
        mangled: "_Z12scale_valuesIfEvPT_S1_S0_i".into(),
        demangled: "void scale_values<float>(float*, float*, float, int)".into(),
    }
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A buffer describing `extent` bytes at `offset` of `alloc`, with the
/// fingerprint the tool would compute.
pub fn buffer(arg: u32, handle: &[u8], alloc: &[u8], offset: u64, extent: u64) -> Buffer {
    Buffer {
        phase: ditto_protocol::Phase::After,
        arg_index: arg,
        name: None,
        dtype: DType::F32,
        transport: Transport::Ipc {
            handle: handle.to_vec(),
            owner_node: None,
        },
        owner_pid: 4242,
        alloc_base: 0x7f00_0000_0000,
        alloc_size: alloc.len() as u64,
        offset,
        extent,
        fingerprint: fingerprint(&alloc[offset as usize..(offset + extent) as usize]),
    }
}

/// A memfd named `name` holding `bytes` (a shared-memory copy, as the
/// tool makes one).
pub fn memfd(name: &str, bytes: &[u8]) -> File {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: fd is new and ours.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(bytes).unwrap();
    f
}

/// A shared-memory buffer describing `bytes` as argument `arg` of `phase`.
pub fn shared_memory_buffer(arg: u32, phase: ditto_protocol::Phase, bytes: &[u8]) -> Buffer {
    let mut b = buffer(arg, &[], bytes, 0, bytes.len() as u64);
    b.transport = Transport::SharedMemory;
    b.phase = phase;
    b
}

pub fn dispatch(index: u64, buffers: Vec<Buffer>) -> Dispatch {
    Dispatch {
        index,
        kernel: kernel(),
        grid: [64, 1, 1],
        block: [16, 1, 1],
        duration_ns: None,
        buffers,
        launch: None,
    }
}

pub fn hello(run: &str) -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        pid: 4242,
        run: run.into(),
        kernel_query: "scale_values".into(),
        command_line: vec!["scale_values".into(), "float".into()],
        working_directory: "/".into(),
        rank: None,
        api: ditto_protocol::Api::Hsa,
    }
}

/// The tool's side of a connection.
pub struct Tool {
    pub stream: UnixStream,
}

impl Tool {
    pub fn connect(socket: &Path) -> Tool {
        let stream = UnixStream::connect(socket).expect("collector socket accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Tool { stream }
    }

    pub fn send(&mut self, msg: &ToolMessage) {
        write_frame(&mut self.stream, msg).unwrap();
    }

    pub fn receive(&mut self) -> CollectorMessage {
        read_frame(&mut self.stream).expect("collector answers")
    }

    /// Hello → Welcome.
    pub fn greet(socket: &Path, run: &str) -> Tool {
        let mut t = Tool::connect(socket);
        t.send(&ToolMessage::Hello(hello(run)));
        assert_eq!(
            t.receive(),
            CollectorMessage::Welcome {
                version: PROTOCOL_VERSION
            }
        );
        t
    }

    pub fn dispatch(&mut self, d: Dispatch) -> Ack {
        self.send(&ToolMessage::Dispatch(d));
        self.ack()
    }

    /// The next message, which must be an Ack.
    pub fn ack(&mut self) -> Ack {
        match self.receive() {
            CollectorMessage::Ack(a) => a,
            other => panic!("expected an Ack, got {other:?}"),
        }
    }

    /// Sends a Dispatch with `files` attached (closing this side's copies,
    /// as the tool does), without waiting for its Ack.
    pub fn send_with_files(&mut self, d: Dispatch, files: Vec<File>) {
        use std::os::fd::AsFd;
        let fds: Vec<_> = files.iter().map(|f| f.as_fd()).collect();
        ditto_protocol::write_frame_with_fds(&self.stream, &ToolMessage::Dispatch(d), &fds)
            .unwrap();
    }

    /// Whether the collector says nothing for `quiet` (it is waiting).
    pub fn silent_for(&mut self, quiet: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the stream outlives the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, quiet.as_millis() as libc::c_int) };
        ready == 0
    }

    /// Goodbye: the kernel ran `dispatched` times, every one matched.
    pub fn goodbye(mut self, dispatched: u64) {
        self.send(&ToolMessage::Goodbye(Goodbye {
            dispatched: vec![(kernel(), dispatched)],
            matched: dispatched,
        }));
        self.stream.flush().unwrap();
    }
}
