//! Runs every test application on ditto's CPU HSA runtime and checks what it
//! prints. The runtime is target/<profile>/hsa-cpu/libhsa-runtime64.so.1 next
//! to this test's own target directory (or DITTO_HSA_CPU_DIR, a directory
//! holding libhsa-runtime64.so.1); build it with `cargo build --workspace`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const APP_TIMEOUT: Duration = Duration::from_secs(60);

fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DITTO_HSA_CPU_DIR") {
        return PathBuf::from(dir);
    }
    // target/<profile>/deps/<this test> → target/<profile>/hsa-cpu
    let exe = std::env::current_exe().expect("test executable path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test runs from target/<profile>/deps");
    profile.join("hsa-cpu")
}

/// Runs `app args...` on the CPU runtime; returns stdout, asserting exit 0.
fn run_app(app: &str, args: &[&str]) -> String {
    run_app_with(app, args, &[])
}

/// As [`run_app`], with extra environment variables.
fn run_app_with(app: &str, args: &[&str], envs: &[(&str, &str)]) -> String {
    let dir = runtime_dir();
    let library = dir.join("libhsa-runtime64.so.1");
    assert!(
        library.exists(),
        "ditto's CPU HSA runtime is missing: {} does not exist; run `cargo build --workspace` first \
         (or set DITTO_HSA_CPU_DIR)",
        library.display()
    );
    let mut child = Command::new(test_apps::app_path(app))
        .args(args)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("LD_PRELOAD")
        .env_remove("HSA_TOOLS_LIB")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {app}: {e}"));
    // A runtime that never completes a barrier would hang the app forever.
    let deadline = Instant::now() + APP_TIMEOUT;
    while child.try_wait().expect("waiting for the app").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child
                .wait_with_output()
                .expect("collecting the killed app's output");
            panic!(
                "{app} {args:?} did not finish within {APP_TIMEOUT:?} (killed)\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let output = child
        .wait_with_output()
        .expect("collecting the app's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{app} {args:?} exited with {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn exact_reduce_sum() -> f64 {
    (0..65536).map(|i| (i % 7) as f64 * 0.5).sum()
}

#[test]
fn reduce_sum_baseline_and_optimized_print_the_exact_sum() {
    let expected = format!("sum = {:.1}\n", exact_reduce_sum());
    assert_eq!(run_app("reduce_sum_baseline", &[]), expected);
    assert_eq!(run_app("reduce_sum_optimized", &[]), expected);
}

#[test]
fn reduce_sum_wrong_prints_zero_and_still_exits_0() {
    assert_eq!(run_app("reduce_sum_wrong", &[]), "sum = 0.0\n");
}

#[test]
fn vector_add_adds_every_element() {
    let n = 10000;
    assert_eq!(
        run_app("vector_add", &[]),
        format!(
            "vector_add: n = {n}, c[0] = 0, c[1] = 3, c[{}] = {}, wrong = 0\n",
            n - 1,
            3 * (n - 1)
        )
    );
}

#[test]
fn scale_values_doubles_for_both_types_and_any_n() {
    for (ty, n) in [
        ("float", 1024),
        ("double", 1024),
        ("double", 1000),
        ("float", 1),
    ] {
        let args: Vec<String> = if n == 1024 {
            vec![ty.into()]
        } else {
            vec![ty.into(), n.to_string()]
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let first: Vec<String> = (0..n.min(4)).map(|i| (2 * i).to_string()).collect();
        let expected = format!(
            "scale_values<{ty}>: N = {n}, output[0..3] = {}, output[{}] = {}\n",
            first.join(" "),
            n - 1,
            2 * (n - 1)
        );
        assert_eq!(
            run_app("scale_values", &args),
            expected,
            "scale_values {args:?}"
        );
    }
}

#[test]
fn scale_twice_chains_two_dispatches() {
    assert_eq!(
        run_app("scale_twice", &[]),
        "scale_twice: N = 1024, middle[1] = 2, middle[1023] = 2046, output[1] = 6, output[1023] = 6138\n"
    );
}

#[test]
fn no_dispatch_runs_only_vector_add() {
    assert_eq!(
        run_app("no_dispatch", &[]),
        "no_dispatch: launched vector_add only, c[0] = 1, c[1023] = 1024\n"
    );
}

/// Output of parallel_groups: (threads that ran its 64 groups, the rest).
fn parallel_groups(threads: &str) -> (usize, String) {
    let out = run_app_with(
        "parallel_groups",
        &[],
        &[("DITTO_HSA_CPU_THREADS", threads)],
    );
    let (first, rest) = out.split_once('\n').expect("two lines");
    let count = first
        .strip_prefix("groups = 64, missing = 0, threads = ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .parse()
        .expect("a thread count");
    (count, rest.to_string())
}

const NO_VIOLATIONS: &str =
    "shared violations = 0, dynamic shared violations = 0, barrier rounds wrong = 0\n";

#[test]
fn groups_run_on_several_threads_with_shared_memory_private_to_each_group() {
    let (threads, rest) = parallel_groups("4");
    assert!(
        (2..=4).contains(&threads),
        "64 groups ran on {threads} threads"
    );
    assert_eq!(rest, NO_VIOLATIONS);
}

#[test]
fn one_runtime_thread_runs_every_group_on_one_thread() {
    let (threads, rest) = parallel_groups("1");
    assert_eq!(threads, 1);
    assert_eq!(rest, NO_VIOLATIONS);
}

#[test]
fn apps_print_the_same_results_on_one_and_on_four_threads() {
    for (app, args) in [
        ("reduce_sum_baseline", &[][..]),
        ("reduce_sum_optimized", &[][..]),
        ("scale_values", &["double", "1000"][..]),
        ("scale_twice", &[][..]),
        ("vector_add", &[][..]),
    ] {
        let one = run_app_with(app, args, &[("DITTO_HSA_CPU_THREADS", "1")]);
        let four = run_app_with(app, args, &[("DITTO_HSA_CPU_THREADS", "4")]);
        assert_eq!(one, four, "{app} {args:?}");
    }
    let expected = format!("sum = {:.1}\n", exact_reduce_sum());
    assert_eq!(
        run_app_with(
            "reduce_sum_optimized",
            &[],
            &[("DITTO_HSA_CPU_THREADS", "4")]
        ),
        expected
    );
}
