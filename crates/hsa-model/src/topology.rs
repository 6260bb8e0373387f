//! The topology directory real ROCr's thunk reads in model mode
//! (`HSA_MODEL_TOPOLOGY`), laid out as the kernel driver's sysfs
//! (`/sys/class/kfd/kfd/topology`): `generation_id`, `system_properties`,
//! and per node `gpu_id`, `name`, `properties`, `mem_banks/M/properties`,
//! `caches/M/properties`, `io_links/M/properties`, `p2p_links`.
//!
//! Node 0 is the CPU; nodes 1..=N are MI300X-like gfx942 GPUs, their
//! properties the values an MI300X's driver reports, except where model
//! mode requires otherwise (found running ROCr 7.2.4):
//! - `gpu_id` is the node's index + 1 (the thunk aborts otherwise);
//! - `gfx_target_version` 90402 (gfx942): for gfx90a ROCr binds a trap
//!   handler, an ioctl model mode does not implement;
//! - `capability` carries the 64-bit doorbell type (2 << 12) and not bit
//!   30 (the debugger runtime, unimplemented in model mode);
//! - the GPU has caches (ROCr asserts "GPU cache info missing" without).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// gfx942's packed target version (9.4.2).
pub const GFX942: u32 = 90402;
/// `HSA_CAPABILITY.DoorbellType` = 2 (64-bit doorbells), bits 12..13.
pub const CAPABILITY_DOORBELL_64: u64 = 2 << 12;
/// MI300X's PCI device id (0x74a1).
const MI300X_DEVICE_ID: u32 = 0x74a1;
/// An MI300X's HBM as its driver reports it (192 GiB less reserved).
const MI300X_LOCAL_MEMORY: u64 = 205_822_885_888;
/// Where the driver numbers GPU SIMDs from.
const GPU_SIMD_ID_BASE: u64 = 0x8000_1000;

/// The node of the `nth` GPU (from 0) of the topology the thunk reads
/// (`HSA_MODEL_TOPOLOGY`): the `nth` node with a nonzero `gpu_id`, in node
/// order, as the thunk creates its models. `nth + 1` (ditto's own layout)
/// where the directory cannot be read.
pub fn nth_gpu_node(nth: usize) -> u32 {
    let fallback = nth as u32 + 1;
    let Some(dir) = std::env::var_os("HSA_MODEL_TOPOLOGY") else {
        return fallback;
    };
    let nodes = Path::new(&dir).join("nodes");
    (0..)
        .map_while(|node: u32| {
            let id = std::fs::read_to_string(nodes.join(node.to_string()).join("gpu_id")).ok()?;
            Some((node, id.trim().parse::<u64>().unwrap_or(0)))
        })
        .filter(|&(_, id)| id != 0)
        .nth(nth)
        .map_or(fallback, |(node, _)| node)
}

/// What the topology describes.
#[derive(Debug, Clone)]
pub struct Topology {
    /// GPU nodes (1 or more).
    pub gpus: u32,
    pub cpu_cores: u32,
    /// Bytes of system memory (node 0's memory bank).
    pub system_memory: u64,
}

impl Topology {
    /// `gpus` GPUs beside this machine's CPU cores and memory.
    pub fn for_this_machine(gpus: u32) -> Topology {
        // SAFETY: sysconf has no memory-safety preconditions.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
        // SAFETY: as above.
        let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(1) as u64;
        Topology {
            gpus,
            cpu_cores: cores,
            system_memory: pages * 4096,
        }
    }

    /// Writes the topology into `dir` (created if missing; files replaced).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        if self.gpus == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a model topology needs at least one GPU",
            ));
        }
        std::fs::create_dir_all(dir.join("nodes"))?;
        std::fs::write(dir.join("generation_id"), "1\n")?;
        std::fs::write(
            dir.join("system_properties"),
            "platform_oem 0\nplatform_id 0\nplatform_rev 0\n",
        )?;
        self.write_node(dir, 0)?;
        for gpu in 1..=self.gpus {
            self.write_node(dir, gpu)?;
        }
        Ok(())
    }

    fn write_node(&self, dir: &Path, node: u32) -> io::Result<()> {
        let path = dir.join("nodes").join(node.to_string());
        for sub in ["mem_banks/0", "io_links", "caches", "p2p_links"] {
            std::fs::create_dir_all(path.join(sub))?;
        }
        let is_gpu = node > 0;
        let gpu_id = if is_gpu { node + 1 } else { 0 };
        std::fs::write(path.join("gpu_id"), format!("{gpu_id}\n"))?;
        std::fs::write(path.join("name"), if is_gpu { "gfx942\n" } else { "\n" })?;
        std::fs::write(path.join("properties"), self.node_properties(node))?;
        let bank = if is_gpu {
            // HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC.
            format!(
                "heap_type 1\nsize_in_bytes {MI300X_LOCAL_MEMORY}\nflags 0\nwidth 8192\nmem_clk_max 1300\n"
            )
        } else {
            format!(
                "heap_type 0\nsize_in_bytes {}\nflags 0\nwidth 64\nmem_clk_max 2400\n",
                self.system_memory
            )
        };
        std::fs::write(path.join("mem_banks/0/properties"), bank)?;
        // Node 0 links to every GPU, each GPU to node 0 (PCIe, type 2).
        let peers: Vec<u32> = if is_gpu {
            vec![0]
        } else {
            (1..=self.gpus).collect()
        };
        for (i, to) in peers.iter().enumerate() {
            let link = path.join("io_links").join(i.to_string());
            std::fs::create_dir_all(&link)?;
            std::fs::write(
                link.join("properties"),
                format!(
                    "type 2\nversion_major 0\nversion_minor 0\nnode_from {node}\nnode_to {to}\n\
                     weight 20\nmin_latency 0\nmax_latency 0\nmin_bandwidth 312\n\
                     max_bandwidth 64000\nrecommended_transfer_size 0\nflags 1\n"
                ),
            )?;
        }
        if is_gpu {
            // L1 per CU, L2 per XCD, the MALL: data caches of the GPU
            // (type 1 data | 8 HSA compute unit).
            for (i, (level, kib, line)) in [(1u32, 32u32, 128u32), (2, 4096, 128), (3, 262_144, 64)]
                .iter()
                .enumerate()
            {
                let cache = path.join("caches").join(i.to_string());
                std::fs::create_dir_all(&cache)?;
                std::fs::write(
                    cache.join("properties"),
                    format!(
                        "processor_id_low {GPU_SIMD_ID_BASE}\nlevel {level}\nsize {kib}\n\
                         cache_line_size {line}\ncache_lines_per_tag 1\nassociation 16\n\
                         latency 1\ntype 9\n"
                    ),
                )?;
            }
        }
        Ok(())
    }

    fn node_properties(&self, node: u32) -> String {
        let is_gpu = node > 0;
        let caches = if is_gpu { 3 } else { 0 };
        let links = if is_gpu { 1 } else { self.gpus };
        let mut p = String::new();
        let mut line = |k: &str, v: u64| {
            let _ = writeln!(p, "{k} {v}");
        };
        line(
            "cpu_cores_count",
            if is_gpu { 0 } else { u64::from(self.cpu_cores) },
        );
        line("simd_count", if is_gpu { 1216 } else { 0 });
        line("mem_banks_count", 1);
        line("caches_count", caches);
        line("io_links_count", u64::from(links));
        line("p2p_links_count", 0);
        line("cpu_core_id_base", 0);
        line("simd_id_base", if is_gpu { GPU_SIMD_ID_BASE } else { 0 });
        line("max_waves_per_simd", if is_gpu { 8 } else { 0 });
        line("lds_size_in_kb", if is_gpu { 64 } else { 0 });
        line("gds_size_in_kb", 0);
        line("num_gws", if is_gpu { 64 } else { 0 });
        line("wave_front_size", if is_gpu { 64 } else { 0 });
        line("array_count", if is_gpu { 32 } else { 0 });
        line("simd_arrays_per_engine", if is_gpu { 1 } else { 0 });
        line("cu_per_simd_array", if is_gpu { 10 } else { 0 });
        line("simd_per_cu", if is_gpu { 4 } else { 0 });
        line("max_slots_scratch_cu", if is_gpu { 32 } else { 0 });
        line(
            "gfx_target_version",
            if is_gpu { u64::from(GFX942) } else { 0 },
        );
        line("vendor_id", if is_gpu { 0x1002 } else { 0 });
        line(
            "device_id",
            if is_gpu {
                u64::from(MI300X_DEVICE_ID)
            } else {
                0
            },
        );
        // Bus number = node, as a host with the GPUs on buses 1.. has them.
        line("location_id", if is_gpu { u64::from(node) << 8 } else { 0 });
        line("domain", 0);
        line(
            "drm_render_minor",
            if is_gpu { 127 + u64::from(node) } else { 0 },
        );
        line("hive_id", 0);
        line("num_sdma_engines", if is_gpu { 2 } else { 0 });
        line("num_sdma_xgmi_engines", if is_gpu { 14 } else { 0 });
        line("num_sdma_queues_per_engine", if is_gpu { 8 } else { 0 });
        line("num_cp_queues", if is_gpu { 24 } else { 0 });
        line("max_engine_clk_fcompute", if is_gpu { 2100 } else { 0 });
        line(
            "local_mem_size",
            if is_gpu { MI300X_LOCAL_MEMORY } else { 0 },
        );
        line("fw_version", if is_gpu { 177 } else { 0 });
        line(
            "capability",
            if is_gpu { CAPABILITY_DOORBELL_64 } else { 0 },
        );
        line("debug_prop", 0);
        line("sdma_fw_version", if is_gpu { 21 } else { 0 });
        line(
            "unique_id",
            if is_gpu {
                0x6469_7474_6f00 + u64::from(node)
            } else {
                0
            },
        );
        line("num_xcc", if is_gpu { 8 } else { 0 });
        line("max_engine_clk_ccompute", 3700);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn property(text: &str, key: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn gpu_nodes_carry_what_model_mode_requires() {
        let dir = tempfile::tempdir().unwrap();
        let t = Topology {
            gpus: 2,
            cpu_cores: 4,
            system_memory: 1 << 34,
        };
        t.write(dir.path()).unwrap();
        for node in 1..=2u32 {
            let n = dir.path().join(format!("nodes/{node}"));
            let gpu_id = std::fs::read_to_string(n.join("gpu_id")).unwrap();
            assert_eq!(gpu_id.trim(), (node + 1).to_string());
            let p = std::fs::read_to_string(n.join("properties")).unwrap();
            assert_eq!(property(&p, "gfx_target_version"), Some(90402));
            let capability = property(&p, "capability").unwrap();
            assert_eq!((capability >> 12) & 3, 2, "64-bit doorbells");
            assert_eq!(capability & (1 << 30), 0, "no debugger runtime bit");
            assert_eq!(property(&p, "caches_count"), Some(3));
            let cache = std::fs::read_to_string(n.join("caches/0/properties")).unwrap();
            assert_eq!(property(&cache, "type"), Some(9));
        }
        let cpu = std::fs::read_to_string(dir.path().join("nodes/0/properties")).unwrap();
        assert_eq!(property(&cpu, "cpu_cores_count"), Some(4));
        assert_eq!(property(&cpu, "io_links_count"), Some(2));
        let bank =
            std::fs::read_to_string(dir.path().join("nodes/0/mem_banks/0/properties")).unwrap();
        assert_eq!(property(&bank, "size_in_bytes"), Some(1 << 34));
    }

    #[test]
    fn no_gpu_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let t = Topology {
            gpus: 0,
            cpu_cores: 1,
            system_memory: 1 << 30,
        };
        assert_eq!(
            t.write(dir.path()).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
