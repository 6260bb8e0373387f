//! ditto's capture modes, dispatch selection, several processes through
//! one collector and the ways the tool is loaded, beneath real ROCr 7.2.4
//! and real HIP 7.2.4 (the ROCm 7.2 chroot) on ditto's model GPU. Each is
//! set beside what the CPU runtime gives for the same tests/hip program
//! (there the build crates/test-apps makes, on the host's HIP; on the model
//! the gfx942 build of hipcc 7.2.4) and run again with the model's
//! execution switched off (DITTO_MODEL_GPU_EXECUTE=0), to see it fail:
//! - `--capture inputs` (and `inputs,outputs`), `--capture written`: the
//!   same buffers in the same phases, the same values (`ditto compare` of
//!   the CPU runtime's snapshot against the model's passes);
//! - `--dispatch 1` of scale_twice: index 1 alone, with `--capture all`
//!   the inputs holding dispatch 0's result and not yet dispatch 1's;
//! - two ranks × two runs through one `ditto collect --hsa-runtime model`,
//!   each rank started by `scripts/ditto-run --hsa-runtime model` (which
//!   takes the model's variables from `ditto hsa-env`), paired by rank;
//! - the tool named in HSA_TOOLS_LIB, preloaded, or both: it starts once
//!   and captures once;
//! - rocprofiler-register's way of loading tools: the chroot's ROCr and
//!   HIP carry none, pinned, so that a chroot that has it fails here and
//!   the real path gets its test.

use crate::common::model_gpu::*;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

#[derive(Clone, Copy, Debug)]
enum Runtime {
    Cpu,
    Model,
}

/// `ditto run --hsa-runtime RUNTIME --kernel KERNEL OPTIONS --out SNAP --
/// PROGRAM` (no timeout but the test's LIMIT), `env` added: on the CPU runtime the tests/hip build on the
/// host, on the model the gfx942 build in the ROCm 7.2 chroot. The output
/// and SNAP (`dir/<runtime>-<label>`).
fn ditto_run(
    runtime: Runtime,
    dir: &Path,
    label: &str,
    program: &str,
    options: &[&str],
    env: &[(&str, String)],
) -> (Output, PathBuf) {
    let (name, snap) = match runtime {
        Runtime::Cpu => ("cpu", dir.join(format!("cpu-{label}"))),
        Runtime::Model => ("model", dir.join(format!("model-{label}"))),
    };
    let out = match runtime {
        Runtime::Cpu => {
            let exe = hip_app(program);
            let mut args = vec!["run", "--hsa-runtime", name];
            args.extend(options);
            args.extend(["--out", snap.to_str().unwrap(), "--", exe.to_str().unwrap()]);
            let mut c = Command::new(ditto_bin());
            c.args(&args).env("NO_COLOR", "1");
            for (k, v) in env {
                c.env(k, v);
            }
            output_within(&mut c, LIMIT, &format!("ditto {args:?}"))
        }
        Runtime::Model => {
            let exe = gfx942_apps().join(program);
            ditto_run_on_model(dir, options, &snap, &[exe.to_str().unwrap()], env)
        }
    };
    (out, snap)
}

/// [`ditto_run`] that must succeed; its snapshot's manifest and directory.
fn captured(
    runtime: Runtime,
    dir: &Path,
    label: &str,
    program: &str,
    options: &[&str],
) -> (serde_json::Value, PathBuf) {
    let (out, snap) = ditto_run(runtime, dir, label, program, options, &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{runtime:?} {program} {options:?}: {}",
        stderr(&out)
    );
    (snapshot_manifest(&snap), snap)
}

/// Each dispatch's index and its (tensor, phase) list, in manifest order.
fn layout(m: &serde_json::Value) -> Vec<(u64, Vec<(String, String)>)> {
    m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["index"].as_u64().unwrap(), buffer_phases(d)))
        .collect()
}

fn pairs(names: &[(&str, &str)]) -> Vec<(String, String)> {
    names
        .iter()
        .map(|(t, p)| (t.to_string(), p.to_string()))
        .collect()
}

/// Tensor `name` of the dispatch with index `index` of a snapshot.
fn tensor(m: &serde_json::Value, snap: &Path, index: u64, name: &str) -> Vec<f32> {
    let d = m["dispatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["index"] == index)
        .unwrap_or_else(|| panic!("no dispatch {index} in {m}"));
    f32_tensor(snap, d["file"].as_str().unwrap(), name)
}

/// `ditto compare --json CPU MODEL` must pass: the same values in every
/// buffer both captured. Its report.
fn same_values(cpu: &Path, model: &Path) -> serde_json::Value {
    let (v, out) = compare_json(cpu, model);
    assert_eq!(
        (out.status.code(), &v["valid"]),
        (Some(0), &serde_json::json!(true)),
        "the CPU runtime's {} against the model's {}: {v}",
        cpu.display(),
        model.display()
    );
    v
}

/// [`ditto_run`] on the model with its execution switched off: no kernel
/// completes, ditto stops the application at `--timeout` (exit 2) and
/// the snapshot holds no dispatch.
fn assert_nothing_captured_switched_off(dir: &Path, program: &str, options: &[&str]) {
    let off = [("DITTO_MODEL_GPU_EXECUTE", "0".to_string())];
    let timeout = SWITCHED_OFF_WAIT.as_secs().to_string();
    let mut options = options.to_vec();
    options.extend(["--timeout", &timeout]);
    let (out, snap) = ditto_run(Runtime::Model, dir, "off", program, &options, &off);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{options:?}: {err}");
    assert!(
        err.contains(&format!(
            "within the {} s timeout (ditto stopped it)",
            SWITCHED_OFF_WAIT.as_secs()
        )),
        "{err}"
    );
    let m = snapshot_manifest(&snap);
    assert_eq!(m["dispatches"], serde_json::json!([]), "{m}");
}

#[test]
fn capture_inputs_beneath_real_rocr_takes_the_cpu_runtime_s_buffers_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[(&str, &str)]); 2] = [
        ("inputs", &[("arg0.before", "before")]),
        (
            "inputs,outputs",
            &[("arg0.before", "before"), ("arg1", "after")],
        ),
    ];
    for (capture, expected) in cases {
        let options = ["--kernel", "reduce_sum", "--capture", capture];
        let label = capture.replace(',', "-");
        let (cpu, cpu_snap) = captured(
            Runtime::Cpu,
            dir.path(),
            &label,
            "reduce_sum_baseline",
            &options,
        );
        let (m, snap) = captured(
            Runtime::Model,
            dir.path(),
            &label,
            "reduce_sum_baseline",
            &options,
        );
        let expected = vec![(0, pairs(expected))];
        assert_eq!(layout(&cpu), expected, "CPU runtime, {capture}");
        assert_eq!(layout(&m), expected, "model, {capture}");
        let input = tensor(&m, &snap, 0, "arg0.before");
        assert_eq!(input.len(), 65536);
        for (i, v) in input.iter().enumerate() {
            assert_eq!(*v, (i % 7) as f32 * 0.5, "input[{i}], {capture}");
        }
        if capture.contains("outputs") {
            assert_eq!(tensor(&m, &snap, 0, "arg1")[0], 98301.5);
        }
        let v = same_values(&cpu_snap, &snap);
        assert_eq!(v["arrays_compared"], expected[0].1.len(), "{v}");
    }
    assert_nothing_captured_switched_off(
        dir.path(),
        "reduce_sum_baseline",
        &["--kernel", "reduce_sum", "--capture", "inputs"],
    );
}

#[test]
fn capture_written_beneath_real_rocr_takes_the_cpu_runtime_s_buffers_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let options = ["--kernel", "scale_values", "--capture", "written"];
    let (cpu, cpu_snap) = captured(Runtime::Cpu, dir.path(), "w", "scale_twice", &options);
    let (m, snap) = captured(Runtime::Model, dir.path(), "w", "scale_twice", &options);
    // scale_values(T* input, T* output, ...): both pointers are outputs.
    let each = pairs(&[
        ("arg0.before", "before"),
        ("arg1.before", "before"),
        ("arg0", "after"),
        ("arg1", "after"),
    ]);
    let expected = vec![(0, each.clone()), (1, each)];
    assert_eq!(layout(&cpu), expected, "CPU runtime");
    assert_eq!(layout(&m), expected, "model");
    // Dispatch 0: middle = 2 * input; dispatch 1: output = 3 * middle.
    for i in 0..1024 {
        let x = i as f32;
        assert_eq!(tensor(&m, &snap, 0, "arg0.before")[i], x, "input[{i}]");
        assert_eq!(tensor(&m, &snap, 0, "arg1")[i], 2.0 * x, "middle[{i}]");
        assert_eq!(tensor(&m, &snap, 1, "arg0.before")[i], 2.0 * x);
        assert_eq!(tensor(&m, &snap, 1, "arg1")[i], 6.0 * x, "output[{i}]");
    }
    // Compared by what the kernels wrote: no element one side alone wrote.
    let v = same_values(&cpu_snap, &snap);
    let written: Vec<&serde_json::Value> = v["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| !a["written"].is_null())
        .collect();
    // The output (arg1) of each dispatch: element 0 is written with the 0
    // it held, which looks untouched. arg0, which no kernel changed, is
    // compared whole, and the before-images of the inputs too.
    assert_eq!(v["arrays_compared"], 6, "{v}");
    assert_eq!(written.len(), 2, "{v}");
    for a in written {
        assert_eq!(a["arg"], 1, "{a}");
        let w = &a["written"];
        assert_eq!(
            (
                w["compared"].as_u64(),
                w["untouched"].as_u64(),
                w["only_optimized"]["count"].as_u64(),
                w["only_reference"]["count"].as_u64()
            ),
            (Some(1023), Some(1), Some(0), Some(0)),
            "{a}"
        );
    }
    assert_nothing_captured_switched_off(dir.path(), "scale_twice", &options);
}

#[test]
fn dispatch_one_of_scale_twice_beneath_real_rocr_is_the_only_capture_and_keeps_index_one() {
    let dir = tempfile::tempdir().unwrap();
    let options = ["--kernel", "scale_values", "--dispatch", "1"];
    let (cpu, cpu_snap) = captured(Runtime::Cpu, dir.path(), "d1", "scale_twice", &options);
    let (m, snap) = captured(Runtime::Model, dir.path(), "d1", "scale_twice", &options);
    for (side, m) in [("CPU runtime", &cpu), ("model", &m)] {
        assert_eq!(
            layout(m),
            vec![(1, pairs(&[("arg0", "after"), ("arg1", "after")]))],
            "{side}: {m}"
        );
        let file = m["dispatches"][0]["file"].as_str().unwrap();
        assert!(file.ends_with("-00001.safetensors"), "{side}: {file}");
        let scale_values = m["dispatched_kernels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["mangled"] == "_Z12scale_valuesIfEvPT_S1_S0_i")
            .unwrap_or_else(|| panic!("{side}: {m}"));
        assert_eq!(scale_values["count"], 2, "{side}: both dispatches ran");
    }
    // The dispatch not selected, said alike (but for the process's pid).
    let unselected = |m: &serde_json::Value| {
        let mut missing = m["missing"].clone();
        for r in missing.as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("pid");
        }
        missing
    };
    assert_eq!(unselected(&m), unselected(&cpu));
    assert_eq!(unselected(&m)[0]["reason"], "selection", "{m}");
    let output = tensor(&m, &snap, 1, "arg1");
    assert_eq!(output.len(), 1024);
    for (i, v) in output.iter().enumerate() {
        assert_eq!(*v, 6.0 * i as f32, "output[{i}]");
    }
    same_values(&cpu_snap, &snap);

    // Everything, of dispatch 1 alone: its inputs hold dispatch 0's result
    // (scale_twice queues both without synchronising) and its output was
    // taken before it ran.
    let options = [
        "--kernel",
        "scale_values",
        "--dispatch",
        "1",
        "--capture",
        "all",
    ];
    let (cpu, cpu_snap) = captured(Runtime::Cpu, dir.path(), "all", "scale_twice", &options);
    let (m, snap) = captured(Runtime::Model, dir.path(), "all", "scale_twice", &options);
    let expected = vec![(
        1,
        pairs(&[
            ("arg0.before", "before"),
            ("arg1.before", "before"),
            ("arg0", "after"),
            ("arg1", "after"),
        ]),
    )];
    assert_eq!(layout(&cpu), expected, "CPU runtime");
    assert_eq!(layout(&m), expected, "model");
    let middle_before = tensor(&m, &snap, 1, "arg0.before");
    let (output_before, output) = (
        tensor(&m, &snap, 1, "arg1.before"),
        tensor(&m, &snap, 1, "arg1"),
    );
    for i in 0..1024 {
        assert_eq!(middle_before[i], 2.0 * i as f32, "middle[{i}] before");
        assert_eq!(output[i], 6.0 * i as f32, "output[{i}] after");
    }
    assert!(
        (1..1024).any(|i| output_before[i] != output[i]),
        "the output was taken before the kernel wrote it"
    );
    same_values(&cpu_snap, &snap);
    assert_nothing_captured_switched_off(dir.path(), "scale_twice", &options);
}

/// `ditto collect --hsa-runtime model` in the ROCm 7.2 chroot (which
/// checks that ROCr has a model mode; it maps nothing: beneath model mode
/// the tool copies buffers into shared memory), its log in
/// `dir/collector.log`; stopped by SIGTERM on drop, which
/// scripts/rocm-chroot passes on to it.
struct ModelCollector {
    child: Child,
}

impl ModelCollector {
    fn start(dir: &Path, socket: &Path, out: &Path) -> ModelCollector {
        let log = std::fs::File::create(dir.join("collector.log")).unwrap();
        let child = in_chroot("7.2", Some(dir))
            .arg("--env")
            .arg(format!("TMPDIR={}", dir.display()))
            .arg("--")
            .arg(ditto_bin())
            .args(["collect", "--hsa-runtime", "model", "--socket"])
            .arg(socket)
            .arg("--out")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start ditto collect in the ROCm 7.2 chroot");
        wait_for(socket, "the model collector's socket");
        ModelCollector { child }
    }
}

impl Drop for ModelCollector {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: plain kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}

/// What scale_values float N prints.
fn scale_values_line(n: u32) -> String {
    format!(
        "scale_values<float>: N = {n}, output[0..3] = 0 2 4 6, output[{}] = {}\n",
        n - 1,
        2 * (n - 1)
    )
}

/// One rank of `run`: scripts/ditto-run --hsa-runtime model in the ROCm
/// 7.2 chroot, scale_values float 256 + rank, as mpirun starts it
/// (OMPI_COMM_WORLD_RANK), `env` added; `wrap` goes before ditto-run.
fn rank_on_model(
    dir: &Path,
    socket: &Path,
    run: &str,
    rank: u32,
    env: &[(&str, &str)],
    wrap: &[&str],
) -> Output {
    let n = (256 + rank).to_string();
    let mut c = in_chroot("7.2", Some(dir));
    for (k, v) in [
        ("TMPDIR", dir.display().to_string()),
        ("DITTO_TOOL_LIB", tool_lib().display().to_string()),
        ("DITTO_BIN", ditto_bin().display().to_string()),
        ("OMPI_COMM_WORLD_RANK", rank.to_string()),
    ] {
        c.arg("--env").arg(format!("{k}={v}"));
    }
    for (k, v) in env {
        c.arg("--env").arg(format!("{k}={v}"));
    }
    c.arg("--")
        .args(wrap)
        .arg(repo_root().join("scripts/ditto-run"))
        .arg("--socket")
        .arg(socket)
        .args([
            "--kernel",
            "scale_values<float>",
            "--hsa-runtime",
            "model",
            "--run",
            run,
            "--",
        ])
        .arg(gfx942_apps().join("scale_values"))
        .args(["float", &n]);
    output_within(&mut c, LIMIT, &format!("rank {rank} of {run}"))
}

#[test]
fn two_ranks_beneath_real_rocr_through_one_collector_pair_by_rank_in_compare() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, snaps) = (dir.path().join("socket"), dir.path().join("snaps"));
    let collector = ModelCollector::start(dir.path(), &socket, &snaps);
    let rank = |run: &str, rank: u32| {
        let out = rank_on_model(dir.path(), &socket, run, rank, &[], &[]);
        assert_eq!(
            (out.status.code(), stdout(&out)),
            (Some(0), scale_values_line(256 + rank)),
            "{run} rank {rank}: {}",
            stderr(&out)
        );
    };
    // Reference ranks at once; optimized ranks one by one in reverse, so
    // that connection order and rank differ.
    std::thread::scope(|s| {
        for r in 0..2 {
            let rank = &rank;
            s.spawn(move || rank("ref", r));
        }
    });
    for r in (0..2).rev() {
        rank("opt", r);
    }
    // Execution switched off: the rank never finishes and gives nothing.
    let off = rank_on_model(
        dir.path(),
        &socket,
        "off",
        0,
        &[("DITTO_MODEL_GPU_EXECUTE", "0")],
        &["timeout", &SWITCHED_OFF_WAIT.as_secs().to_string()],
    );
    assert_eq!(off.status.code(), Some(124), "{}", stderr(&off));
    assert_eq!(stdout(&off), "");
    drop(collector);
    let log = std::fs::read_to_string(dir.path().join("collector.log")).unwrap();
    let off = snapshot_manifest(&snaps.join("off"));
    assert_eq!(off["dispatches"], serde_json::json!([]), "{off}\n{log}");
    for run in ["ref", "opt"] {
        let m = snapshot_manifest(&snaps.join(run));
        let mut ranks: Vec<u64> = m["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert_eq!(r["rank_source"], "launcher", "{r}");
                r["rank"].as_u64().unwrap()
            })
            .collect();
        ranks.sort();
        assert_eq!(ranks, [0, 1], "{run}: {log}");
        for d in m["dispatches"].as_array().unwrap() {
            let n = 256 + d["rank"].as_u64().unwrap() as usize;
            let output = f32_tensor(&snaps.join(run), d["file"].as_str().unwrap(), "arg1");
            assert_eq!(output.len(), n, "{d}");
            for (i, v) in output.iter().enumerate() {
                assert_eq!(*v, 2.0 * i as f32, "{run} {d}: output[{i}]");
            }
        }
    }
    let (v, out) = compare_json(&snaps.join("ref"), &snaps.join("opt"));
    assert_eq!(v["valid"], true, "{}", stderr(&out));
    let arrays = v["arrays"].as_array().unwrap();
    assert_eq!(arrays.len(), 4, "two arrays per rank: {v}");
    for a in arrays {
        let rank = a["rank"].as_u64().unwrap();
        assert_eq!(a["total_elements"].as_u64().unwrap(), 256 + rank, "{a}");
    }
}

#[test]
fn ditto_hsa_env_gives_what_ditto_run_gives_the_application_and_refuses_a_rocr_without_model_mode()
{
    // The CPU runtime: its directory first in LD_LIBRARY_PATH.
    let out = Command::new(ditto_bin())
        .args(["hsa-env", "--hsa-runtime", "cpu"])
        .env("DITTO_CPU_RUNTIME_DIR", cpu_runtime_dir())
        .env("LD_LIBRARY_PATH", "/elsewhere")
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (
            Some(0),
            format!(
                "LD_LIBRARY_PATH={}:/elsewhere\n",
                cpu_runtime_dir().display()
            )
        ),
        "{}",
        stderr(&out)
    );
    // The model, beneath ROCr 7.2.4: the library beside `ditto`, the
    // topology written under TMPDIR, signals without events.
    let dir = tempfile::tempdir().unwrap();
    let out = ditto_in_chroot(dir.path(), &["hsa-env", "--hsa-runtime", "model"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once('=').unwrap_or_else(|| panic!("{text}")))
        .collect();
    let model = model_lib().display().to_string();
    assert_eq!(
        lines.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        [
            "HSA_MODEL_LIB",
            "HSA_MODEL_TOPOLOGY",
            "HSA_ENABLE_INTERRUPT",
            "GPU_PINNED_MIN_XFER_SIZE"
        ],
        "{text}"
    );
    assert_eq!(
        (lines[0].1, lines[2].1, lines[3].1),
        (model.as_str(), "0", "4096"),
        "{text}"
    );
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let topology = Path::new(lines[1].1);
    assert!(
        topology.starts_with(dir.path().join(format!("ditto-model-{uid}")))
            && topology.join("nodes/1/properties").is_file(),
        "{text}"
    );
    // scripts/ditto-run --hsa-runtime model beneath ROCm 6.4's ROCr: the
    // refusal `ditto hsa-env` gives, and nothing started.
    let socket = dir.path().join("socket");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut c = in_chroot("6.4", Some(dir.path()));
    c.args(["--env", &format!("DITTO_BIN={}", ditto_bin().display())])
        .args(["--env", &format!("DITTO_TOOL_LIB={}", tool_lib().display())])
        .arg("--")
        .arg(repo_root().join("scripts/ditto-run"))
        .arg("--socket")
        .arg(&socket)
        .args([
            "--kernel",
            "k",
            "--hsa-runtime",
            "model",
            "--",
            "echo",
            "ran",
        ]);
    let out = output_within(&mut c, LIMIT, "ditto-run --hsa-runtime model in 6.4");
    let err = stderr(&out);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(2), String::new()),
        "{err}"
    );
    assert!(
        err.contains("has no model mode") && err.contains("ditto-run: error: --hsa-runtime model:"),
        "{err}"
    );
}

/// scale_values float 256 on the model under the tool, found through
/// `ways` (HSA_TOOLS_LIB, LD_PRELOAD or both), `env` added, `wrap` before
/// it, capturing into `run` of the collector at `socket`.
fn loaded(
    dir: &Path,
    socket: &Path,
    run: &str,
    ways: &[&str],
    env: &[(&str, String)],
    wrap: &[&str],
) -> Output {
    let mut vars: Vec<(&str, String)> = ways
        .iter()
        .map(|way| (*way, tool_lib().display().to_string()))
        .collect();
    vars.extend([
        ("DITTO_KERNEL", "scale_values<float>".to_string()),
        ("DITTO_SOCKET", socket.display().to_string()),
        ("DITTO_RUN_NAME", run.to_string()),
        ("DITTO_LOG", "info".to_string()),
    ]);
    vars.extend(env.iter().cloned());
    let exe = gfx942_apps().join("scale_values");
    let mut cmd = wrap.to_vec();
    cmd.extend([exe.to_str().unwrap(), "float", "256"]);
    on_model(dir, &vars, &cmd, LIMIT)
}

#[test]
fn real_rocr_7_2_loads_the_tool_from_hsa_tools_lib_ld_preload_or_both_and_it_captures_once() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, snaps) = (dir.path().join("socket"), dir.path().join("snaps"));
    let collector = ModelCollector::start(dir.path(), &socket, &snaps);
    let ways: [(&str, &[&str]); 3] = [
        ("tools-lib", &["HSA_TOOLS_LIB"]),
        ("preload", &["LD_PRELOAD"]),
        ("both", &["HSA_TOOLS_LIB", "LD_PRELOAD"]),
    ];
    for (run, ways) in ways {
        let out = loaded(dir.path(), &socket, run, ways, &[], &[]);
        let err = stderr(&out);
        assert_eq!(
            (out.status.code(), stdout(&out)),
            (Some(0), scale_values_line(256)),
            "{ways:?}: {err}"
        );
        assert_eq!(
            err.matches("capturing kernel `").count(),
            1,
            "{ways:?}: {err}"
        );
    }
    // Execution switched off: the tool starts, the kernel never completes,
    // nothing is captured.
    let off = [("DITTO_MODEL_GPU_EXECUTE", "0".to_string())];
    let limit = SWITCHED_OFF_WAIT.as_secs().to_string();
    let ways = ["HSA_TOOLS_LIB", "LD_PRELOAD"];
    let out = loaded(
        dir.path(),
        &socket,
        "off",
        &ways,
        &off,
        &["timeout", &limit],
    );
    let err = stderr(&out);
    assert_eq!(
        (out.status.code(), stdout(&out)),
        (Some(124), String::new()),
        "{err}"
    );
    assert_eq!(err.matches("capturing kernel `").count(), 1, "{err}");
    drop(collector);
    let log = std::fs::read_to_string(dir.path().join("collector.log")).unwrap();
    assert_eq!(
        snapshot_manifest(&snaps.join("off"))["dispatches"],
        serde_json::json!([]),
        "{log}"
    );
    for run in ["tools-lib", "preload", "both"] {
        let m = snapshot_manifest(&snaps.join(run));
        assert_eq!(
            layout(&m),
            vec![(0, pairs(&[("arg0", "after"), ("arg1", "after")]))],
            "{run}: {m}\n{log}"
        );
        let output = tensor(&m, &snaps.join(run), 0, "arg1");
        assert_eq!(output.len(), 256);
        for (i, v) in output.iter().enumerate() {
            assert_eq!(*v, 2.0 * i as f32, "{run}: output[{i}]");
        }
    }
}

/// rocprofiler-register (ROCm 7's loader of rocprofiler-sdk tools, which
/// takes over before HSA_TOOLS_LIB is read where ROCr and HIP link it) is
/// a way of loading the tool that cannot run here: Debian's ROCr 7.2.4
/// and HIP 7.2.4 neither link librocprofiler-register nor name it. Pinned:
/// a chroot whose libraries carry it fails here, and that path then gets
/// its end-to-end test.
#[test]
fn the_chroot_s_rocr_and_hip_7_2_carry_no_rocprofiler_register() {
    let out = Command::new(rocm_chroot())
        .args(["path", "7.2"])
        .output()
        .unwrap();
    let root = PathBuf::from(stdout(&out).trim());
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    for name in ["libhsa-runtime64.so.1", "libamdhip64.so.7"] {
        let file = std::fs::canonicalize(lib.join(name))
            .unwrap_or_else(|e| panic!("{name} in {}: {e}", lib.display()));
        let bytes = std::fs::read(&file).unwrap();
        assert!(bytes.len() > 1 << 20, "{}", file.display());
        assert!(
            !bytes.windows(11).any(|w| w == b"rocprofiler"),
            "{} names rocprofiler: the rocprofiler-register path can now run; test it",
            file.display()
        );
        // What the library links, by readelf in the chroot.
        let inside = Path::new("/usr/lib/x86_64-linux-gnu").join(name);
        let out = in_chroot("7.2", None)
            .args(["--", "readelf", "-d"])
            .arg(&inside)
            .output()
            .unwrap();
        let needed: Vec<String> = stdout(&out)
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .map(str::to_string)
            .collect();
        assert!(
            needed.iter().any(|l| l.contains("libc.so.6")),
            "{name}: {needed:?} {}",
            stderr(&out)
        );
        assert!(
            !needed.iter().any(|l| l.contains("rocprofiler")),
            "{name} links rocprofiler-register: {needed:?}"
        );
    }
    let mut register = Vec::new();
    for dir in [lib.clone(), root.join("opt")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        register.extend(
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().contains("rocprofiler"))
                .map(|e| e.path()),
        );
    }
    assert_eq!(register, Vec::<PathBuf>::new());
}
