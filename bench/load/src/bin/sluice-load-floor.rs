//! The load benchmark's floor: a stand-in for the master that does no work.
//!
//! It answers the requests the simulated workers send (register, lease,
//! commit, finish) over HTTP/1.1 keep-alive connections with fixed answers of
//! the master's shape, after checking the job token, and keeps nothing: no
//! queue, no journal, no lock, no fsync. The load tool drives it exactly as it
//! drives `sluice master`, on the same CPUs, so its latency is what the
//! machine, the kernel's loopback TCP and the load tool cost by themselves:
//! no master can answer faster than this on the same machine.
//!
//! Started by `sluice-load` as `sluice-load-floor --listen ADDR` with the
//! token in `SLUICE_TOKEN`; runs until killed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A master stand-in that answers every worker request at once and does no work.
#[derive(Parser, Debug)]
#[command(about = "A no-op stand-in for the master: the load benchmark's floor")]
struct Args {
    /// Address to listen on.
    #[arg(long)]
    listen: String,
    /// The job token requests must carry.
    #[arg(long, env = "SLUICE_TOKEN", hide_env_values = true)]
    token: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    // A multi-threaded runtime with one worker per CPU, as `sluice master` runs.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let bearer: Arc<str> = format!("Bearer {}", args.token).into();
    let next = Arc::new(AtomicU64::new(1));
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (bearer, next) = (bearer.clone(), next.clone());
        tokio::spawn(async move {
            // A connection ends when the load tool closes it or sends garbage.
            let _ = connection(stream, &bearer, &next).await;
        });
    }
}

/// Answers the requests of one keep-alive connection, in order.
async fn connection(mut stream: TcpStream, bearer: &str, next: &AtomicU64) -> Result<()> {
    let mut input: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(512);
    loop {
        let (path, authorized, max, used) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut headers);
            if let httparse::Status::Complete(head) = request.parse(&input)? {
                let header = |name: &str| {
                    request
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| h.value)
                };
                let length = header("content-length")
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if input.len() >= head + length {
                    let authorized = header("authorization") == Some(bearer.as_bytes());
                    // Leases ask for `max` tasks; anything else has no `max`.
                    let max = serde_json::from_slice::<Max>(&input[head..head + length])
                        .map_or(1, |body| body.max.clamp(1, 1024));
                    break (
                        request.path.unwrap_or("").to_string(),
                        authorized,
                        max,
                        head + length,
                    );
                }
            }
            input.reserve(4096);
            if stream.read_buf(&mut input).await? == 0 {
                return Ok(());
            }
        };
        input.drain(..used);
        out.clear();
        if !authorized {
            respond(&mut out, "401 Unauthorized", "missing or wrong job token\n");
        } else {
            let n = next.fetch_add(1, Ordering::Relaxed);
            match path.as_str() {
                "/v1/register" => respond(
                    &mut out,
                    "200 OK",
                    &format!(r#"{{"worker":{n},"secret":"{n:032x}"}}"#),
                ),
                "/v1/lease" => {
                    let tasks: Vec<String> = (0..max)
                        .map(|i| {
                            let attempt = n * 1024 + i;
                            format!(
                                r#"{{"attempt":{attempt},"epoch":0,"split":{},"offset":0,"deadline":0}}"#,
                                attempt % 1_000_000
                            )
                        })
                        .collect();
                    let body = format!(r#"{{"ok":{{"tasks":[{}]}}}}"#, tasks.join(","));
                    respond(&mut out, "200 OK", &body)
                }
                "/v1/commit" | "/v1/finish" => respond(&mut out, "200 OK", r#"{"ok":null}"#),
                "/v1/status" | "/metrics" => respond(&mut out, "200 OK", "{}"),
                other => bail!("no route {other}"),
            }
        }
        stream.write_all(&out).await?;
    }
}

/// The one field of a lease request the floor reads.
#[derive(serde::Deserialize)]
struct Max {
    max: u64,
}

/// Writes an HTTP/1.1 answer with `body` into `out`.
fn respond(out: &mut Vec<u8>, status: &str, body: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body.as_bytes());
}
