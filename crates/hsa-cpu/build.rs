//! Link arguments for libhsa-runtime64.so.1 and the symlink under
//! target/<profile>/hsa-cpu/ that LD_LIBRARY_PATH points at.

use std::path::{Path, PathBuf};

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let map = crate_dir.join("exports.map");
    println!("cargo:rerun-if-changed={}", map.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhsa-runtime64.so.1");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );

    // OUT_DIR = <target>/<profile>/build/hsa-cpu-<hash>/out (CARGO_TARGET_DIR
    // and --target triples included): three levels up is the profile dir.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    if let Err(e) = make_link(profile_dir) {
        println!(
            "cargo:warning=could not create {}/hsa-cpu/libhsa-runtime64.so.1: {e}",
            profile_dir.display()
        );
    }
}

fn make_link(profile_dir: &Path) -> std::io::Result<()> {
    let dir = profile_dir.join("hsa-cpu");
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("libhsa-runtime64.so.1");
    let target = Path::new("../libhsa_runtime64.so");
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(target, &link)
}
