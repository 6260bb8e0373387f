//! What the store's tests write: a process's Hello, a captured buffer of
//! given bytes and a dispatch of scale_values<float>; and the names of a
//! directory's entries. Tests only.

use super::CapturedBuffer;
use ditto_protocol::{Buffer, DType, Dispatch, Hello, KernelName, Transport};

pub fn hello(run: &str) -> Hello {
    Hello {
        version: ditto_protocol::PROTOCOL_VERSION,
        pid: 77,
        run: run.into(),
        kernel_query: "scale_values".into(),
        command_line: vec!["app".into(), "float".into()],
        working_directory: "/tmp".into(),
        rank: None,
        api: ditto_protocol::Api::Hsa,
    }
}

pub fn captured(arg: u32, dtype: DType, data: Vec<u8>) -> CapturedBuffer {
    CapturedBuffer {
        buffer: Buffer {
            phase: ditto_protocol::Phase::After,
            arg_index: arg,
            name: None,
            dtype,
            transport: Transport::Ipc {
                handle: vec![0xab; 32],
                owner_node: None,
            },
            owner_pid: 77,
            alloc_base: 0x1000,
            alloc_size: 4096,
            offset: 0,
            extent: data.len() as u64,
            fingerprint: ditto_protocol::fingerprint(&data),
        },
        data,
    }
}

pub fn dispatch(index: u64) -> Dispatch {
    Dispatch {
        index,
        kernel: KernelName {
            mangled: "_Z12scale_valuesIfEvPT_S1_S0_i".into(),
            demangled: "void scale_values<float>(float*, float*, float, int)".into(),
        },
        grid: [16, 1, 1],
        block: [4, 1, 1],
        duration_ns: None,
        buffers: vec![],
        launch: None,
    }
}

/// The names of the entries of `dir`, sorted.
pub fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
