//! Parallel kernel execution (include/ditto_hsa_cpu.h, "Executing"): groups
//! of one dispatch run in chunks on several threads, a one-group dispatch
//! runs on the queue's own thread, completion comes after every group, a
//! failing chunk fails the dispatch once while the other groups still run,
//! queues dispatching at once all complete, and code objects of another
//! code-object ABI are refused. The kernels are hand-written C entries that
//! honour their range of groups, as ABI 2 requires.

use crate::common::*;
use hsa::*;
use hsa_runtime64 as rt;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

/// `rendezvous` counts each group's arrival, waits at the grid barrier
/// when the dispatch has one, and records the count it sees after it
/// (group `skip` returns at once, reaching no barrier).
/// `probe` records, per group, the OS thread id and the first 15 bytes of
/// the thread's name, then sleeps 2 ms (so that with several threads the
/// workers surely claim chunks). `mark` adds 1 to marks[group] for every
/// group of its range, except `fail_group`, for which the call returns 1
/// after running the others. `busy` adds 1 to marks[group] after 200 µs.
const EXEC_C: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "ditto_hsa_cpu.h"
struct probe_args { uint64_t* tids; char* names; };
static int probe_entry(const ditto_cpu_dispatch_t* d) {
  struct probe_args a; memcpy(&a, d->kernarg, sizeof a);
  for (uint64_t g = d->first_group; g < d->first_group + d->group_count; g++) {
    a.tids[g] = (uint64_t)syscall(SYS_gettid);
    pthread_getname_np(pthread_self(), a.names + 16 * g, 16);
    usleep(2000);
  }
  return 0;
}
struct mark_args { uint32_t* marks; uint32_t fail_group; };
static int mark_entry(const ditto_cpu_dispatch_t* d) {
  struct mark_args a; memcpy(&a, d->kernarg, sizeof a);
  int rc = 0;
  for (uint64_t g = d->first_group; g < d->first_group + d->group_count; g++) {
    if (g == a.fail_group) { rc = 1; continue; }
    __atomic_fetch_add(&a.marks[g], 1, __ATOMIC_RELAXED);
  }
  return rc;
}
static int busy_entry(const ditto_cpu_dispatch_t* d) {
  uint32_t* marks; memcpy(&marks, d->kernarg, sizeof marks);
  for (uint64_t g = d->first_group; g < d->first_group + d->group_count; g++) {
    usleep(200);
    __atomic_fetch_add(&marks[g], 1, __ATOMIC_RELAXED);
  }
  return 0;
}
struct rendezvous_args { uint32_t* arrived; uint32_t* seen; uint32_t* had_barrier; uint32_t skip; };
static int rendezvous_entry(const ditto_cpu_dispatch_t* d) {
  struct rendezvous_args a; memcpy(&a, d->kernarg, sizeof a);
  for (uint64_t g = d->first_group; g < d->first_group + d->group_count; g++) {
    a.had_barrier[g] = d->grid_barrier != NULL;
    if (g == a.skip) continue;
    __atomic_fetch_add(a.arrived, 1, __ATOMIC_RELAXED);
    if (d->grid_barrier) d->grid_barrier(d->grid_barrier_context);
    a.seen[g] = __atomic_load_n(a.arrived, __ATOMIC_RELAXED);
    if (d->grid_barrier) d->grid_barrier(d->grid_barrier_context);
  }
  return 0;
}
static const ditto_cpu_kernel_t kernels[] = {
  { "probe", sizeof(struct probe_args), 8, 0, 0, probe_entry },
  { "rendezvous", sizeof(struct rendezvous_args), 8, 0, 0, rendezvous_entry },
  { "mark", sizeof(struct mark_args), 8, 0, 0, mark_entry },
  { "busy", 8, 8, 0, 0, busy_entry },
};
#if defined(EXEC_ABI)
uint32_t ditto_cpu_code_object_abi = EXEC_ABI;
#elif defined(EXEC_NO_ABI)
#else
uint32_t ditto_cpu_code_object_abi = DITTO_CPU_CODE_OBJECT_ABI;
#endif
const ditto_cpu_kernel_t* ditto_cpu_code_object_kernels(uint32_t* count) {
  *count = sizeof kernels / sizeof kernels[0];
  return kernels;
}
"#;

fn exec_code_object(defines: &[&str]) -> Result<hsa_executable_t, hsa_status_t> {
    init();
    let dir = tempfile::tempdir().unwrap();
    let so = compile_shared(dir.path(), "exec", EXEC_C, defines);
    load_code_object(&std::fs::read(so).unwrap())
}

fn exec_kernels() -> hsa_executable_t {
    exec_code_object(&[]).expect("load the execution test code object")
}

/// A 1-D dispatch of `groups` groups of 64 work-items.
fn groups_dispatch(
    kernel: u64,
    kernarg: *mut c_void,
    groups: u32,
    done: hsa_signal_t,
) -> AqlPacket {
    dispatch(kernel, kernarg, groups * 64, done, true)
}

/// Runs `probe` over `groups` groups; returns (thread id, thread name) per group.
fn probe(groups: u32) -> Vec<(u64, String)> {
    let exe = exec_kernels();
    let kernel = kernel_object(exe, "probe.kd");
    let mut tids = vec![0u64; groups as usize];
    let mut names = vec![0u8; 16 * groups as usize];
    let mut args = [tids.as_mut_ptr() as u64, names.as_mut_ptr() as u64];
    let q = queue(64);
    let done = signal(1);
    submit(
        q,
        &[groups_dispatch(
            kernel,
            args.as_mut_ptr().cast(),
            groups,
            done,
        )],
    );
    assert_eq!(wait_eq(done, 0), 0);
    // SAFETY: q is live and idle.
    unsafe { rt::hsa_queue_destroy(q) };
    tids.iter()
        .zip(names.chunks(16))
        .map(|(tid, name)| {
            let end = name.iter().position(|b| *b == 0).unwrap_or(16);
            (*tid, String::from_utf8_lossy(&name[..end]).into_owned())
        })
        .collect()
}

fn distinct_threads(groups: &[(u64, String)]) -> usize {
    assert!(
        groups.iter().all(|(tid, _)| *tid != 0),
        "a group did not run"
    );
    groups
        .iter()
        .map(|(tid, _)| *tid)
        .collect::<HashSet<_>>()
        .len()
}

#[test]
#[ignore = "child scenario: run by groups_run_on_several_threads_only_when_the_runtime_has_several"]
fn child_probe_threads() {
    let expected = std::env::var("EXPECT_THREADS").expect("EXPECT_THREADS set by the parent");
    let many = probe(64);
    let one = probe(1);
    assert!(
        one[0].1.starts_with("hsa-cpu-queue"),
        "a one-group dispatch runs inline on the queue's thread, ran on {:?}",
        one[0].1
    );
    match expected.as_str() {
        "one" => {
            assert_eq!(distinct_threads(&many), 1, "{many:?}");
            assert!(many[0].1.starts_with("hsa-cpu-queue"), "{:?}", many[0].1);
        }
        "several" => {
            let n = distinct_threads(&many);
            assert!((2..=4).contains(&n), "64 groups ran on {n} threads");
            assert!(
                many.iter()
                    .any(|(_, name)| name.starts_with("hsa-cpu-group-")),
                "no group ran on a group worker: {many:?}"
            );
        }
        other => panic!("EXPECT_THREADS={other}"),
    }
}

#[test]
fn groups_run_on_several_threads_only_when_the_runtime_has_several() {
    for (threads, expected) in [("4", "several"), ("1", "one")] {
        run_child(
            "execution::child_probe_threads",
            &[
                ("DITTO_HSA_CPU_THREADS", threads.to_string()),
                ("EXPECT_THREADS", expected.to_string()),
            ],
        );
    }
}

static ERRORS: AtomicU32 = AtomicU32::new(0);
static LAST_ERROR: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn count_errors(status: hsa_status_t, _q: *mut hsa_queue_t, _d: *mut c_void) {
    LAST_ERROR.store(status, Ordering::SeqCst);
    ERRORS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_failing_group_fails_the_dispatch_once_and_the_other_groups_still_run() {
    let exe = exec_kernels();
    let kernel = kernel_object(exe, "mark.kd");
    let groups = 40u32;
    let fail_group = 13u32;
    let mut marks = vec![0u32; groups as usize];
    #[repr(C)]
    struct MarkArgs {
        marks: *mut u32,
        fail_group: u32,
    }
    let mut args = MarkArgs {
        marks: marks.as_mut_ptr(),
        fail_group,
    };
    let mut q = std::ptr::null_mut();
    // SAFETY: valid out pointer; the callback only touches statics.
    let s = unsafe {
        rt::hsa_queue_create(
            gpu(),
            64,
            HSA_QUEUE_TYPE_MULTI,
            Some(count_errors),
            std::ptr::null_mut(),
            u32::MAX,
            u32::MAX,
            &mut q,
        )
    };
    assert_eq!(s, 0);
    let done = signal(1);
    submit(
        q,
        &[groups_dispatch(
            kernel,
            &mut args as *mut MarkArgs as *mut c_void,
            groups,
            done,
        )],
    );
    assert_eq!(wait_eq(done, 0), 0);
    assert_eq!(ERRORS.load(Ordering::SeqCst), 1, "reported exactly once");
    assert_eq!(
        LAST_ERROR.load(Ordering::SeqCst),
        HSA_STATUS_ERROR_EXCEPTION
    );
    for (g, m) in marks.iter().enumerate() {
        let expected = u32::from(g as u32 != fail_group);
        assert_eq!(*m, expected, "group {g}");
    }
    // SAFETY: q is live and idle.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn two_queues_dispatching_at_once_both_complete_after_every_group() {
    let exe = exec_kernels();
    let kernel = kernel_object(exe, "busy.kd");
    let workers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let (groups, dispatches) = (24u32, 12u32);
                let mut marks = vec![0u32; groups as usize];
                let mut arg = marks.as_mut_ptr() as u64;
                let q = queue(64);
                for _ in 0..dispatches {
                    let done = signal(1);
                    submit(
                        q,
                        &[groups_dispatch(
                            kernel,
                            &mut arg as *mut u64 as *mut c_void,
                            groups,
                            done,
                        )],
                    );
                    assert_eq!(wait_eq(done, 0), 0, "a dispatch did not complete");
                }
                // SAFETY: q is live and idle.
                unsafe { rt::hsa_queue_destroy(q) };
                (marks, dispatches)
            })
        })
        .collect();
    for w in workers {
        let (marks, dispatches) = w.join().unwrap();
        // Completion came after every group of every dispatch of this queue.
        assert_eq!(marks, vec![dispatches; marks.len()]);
    }
}

#[test]
fn completion_signal_and_end_time_come_after_the_last_group() {
    let exe = exec_kernels();
    let kernel = kernel_object(exe, "busy.kd");
    let groups = 48u32;
    let mut marks = vec![0u32; groups as usize];
    let mut arg = marks.as_mut_ptr() as u64;
    let q = queue(64);
    // SAFETY: q is live.
    assert_eq!(
        unsafe { rt::hsa_amd_profiling_set_profiler_enabled(q, 1) },
        0
    );
    let done = signal(1);
    submit(
        q,
        &[groups_dispatch(
            kernel,
            &mut arg as *mut u64 as *mut c_void,
            groups,
            done,
        )],
    );
    assert_eq!(wait_eq(done, 0), 0);
    // Read at once: a late group would show as a 0 here.
    let seen: Vec<u32> = marks
        .iter()
        // SAFETY: plain reads of memory the kernel wrote before completion.
        .map(|m| unsafe { std::ptr::read_volatile(m) })
        .collect();
    assert_eq!(seen, vec![1; groups as usize]);
    let mut time = hsa_amd_profiling_dispatch_time_t::default();
    // SAFETY: valid agent, signal and out pointer.
    let s = unsafe { rt::hsa_amd_profiling_get_dispatch_time(gpu(), done, &mut time) };
    assert_eq!(s, 0);
    // 48 groups of >= 200 µs each on at most available_parallelism threads.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert!(
        time.end - time.start >= 48 * 200_000 / threads,
        "end - start = {} ns",
        time.end - time.start
    );
    // SAFETY: q is live and idle.
    unsafe { rt::hsa_queue_destroy(q) };
}

#[test]
fn code_objects_of_another_abi_or_without_one_are_refused() {
    assert_eq!(
        exec_code_object(&["-DEXEC_ABI=1"]),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
    assert_eq!(
        exec_code_object(&["-DEXEC_ABI=3"]),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
    assert_eq!(
        exec_code_object(&["-DEXEC_NO_ABI"]),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
    assert!(exec_code_object(&[]).is_ok(), "the current ABI loads");
}

#[test]
#[ignore = "child scenario: run by refusing_an_old_code_object_says_which_abi_it_has"]
fn child_load_abi_1() {
    assert_eq!(
        exec_code_object(&["-DEXEC_ABI=1"]),
        Err(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)
    );
}

#[test]
fn refusing_an_old_code_object_says_which_abi_it_has() {
    let out = run_child("execution::child_load_abi_1", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("code-object ABI 1") && stderr.contains("runs ABI 2"),
        "stderr:\n{stderr}"
    );
}

/// Runs `rendezvous` over `groups` groups on a queue of `type_`; returns
/// (seen, had_barrier) per group.
fn rendezvous(type_: hsa_queue_type32_t, groups: u32, skip: u32) -> (Vec<u32>, Vec<u32>) {
    let exe = exec_kernels();
    let kernel = kernel_object(exe, "rendezvous.kd");
    let mut arrived = 0u32;
    let mut seen = vec![0u32; groups as usize];
    let mut had_barrier = vec![9u32; groups as usize];
    #[repr(C)]
    struct Args(*mut u32, *mut u32, *mut u32, u32);
    let mut args = Args(
        &mut arrived,
        seen.as_mut_ptr(),
        had_barrier.as_mut_ptr(),
        skip,
    );
    let q = queue_on(gpu(), 64, type_);
    // SAFETY: the kernarg block outlives the dispatch; q is live.
    unsafe {
        let done = signal(1);
        let args_ptr = &mut args as *mut Args as *mut c_void;
        submit(q, &[groups_dispatch(kernel, args_ptr, groups, done)]);
        assert_eq!(wait_eq(done, 0), 0);
        rt::hsa_queue_destroy(q);
    }
    (seen, had_barrier)
}

#[test]
fn a_cooperative_queue_runs_every_group_at_once_behind_one_grid_barrier() {
    let mut coop = false;
    // SAFETY: COOPERATIVE_QUEUES is a bool.
    let s = unsafe { rt::hsa_agent_get_info(gpu(), 0xA010, &mut coop as *mut bool as *mut c_void) };
    assert_eq!(
        (s, coop),
        (0, true),
        "the GPU agent reports cooperative queues"
    );
    // 40 groups: more than the pool has threads, so only threads of their
    // own let every group reach the barrier. Group 7 returns at once and
    // so no longer holds the barrier.
    let (seen, had_barrier) = rendezvous(HSA_QUEUE_TYPE_COOPERATIVE, 40, 7);
    assert!(had_barrier.iter().all(|b| *b == 1), "{had_barrier:?}");
    for (g, n) in seen.iter().enumerate() {
        let expected = if g == 7 { 0 } else { 39 };
        assert_eq!(
            *n, expected,
            "group {g} passed the barrier before the others arrived"
        );
    }
}

#[test]
fn an_ordinary_queue_gives_no_grid_barrier() {
    let (_, had_barrier) = rendezvous(HSA_QUEUE_TYPE_MULTI, 8, u32::MAX);
    assert_eq!(had_barrier, vec![0; 8]);
}
