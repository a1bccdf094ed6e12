//! What people see of a job: the status page.

use std::collections::VecDeque;
use std::fmt::Write;

use crate::protocol::api::StatusReply;
use crate::protocol::follow::FollowStatus;

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The status page: refreshes itself every 2 seconds.
pub fn render(s: &StatusReply, history: &VecDeque<f64>) -> String {
    let mut html = String::new();
    progress(&mut html, s);
    if let Some(f) = &s.follow {
        following(&mut html, f);
    }
    html.push_str("<h2>committed rows/s</h2>");
    html.push_str(&chart(history));
    workers(&mut html, s);
    failures(&mut html, s);
    html.push_str("</body></html>\n");
    html
}

/// The page's head, and the job's state, tasks and rows.
fn progress(html: &mut String, s: &StatusReply) {
    let q = &s.queue;
    let _ = write!(
        html,
        r#"<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>sluice: {url}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}
td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}}th{{background:#f4f4f4}}
.big{{font-size:1.4em}} .over{{color:#070}} .fail{{color:#b00}}</style></head><body>
<h1>sluice job</h1><p class="big">{url}</p>
<p id="state" class="big {cls}">{state}</p>
<table><tr><th>epoch</th><th>todo</th><th>leased</th><th>done</th><th>failed</th><th>tasks done (all epochs)</th></tr>
<tr><td id="epoch">{epoch} / {epochs}</td><td id="todo">{todo}</td><td id="leased">{leased}</td><td id="done">{done}</td><td id="failed">{failed}</td><td id="tasks-done">{tasks_done}</td></tr></table>
<h2>rows (all epochs)</h2>
<table><tr><th>committed</th><th>in tasks done</th><th>in the job</th><th>progress</th><th>time left</th></tr>
<tr><td id="rows-committed">{committed}</td><td id="rows-done">{rows_done}</td><td id="rows-total">{rows_total}</td><td id="rows-percent">{percent}</td><td id="eta">{eta}</td></tr></table>
"#,
        url = esc(&s.url),
        cls = if q.job_over { "over" } else { "" },
        state = if q.job_over { "job over" } else { "running" },
        epoch = q.epoch,
        epochs = q.epochs,
        todo = q.todo,
        leased = q.leased,
        done = q.done,
        failed = q.failed,
        tasks_done = q.tasks_done,
        committed = s.rows_committed,
        rows_done = s.rows_done,
        rows_total = s
            .rows_total
            .map_or_else(|| "unknown".to_string(), |t| t.to_string()),
        percent = match s.rows_total {
            Some(total) if total > 0 => {
                format!("{:.1}%", s.rows_committed as f64 * 100.0 / total as f64)
            }
            _ => "-".to_string(),
        },
        eta = eta_text(s.eta_seconds),
    );
}

/// How far a followed job is behind its source.
fn following(html: &mut String, f: &FollowStatus) {
    let _ = write!(
        html,
        "<h2>following the source</h2><table><tr><th>newest taken</th><th>newest trained</th><th>lag (rows)</th><th>lag (seconds)</th><th>steps</th><th>state</th></tr>\
<tr><td id=\"follow-seen\">{}</td><td id=\"follow-trained\">{}</td><td id=\"follow-lag-rows\">{}</td><td id=\"follow-lag-seconds\">{:.1}</td><td id=\"follow-steps\">{}</td><td id=\"follow-state\">{}</td></tr></table>",
        esc(&f.seen),
        esc(f.trained.as_deref().unwrap_or("-")),
        f.lag_rows,
        f.lag_seconds,
        f.steps,
        if f.open { "following" } else { "closed: training what was taken" }
    );
}

/// The workers: how many are live and departed, and what each acknowledged.
fn workers(html: &mut String, s: &StatusReply) {
    let _ = write!(
        html,
        "<h2>workers</h2><p><span id=\"workers-live\">{}</span> live, <span id=\"workers-departed\">{}</span> departed (no heartbeat within the lease timeout)</p>",
        s.workers.len(),
        s.workers_departed
    );
    html.push_str("<table><tr><th>worker</th><th>name</th><th>ranks</th><th>rows it acknowledged</th><th>rows/s</th><th>last heartbeat</th></tr>");
    for w in &s.workers {
        let ranks = w.ranks.as_deref().map_or("–".to_string(), rank_runs);
        let _ = write!(
            html,
            "<tr class=\"worker\"><td>{}</td><td class=\"name\">{}</td><td class=\"ranks\">{ranks}</td><td>{}</td><td>{:.0}</td><td>{:.1}s ago</td></tr>",
            w.worker,
            esc(&w.name),
            w.rows,
            w.rows_per_second,
            w.seconds_since_heartbeat
        );
    }
    html.push_str("</table>");
}

/// The failed tasks: their files, epochs and reasons.
/// Ascending ranks as runs: `0–2, 5`.
fn rank_runs(ranks: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &rank in ranks {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(rank) => *last = rank,
            _ => runs.push((rank, rank)),
        }
    }
    let run = |&(first, last): &(u32, u32)| {
        if first == last {
            first.to_string()
        } else {
            format!("{first}–{last}")
        }
    };
    runs.iter().map(run).collect::<Vec<_>>().join(", ")
}

fn failures(html: &mut String, s: &StatusReply) {
    html.push_str("<h2>failures</h2>");
    if s.failed.is_empty() {
        html.push_str("<p>none</p>");
    } else {
        html.push_str("<table><tr><th>file</th><th>epoch</th><th>reason</th></tr>");
        for f in &s.failed {
            let _ = write!(
                html,
                "<tr class=\"fail\"><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&f.file),
                f.epoch,
                esc(&f.reason)
            );
        }
        html.push_str("</table>");
    }
}

/// The page a request without the job's token gets instead of the status
/// (answered `401`): it shows nothing of the job, only how to open the
/// page. `given`: a token was sent, and it was not the job's.
pub fn how_to_open(given: bool) -> String {
    let why = if given {
        "The token given is not this job's."
    } else {
        "No token was given."
    };
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>sluice: job token needed</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}code{{background:#f4f4f4;padding:.1em .3em}}</style></head><body>
<h1>sluice job</h1><p id="refused">missing or wrong job token: {why}</p>
<p>This status page shows a job only to those who hold its token, the one the master was started with
(<code>SLUICE_TOKEN</code>, or the file given to <code>--token-file</code>).</p>
<p>Open it as <code>/?token=TOKEN</code>, for example <code>http://HOST:PORT/?token=$(cat TOKEN_FILE)</code>,
or send the header <code>Authorization: Bearer TOKEN</code>. <code>sluice status --master URL</code> shows the same
figures in a terminal.</p>
</body></html>
"#
    )
}

/// The time left for people (`12m 5s`), `-` while it is unknown.
pub fn eta_text(seconds: Option<f64>) -> String {
    match seconds.and_then(|s| std::time::Duration::try_from_secs_f64(s).ok()) {
        Some(left) => crate::logging::short_duration(left),
        None => "-".to_string(),
    }
}

/// A small SVG line chart of rows/s samples.
fn chart(history: &VecDeque<f64>) -> String {
    let (w, h) = (480.0, 100.0);
    let max = history.iter().cloned().fold(1.0_f64, f64::max);
    let n = history.len().max(2) as f64;
    let points: Vec<String> = history
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * w / (n - 1.0),
                h - v / max * (h - 4.0)
            )
        })
        .collect();
    format!(
        r##"<svg id="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" style="background:#fafafa;border:1px solid #ddd"><polyline fill="none" stroke="#36c" stroke-width="2" points="{}"/><text x="4" y="14" font-size="12">max {:.0} rows/s</text></svg>"##,
        points.join(" "),
        max
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::api::WorkerStatus;
    use crate::queue::{Queue, QueueConfig, WorkerId};

    /// A job's status with one worker named `name`, for the page's and
    /// `/metrics`' tests.
    pub(crate) fn status(rows_total: Option<u64>, name: &str) -> StatusReply {
        let queue = Queue::new(4, QueueConfig::default())
            .expect("queue")
            .status();
        StatusReply {
            follow: None,
            url: "file:///data/<clicks>".into(),
            queue,
            rows_committed: 1500,
            rows_done: 1000,
            rows_total,
            workers: vec![WorkerStatus {
                worker: WorkerId(3),
                name: name.into(),
                rows: 1200,
                rows_per_second: 250.0,
                seconds_since_heartbeat: 0.4,
                ranks: Some(vec![2, 3, 5]),
            }],
            workers_departed: 2,
            eta_seconds: Some(725.0),
            failed: Vec::new(),
            cache: Some(connectors::cache::CacheStats {
                hit_bytes: 300,
                fetched_bytes: 200,
                bytes: 100,
            }),
            sources: vec![crate::protocol::api::SourceStatus {
                name: "clicks".into(),
                rows: 700,
            }],
        }
    }

    #[test]
    fn the_page_shows_the_queues_rows_and_escapes_names() {
        let html = render(&status(Some(4000), "<b>w</b>"), &VecDeque::new());
        for part in [
            r#"<td id="rows-committed">1500</td>"#,
            r#"<td id="rows-done">1000</td>"#,
            r#"<td id="rows-total">4000</td>"#,
            r#"<td id="rows-percent">37.5%</td>"#,
            r#"<span id="workers-departed">2</span>"#,
            r#"<td id="eta">12m 5s</td>"#,
            "&lt;b&gt;w&lt;/b&gt;",
            "file:///data/&lt;clicks&gt;",
            r#"<td class="ranks">2–3, 5</td>"#,
        ] {
            assert!(html.contains(part), "no `{part}` in:\n{html}");
        }
        let unknown = render(&status(None, "w"), &VecDeque::new());
        assert!(unknown.contains(r#"<td id="rows-total">unknown</td>"#));
    }

    #[test]
    fn the_page_without_a_token_says_how_to_open_it_and_nothing_more() {
        for given in [false, true] {
            let html = how_to_open(given);
            assert!(
                html.contains("/?token=") && html.contains("--token-file"),
                "{html}"
            );
            assert!(!html.contains("rows-committed"), "{html}");
        }
    }
}
