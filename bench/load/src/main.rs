//! The master load benchmark.
//!
//! Writes a job of `--tasks` synthetic splits as the master's `job.json` (the
//! `JobFile` the master itself writes after listing a dataset), starts the real
//! `sluice master` binary on that state directory, and drives it over loopback with
//! `--workers` concurrent workers: each registers, then leases, commits and finishes
//! tasks until the job is over or `--seconds` have passed. It reports operations
//! per second, latency percentiles per operation, the commit lag (from the moment a
//! worker decides to commit, its trainers having acknowledged rows, to the master's
//! reply saying the commit is durable), the master's peak RSS (`VmHWM`), and how
//! long the master takes to answer again after `kill -9` with its state as the run
//! left it (snapshot and journal).

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
use connectors::{Format, FormatOptions, ReadPlan, Split, SplitRange};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice::protocol::spec::JobSpec;
use sluice::protocol::api::{
    Answer, CommitRequest, FinishRequest, LeaseRequest, RegisterReply, RegisterRequest, StatusReply,
};
use sluice::master::identity::Identity;
use sluice::master::state::JobFile;
use sluice::task::{LeaseReply, QueueConfig};

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
    /// Longest the load phase runs, in seconds; it ends sooner when the job is over.
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

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
struct Results {
    tasks: usize,
    workers: usize,
    lease_batch: usize,
    machine: String,
    cpus: usize,
    /// Seconds to write `job.json`.
    job_write_s: f64,
    /// Seconds from starting the master on the new job to its first answer.
    first_start_s: f64,
    /// Seconds the load phase ran.
    load_s: f64,
    /// Whether every task was finished within the load phase.
    job_over: bool,
    tasks_finished: u64,
    tasks_per_s: f64,
    /// Requests (register, lease, commit, finish) per second.
    requests_per_s: f64,
    /// Lease and commit requests per second.
    lease_commit_per_s: f64,
    /// Lease answers that carried no task (`wait`).
    waits: u64,
    register: Latency,
    lease: Latency,
    commit: Latency,
    finish: Latency,
    all: Latency,
    /// From a worker's decision to commit (a commit, or the finish that
    /// commits the rest of the task) to the reply that says it is durable.
    commit_lag: Latency,
    /// The master's peak resident set (VmHWM) over the load phase, in MiB.
    master_peak_rss_mib: f64,
    /// What the master left on disk when it was killed.
    state: StateFiles,
    /// Seconds from starting the killed master again to its first answer.
    restart_s: f64,
    /// The restarted master's peak resident set, in MiB.
    restart_peak_rss_mib: f64,
    /// Tasks done as the restarted master reports them (equal to the count before).
    tasks_done_after_restart: u64,
}

/// Requests and their latencies, as one worker saw them.
#[derive(Default)]
struct WorkerLog {
    register: Vec<u32>,
    lease: Vec<u32>,
    commit: Vec<u32>,
    finish: Vec<u32>,
    /// Acknowledgement to durable reply, per commit and finish.
    commit_lag: Vec<u32>,
    waits: u64,
    tasks: u64,
}

/// A master under test: the child process and how to reach it.
struct Master {
    child: Child,
    base: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.tasks == 0 || args.workers == 0 || args.lease_batch == 0 {
        bail!("--tasks, --workers and --lease-batch must be at least 1");
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

    let started = Instant::now();
    write_job(&state, args.tasks, args.rows)?;
    let job_write_s = started.elapsed().as_secs_f64();
    eprintln!(
        "wrote job.json of {} tasks in {job_write_s:.1}s",
        args.tasks
    );

    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.workers + 8)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(60))
        .build()?;

    let mut master = spawn_master(&sluice, &state, &token, &log)?;
    let first_start_s = wait_ready(&client, &mut master, &token, &log).await?;
    eprintln!("master answered after {first_start_s:.2}s");

    let outcome = drive(&args, &client, &master.base, &token).await;
    let (load_s, logs) = match outcome {
        Ok(done) => done,
        Err(e) => {
            let _ = master.child.kill();
            return Err(e);
        }
    };
    let status: StatusReply = get(&client, &master.base, &token, "/v1/status").await?;
    let master_peak_rss_mib = peak_rss_mib(master.child.id())?;

    let mut all = Vec::new();
    let mut waits = 0;
    let mut finished = 0;
    let (mut register, mut lease, mut commit, mut finish, mut commit_lag) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for log in logs {
        all.extend_from_slice(&log.register);
        all.extend_from_slice(&log.lease);
        all.extend_from_slice(&log.commit);
        all.extend_from_slice(&log.finish);
        register.extend(log.register);
        lease.extend(log.lease);
        commit.extend(log.commit);
        finish.extend(log.finish);
        commit_lag.extend(log.commit_lag);
        waits += log.waits;
        finished += log.tasks;
    }
    let requests = all.len() as f64;
    let lease_commit = (lease.len() + commit.len()) as f64;

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
    let after: StatusReply = get(&client, &restarted.base, &token, "/v1/status").await?;
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

    let results = Results {
        tasks: args.tasks,
        workers: args.workers,
        lease_batch: args.lease_batch,
        machine: machine(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        job_write_s,
        first_start_s,
        load_s,
        job_over: status.queue.job_over,
        tasks_finished: finished,
        tasks_per_s: finished as f64 / load_s,
        requests_per_s: requests / load_s,
        lease_commit_per_s: lease_commit / load_s,
        waits,
        register: Latency::of(register),
        lease: Latency::of(lease),
        commit: Latency::of(commit),
        finish: Latency::of(finish),
        all: Latency::of(all),
        commit_lag: Latency::of(commit_lag),
        master_peak_rss_mib,
        state: files,
        restart_s,
        restart_peak_rss_mib,
        tasks_done_after_restart: after.queue.tasks_done,
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

/// Writes `job.json`: `tasks` splits of `rows` rows each, one Parquet file apiece.
fn write_job(state: &Path, tasks: usize, rows: u64) -> Result<()> {
    let splits = (0..tasks)
        .map(|i| Split {
            path: format!("warehouse/synthetic/part-{i:07}.parquet"),
            size: 64 << 20,
            format: Format::Parquet,
            codec: Codec::None,
            partition_dir: String::new(),
            partition_values: Vec::new(),
            range: SplitRange::Whole,
            rows: Some(rows),
        })
        .collect();
    let job = JobFile {
        spec: JobSpec {
            url: "file:///warehouse/synthetic".to_string(),
            splits,
            plan: ReadPlan {
                data_schema: Arc::new(arrow::datatypes::Schema::empty()),
                partition_fields: Vec::new(),
                columns: Vec::new(),
                options: FormatOptions::default(),
            },
            epochs: 1,
            seed: 0,
            lease_timeout_ms: None,
        },
        queue: QueueConfig {
            epochs: 1,
            max_attempts: 3,
            // Long enough that no lease lapses while hundreds of workers share two cores.
            lease_timeout_ms: 600_000,
            seed: 0,
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
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = Command::new(sluice)
        .arg("master")
        .arg("file:///warehouse/synthetic")
        .args(["--listen", &addr, "--linger", "3600s"])
        .arg("--state")
        .arg(state)
        .env("SLUICE_TOKEN", token)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", sluice.display()))?;
    Ok(Master {
        child,
        base: format!("http://{addr}"),
    })
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
            .get(format!("{}/v1/status", master.base))
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

/// Runs the workers until the job is over or the time is up.
async fn drive(
    args: &Args,
    client: &reqwest::Client,
    base: &str,
    token: &str,
) -> Result<(f64, Vec<WorkerLog>)> {
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let over = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(args.workers);
    for index in 0..args.workers {
        let worker = Worker {
            name: format!("load-{index}"),
            client: client.clone(),
            base: base.to_string(),
            token: token.to_string(),
            batch: args.lease_batch,
            rows: args.rows,
            deadline,
            over: over.clone(),
            finished: finished.clone(),
        };
        handles.push(tokio::spawn(worker.run()));
    }
    let progress = {
        let finished = finished.clone();
        let over = over.clone();
        let total = args.tasks;
        tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if over.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    break;
                }
                let now = finished.load(Ordering::Relaxed);
                eprintln!(
                    "{:>6.0}s: {now} of {total} tasks finished ({:.0}/s)",
                    started.elapsed().as_secs_f64(),
                    (now - last) as f64 / 5.0
                );
                last = now;
            }
        })
    };
    let mut logs = Vec::with_capacity(handles.len());
    for handle in handles {
        logs.push(handle.await.context("a worker panicked")??);
    }
    let load_s = started.elapsed().as_secs_f64();
    progress.abort();
    Ok((load_s, logs))
}

/// One simulated worker: register, then lease → commit → finish until told to stop.
struct Worker {
    name: String,
    client: reqwest::Client,
    base: String,
    token: String,
    batch: usize,
    rows: u64,
    deadline: Instant,
    over: Arc<AtomicBool>,
    finished: Arc<AtomicU64>,
}

impl Worker {
    async fn run(self) -> Result<WorkerLog> {
        let mut log = WorkerLog::default();
        let register = RegisterRequest {
            name: Some(self.name.clone()),
        };
        let (reply, took): (RegisterReply, _) = self.post("/v1/register", &register).await?;
        log.register.push(took);
        let (worker, secret) = (reply.worker, reply.secret);
        while Instant::now() < self.deadline && !self.over.load(Ordering::Relaxed) {
            let request = LeaseRequest {
                worker,
                secret: secret.clone(),
                max: self.batch,
            };
            let (answer, took) = self.post("/v1/lease", &request).await?;
            log.lease.push(took);
            match answer {
                Answer::Ok(LeaseReply::Tasks(leases)) => {
                    for lease in leases {
                        // The trainers acknowledged half the task: commit it.
                        let acknowledged = Instant::now();
                        let commit = CommitRequest {
                            worker,
                            secret: secret.clone(),
                            attempt: lease.attempt,
                            offset: self.rows / 2,
                        };
                        let (answer, took): (Answer<()>, _) =
                            self.post("/v1/commit", &commit).await?;
                        log.commit.push(took);
                        if let Answer::Refused(e) = answer {
                            bail!("commit refused: {e}");
                        }
                        log.commit_lag.push(micros_since(acknowledged));
                        // The rest acknowledged: the finish commits it.
                        let acknowledged = Instant::now();
                        let finish = FinishRequest {
                            worker,
                            secret: secret.clone(),
                            attempt: lease.attempt,
                            rows: self.rows,
                        };
                        let (answer, took): (Answer<()>, _) =
                            self.post("/v1/finish", &finish).await?;
                        log.finish.push(took);
                        if let Answer::Refused(e) = answer {
                            bail!("finish refused: {e}");
                        }
                        log.commit_lag.push(micros_since(acknowledged));
                        log.tasks += 1;
                        self.finished.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Answer::Ok(LeaseReply::Wait) => {
                    log.waits += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Answer::Ok(LeaseReply::JobOver) => {
                    self.over.store(true, Ordering::Relaxed);
                }
                Answer::Refused(e) => bail!("lease refused: {e}"),
            }
        }
        Ok(log)
    }

    /// Posts `body` and reads the whole answer; returns it with the microseconds taken.
    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<(T, u32)> {
        let started = Instant::now();
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let took = micros_since(started);
        if !status.is_success() && status != reqwest::StatusCode::CONFLICT {
            bail!(
                "POST {path} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let answer = serde_json::from_slice(&bytes)
            .with_context(|| format!("POST {path}: unexpected answer"))?;
        Ok((answer, took))
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

/// The figures as a Markdown table.
fn markdown(r: &Results) -> String {
    let mut out = String::new();
    let mut row = |what: &str, value: String| {
        out.push_str(&format!("| {what} | {value} |\n"));
    };
    row("tasks in the job", thousands(r.tasks as f64));
    row("concurrent workers (loopback)", r.workers.to_string());
    row(
        "load phase",
        format!(
            "{:.0} s, {} tasks finished{}",
            r.load_s,
            thousands(r.tasks_finished as f64),
            if r.job_over { " (job over)" } else { "" }
        ),
    );
    row(
        "lease + commit requests per second",
        thousands(r.lease_commit_per_s),
    );
    row(
        "all requests per second (lease, commit, finish)",
        thousands(r.requests_per_s),
    );
    row("tasks finished per second", thousands(r.tasks_per_s));
    for (what, l) in [
        ("lease", &r.lease),
        ("commit", &r.commit),
        ("finish", &r.finish),
        ("all requests", &r.all),
    ] {
        row(
            &format!("{what} latency p50 / p99"),
            format!("{} / {}", ms(l.p50_us), ms(l.p99_us)),
        );
    }
    row(
        "commit lag p50 / p99 (acknowledgement to durable reply)",
        format!("{} / {}", ms(r.commit_lag.p50_us), ms(r.commit_lag.p99_us)),
    );
    row(
        "master peak RSS",
        format!("{:.0} MiB", r.master_peak_rss_mib),
    );
    row(
        "first start (`job.json` only)",
        format!(
            "{:.2} s ({} MB `job.json`)",
            r.first_start_s,
            r.state.job_bytes / 1_000_000
        ),
    );
    row(
        "restart after `kill -9`",
        format!(
            "{:.2} s ({} MB snapshot + {} journal records), peak RSS {:.0} MiB",
            r.restart_s,
            r.state.snapshot_bytes / 1_000_000,
            thousands(r.state.journal_records as f64),
            r.restart_peak_rss_mib
        ),
    );
    let mut text = format!(
        "{} tasks, {} workers leasing {} task(s) per request, on {} ({} CPUs):\n\n\
         | figure | value |\n|---|---|\n",
        thousands(r.tasks as f64),
        r.workers,
        r.lease_batch,
        r.machine,
        r.cpus
    );
    text.push_str(&out);
    text
}
