//! How the model's queue threads wait for work: a GPU's command processor
//! is woken by the doorbell, but the thunk's model mode never tells the
//! model where the doorbell lies, so an idle queue is polled: spinning,
//! then yielding, then sleeping, up to 1 ms between looks. Progress
//! resets it, so a queue in use answers within microseconds and only a
//! queue idle for a while costs the next packet up to a millisecond.

use std::time::Duration;

/// Longest sleep between two looks at an idle queue.
const LONGEST_SLEEP: Duration = Duration::from_millis(1);

/// Polls without progress so far.
#[derive(Default)]
pub struct Backoff(u32);

impl Backoff {
    /// One wait: spin (64 times), yield (64 times), then sleep 20 µs more
    /// each time, up to `LONGEST_SLEEP`.
    pub fn wait(&mut self) {
        self.0 = self.0.saturating_add(1);
        match self.0 {
            0..64 => std::hint::spin_loop(),
            64..128 => std::thread::yield_now(),
            n => std::thread::sleep(
                Duration::from_micros(u64::from(n - 127) * 20).min(LONGEST_SLEEP),
            ),
        }
    }

    /// Work arrived: the next wait starts from spinning again.
    pub fn reset(&mut self) {
        self.0 = 0;
    }
}
