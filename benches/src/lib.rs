//! What fusebox's benchmarks share: the runtimes, the way calls are made by one task or by
//! two tasks at once, the CPU-time switch, and a latency histogram for the load generators.
//!
//! Every bench measures variants against each other in one run, so they must all be driven
//! the same way; keeping that driving code here (and not one copy per bench file) is what
//! makes a figure in one bench comparable with the same figure in another.

use cpu_time::ProcessTime;
use std::future::Future;
use std::sync::{Arc, Barrier, OnceLock, mpsc};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::Instant;

pub mod histogram;
pub mod keyed;
pub mod services;

pub use histogram::Histogram;

/// One way of making calls. Each task gets its own clone (its own service clone; the
/// middleware state inside is shared between clones).
pub trait Client: Clone + Send + 'static {
    /// Makes one call and consumes its result.
    fn once(&mut self) -> impl Future<Output = ()> + Send;
}

/// Set (to anything) to measure the CPU time the process spent instead of wall time.
///
/// On a machine shared with other work, wall time counts the moments the benchmark waits
/// for a core; CPU time does not. With two tasks it is the CPU of both (waiting on a
/// contended cache line is CPU time too), so per call it is about twice the wall figure
/// when the two really run in parallel. Groups then carry a `_cpu` suffix.
pub const CPU_TIME_VAR: &str = "FUSEBOX_BENCH_CPU_TIME";

/// Whether [`CPU_TIME_VAR`] is set.
pub fn cpu_time() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(CPU_TIME_VAR).is_some())
}

/// `base`, with a `_cpu` suffix when measuring CPU time.
pub fn group_name(base: &str) -> String {
    if cpu_time() {
        format!("{base}_cpu")
    } else {
        base.to_owned()
    }
}

/// A current-thread runtime with time enabled.
pub fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

/// A multi-thread runtime with two workers and time enabled.
pub fn two_workers() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a two-worker runtime")
}

/// `iters` calls by one task on the current-thread runtime `rt`: wall time, or the
/// process's CPU time when [`cpu_time()`] is on.
pub fn one_task<C: Client>(rt: &Runtime, client: &C, iters: u64) -> Duration {
    let mut client = client.clone();
    rt.block_on(async move {
        let cpu = cpu_time().then(ProcessTime::now);
        let start = Instant::now();
        for _ in 0..iters {
            client.once().await;
        }
        let wall = start.elapsed();
        cpu.map_or(wall, |cpu| cpu.elapsed())
    })
}

/// How long [`two_tasks`] waits for a task it spawned to run before it wakes the runtime's
/// workers again.
const KICK: Duration = Duration::from_millis(5);

/// `iters` calls split between two tasks on the two-worker runtime `rt`, started together:
/// the wall time from the first start to the last end (or the process's CPU time when
/// [`cpu_time()`] is on).
///
/// The two tasks meet at a blocking barrier before their first call, so both run at once,
/// one on each worker. The second task is spawned only once the first one runs: by then
/// the first holds its worker at the barrier, so the second can only be taken by the
/// other worker. Spawned together, both could be taken from the runtime's queue by one
/// worker in one batch, and the first would block that worker at the barrier with the
/// second queued behind it.
///
/// A task spawned from outside the runtime waits in its queue until a worker is woken for
/// it, and now and then the parked worker was not: the bench hung with the first task at
/// the barrier. So each task is waited for until it runs, and while it does not, an empty
/// task is spawned every few milliseconds, each of which wakes a parked worker again.
pub fn two_tasks<C: Client>(rt: &Runtime, client: &C, iters: u64) -> Duration {
    let cpu = cpu_time().then(ProcessTime::now);
    let barrier = Arc::new(Barrier::new(2));
    let (running, runs) = mpsc::channel::<()>();
    let spawn = |calls: u64| {
        let mut client = client.clone();
        let barrier = Arc::clone(&barrier);
        let running = running.clone();
        let task = rt.spawn(async move {
            let _ = running.send(());
            barrier.wait();
            let start = Instant::now();
            for _ in 0..calls {
                client.once().await;
            }
            (start, Instant::now())
        });
        while let Err(mpsc::RecvTimeoutError::Timeout) = runs.recv_timeout(KICK) {
            rt.spawn(async {});
        }
        task
    };
    let first = spawn(iters.div_ceil(2));
    let second = spawn(iters / 2);
    let wall = rt.block_on(async move {
        let mut first_start = None::<Instant>;
        let mut last_end = None::<Instant>;
        for handle in [first, second] {
            let (start, end) = handle.await.expect("a bench task finished");
            first_start = Some(first_start.map_or(start, |s| s.min(start)));
            last_end = Some(last_end.map_or(end, |e| e.max(end)));
        }
        match (first_start, last_end) {
            (Some(start), Some(end)) => end.saturating_duration_since(start),
            _ => Duration::ZERO,
        }
    });
    cpu.map_or(wall, |cpu| cpu.elapsed())
}

/// How the calls of one measurement are made.
#[derive(Debug, Clone, Copy)]
pub enum Tasks {
    /// One task on a current-thread runtime.
    One,
    /// Two tasks on a two-worker runtime, sharing the middleware.
    Two,
}

/// Times `iters` calls of `client` on `rt`, made as `tasks` says.
pub fn measure<C: Client>(rt: &Runtime, tasks: Tasks, client: &C, iters: u64) -> Duration {
    match tasks {
        Tasks::One => one_task(rt, client, iters),
        Tasks::Two => two_tasks(rt, client, iters),
    }
}

/// CPU time this thread has used.
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// A duration from the environment variable `var` in seconds (fractions allowed), else
/// `default`. For load generators whose default run must stay short.
pub fn env_secs(var: &str, default: Duration) -> Duration {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(default, Duration::from_secs_f64)
}

/// A count from the environment variable `var`, else `default`.
pub fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    /// Notes the thread of each call.
    #[derive(Clone)]
    struct Threads(Arc<Mutex<Vec<ThreadId>>>);

    impl Client for Threads {
        async fn once(&mut self) {
            let mut seen = self.0.lock().expect("an unpoisoned list");
            let id = std::thread::current().id();
            if !seen.contains(&id) {
                seen.push(id);
            }
        }
    }

    #[test]
    fn the_two_tasks_run_on_both_workers() {
        let rt = two_workers();
        for round in 0..200 {
            let threads = Threads(Arc::default());
            two_tasks(&rt, &threads, 64);
            let seen = threads.0.lock().expect("an unpoisoned list");
            assert_eq!(seen.len(), 2, "round {round}: the calls ran on {seen:?}");
        }
    }
}
