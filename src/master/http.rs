//! The master's HTTP layer: routes, the job token check, the worker secret
//! check, and turning queue replies into JSON. Thin by design: all rules live
//! in the queue.
//!
//! The token is checked before a request body is read: an unauthorized client
//! gets 401 whatever it sent. An authorized one with a body that is not the
//! JSON expected gets 400 with a one-line reason.

use connectors::Report;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::{metrics, page};
use crate::protocol::api::*;
use crate::protocol::ops::{self, Operation, WorkerOperation};
use crate::queue::{Command, QueueError, Reply, WorkerSecret};
use crate::state::commit::GroupCommit;
use crate::state::MasterState;
use crate::wall::wall_millis;

/// An HTTP request as axum hands it over (the API's own requests are [`Request`]s).
type HttpRequest = axum::extract::Request;

/// How long an authorized client may take to send a request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Shared by every request.
#[derive(Clone)]
pub struct AppState {
    /// The master.
    pub master: Arc<Mutex<MasterState>>,
    /// Writes changes to the journal before their replies go out.
    pub commit: GroupCommit,
    /// The job token.
    pub token: Arc<String>,
}

/// The router of the master.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics))
        .route(JobQuery::PATH, get(job))
        .route(SplitsQuery::PATH, get(splits))
        .route(EpochQuery::PATH, get(epoch_view))
        .route(StatusQuery::PATH, get(status))
        .route(RegisterRequest::PATH, post(register))
        .route(ops::Lease::PATH, post(operate::<ops::Lease>))
        .route(ops::TakeRanks::PATH, post(operate::<ops::TakeRanks>))
        .route(ops::Heartbeat::PATH, post(heartbeat))
        .route(ops::Commit::PATH, post(operate::<ops::Commit>))
        .route(ops::Finish::PATH, post(operate::<ops::Finish>))
        .route(ops::Fail::PATH, post(operate::<ops::Fail>))
        .route(ops::HandBack::PATH, post(operate::<ops::HandBack>))
        .route(ops::Checkpoint::PATH, post(operate::<ops::Checkpoint>))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // One reference count per request, not one per field.
        .with_state(Arc::new(state))
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// Checks the token from `Authorization: Bearer` (or `?token=` for pages), in constant time.
fn authorized(state: &AppState, headers: &HeaderMap, query: Option<&str>) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or(query);
    match given {
        Some(t) => bool::from(t.as_bytes().ct_eq(state.token.as_bytes())),
        None => false,
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "missing or wrong job token\n",
    )
        .into_response()
}

/// Runs a command; its reply comes back once the change is durable. After a
/// journal failure nothing more is: the request is answered 503 (the worker
/// retries, and finds the restarted master), and the master stops, see
/// [`GroupCommit`].
async fn run(state: &AppState, command: Command) -> Result<Reply, Response> {
    state.commit.run(command).await.map_err(|error| {
        let reason = format!("the master stops: {}", Report(&error));
        plain(StatusCode::SERVICE_UNAVAILABLE, &reason)
    })
}

macro_rules! guard {
    ($state:expr, $headers:expr) => {
        if !authorized(&$state, $headers, None) {
            return unauthorized();
        }
    };
}

/// The token check, then the body read and parsed, then the worker it names
/// checked against its secret: the operation, or the answer for the handler.
async fn accept<O: WorkerOperation>(state: &AppState, request: HttpRequest) -> Result<O, Response> {
    if !authorized(state, request.headers(), None) {
        return Err(unauthorized());
    }
    let signed: Signed<O> = parse(request.into_body()).await?;
    if let Err(reason) = signed.op.check() {
        return Err(plain(
            StatusCode::BAD_REQUEST,
            &format!("bad request body: {reason}"),
        ));
    }
    let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
    match master
        .queue()
        .authenticate(signed.op.worker(), &signed.secret)
    {
        Ok(()) => Ok(signed.op),
        Err(error) => Err(refused(error)),
    }
}

/// Applies `op` to the queue, made now; its answer comes back once the
/// change is durable (see [`run`]).
async fn apply<O: Operation>(
    state: &AppState,
    op: O,
) -> Result<Result<O::Output, QueueError>, Response> {
    let reply = run(state, op.command(wall_millis())).await?;
    O::output(reply).ok_or_else(unexpected)
}

/// The handler of a worker's operation that needs nothing besides the queue.
async fn operate<O: WorkerOperation>(
    State(state): State<Arc<AppState>>,
    request: HttpRequest,
) -> Response {
    let op: O = match accept(&state, request).await {
        Ok(op) => op,
        Err(response) => return response,
    };
    match apply(&state, op).await {
        Ok(result) => answer(result),
        Err(response) => response,
    }
}

/// Reads a request body (bounded in size and time) and parses it.
async fn parse<T: DeserializeOwned>(body: Body) -> Result<T, Response> {
    let bytes = read_body(body).await?;
    serde_json::from_slice(&bytes).map_err(bad_body)
}

/// Reads a request body, bounded in size and time.
async fn read_body(body: Body) -> Result<axum::body::Bytes, Response> {
    let read = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await;
    match read {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => {
            let reason = format!("request body unreadable or over {MAX_BODY} bytes");
            Err(plain(StatusCode::PAYLOAD_TOO_LARGE, &reason))
        }
        Err(_) => {
            let reason = format!("request body not sent within {BODY_TIMEOUT:?}");
            Err(plain(StatusCode::REQUEST_TIMEOUT, &reason))
        }
    }
}

/// The answer to a body that is not the JSON expected.
fn bad_body(error: serde_json::Error) -> Response {
    plain(
        StatusCode::BAD_REQUEST,
        &format!("bad request body: {error}"),
    )
}

/// A plain-text answer of one line.
fn plain(status: StatusCode, reason: &str) -> Response {
    (status, format!("{}\n", reason.replace('\n', " "))).into_response()
}

/// A queue refusal as the API answers it: 409 with the reason.
fn refused(error: QueueError) -> Response {
    (StatusCode::CONFLICT, Json(Answer::<()>::Refused(error))).into_response()
}

fn answer<T: serde::Serialize>(result: Result<T, QueueError>) -> Response {
    match result {
        Ok(v) => Json(Answer::Ok(v)).into_response(),
        Err(e) => refused(e),
    }
}

/// 128 random bits from the system's source, as hex.
fn new_secret() -> Option<WorkerSecret> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(WorkerSecret::new(hex))
}

fn unexpected() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "unexpected reply from the queue\n",
    )
        .into_response()
}

async fn register(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    guard!(state, request.headers());
    let bytes = match read_body(request.into_body()).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    // The body is optional: older workers send `null`, or nothing.
    let request: RegisterRequest = if bytes.trim_ascii().is_empty() {
        RegisterRequest::default()
    } else {
        match serde_json::from_slice::<Option<RegisterRequest>>(&bytes) {
            Ok(request) => request.unwrap_or_default(),
            Err(error) => return bad_body(error),
        }
    };
    let Some(secret) = new_secret() else {
        let reason = "no random source for a worker secret";
        return plain(StatusCode::INTERNAL_SERVER_ERROR, reason);
    };
    let name = request.name.as_deref().and_then(worker_name);
    let register = ops::Register {
        secret: Some(secret.clone()),
        name: name.clone(),
    };
    match apply(&state, register).await {
        Ok(Ok(worker)) => {
            tracing::info!(%worker, name = name.as_deref().unwrap_or(""), "worker registered");
            state
                .master
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .saw_worker(worker, 0, std::time::Instant::now());
            Json(RegisterReply { worker, secret }).into_response()
        }
        Ok(Err(refusal)) => refused(refusal),
        Err(response) => response,
    }
}

/// A heartbeat: besides renewing the worker's leases, the rows it reports
/// go to the status page, and leases it does not hold are taken back.
async fn heartbeat(State(state): State<Arc<AppState>>, request: HttpRequest) -> Response {
    let beat: ops::Heartbeat = match accept(&state, request).await {
        Ok(beat) => beat,
        Err(response) => return response,
    };
    let (worker, rows, held, cache) = (beat.worker, beat.rows, beat.held.clone(), beat.cache);
    let result = match apply(&state, beat).await {
        Ok(result) => result,
        Err(response) => return response,
    };
    if result.is_ok() {
        {
            let mut master = state.master.lock().unwrap_or_else(|e| e.into_inner());
            master.saw_worker(worker, rows, std::time::Instant::now());
            if let Some(cache) = cache {
                master.saw_cache(worker, cache);
            }
        }
        if let Some(held) = &held {
            take_back_unheld(&state, worker, held).await;
        }
    }
    answer(result)
}

/// Leases the queue granted `worker` that it does not hold: their replies
/// never reached it (a master killed after journaling, before answering).
/// They go back to the queue instead of being kept alive by its heartbeats.
async fn take_back_unheld(
    state: &AppState,
    worker: crate::queue::WorkerId,
    held: &[crate::queue::AttemptId],
) {
    let zombies: Vec<crate::queue::AttemptId> = state
        .master
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .queue()
        .leases_of(worker)
        .filter(|attempt| !held.contains(attempt))
        .collect();
    for attempt in zombies {
        tracing::warn!(%attempt, %worker, "lease never reached its worker; back to the queue");
        let reason = format!("lease reply never reached worker {worker}");
        let fail = ops::Fail {
            worker,
            attempt,
            reason,
            for_good: false,
        };
        apply(state, fail).await.ok();
    }
}

async fn job(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<JobQuery>,
) -> Response {
    guard!(state, &headers);
    let (spec, queue, resume) = {
        let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
        let resume = query
            .name
            .as_deref()
            .and_then(|name| master.queue().checkpoint_of(name.trim()))
            .map(str::to_string);
        (master.spec.clone(), master.queue().config().clone(), resume)
    };
    let mut spec = spec.as_ref().clone();
    spec.lease_timeout_ms = Some(queue.lease_timeout_ms);
    if let Some(global) = &mut spec.global {
        // The world as it is now (a master resumed with another --world-size).
        global.world = queue.world;
        global.lanes = queue.lanes;
    }
    spec.resume_checkpoint = resume;
    Json(spec).into_response()
}

async fn epoch_view(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<EpochQuery>,
) -> Response {
    guard!(state, &headers);
    let view = {
        let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
        master.queue().epoch_view(query.epoch)
    };
    Json(view).into_response()
}

async fn splits(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<SplitsQuery>,
) -> Response {
    guard!(state, &headers);
    let splits = {
        let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
        master.splits_from(query.from)
    };
    Json(splits).into_response()
}

/// The sources of a mixed job with their rows committed.
fn sources_of(master: &MasterState) -> Vec<crate::protocol::api::SourceStatus> {
    let names = &master.spec.plan.source_names;
    if names.is_empty() {
        return Vec::new();
    }
    let rows = master.queue().rows_by_source();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| crate::protocol::api::SourceStatus {
            name: name.clone(),
            rows: rows.get(i).copied().unwrap_or(0),
        })
        .collect()
}

/// The status as JSON (also used by the page and `sluice status`).
pub fn status_of(master: &MasterState) -> StatusReply {
    let queue = master.queue().status();
    let failed = queue
        .failures
        .iter()
        .map(|f| FailedTaskStatus {
            file: master
                .spec
                .splits
                .get(f.split as usize)
                .map(|s| {
                    format!(
                        "{}/{}",
                        master.spec.url.trim_end_matches('/'),
                        relative(&master.spec.url, &s.path)
                    )
                })
                .unwrap_or_default(),
            epoch: f.epoch,
            reason: f.reason.clone(),
        })
        .collect();
    // The clocks are read here, at the edge: the state is handed the time.
    let now = std::time::Instant::now();
    let mut workers: Vec<WorkerStatus> = master
        .live_workers(now)
        .map(|(id, w)| WorkerStatus {
            worker: id,
            name: master
                .queue()
                .worker_name(id)
                .unwrap_or_default()
                .to_string(),
            rows: w.rows,
            rows_per_second: w.rate,
            seconds_since_heartbeat: now.saturating_duration_since(w.last).as_secs_f64(),
            ranks: master.queue().ranks_of(id),
        })
        .collect();
    workers.sort_by_key(|w| w.worker);
    StatusReply {
        url: master.spec.url.clone(),
        rows_committed: queue.rows_committed,
        rows_done: queue.rows_done,
        rows_total: master.rows_total(),
        workers_departed: queue.workers.saturating_sub(workers.len()),
        eta_seconds: master.eta(now).map(|d| d.as_secs_f64()),
        queue,
        workers,
        failed,
        follow: master.follow_status(wall_millis()),
        cache: master.cache_stats(),
        sources: sources_of(master),
    }
}

/// The part of a store path below the dataset URL's path, for display.
fn relative(url: &str, path: &str) -> String {
    let root = url
        .split_once("://")
        .map(|(_, rest)| rest.split_once('/').map(|(_, p)| p).unwrap_or(""))
        .unwrap_or(url)
        .trim_matches('/');
    path.strip_prefix(root)
        .unwrap_or(path)
        .trim_start_matches('/')
        .to_string()
}

async fn status(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<StatusQuery>,
) -> Response {
    if !authorized(&state, &headers, q.token.as_deref()) {
        return unauthorized();
    }
    let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
    let reply: <StatusQuery as Get>::Reply = status_of(&master);
    Json(reply).into_response()
}

async fn status_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&state, &headers, q.token.as_deref()) {
        // Still 401 and nothing of the job, but a person learns how to open
        // it (the token given, if any, is never shown back).
        let given = q.token.is_some() || headers.contains_key(header::AUTHORIZATION);
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Html(page::how_to_open(given)),
        )
            .into_response();
    }
    let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
    Html(page::render(&status_of(&master), &master.history)).into_response()
}

async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<TokenQuery>,
) -> Response {
    if !authorized(&state, &headers, q.token.as_deref()) {
        return unauthorized();
    }
    let master = state.master.lock().unwrap_or_else(|e| e.into_inner());
    let snapshot = metrics::Figures {
        status: status_of(&master),
        requests: master.requests,
        journaled: master.journaled,
        timings: Some(state.commit.timings()),
    };
    drop(master);
    match snapshot.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode /metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
