//! What the kill trials (collector_killed.rs, application_killed.rs) share:
//! the reproducible sequence of kill points, and reading back a snapshot
//! directory of dispatch_storm captures file by file. Owns no process.
#![allow(dead_code)]

use std::path::Path;

/// Floats storm_fill writes per dispatch (dispatch_storm's kOutputFloats).
pub const STORM_FLOATS: usize = 1024;

/// A small deterministic pseudo-random sequence (splitmix64): the same seed
/// gives the same kill points, so a failing trial can be replayed. The seed
/// is `DITTO_TRIAL_SEED` when set, else `default`.
pub struct KillPoints {
    pub seed: u64,
    state: u64,
}

impl KillPoints {
    pub fn new(default: u64) -> KillPoints {
        let seed = std::env::var("DITTO_TRIAL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        KillPoints { seed, state: seed }
    }

    /// The next value in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound
    }
}

/// Names in `dir` (none when it does not exist).
pub fn names_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// (rank, index) of `dispatch-<rank>-<index>.safetensors`.
pub fn dispatch_file_key(name: &str) -> Option<(u64, u64)> {
    let rest = name
        .strip_prefix("dispatch-")?
        .strip_suffix(".safetensors")?;
    let (rank, index) = rest.split_once('-')?;
    Some((rank.parse().ok()?, index.parse().ok()?))
}

/// Reads every dispatch file of a dispatch_storm snapshot in `snap` and
/// checks it whole: it parses as safetensors, and its `arg0` holds what
/// storm_fill wrote in that dispatch (matched dispatch 0 is the warm-up,
/// dispatch -1; matched dispatch i > 0 is storm dispatch i - 1, writing
/// out[j] = i - 1 + j). Returns the (rank, index) of every file. `trial`
/// names the trial in every failure.
pub fn check_dispatch_files(snap: &Path, trial: &str) -> Vec<(u64, u64)> {
    let mut keys = Vec::new();
    for name in names_in(snap) {
        if !name.starts_with("dispatch-") {
            continue;
        }
        let (rank, index) = dispatch_file_key(&name)
            .unwrap_or_else(|| panic!("{trial}: unexpected file name {name}"));
        let bytes = std::fs::read(snap.join(&name)).unwrap();
        let tensors = safetensors::SafeTensors::deserialize(&bytes)
            .unwrap_or_else(|e| panic!("{trial}: {name} is torn or not safetensors: {e}"));
        let out = tensors
            .tensor("arg0")
            .unwrap_or_else(|e| panic!("{trial}: {name} has no arg0: {e}"));
        assert_eq!(out.dtype(), safetensors::Dtype::F32, "{trial}: {name}");
        assert_eq!(out.shape(), [STORM_FLOATS], "{trial}: {name}");
        let dispatch = index as i64 - 1;
        for (j, c) in out.data().chunks_exact(4).enumerate() {
            let v = f32::from_le_bytes(c.try_into().unwrap());
            assert_eq!(
                v,
                (dispatch + j as i64) as f32,
                "{trial}: {name} arg0[{j}] is not what storm dispatch {dispatch} wrote"
            );
        }
        keys.push((rank, index));
    }
    keys
}

/// (rank, index) of every dispatch record in a merged manifest.
pub fn manifest_keys(manifest: &serde_json::Value) -> Vec<(u64, u64)> {
    let mut keys: Vec<(u64, u64)> = manifest["dispatches"]
        .as_array()
        .expect("manifest has dispatches")
        .iter()
        .map(|d| (d["rank"].as_u64().unwrap(), d["index"].as_u64().unwrap()))
        .collect();
    keys.sort_unstable();
    keys
}
