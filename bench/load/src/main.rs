//! The master load benchmark.
//!
//! Writes a job of `--tasks` synthetic splits as the master's `job.json` (the
//! `JobRecord` the master itself writes after listing a dataset), starts the real
//! `sluice master` binary on that state directory, and drives it over loopback with
//! `--workers` concurrent workers: each registers, then leases, commits and finishes
//! tasks, in two phases:
//!
//! - **open loop** (`--open-seconds`): the workers offer a fixed rate of `--rate`
//!   lease + commit requests per second between them (finishes come on top, one per
//!   task), each worker on its own schedule of evenly spaced send times. Latency runs
//!   from a request's scheduled send time to its answer, so a master that falls
//!   behind shows it (no coordinated omission): a worker whose previous answer came
//!   late sends at once, and the wait counts;
//! - **closed loop** (until the job is over or `--seconds` have passed): every worker
//!   sends its next request as soon as the last is answered, for the peak rate. With
//!   one request out per worker, mean latency there is workers / rate (Little's law):
//!   it measures queueing, not the master's speed.
//!
//! It reports requests per second, latency percentiles per operation and phase, the
//! CPU time the master and the load tool used per request, the `fdatasync` latency of
//! the state directory's disk (what a durable answer waits for at least), the
//! master's peak RSS (`VmHWM`), and how long the master takes to answer again after
//! `kill -9` with its state as the run left it (snapshot and journal).
//!
//! The simulated workers speak HTTP/1.1 over one keep-alive connection each with a
//! minimal client (requests written whole, answers parsed with `httparse`), so that
//! the load tool costs the shared CPUs little beside the master.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use connectors::codec::Codec;
use connectors::{Format, FormatOptions, SplitRange};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice::protocol::api::{
    Answer, CommitRequest, FinishRequest, LeaseRequest, RegisterReply, RegisterRequest, StatusReply,
};
use sluice::protocol::ops;
use sluice::protocol::spec::JobSpec;
use sluice::queue::{AttemptId, LeaseReply, QueueConfig, WorkerId, WorkerSecret};
use sluice::state::identity::Identity;
use sluice::state::master_state::{JobRecord, STATE_FORMAT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Settings of a run.
#[derive(Parser, Debug, Clone)]
#[command(about = "Drives a real sluice master with simulated workers and measures it")]
struct Args {
    /// Tasks (splits) in the job.
    #[arg(long, default_value_t = 1_000_000)]
    tasks: usize,
    /// Concurrent simulated workers.
    #[arg(long, default_value_t = 256)]
    workers: usize,
    /// Tasks asked for in each lease request.
    #[arg(long, default_value_t = 1)]
    lease_batch: usize,
    /// Lease + commit requests per second the workers offer together in the
    /// open-loop phase (finishes come on top: one per task).
    #[arg(long, default_value_t = 30_000.0)]
    rate: f64,
    /// Seconds of the open-loop phase (0 skips it).
    #[arg(long, default_value_t = 20.0)]
    open_seconds: f64,
    /// Longest the closed-loop phase runs, in seconds; it ends sooner when the job
    /// is over.
    #[arg(long, default_value_t = 120.0)]
    seconds: f64,
    /// Rows in each task (a commit reports half, the finish all).
    #[arg(long, default_value_t = 10_000)]
    rows: u64,
    /// The `sluice` binary (a release build).
    #[arg(long)]
    sluice: PathBuf,
    /// Directory in which the master's state directory is made.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the state directory afterwards.
    #[arg(long)]
    keep_state: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a Markdown summary here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Threads that run the simulated workers: 1 runs them all on one
    /// thread (no wakeups across threads), more on a work-stealing runtime.
    /// The load tool shares the CPUs with the master.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The no-op stand-in for the master (`sluice-load-floor`): when given
    /// (and the open loop is not skipped), it is driven after the master,
    /// open loop for `--open-seconds` at `--rate` and at each of
    /// `--rates`, to measure what the machine and the load tool cost
    /// without any master work.
    #[arg(long)]
    floor: Option<PathBuf>,
    /// More offered rates (lease + commit requests per second), comma-separated:
    /// the master is driven open loop at each for `--open-seconds` before the
    /// main phases (the tasks those workers lease they finish before the next
    /// phase), and so is the floor when given.
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
}

/// Latency figures of one kind of request, in microseconds.
#[derive(Debug, Clone, Serialize)]
struct Latency {
    count: usize,
    p50_us: u32,
    p99_us: u32,
    p999_us: u32,
    max_us: u32,
}

impl Latency {
    fn of(mut micros: Vec<u32>) -> Latency {
        micros.sort_unstable();
        let at = |q: f64| -> u32 {
            if micros.is_empty() {
                return 0;
            }
            let i = ((micros.len() - 1) as f64 * q).round() as usize;
            micros[i.min(micros.len() - 1)]
        };
        Latency {
            count: micros.len(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: micros.last().copied().unwrap_or(0),
        }
    }
}

/// What the state directory held when the master was killed.
#[derive(Debug, Clone, Serialize)]
struct StateFiles {
    job_bytes: u64,
    snapshot_bytes: u64,
    journal_bytes: u64,
    journal_records: u64,
}

/// The figures of one phase.
#[derive(Debug, Clone, Serialize)]
struct PhaseResults {
    /// `open` (a fixed offered rate) or `closed` (each worker as fast as answered).
    kind: &'static str,
    /// Lease + commit requests per second offered (open loop only).
    offered_lease_commit_per_s: Option<f64>,
    /// Seconds the phase ran.
    seconds: f64,
    tasks_finished: u64,
    tasks_per_s: f64,
    /// Requests (lease, commit, finish) answered per second.
    requests_per_s: f64,
    /// Lease and commit requests answered per second.
    lease_commit_per_s: f64,
    /// Lease answers that carried no task (`wait`).
    waits: u64,
    /// Open loop: from the scheduled send time to the answer. Closed loop: from
    /// the send to the answer.
    lease: Latency,
    commit: Latency,
    finish: Latency,
    all: Latency,
    /// From the send to the answer, whatever the schedule said (open loop: the
    /// master's part of the latency above).
    all_from_send: Latency,
    /// Open loop: from the scheduled send time to the actual send, every
    /// request (a late answer before it, or the load tool's own lag).
    send_behind: Latency,
    /// Open loop: from the scheduled send time to the actual send, for
    /// requests whose worker sat idle until then: the load tool's timer and
    /// scheduling lag alone.
    wake_lag: Latency,
    /// The master's own timing histograms over the phase (`/metrics`, where
    /// it has them): p50 and p99 as bucket upper bounds.
    master_timings: std::collections::BTreeMap<String, Bucketed>,
    /// CPU seconds the master used in the phase.
    master_cpu_s: f64,
    /// CPU seconds the load tool used in the phase.
    load_cpu_s: f64,
    /// The master's CPU per request answered, in microseconds.
    master_cpu_us_per_request: f64,
    /// The load tool's CPU per request, in microseconds.
    load_cpu_us_per_request: f64,
    /// CPU seconds other processes used on the machine meanwhile (they compete
    /// for the same CPUs).
    other_cpu_s: f64,
    /// `fdatasync` after a small append in the state directory's file system,
    /// probed every 20 ms during the phase: the least a durable answer waits.
    fdatasync: Latency,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
struct Results {
    tasks: usize,
    workers: usize,
    lease_batch: usize,
    /// Threads of the load tool's runtime.
    threads: usize,
    machine: String,
    cpus: usize,
    /// `fdatasync` after a small append in the state directory's file system,
    /// before the master starts.
    fdatasync: Latency,
    /// Seconds to write `job.json`.
    job_write_s: f64,
    /// Seconds from starting the master on the new job to its first answer.
    first_start_s: f64,
    open: Option<PhaseResults>,
    closed: PhaseResults,
    /// Whether every task was finished by the end of the closed-loop phase.
    job_over: bool,
    tasks_finished: u64,
    register: Latency,
    /// The master's peak resident set (VmHWM) over both phases, in MiB.
    master_peak_rss_mib: f64,
    /// What the master left on disk when it was killed.
    state: StateFiles,
    /// Seconds from starting the killed master again to its first answer.
    restart_s: f64,
    /// The restarted master's peak resident set, in MiB.
    restart_peak_rss_mib: f64,
    /// Tasks done as the restarted master reports them (equal to the count before).
    tasks_done_after_restart: u64,
    /// The master's open-loop phases at `--rates`, before the main phases.
    sweep: Vec<PhaseResults>,
    /// The no-op stand-in's open-loop phases, by offered rate (empty without `--floor`).
    floor: Vec<PhaseResults>,
}

/// Requests and their latencies, as one worker saw them in one phase.
#[derive(Default)]
struct PhaseLog {
    lease: Vec<u32>,
    commit: Vec<u32>,
    finish: Vec<u32>,
    from_send: Vec<u32>,
    /// Open loop: from the scheduled send time to the send, every request.
    behind: Vec<u32>,
    /// Open loop: the same, only for requests whose worker was idle at the
    /// scheduled time (its timer's lateness: the load tool's own lag).
    wake_lag: Vec<u32>,
    waits: u64,
    tasks: u64,
}

impl PhaseLog {
    fn absorb(&mut self, other: PhaseLog) {
        self.lease.extend(other.lease);
        self.commit.extend(other.commit);
        self.finish.extend(other.finish);
        self.from_send.extend(other.from_send);
        self.behind.extend(other.behind);
        self.wake_lag.extend(other.wake_lag);
        self.waits += other.waits;
        self.tasks += other.tasks;
    }

    fn requests(&self) -> usize {
        self.lease.len() + self.commit.len() + self.finish.len()
    }
}

/// What one worker saw.
struct WorkerLog {
    register: u32,
    open: PhaseLog,
    closed: PhaseLog,
}

/// A master under test: the child process and how to reach it.
struct Master {
    child: Child,
    addr: String,
}

impl Master {
    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(run(args))
}

/// Runs the benchmark.
async fn run(args: Args) -> Result<()> {
    if args.tasks == 0 || args.workers == 0 || args.lease_batch == 0 {
        bail!("--tasks, --workers and --lease-batch must be at least 1");
    }
    if args.open_seconds > 0.0 && (args.rate.is_nan() || args.rate <= 0.0) {
        bail!("--rate must be above 0 for an open-loop phase");
    }
    if args.rates.iter().any(|rate| rate.is_nan() || *rate <= 0.0) {
        bail!("every --rates rate must be above 0");
    }
    // Tasks the open-loop phases finish: with K tasks per lease, K of every
    // K + 1 lease + commit requests are commits, one per task.
    let k = args.lease_batch as f64;
    let offered: f64 = args.rates.iter().filter(|r| **r != args.rate).sum::<f64>() + args.rate;
    let needed = offered * k / (k + 1.0) * args.open_seconds.max(0.0);
    if needed * 1.05 > args.tasks as f64 {
        bail!(
            "the open-loop phases finish about {needed:.0} tasks, and --tasks {} leaves \
             too few for them: raise --tasks, or lower --rates or --open-seconds",
            args.tasks
        );
    }
    let sluice = args
        .sluice
        .canonicalize()
        .with_context(|| format!("no sluice binary at {}", args.sluice.display()))?;
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let state = work_dir.join(format!("sluice-load-{}", std::process::id()));
    if state.exists() {
        std::fs::remove_dir_all(&state).with_context(|| format!("clearing {}", state.display()))?;
    }
    std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
    let log = work_dir.join(format!("sluice-load-{}-master.log", std::process::id()));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let token = format!("load-{:x}-{nanos:x}", std::process::id());

    let fdatasync = probe_fdatasync(&state)?;
    eprintln!(
        "fdatasync in {}: p50 {} p99 {}",
        state.display(),
        ms(fdatasync.p50_us),
        ms(fdatasync.p99_us)
    );

    let started = Instant::now();
    write_job(&state, args.tasks, args.rows)?;
    let job_write_s = started.elapsed().as_secs_f64();
    eprintln!(
        "wrote job.json of {} tasks in {job_write_s:.1}s",
        args.tasks
    );

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;

    let mut master = spawn_master(&sluice, &state, &token, &log)?;
    let first_start_s = wait_ready(&client, &mut master, &token, &log).await?;
    eprintln!("master answered after {first_start_s:.2}s");

    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe = {
        let (dir, stop) = (work_dir.clone(), stop_probe.clone());
        std::thread::spawn(move || probe_fdatasync_while(dir, stop))
    };
    let outcome = async {
        let mut swept = Vec::new();
        if args.open_seconds > 0.0 {
            for rate in args.rates.iter().copied().filter(|r| *r != args.rate) {
                let phase = Args {
                    rate,
                    seconds: 0.0,
                    ..args.clone()
                };
                eprintln!("master at {rate:.0} lease + commit/s, open loop");
                swept.push((rate, drive(&phase, &master, &token, true).await?));
            }
        }
        let main = drive(&args, &master, &token, false).await?;
        anyhow::Ok((swept, main))
    }
    .await;
    stop_probe.store(true, Ordering::Relaxed);
    let syncs = match probe.join() {
        Ok(samples) => samples?,
        Err(_) => bail!("the fdatasync probe panicked"),
    };
    let (swept, driven) = match outcome {
        Ok(done) => done,
        Err(e) => {
            let _ = master.child.kill();
            return Err(e);
        }
    };
    let status: StatusReply = get(&client, &master.base(), &token, "/v1/status").await?;
    let master_peak_rss_mib = peak_rss_mib(master.child.id())?;

    let mut register = Vec::new();
    let (mut open, mut closed) = (PhaseLog::default(), PhaseLog::default());
    for log in driven.logs {
        register.push(log.register);
        open.absorb(log.open);
        closed.absorb(log.closed);
    }
    // Every phase's tasks, the sweep's (and those its workers finished
    // unlogged) included: the master's own count.
    let finished = status.queue.tasks_done;
    let open = driven
        .open
        .map(|clock| phase_results("open", Some(args.rate), clock, open, &syncs));
    let closed = phase_results("closed", None, driven.closed, closed, &syncs);
    let sweep: Vec<PhaseResults> = swept
        .into_iter()
        .filter_map(|(rate, driven)| {
            let mut log = PhaseLog::default();
            for worker in driven.logs {
                log.absorb(worker.open);
            }
            let clock = driven.open?;
            Some(phase_results("open", Some(rate), clock, log, &syncs))
        })
        .collect();

    // Kill the master as a crash would, then time its return.
    master
        .child
        .kill()
        .context("killing the master with SIGKILL")?;
    let _ = master.child.wait();
    let files = state_files(&state)?;
    eprintln!(
        "killed the master; state: job.json {} MB, snapshot {} MB, journal {} records",
        files.job_bytes / 1_000_000,
        files.snapshot_bytes / 1_000_000,
        files.journal_records
    );
    let mut restarted = spawn_master(&sluice, &state, &token, &log)?;
    let restart_s = wait_ready(&client, &mut restarted, &token, &log).await?;
    let after: StatusReply = get(&client, &restarted.base(), &token, "/v1/status").await?;
    let restart_peak_rss_mib = peak_rss_mib(restarted.child.id())?;
    let _ = restarted.child.kill();
    let _ = restarted.child.wait();
    eprintln!("restarted master answered after {restart_s:.2}s");
    if after.queue.tasks_done != status.queue.tasks_done {
        bail!(
            "the restarted master reports {} tasks done, {} before the kill",
            after.queue.tasks_done,
            status.queue.tasks_done
        );
    }

    let mut floor = Vec::new();
    if let (Some(binary), true) = (&args.floor, args.open_seconds > 0.0) {
        let mut rates = vec![args.rate];
        rates.extend(args.rates.iter().copied().filter(|r| *r != args.rate));
        for rate in rates {
            floor.push(drive_floor(&args, binary, rate, &token, &log, &client).await?);
        }
    }

    let results = Results {
        tasks: args.tasks,
        workers: args.workers,
        lease_batch: args.lease_batch,
        threads: args.threads,
        machine: machine(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        fdatasync,
        job_write_s,
        first_start_s,
        open,
        closed,
        job_over: status.queue.job_over,
        tasks_finished: finished,
        register: Latency::of(register),
        master_peak_rss_mib,
        state: files,
        restart_s,
        restart_peak_rss_mib,
        tasks_done_after_restart: after.queue.tasks_done,
        sweep,
        floor,
    };
    let json = serde_json::to_string_pretty(&results)?;
    println!("{json}");
    let markdown = markdown(&results);
    eprintln!("{markdown}");
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{json}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, &markdown).with_context(|| format!("writing {}", path.display()))?;
    }
    if !args.keep_state {
        std::fs::remove_dir_all(&state).with_context(|| format!("removing {}", state.display()))?;
        let _ = std::fs::remove_file(&log);
    }
    Ok(())
}

/// Drives the no-op stand-in at `rate` for `--open-seconds`, open loop, as
/// the master was driven, and returns that phase's figures.
async fn drive_floor(
    args: &Args,
    binary: &Path,
    rate: f64,
    token: &str,
    log: &Path,
    client: &reqwest::Client,
) -> Result<PhaseResults> {
    let mut stand_in = spawn(Command::new(binary), binary, token, log)?;
    wait_ready(client, &mut stand_in, token, log).await?;
    let phase = Args {
        rate,
        seconds: 0.0,
        ..args.clone()
    };
    let driven = drive(&phase, &stand_in, token, false).await;
    let _ = stand_in.child.kill();
    let _ = stand_in.child.wait();
    let driven = driven.context("driving the floor")?;
    let mut log = PhaseLog::default();
    for worker in driven.logs {
        log.absorb(worker.open);
    }
    let clock = driven.open.context("the floor's phase has an open loop")?;
    let results = phase_results("floor", Some(rate), clock, log, &[]);
    eprintln!(
        "floor at {rate:.0} lease + commit/s: p99 {} from the schedule",
        ms(results.all.p99_us)
    );
    Ok(results)
}

/// The figures of one phase from what its workers logged.
fn phase_results(
    kind: &'static str,
    offered: Option<f64>,
    clock: PhaseClock,
    log: PhaseLog,
    syncs: &[(Instant, u32)],
) -> PhaseResults {
    let fdatasync = Latency::of(
        syncs
            .iter()
            .filter(|(at, _)| *at >= clock.from && *at < clock.to)
            .map(|(_, micros)| *micros)
            .collect(),
    );
    let seconds = clock.seconds.max(f64::MIN_POSITIVE);
    let requests = log.requests() as f64;
    let per_request = |cpu: f64| {
        if requests > 0.0 {
            cpu * 1e6 / requests
        } else {
            0.0
        }
    };
    let lease_commit = (log.lease.len() + log.commit.len()) as f64;
    let mut all = Vec::with_capacity(log.requests());
    all.extend_from_slice(&log.lease);
    all.extend_from_slice(&log.commit);
    all.extend_from_slice(&log.finish);
    PhaseResults {
        kind,
        offered_lease_commit_per_s: offered,
        seconds,
        tasks_finished: log.tasks,
        tasks_per_s: log.tasks as f64 / seconds,
        requests_per_s: requests / seconds,
        lease_commit_per_s: lease_commit / seconds,
        waits: log.waits,
        lease: Latency::of(log.lease),
        commit: Latency::of(log.commit),
        finish: Latency::of(log.finish),
        all: Latency::of(all),
        all_from_send: Latency::of(log.from_send),
        master_timings: clock.timings.clone(),
        send_behind: Latency::of(log.behind),
        wake_lag: Latency::of(log.wake_lag),
        master_cpu_s: clock.master_cpu_s,
        load_cpu_s: clock.load_cpu_s,
        master_cpu_us_per_request: per_request(clock.master_cpu_s),
        load_cpu_us_per_request: per_request(clock.load_cpu_s),
        other_cpu_s: (clock.busy_cpu_s - clock.master_cpu_s - clock.load_cpu_s).max(0.0),
        fdatasync,
    }
}

/// Times `fdatasync` every 20 ms in `dir` until `stop` is set: (when, microseconds).
fn probe_fdatasync_while(dir: PathBuf, stop: Arc<AtomicBool>) -> Result<Vec<(Instant, u32)>> {
    let path = dir.join(format!(
        "sluice-load-{}-fdatasync-probe",
        std::process::id()
    ));
    let mut file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let line = [b'x'; 200];
    let mut samples = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        file.write_all(&line)?;
        let started = Instant::now();
        file.sync_data()?;
        samples.push((started, micros_since(started)));
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(samples)
}

/// Times `fdatasync` after small appends in `dir`: the least a durable answer waits.
fn probe_fdatasync(dir: &Path) -> Result<Latency> {
    let path = dir.join("fdatasync-probe");
    let mut file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let line = [b'x'; 200];
    let mut micros = Vec::with_capacity(200);
    for _ in 0..200 {
        file.write_all(&line)?;
        let started = Instant::now();
        file.sync_data()?;
        micros.push(micros_since(started));
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(Latency::of(micros))
}

/// Writes `job.json`: `tasks` splits of `rows` rows each, one Parquet file apiece.
///
/// The split, the read plan and the job are built from their JSON form, as a
/// state written by an older build holds them: fields added to them later
/// take their defaults (a state must read after an upgrade, so every new
/// field has one), and this tool keeps compiling as they grow.
fn write_job(state: &Path, tasks: usize, rows: u64) -> Result<()> {
    let splits: Vec<serde_json::Value> = (0..tasks)
        .map(|i| {
            serde_json::json!({
                "path": format!("warehouse/synthetic/part-{i:07}.parquet"),
                "size": 64u64 << 20,
                "format": Format::Parquet,
                "codec": Codec::None,
                "partition_dir": "",
                "partition_values": [],
                "range": SplitRange::Whole,
                "rows": rows,
            })
        })
        .collect();
    let plan = serde_json::json!({
        "data_schema": arrow::datatypes::Schema::empty(),
        "partition_fields": [],
        "columns": [],
        "options": FormatOptions::default(),
    });
    let spec = serde_json::json!({
        "url": "file:///warehouse/synthetic",
        "splits": splits,
        "plan": plan,
        "epochs": 1,
        "seed": 0,
    });
    let spec: JobSpec = serde_json::from_value(spec).context("building the job spec")?;
    let job = JobRecord {
        format: STATE_FORMAT,
        spec,
        queue: QueueConfig {
            epochs: 1,
            max_attempts: 3,
            // Long enough that no lease lapses while hundreds of workers share two cores.
            lease_timeout_ms: 600_000,
            seed: 0,
            ..QueueConfig::default()
        },
        identity: Identity::default(),
    };
    let path = state.join("job.json");
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(file);
    serde_json::to_writer(&mut out, &job)?;
    out.flush()?;
    out.get_ref().sync_all()?;
    Ok(())
}

/// Starts `sluice master` on the state directory, listening on a free loopback port.
fn spawn_master(sluice: &Path, state: &Path, token: &str, log: &Path) -> Result<Master> {
    let mut command = Command::new(sluice);
    command
        .arg("master")
        .arg("file:///warehouse/synthetic")
        .args(["--linger", "3600s"])
        .arg("--state")
        .arg(state)
        .env("RUST_LOG", "warn");
    spawn(command, sluice, token, log)
}

/// Starts `command` (the master, or the floor standing in for it) with
/// `--listen` on a free loopback port and the job token, its output
/// appended to `log`.
fn spawn(mut command: Command, binary: &Path, token: &str, log: &Path) -> Result<Master> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = command
        .args(["--listen", &addr])
        .env("SLUICE_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    Ok(Master { child, addr })
}

/// Polls the master's status until it answers; returns the seconds that took.
async fn wait_ready(
    client: &reqwest::Client,
    master: &mut Master,
    token: &str,
    log: &Path,
) -> Result<f64> {
    let started = Instant::now();
    loop {
        if let Some(code) = master.child.try_wait()? {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = tail.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            bail!("the master exited with {code} before answering:\n{tail}");
        }
        let answer = client
            .get(format!("{}/v1/status", master.base()))
            .bearer_auth(token)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(response) = answer {
            if response.status().is_success() {
                return Ok(started.elapsed().as_secs_f64());
            }
        }
        if started.elapsed() > Duration::from_secs(900) {
            bail!("the master did not answer within 15 minutes");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Percentiles of one of the master's histograms, as bucket upper bounds, in
/// microseconds.
#[derive(Debug, Clone, Serialize)]
struct Bucketed {
    count: u64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

/// The master's histograms at one time: name -> (sum in seconds, cumulative
/// (upper bound, count) buckets).
type Histograms = std::collections::BTreeMap<String, (f64, Vec<(f64, u64)>)>;

/// Reads the master's timing histograms from `/metrics` (none from a master
/// without them).
async fn scrape(client: &reqwest::Client, base: &str, token: &str) -> Histograms {
    let mut out = Histograms::new();
    let Ok(response) = client
        .get(format!("{base}/metrics"))
        .bearer_auth(token)
        .send()
        .await
    else {
        return out;
    };
    let Ok(text) = response.text().await else {
        return out;
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if let Some((name, le)) = key.split_once("_bucket{le=\"") {
            let le = le.trim_end_matches("\"}");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            let count = value.parse().unwrap_or(0);
            out.entry(name.to_string()).or_default().1.push((le, count));
        } else if let Some(name) = key.strip_suffix("_sum") {
            if let Ok(sum) = value.parse() {
                out.entry(name.to_string()).or_default().0 = sum;
            }
        }
    }
    out.retain(|_, (_, buckets)| !buckets.is_empty());
    out
}

/// The percentiles of what each histogram counted between two scrapes.
fn bucketed(
    before: &Histograms,
    after: &Histograms,
) -> std::collections::BTreeMap<String, Bucketed> {
    let mut out = std::collections::BTreeMap::new();
    for (name, (sum, buckets)) in after {
        let (sum0, buckets0) = before.get(name).cloned().unwrap_or_default();
        let counts: Vec<(f64, u64)> = buckets
            .iter()
            .enumerate()
            .map(|(i, (le, n))| (*le, n - buckets0.get(i).map_or(0, |b| b.1)))
            .collect();
        let count = counts.last().map_or(0, |b| b.1);
        let at = |q: f64| -> f64 {
            let want = (count as f64 * q).ceil() as u64;
            counts
                .iter()
                .find(|(_, n)| *n >= want.max(1))
                .map_or(f64::NAN, |(le, _)| le * 1e6)
        };
        out.insert(
            name.trim_start_matches("sluice_").to_string(),
            Bucketed {
                count,
                mean_us: if count > 0 {
                    (sum - sum0) * 1e6 / count as f64
                } else {
                    0.0
                },
                p50_us: at(0.50),
                p99_us: at(0.99),
                p999_us: at(0.999),
            },
        );
    }
    out
}

/// How long a phase ran and the CPU it cost.
#[derive(Debug, Clone)]
struct PhaseClock {
    from: Instant,
    to: Instant,
    seconds: f64,
    master_cpu_s: f64,
    load_cpu_s: f64,
    /// CPU seconds every process on the machine used.
    busy_cpu_s: f64,
    /// The master's timing histograms over the phase.
    timings: std::collections::BTreeMap<String, Bucketed>,
}

/// CPU seconds a process used so far (user and system, all threads).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The fields after the command name, which is in parentheses.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 here.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / clock_ticks()
}

/// CPU seconds the whole machine spent busy so far (`/proc/stat`: all but idle
/// and iowait).
fn busy_seconds() -> f64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq (guest time is in user).
    let busy: f64 = ticks
        .iter()
        .take(7)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    busy / clock_ticks()
}

/// Clock ticks per second of `/proc/*/stat` (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A reading of the clock and both processes' CPU time.
struct Mark {
    at: Instant,
    master_cpu: f64,
    load_cpu: f64,
    busy_cpu: f64,
    timings: Histograms,
}

impl Mark {
    async fn now(master: u32, client: &reqwest::Client, base: &str, token: &str) -> Mark {
        let timings = scrape(client, base, token).await;
        Mark {
            at: Instant::now(),
            master_cpu: cpu_seconds(master),
            load_cpu: cpu_seconds(std::process::id()),
            busy_cpu: busy_seconds(),
            timings,
        }
    }

    fn until(&self, end: &Mark) -> PhaseClock {
        PhaseClock {
            from: self.at,
            to: end.at,
            seconds: end.at.duration_since(self.at).as_secs_f64(),
            master_cpu_s: end.master_cpu - self.master_cpu,
            load_cpu_s: end.load_cpu - self.load_cpu,
            busy_cpu_s: end.busy_cpu - self.busy_cpu,
            timings: bucketed(&self.timings, &end.timings),
        }
    }
}

/// What the workers logged and how long each phase ran.
struct Driven {
    logs: Vec<WorkerLog>,
    open: Option<PhaseClock>,
    closed: PhaseClock,
}

/// Drives `master` with `--workers` new workers: the open loop, then the
/// closed loop. With `drain`, each worker then finishes the tasks it still
/// holds (unlogged), so that a later phase finds none leased.
async fn drive(args: &Args, master: &Master, token: &str, drain: bool) -> Result<Driven> {
    let workers = args.workers;
    let pid = master.child.id();
    let mut conns = Vec::with_capacity(workers);
    let mut registered = Vec::with_capacity(workers);
    for index in 0..workers {
        let mut conn = Conn::connect(&master.addr, token).await?;
        let request = RegisterRequest {
            name: Some(format!("load-{index}")),
        };
        let sent = Instant::now();
        let reply: RegisterReply = conn.call("/v1/register", &request).await?;
        registered.push((reply.worker, reply.secret, micros_since(sent)));
        conns.push(conn);
    }
    let over = Arc::new(AtomicBool::new(false));
    let closing = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU64::new(0));
    let open_seconds = args.open_seconds.max(0.0);
    let start = Instant::now() + Duration::from_millis(20);
    let open_end = start + Duration::from_secs_f64(open_seconds);
    let closed_for = Duration::from_secs_f64(args.seconds);
    let switch = Arc::new(tokio::sync::Barrier::new(workers + 1));
    // Requests per lease + commit in a round of one lease and its tasks.
    let k = args.lease_batch as f64;
    let per_lease_commit = (1.0 + 2.0 * k) / (1.0 + k);
    // Each worker sends every `gap`; worker i starts i/workers of a gap in.
    let gap = if open_seconds > 0.0 {
        Duration::from_secs_f64(workers as f64 / (args.rate * per_lease_commit))
    } else {
        Duration::ZERO
    };
    let mut handles = Vec::with_capacity(workers);
    for (index, (conn, (worker, secret, register))) in conns.into_iter().zip(registered).enumerate()
    {
        let sim = Worker {
            conn,
            worker,
            secret,
            batch: args.lease_batch,
            rows: args.rows,
            over: over.clone(),
            finished: finished.clone(),
            drain,
        };
        let first = start + gap.mul_f64(index as f64 / workers as f64);
        handles.push(tokio::spawn(sim.run(
            register,
            first,
            gap,
            open_end,
            switch.clone(),
            closed_for,
        )));
    }
    let progress = {
        let finished = finished.clone();
        let over = over.clone();
        let closing = closing.clone();
        let total = args.tasks;
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if over.load(Ordering::Relaxed) {
                    break;
                }
                let now = finished.load(Ordering::Relaxed);
                let phase = if closing.load(Ordering::Relaxed) {
                    "closed"
                } else {
                    "open"
                };
                eprintln!(
                    "{:>6.0}s ({phase} loop): {now} of {total} tasks finished ({:.0}/s)",
                    start.elapsed().as_secs_f64(),
                    (now - last) as f64 / 5.0
                );
                last = now;
            }
        })
    };
    tokio::time::sleep_until(start.into()).await;
    let client = reqwest::Client::new();
    let base = master.base();
    let at_start = Mark::now(pid, &client, &base, token).await;
    // Every worker's open-loop requests answered.
    switch.wait().await;
    closing.store(true, Ordering::Relaxed);
    let at_switch = if open_seconds > 0.0 {
        Some(Mark::now(pid, &client, &base, token).await)
    } else {
        None
    };
    let mut logs = Vec::with_capacity(handles.len());
    for handle in handles {
        logs.push(handle.await.context("a worker panicked")??);
    }
    let at_end = Mark::now(pid, &client, &base, token).await;
    progress.abort();
    let open = at_switch.as_ref().map(|switch| at_start.until(switch));
    let closed = at_switch.as_ref().unwrap_or(&at_start).until(&at_end);
    Ok(Driven { logs, open, closed })
}

/// One simulated worker: lease → commit → finish, on a schedule, then as fast as
/// answered, until told to stop.
struct Worker {
    conn: Conn,
    worker: WorkerId,
    secret: WorkerSecret,
    batch: usize,
    rows: u64,
    over: Arc<AtomicBool>,
    finished: Arc<AtomicU64>,
    /// After the phases, finish the tasks still held.
    drain: bool,
}

/// What a worker sends next.
enum Step {
    Lease,
    Commit(AttemptId),
    Finish(AttemptId),
}

/// The kind of a request, for its latency.
#[derive(Clone, Copy)]
enum Kind {
    Lease,
    Commit,
    Finish,
}

/// Where a worker is in its tasks.
struct Progress {
    /// Attempts leased and not yet finished, oldest first.
    leased: std::collections::VecDeque<AttemptId>,
    /// What it sends next.
    step: Step,
}

impl Worker {
    /// Sends the open-loop requests scheduled before `open_end`, waits for the
    /// other workers at `switch`, then sends as fast as answered for `closed_for`.
    async fn run(
        mut self,
        register: u32,
        first: Instant,
        gap: Duration,
        open_end: Instant,
        switch: Arc<tokio::sync::Barrier>,
        closed_for: Duration,
    ) -> Result<WorkerLog> {
        let mut open = PhaseLog::default();
        let mut closed = PhaseLog::default();
        let mut progress = Progress {
            leased: Default::default(),
            step: Step::Lease,
        };
        // Open loop: each request at its time on this worker's schedule; if
        // the last answer came after that, it goes at once and the wait counts.
        let mut slot = first;
        let outcome = async {
            while slot < open_end && !self.over.load(Ordering::Relaxed) {
                let at = slot;
                slot += gap;
                let idle = at > Instant::now();
                if idle {
                    tokio::time::sleep_until(at.into()).await;
                }
                self.send(&mut progress, &mut open, Some((at, idle)))
                    .await?;
            }
            anyhow::Ok(())
        }
        .await;
        // Reached even after an error, so the other workers go on.
        switch.wait().await;
        outcome?;
        let deadline = Instant::now() + closed_for;
        while Instant::now() < deadline && !self.over.load(Ordering::Relaxed) {
            if self.send(&mut progress, &mut closed, None).await? {
                // Nothing to lease until other workers finish: ask again soon.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if self.drain {
            let mut unlogged = PhaseLog::default();
            while !progress.leased.is_empty() {
                self.send(&mut progress, &mut unlogged, None).await?;
            }
        }
        Ok(WorkerLog {
            register,
            open,
            closed,
        })
    }

    /// Sends the next request and logs its latency: from the scheduled time
    /// when given (with whether the worker sat idle until it), else from the
    /// send. Returns whether the master said to wait.
    async fn send(
        &mut self,
        progress: &mut Progress,
        log: &mut PhaseLog,
        scheduled: Option<(Instant, bool)>,
    ) -> Result<bool> {
        let sent = Instant::now();
        if let Some((at, idle)) = scheduled {
            let behind = sent.saturating_duration_since(at).as_micros();
            let behind = behind.min(u128::from(u32::MAX)) as u32;
            log.behind.push(behind);
            if idle {
                log.wake_lag.push(behind);
            }
        }
        let mut waited = false;
        let kind = match progress.step {
            Step::Lease => Kind::Lease,
            Step::Commit(_) => Kind::Commit,
            Step::Finish(_) => Kind::Finish,
        };
        let leased = &mut progress.leased;
        progress.step = match progress.step {
            Step::Lease => {
                let request = LeaseRequest {
                    secret: self.secret.clone(),
                    op: ops::Lease {
                        worker: self.worker,
                        max: self.batch,
                    },
                };
                let answer: Answer<LeaseReply> = self.conn.call("/v1/lease", &request).await?;
                match answer {
                    Answer::Ok(LeaseReply::Tasks(leases)) => {
                        leased.extend(leases.iter().map(|l| l.attempt));
                    }
                    Answer::Ok(LeaseReply::Wait) => {
                        log.waits += 1;
                        waited = true;
                    }
                    Answer::Ok(LeaseReply::JobOver) => self.over.store(true, Ordering::Relaxed),
                    Answer::Refused(e) => bail!("lease refused: {e}"),
                }
                match leased.front() {
                    Some(&attempt) => Step::Commit(attempt),
                    None => Step::Lease,
                }
            }
            Step::Commit(attempt) => {
                // The trainers acknowledged half the task: commit it.
                let request = CommitRequest {
                    secret: self.secret.clone(),
                    op: ops::Commit {
                        worker: self.worker,
                        attempt,
                        offset: self.rows / 2,
                        ranges: Vec::new(),
                    },
                };
                let answer: Answer<()> = self.conn.call("/v1/commit", &request).await?;
                if let Answer::Refused(e) = answer {
                    bail!("commit refused: {e}");
                }
                Step::Finish(attempt)
            }
            Step::Finish(attempt) => {
                // The rest acknowledged: the finish commits it.
                let request = FinishRequest {
                    secret: self.secret.clone(),
                    op: ops::Finish {
                        worker: self.worker,
                        attempt,
                        rows: self.rows,
                    },
                };
                let answer: Answer<()> = self.conn.call("/v1/finish", &request).await?;
                if let Answer::Refused(e) = answer {
                    bail!("finish refused: {e}");
                }
                log.tasks += 1;
                self.finished.fetch_add(1, Ordering::Relaxed);
                leased.pop_front();
                match leased.front() {
                    Some(&attempt) => Step::Commit(attempt),
                    None => Step::Lease,
                }
            }
        };
        let took = micros_since(scheduled.map_or(sent, |(at, _)| at));
        log.from_send.push(micros_since(sent));
        match kind {
            Kind::Lease => log.lease.push(took),
            Kind::Commit => log.commit.push(took),
            Kind::Finish => log.finish.push(took),
        }
        Ok(waited)
    }
}

/// One keep-alive HTTP/1.1 connection to the master: a request is written
/// whole, its answer read by `Content-Length`.
struct Conn {
    stream: TcpStream,
    /// The headers every request carries.
    head: String,
    out: Vec<u8>,
    input: Vec<u8>,
}

impl Conn {
    async fn connect(addr: &str, token: &str) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            head: format!(
                "Host: {addr}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\n"
            ),
            out: Vec::with_capacity(512),
            input: Vec::with_capacity(4096),
        })
    }

    /// Posts `body` as JSON and parses the answer (200 or 409).
    async fn call<B: Serialize, T: DeserializeOwned>(&mut self, path: &str, body: &B) -> Result<T> {
        let json = serde_json::to_vec(body)?;
        self.out.clear();
        write!(
            self.out,
            "POST {path} HTTP/1.1\r\n{}Content-Length: {}\r\n\r\n",
            self.head,
            json.len()
        )?;
        self.out.extend_from_slice(&json);
        self.stream
            .write_all(&self.out)
            .await
            .with_context(|| format!("POST {path}"))?;
        let (status, body) = self
            .read_answer()
            .await
            .with_context(|| format!("POST {path}"))?;
        if status != 200 && status != 409 {
            bail!(
                "POST {path} answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        serde_json::from_slice(&body).with_context(|| format!("POST {path}: unexpected answer"))
    }

    /// Reads one answer: its status and body.
    async fn read_answer(&mut self) -> Result<(u16, Vec<u8>)> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut response = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) = response.parse(&self.input)? {
                let status = response.code.unwrap_or(0);
                let length = response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .context("an answer without Content-Length")?;
                while self.input.len() < head + length {
                    self.fill().await?;
                }
                let body = self.input[head..head + length].to_vec();
                self.input.drain(..head + length);
                return Ok((status, body));
            }
            self.fill().await?;
        }
    }

    /// Reads more of the stream into the input buffer.
    async fn fill(&mut self) -> Result<()> {
        self.input.reserve(4096);
        let read = self.stream.read_buf(&mut self.input).await?;
        if read == 0 {
            bail!("the master closed the connection");
        }
        Ok(())
    }
}

/// Microseconds since `start`, saturating.
fn micros_since(start: Instant) -> u32 {
    start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32
}

async fn get<T: DeserializeOwned>(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    path: &str,
) -> Result<T> {
    let response = client
        .get(format!("{base}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| format!("GET {path}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("GET {path} answered {status}");
    }
    Ok(response.json().await?)
}

/// The peak resident set of a process (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let kb: f64 = text
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmHWM in {path}"))?;
    Ok(kb / 1024.0)
}

/// Sizes of what the state directory holds, and the journal's record count.
fn state_files(state: &Path) -> Result<StateFiles> {
    let mut files = StateFiles {
        job_bytes: 0,
        snapshot_bytes: 0,
        journal_bytes: 0,
        journal_records: 0,
    };
    for entry in std::fs::read_dir(state).with_context(|| format!("listing {}", state.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let len = entry.metadata()?.len();
        if name == "job.json" {
            files.job_bytes = len;
        } else if name.starts_with("snapshot") {
            files.snapshot_bytes += len;
        } else if name.starts_with("journal") {
            files.journal_bytes += len;
            let text = std::fs::read(entry.path())?;
            files.journal_records += text.iter().filter(|b| **b == b'\n').count() as u64;
        }
    }
    Ok(files)
}

/// The CPU model, for the record.
fn machine() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(us: u32) -> String {
    format!("{:.2} ms", f64::from(us) / 1000.0)
}

/// The figures as Markdown tables.
fn markdown(r: &Results) -> String {
    let mut text = format!(
        "{} tasks, {} workers leasing {} task(s) per request, on {} ({} CPUs shared by \
         the master and the workers, over loopback; the workers on {} thread(s)); \
         `fdatasync` of a small append in the state directory before the run: p50 {}, \
         p99 {}.\n\n",
        thousands(r.tasks as f64),
        r.workers,
        r.lease_batch,
        r.machine,
        r.cpus,
        r.threads,
        ms(r.fdatasync.p50_us),
        ms(r.fdatasync.p99_us),
    );
    let phases: Vec<&PhaseResults> = r.open.iter().chain(Some(&r.closed)).collect();
    let mut header = String::from("| figure |");
    let mut rule = String::from("|---|");
    for p in &phases {
        match p.offered_lease_commit_per_s {
            Some(rate) => header.push_str(&format!(
                " open loop: {} lease + commit/s offered |",
                thousands(rate)
            )),
            None => header.push_str(" closed loop: each worker as fast as answered |"),
        }
        rule.push_str("---|");
    }
    text.push_str(&format!("{header}\n{rule}\n"));
    let mut row = |what: &str, value: &dyn Fn(&PhaseResults) -> String| {
        let cells: Vec<String> = phases.iter().map(|p| value(p)).collect();
        text.push_str(&format!("| {what} | {} |\n", cells.join(" | ")));
    };
    row("phase", &|p| {
        format!(
            "{:.0} s, {} tasks finished",
            p.seconds,
            thousands(p.tasks_finished as f64)
        )
    });
    row("lease + commit requests per second", &|p| {
        thousands(p.lease_commit_per_s)
    });
    row("all requests per second (lease, commit, finish)", &|p| {
        thousands(p.requests_per_s)
    });
    row("tasks finished per second", &|p| thousands(p.tasks_per_s));
    for (what, pick) in [
        (
            "lease",
            (|p: &PhaseResults| p.lease.clone()) as fn(&PhaseResults) -> Latency,
        ),
        ("commit", |p: &PhaseResults| p.commit.clone()),
        ("finish", |p: &PhaseResults| p.finish.clone()),
        ("all requests", |p: &PhaseResults| p.all.clone()),
    ] {
        row(&format!("{what} latency p50 / p99 / p99.9"), &|p| {
            let l = pick(p);
            format!("{} / {} / {}", ms(l.p50_us), ms(l.p99_us), ms(l.p999_us))
        });
    }
    row("all requests, send to answer, p50 / p99 / p99.9", &|p| {
        let l = &p.all_from_send;
        format!("{} / {} / {}", ms(l.p50_us), ms(l.p99_us), ms(l.p999_us))
    });
    row(
        "open loop: scheduled time to send, p50 / p99 / p99.9 (all; idle workers only)",
        &|p| {
            let (b, w) = (&p.send_behind, &p.wake_lag);
            format!(
                "{} / {} / {}; {} / {} / {}",
                ms(b.p50_us),
                ms(b.p99_us),
                ms(b.p999_us),
                ms(w.p50_us),
                ms(w.p99_us),
                ms(w.p999_us)
            )
        },
    );
    let mut names: Vec<String> = Vec::new();
    for p in &phases {
        for name in p.master_timings.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    for name in &names {
        row(
            &format!("master `{name}` mean / p50 / p99 / p99.9 (bucket bounds)"),
            &|p| match p.master_timings.get(name) {
                Some(b) => format!(
                    "{:.2} / {:.2} / {:.2} / {:.2} ms ({} counted)",
                    b.mean_us / 1e3,
                    b.p50_us / 1e3,
                    b.p99_us / 1e3,
                    b.p999_us / 1e3,
                    thousands(b.count as f64)
                ),
                None => "-".to_string(),
            },
        );
    }
    row("master CPU per request", &|p| {
        format!(
            "{:.1} µs ({:.2} CPUs)",
            p.master_cpu_us_per_request,
            p.master_cpu_s / p.seconds
        )
    });
    row("load tool CPU per request", &|p| {
        format!(
            "{:.1} µs ({:.2} CPUs)",
            p.load_cpu_us_per_request,
            p.load_cpu_s / p.seconds
        )
    });
    row("other processes on the machine", &|p| {
        format!("{:.2} CPUs", p.other_cpu_s / p.seconds)
    });
    row("`fdatasync` meanwhile (every 20 ms) p50 / p99", &|p| {
        format!("{} / {}", ms(p.fdatasync.p50_us), ms(p.fdatasync.p99_us))
    });
    text.push_str(&format!(
        "\nOpen-loop latency runs from each request's scheduled send time (a late \
         answer delays the worker's next request, and that wait counts); closed-loop \
         latency from the send, where {} workers with one request out each make its \
         mean workers / rate (Little's law).\n\n| figure | value |\n|---|---|\n",
        r.workers
    ));
    text.push_str(&format!(
        "| job | {} tasks finished{} |\n",
        thousands(r.tasks_finished as f64),
        if r.job_over { " (job over)" } else { "" }
    ));
    text.push_str(&format!(
        "| register latency p50 / p99 | {} / {} |\n",
        ms(r.register.p50_us),
        ms(r.register.p99_us)
    ));
    text.push_str(&format!(
        "| master peak RSS | {:.0} MiB |\n",
        r.master_peak_rss_mib
    ));
    text.push_str(&format!(
        "| first start (`job.json` only) | {:.2} s ({} MB `job.json`) |\n",
        r.first_start_s,
        r.state.job_bytes / 1_000_000
    ));
    text.push_str(&format!(
        "| restart after `kill -9` | {:.2} s ({} MB snapshot + {} journal records), peak RSS {:.0} MiB |\n",
        r.restart_s,
        r.state.snapshot_bytes / 1_000_000,
        thousands(r.state.journal_records as f64),
        r.restart_peak_rss_mib
    ));
    if !r.floor.is_empty() {
        text.push_str(&floor_markdown(r));
    }
    text
}

/// The comparison table: the master and the no-op stand-in (the floor) open
/// loop at each offered rate, side by side, fastest rate first.
fn floor_markdown(r: &Results) -> String {
    let mut text = String::from(
        "\nThe floor: `sluice-load-floor`, a stand-in that answers the same requests at \
         once with fixed answers and does no work (no queue, no journal, no fsync), \
         driven open loop by the same load tool on the same CPUs. No master can answer \
         faster on this machine. Latency from the schedule; the ratio is the master's \
         p99 over the floor's.\n\n\
         | offered lease + commit/s | answered by | achieved requests/s | p50 / p99 / p99.9 from the schedule | p50 / p99 / p99.9 from the send | server CPU per request | load tool CPU per request | p99 ratio |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let rate = |p: &PhaseResults| p.offered_lease_commit_per_s.unwrap_or(0.0);
    let mut rates: Vec<f64> = r.floor.iter().map(rate).collect();
    rates.sort_by(|a, b| b.total_cmp(a));
    let mut line = |who: &str, p: &PhaseResults, ratio: &str| {
        let (a, s) = (&p.all, &p.all_from_send);
        text.push_str(&format!(
            "| {} | {who} | {} | {} / {} / {} | {} / {} / {} | {:.1} µs | {:.1} µs | {ratio} |\n",
            thousands(rate(p)),
            thousands(p.requests_per_s),
            ms(a.p50_us),
            ms(a.p99_us),
            ms(a.p999_us),
            ms(s.p50_us),
            ms(s.p99_us),
            ms(s.p999_us),
            p.master_cpu_us_per_request,
            p.load_cpu_us_per_request,
        ));
    };
    for at in rates {
        let master = r.open.iter().chain(&r.sweep).find(|p| rate(p) == at);
        let Some(floor) = r.floor.iter().find(|p| rate(p) == at) else {
            continue;
        };
        if let Some(master) = master {
            let ratio = if floor.all.p99_us > 0 {
                format!("{:.1}×", master.all.p99_us as f64 / floor.all.p99_us as f64)
            } else {
                "-".to_string()
            };
            line("`sluice master`", master, &ratio);
        }
        line("the floor", floor, "");
    }
    text
}
