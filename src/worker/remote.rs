//! A remote master as a task source: the `/v1` API over HTTP, retried with
//! backoff while the master is unreachable (it may be restarting).

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::protocol::api::*;
use crate::protocol::ops::{self, Operation, WorkerOperation};
use crate::protocol::spec::JobSpec;
use crate::protocol::{SourceError, TaskSource};
use crate::queue::{
    AttemptId, FailOutcome, LeaseReply, QueueError, QueueStatus, WorkerId, WorkerSecret,
};
use crate::trainer::protocol::TOKEN_ENV;

/// Errors talking to the master.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The master refused the token.
    #[error("the master at {url} refused the job token (401): check --token-file or {TOKEN_ENV}")]
    Unauthorized {
        /// The master.
        url: String,
    },
    /// The master stayed unreachable.
    #[error("master {url} unreachable for {waited:?}: {last}")]
    Unreachable {
        /// The master.
        url: String,
        /// How long we tried.
        waited: Duration,
        /// The last error.
        last: String,
    },
    /// A stop was requested and the master did not answer within its grace.
    #[error("master {url} did not answer within the --grace period after the stop: {last}")]
    Stopped {
        /// The master.
        url: String,
        /// The last error.
        last: String,
    },
    /// The master answered something unexpected.
    #[error("master {url} answered {status}: {body}")]
    Protocol {
        /// The master.
        url: String,
        /// HTTP status.
        status: u16,
        /// Body (cut short).
        body: String,
    },
    /// The master's TLS certificate is not trusted.
    #[error("master {url}: its TLS certificate is not trusted ({}); pass --ca-file with the CA that signed it", error_chain(.cause))]
    Certificate {
        /// The master.
        url: String,
        /// The request's failure, with the TLS error among its sources.
        cause: reqwest::Error,
    },
    /// The CA certificate file cannot be read.
    #[error("--ca-file {path}: {cause}")]
    CaFileUnreadable {
        /// The file.
        path: String,
        /// The read's failure.
        cause: std::io::Error,
    },
    /// The CA certificate file is not a PEM bundle of certificates.
    #[error("--ca-file {path}: {}", error_chain(.cause))]
    CaFile {
        /// The file.
        path: String,
        /// What parsing it found.
        cause: reqwest::Error,
    },
    /// The CA certificate file holds no certificate.
    #[error("--ca-file {path}: no certificate in the file")]
    CaFileEmpty {
        /// The file.
        path: String,
    },
}

/// A master reached over HTTP.
#[derive(Clone)]
pub struct RemoteSource {
    client: reqwest::Client,
    base: String,
    token: String,
    /// How long a request is retried while the master is down.
    patience: Duration,
    rows: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The secret of each worker registered through this client.
    secrets: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<WorkerId, WorkerSecret>>>,
    /// The name workers register with.
    name: Option<String>,
    /// After a stop, requests are given up when its grace has passed.
    stop: Option<StopDeadline>,
    /// Set when a request was given up so.
    gave_up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The master not answering, as said in the log (shared by the clones).
    wait: std::sync::Arc<std::sync::Mutex<Option<crate::logging::Wait>>>,
    /// The worker's cache (`--cache`), told to the master in heartbeats.
    cache: std::sync::Arc<std::sync::Mutex<Option<CacheReport>>>,
}

/// What a worker's heartbeats say of its cache: which splits it holds
/// (sent again only when that changed) and what it did.
struct CacheReport {
    cache: std::sync::Arc<connectors::cache::Cache>,
    /// The cache's key of each split's file (`None`: never cached).
    keys: Vec<Option<connectors::cache::FileKey>>,
    /// The cache's generation the master last heard of.
    sent: Option<u64>,
}

impl CacheReport {
    /// The splits held, when they may have changed since last sent, with
    /// the generation they are of.
    fn held(&self) -> Option<(u64, Vec<u32>)> {
        let generation = self.cache.generation();
        if self.sent == Some(generation) {
            return None;
        }
        let held = (0u32..)
            .zip(&self.keys)
            .filter(|(_, key)| key.as_ref().is_some_and(|k| self.cache.holds(k)))
            .map(|(split, _)| split)
            .collect();
        Some((generation, held))
    }
}

/// A stop request and when it came.
#[derive(Clone)]
struct StopDeadline {
    signal: tokio::sync::watch::Receiver<bool>,
    /// When the stop was requested.
    since: std::sync::Arc<std::sync::OnceLock<Instant>>,
    grace: Duration,
}

/// The outcome of one try of a request.
enum Attempt<T> {
    /// A reply, or an error that trying again cannot change.
    Done(Result<T, RemoteError>),
    /// No answer (or a 5xx) for this reason: try again.
    Retry(String),
}

impl RemoteSource {
    /// A client of the master at `base` (e.g. `http://10.0.0.5:7070`, or
    /// `https://...` with `ca_file` naming the CA that signed its certificate
    /// when the system does not trust it).
    pub fn new(
        base: &str,
        token: String,
        patience: Duration,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, RemoteError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(30));
        if let Some(path) = ca_file {
            let shown = || path.display().to_string();
            let pem = std::fs::read(path).map_err(|source| RemoteError::CaFileUnreadable {
                path: shown(),
                cause: source,
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| {
                RemoteError::CaFile {
                    path: shown(),
                    cause: source,
                }
            })?;
            if certs.is_empty() {
                return Err(RemoteError::CaFileEmpty { path: shown() });
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| RemoteError::Unreachable {
            url: base.to_string(),
            waited: Duration::ZERO,
            last: e.to_string(),
        })?;
        Ok(RemoteSource {
            client,
            base: base.trim_end_matches('/').to_string(),
            token,
            patience,
            rows: Default::default(),
            secrets: Default::default(),
            name: None,
            stop: None,
            gave_up: Default::default(),
            wait: Default::default(),
            cache: Default::default(),
        })
    }

    /// Tells the master, in heartbeats, what `cache` holds of the job's
    /// splits and what it did (the keys: `location.cache_key` of each split).
    pub fn report_cache(
        &self,
        cache: std::sync::Arc<connectors::cache::Cache>,
        keys: Vec<Option<connectors::cache::FileKey>>,
    ) {
        let mut report = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        *report = Some(CacheReport {
            cache,
            keys,
            sent: None,
        });
    }

    /// Registers workers under `name` (shown on the master's status page).
    pub fn with_name(mut self, name: String) -> Self {
        self.name = Some(name);
        self
    }

    /// A counter the worker updates with rows acknowledged, reported in heartbeats.
    pub fn rows_counter(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.rows.clone()
    }

    /// Gives up on the master once a stop was requested (SIGTERM, SIGINT)
    /// and its grace has passed: a worker whose master is unreachable still
    /// stops within `--grace`. Call from within the async runtime.
    pub fn with_stop(mut self, stop: &crate::worker::pipeline::Stop) -> Self {
        let since = std::sync::Arc::new(std::sync::OnceLock::new());
        let mut signal = stop.signal.clone();
        let recorded = since.clone();
        tokio::spawn(async move {
            if signal.wait_for(|stop| *stop).await.is_ok() {
                let _ = recorded.set(Instant::now());
            }
        });
        self.stop = Some(StopDeadline {
            signal: stop.signal.clone(),
            since,
            grace: stop.grace,
        });
        self
    }

    /// Whether a request was given up because the grace after a stop had
    /// passed (the master did not answer in time).
    pub fn gave_up_stopping(&self) -> bool {
        self.gave_up.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// When requests are given up: the stop's time plus its grace, once a
    /// stop was requested.
    fn stop_deadline(&self) -> Option<Instant> {
        let stop = self.stop.as_ref()?;
        if !*stop.signal.borrow() {
            return None;
        }
        let since = stop.since.get().copied().unwrap_or_else(Instant::now);
        Some(since + stop.grace)
    }

    /// Resolves once a stop is requested (never without one).
    async fn stop_requested(&self) {
        match &self.stop {
            Some(stop) => {
                let mut signal = stop.signal.clone();
                if signal.wait_for(|stop| *stop).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }

    /// Sends a request and reads its reply, retrying while the master is
    /// unreachable (up to the patience) when that is safe: any failure for an
    /// `idempotent` request, only a refused connection or a 503 (the master
    /// did not apply it) for the others. While it waits it says so, once a
    /// minute; after a stop it gives up when the grace has passed.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&B>,
        idempotent: bool,
    ) -> Result<T, RemoteError> {
        let url = format!("{}{}", self.base, path);
        let start = Instant::now();
        // Waits of 100 ms doubling to 2 s, each drawn between half and all
        // of that: workers that lost the master at once do not come back in
        // step. The patience bounds the whole.
        let mut waits = super::backoff::Backoff::between(
            Duration::from_millis(100),
            Duration::from_secs(2),
            None,
        );
        loop {
            let attempt = self.attempt::<B, T>(&url, path, body, idempotent, start);
            let tried = match self.stop_deadline() {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), attempt)
                    .await
                    .unwrap_or_else(|_| Attempt::Retry("no answer".to_string())),
                None => attempt.await,
            };
            let last = match tried {
                Attempt::Done(result) => {
                    if result.is_ok() {
                        self.answered();
                    }
                    return result;
                }
                Attempt::Retry(last) => last,
            };
            if self.stop_deadline().is_some_and(|d| Instant::now() >= d) {
                self.gave_up
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(RemoteError::Stopped {
                    url: self.base.clone(),
                    last,
                });
            }
            if start.elapsed() >= self.patience {
                return Err(RemoteError::Unreachable {
                    url: self.base.clone(),
                    waited: start.elapsed(),
                    last,
                });
            }
            self.waiting(&last);
            let mut pause = waits.next_wait();
            if let Some(deadline) = self.stop_deadline() {
                pause = pause.min(deadline.saturating_duration_since(Instant::now()));
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                // The grace starts: the next try is bounded by it.
                () = self.stop_requested(), if self.stop_deadline().is_none() => {}
            }
        }
    }

    /// Says that the master does not answer: when it first does not, then
    /// once a minute, for all the requests waiting on it together.
    fn waiting(&self, last: &str) {
        let mut wait = self.wait.lock().unwrap_or_else(|e| e.into_inner());
        wait.get_or_insert_with(|| crate::logging::Wait::new(format!("master {}", self.base)))
            .say(
                &format!("unreachable ({last}); retrying"),
                Some(self.patience),
            );
    }

    /// The master answered: a wait that was announced is over.
    fn answered(&self) {
        let mut wait = self.wait.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(over) = wait.take().filter(crate::logging::Wait::said) {
            let after = crate::logging::short_duration(over.waited());
            tracing::info!(target: crate::logging::PROGRESS, master = %self.base, "master {} answered again after {after}", self.base);
        }
    }

    /// One try of a request: its reply or error, or why to try again.
    async fn attempt<B: Serialize, T: DeserializeOwned>(
        &self,
        url: &str,
        path: &str,
        body: Option<&B>,
        idempotent: bool,
        start: Instant,
    ) -> Attempt<T> {
        let request = match body {
            Some(b) => self.client.post(url).json(b),
            None => self.client.get(url),
        }
        .bearer_auth(&self.token);
        match request.send().await {
            Ok(resp) => match resp.status() {
                StatusCode::UNAUTHORIZED => Attempt::Done(Err(RemoteError::Unauthorized {
                    url: self.base.clone(),
                })),
                s if s.is_success() || s == StatusCode::CONFLICT => {
                    Attempt::Done(resp.json::<T>().await.map_err(|e| RemoteError::Protocol {
                        url: self.base.clone(),
                        status: s.as_u16(),
                        body: e.to_string(),
                    }))
                }
                s if s.is_server_error()
                    && (idempotent || s == StatusCode::SERVICE_UNAVAILABLE) =>
                {
                    Attempt::Retry(format!("http {s}"))
                }
                s => {
                    let body: String = resp
                        .text()
                        .await
                        .unwrap_or_default()
                        .chars()
                        .take(300)
                        .collect();
                    Attempt::Done(Err(RemoteError::Protocol {
                        url: self.base.clone(),
                        status: s.as_u16(),
                        body,
                    }))
                }
            },
            Err(e) => {
                let chain = error_chain(&e);
                if is_certificate_error(&e) {
                    // Retrying cannot make an untrusted certificate trusted.
                    return Attempt::Done(Err(RemoteError::Certificate {
                        url: self.base.clone(),
                        cause: e,
                    }));
                }
                if !idempotent && !e.is_connect() {
                    // The master may have applied it: sending it again
                    // could apply it twice.
                    return Attempt::Done(Err(RemoteError::Unreachable {
                        url: self.base.clone(),
                        waited: start.elapsed(),
                        last: format!("{chain} (not sent again: {path} is not idempotent)"),
                    }));
                }
                Attempt::Retry(chain)
            }
        }
    }

    /// Sends a worker's operation, signed; the queue's refusal is its error.
    async fn apply<O: WorkerOperation>(&self, op: O) -> Result<O::Output, SourceError> {
        let signed = Signed {
            secret: self
                .secret(op.worker())
                .map_err(SourceError::refused(O::DOING))?,
            op,
        };
        match self
            .call::<_, Answer<O::Output>>(O::PATH, Some(&signed), O::IDEMPOTENT)
            .await
        {
            Ok(Answer::Ok(v)) => Ok(v),
            Ok(Answer::Refused(e)) => Err(SourceError::refused(O::DOING)(e)),
            Err(e) => Err(SourceError::unavailable(O::DOING)(e)),
        }
    }

    /// The secret `worker` registered with; a worker this client did not
    /// register is refused before anything is sent.
    fn secret(&self, worker: WorkerId) -> Result<WorkerSecret, QueueError> {
        let secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        secrets
            .get(&worker)
            .cloned()
            .ok_or(QueueError::WrongSecret { worker })
    }

    /// Asks the master a read ([`Get`]), again after failures as every read.
    pub async fn get<G: Get>(&self, query: &G) -> Result<G::Reply, RemoteError> {
        self.call::<(), G::Reply>(&query.path_and_query(), None, true)
            .await
    }

    /// Fetches the job spec for the worker named `name`: with the last
    /// complete checkpoint that name's trainers wrote, if any.
    pub async fn job_for(&self, name: &str) -> Result<JobSpec, RemoteError> {
        self.get(&JobQuery {
            name: Some(name.to_string()),
        })
        .await
    }

    /// Fetches the status.
    pub async fn status_reply(&self) -> Result<StatusReply, RemoteError> {
        self.get(&StatusQuery::default()).await
    }
}

/// An error with its sources, `a: b: c` (reqwest's own message hides the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// Whether a request failed on the server's certificate: a TLS error about
/// the certificate among its sources (rustls reports it inside an I/O error).
fn is_certificate_error(e: &(dyn std::error::Error + 'static)) -> bool {
    use tokio_rustls::rustls::Error as Tls;
    let mut source = Some(e);
    while let Some(e) = source {
        let tls = e.downcast_ref::<Tls>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<Tls>())
        });
        if let Some(tls) = tls {
            return matches!(
                tls,
                Tls::InvalidCertificate(_)
                    | Tls::NoCertificatesPresented
                    | Tls::InvalidCertRevocationList(_)
            );
        }
        source = e.source();
    }
    false
}

#[async_trait::async_trait]
impl TaskSource for RemoteSource {
    async fn register(&self) -> Result<WorkerId, SourceError> {
        let request = RegisterRequest {
            name: self.name.clone(),
        };
        let reply = self
            .call::<_, RegisterReply>(
                RegisterRequest::PATH,
                Some(&request),
                RegisterRequest::IDEMPOTENT,
            )
            .await
            .map_err(SourceError::unavailable(ops::Register::DOING))?;
        let mut secrets = self.secrets.lock().unwrap_or_else(|e| e.into_inner());
        secrets.insert(reply.worker, reply.secret);
        Ok(reply.worker)
    }

    async fn lease(&self, worker: WorkerId, max: usize) -> Result<LeaseReply, SourceError> {
        self.apply(ops::Lease { worker, max }).await
    }

    async fn take_ranks(
        &self,
        worker: WorkerId,
        devices: u32,
    ) -> Result<crate::queue::RanksReply, SourceError> {
        self.apply(ops::TakeRanks { worker, devices }).await
    }

    async fn heartbeat(
        &self,
        worker: WorkerId,
        held: &[AttemptId],
    ) -> Result<Vec<AttemptId>, SourceError> {
        let rows = self.rows.load(std::sync::atomic::Ordering::Relaxed);
        let (cached, cache) = {
            let report = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            match report.as_ref() {
                Some(r) => (r.held(), Some(r.cache.stats())),
                None => (None, None),
            }
        };
        let generation = cached.as_ref().map(|(g, _)| *g);
        let beat = ops::Heartbeat {
            worker,
            rows,
            held: Some(held.to_vec()),
            cached: cached.map(|(_, held)| held),
            cache,
        };
        let lost = self.apply(beat).await.map(|r| r.lost)?;
        if let Some(generation) = generation {
            let mut report = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = report.as_mut() {
                r.sent = Some(generation);
            }
        }
        Ok(lost)
    }

    async fn commit(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        offset: u64,
        ranges: Vec<(u64, u64)>,
    ) -> Result<(), SourceError> {
        let commit = ops::Commit {
            worker,
            attempt,
            offset,
            ranges,
        };
        self.apply(commit).await
    }

    async fn finish(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        rows: u64,
    ) -> Result<(), SourceError> {
        let finish = ops::Finish {
            worker,
            attempt,
            rows,
        };
        self.apply(finish).await
    }

    async fn fail(
        &self,
        worker: WorkerId,
        attempt: AttemptId,
        reason: String,
        for_good: bool,
    ) -> Result<FailOutcome, SourceError> {
        let fail = ops::Fail {
            worker,
            attempt,
            reason,
            for_good,
        };
        self.apply(fail).await
    }

    async fn declare_checkpoints(&self, worker: WorkerId) -> Result<(), SourceError> {
        self.apply(ops::Checkpoint {
            worker,
            id: None,
            pieces: Vec::new(),
            unsaved: None,
            ended: false,
        })
        .await
    }

    async fn checkpoint(
        &self,
        worker: WorkerId,
        id: String,
        pieces: Vec<crate::queue::CutPiece>,
    ) -> Result<(), SourceError> {
        self.apply(ops::Checkpoint {
            worker,
            id: Some(id),
            pieces,
            unsaved: None,
            ended: false,
        })
        .await
    }

    fn keeps_unsaved(&self) -> bool {
        true
    }

    async fn unsaved(
        &self,
        worker: WorkerId,
        pieces: Vec<crate::queue::CutPiece>,
    ) -> Result<(), SourceError> {
        self.apply(ops::Checkpoint {
            worker,
            id: None,
            pieces: Vec::new(),
            unsaved: Some(pieces),
            ended: false,
        })
        .await
    }

    async fn unsaved_at_end(
        &self,
        worker: WorkerId,
        pieces: Vec<crate::queue::CutPiece>,
    ) -> Result<(), SourceError> {
        self.apply(ops::Checkpoint {
            worker,
            id: None,
            pieces: Vec::new(),
            unsaved: Some(pieces),
            ended: true,
        })
        .await
    }

    async fn hand_back(&self, worker: WorkerId, attempt: AttemptId) -> Result<(), SourceError> {
        self.apply(ops::HandBack { worker, attempt }).await
    }

    async fn status(&self) -> Result<QueueStatus, SourceError> {
        self.status_reply()
            .await
            .map(|s| s.queue)
            .map_err(SourceError::unavailable("ask the job's status"))
    }

    async fn epoch_view(
        &self,
        epoch: crate::epoch::Epoch,
    ) -> Result<Option<crate::queue::EpochView>, SourceError> {
        self.get(&EpochQuery { epoch })
            .await
            .map_err(SourceError::unavailable(
                "ask how the epoch hands out its tasks",
            ))
    }

    async fn splits_from(&self, from: usize) -> Result<Vec<connectors::Split>, SourceError> {
        self.get(&SplitsQuery { from })
            .await
            .map_err(SourceError::unavailable("fetch the job's new splits"))
    }
}
