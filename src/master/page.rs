//! What people and Prometheus see of a job: the status page and `/metrics`.

use std::collections::VecDeque;
use std::fmt::Write;

use super::api::StatusReply;

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The status page: refreshes itself every 2 seconds.
pub fn render(s: &StatusReply, history: &VecDeque<f64>) -> String {
    let q = &s.queue;
    let mut html = String::new();
    let _ = write!(
        html,
        r#"<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>sluice: {url}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}
td,th{{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}}th{{background:#f4f4f4}}
.big{{font-size:1.4em}} .over{{color:#070}} .fail{{color:#b00}}</style></head><body>
<h1>sluice job</h1><p class="big">{url}</p>
<p id="state" class="big {cls}">{state}</p>
<table><tr><th>epoch</th><th>todo</th><th>leased</th><th>done</th><th>failed</th><th>tasks done (all epochs)</th><th>rows acknowledged</th></tr>
<tr><td id="epoch">{epoch} / {epochs}</td><td id="todo">{todo}</td><td id="leased">{leased}</td><td id="done">{done}</td><td id="failed">{failed}</td><td id="tasks-done">{tasks_done}</td><td id="rows">{rows}</td></tr></table>
"#,
        url = esc(&s.url),
        cls = if q.job_over { "over" } else { "" },
        state = if q.job_over { "job over" } else { "running" },
        epoch = q.epoch + 1,
        epochs = q.epochs,
        todo = q.todo,
        leased = q.leased,
        done = q.done,
        failed = q.failed,
        tasks_done = q.tasks_done,
        rows = s.rows,
    );
    html.push_str("<h2>rows/s</h2>");
    html.push_str(&chart(history));
    html.push_str("<h2>workers</h2><table><tr><th>worker</th><th>rows</th><th>rows/s</th><th>last heartbeat</th></tr>");
    for w in &s.workers {
        let _ = write!(
            html,
            "<tr class=\"worker\"><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.1}s ago</td></tr>",
            w.worker, w.rows, w.rows_per_second, w.seconds_since_heartbeat
        );
    }
    html.push_str("</table><h2>failures</h2>");
    if s.failed.is_empty() {
        html.push_str("<p>none</p>");
    } else {
        html.push_str("<table><tr><th>file</th><th>epoch</th><th>reason</th></tr>");
        for f in &s.failed {
            let _ = write!(
                html,
                "<tr class=\"fail\"><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&f.file),
                f.epoch + 1,
                esc(&f.reason)
            );
        }
        html.push_str("</table>");
    }
    html.push_str("</body></html>\n");
    html
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

/// Prometheus text exposition.
pub fn metrics(s: &StatusReply, requests: u64, journaled: u64) -> String {
    let q = &s.queue;
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, kind: &str, lines: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in lines {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    gauge(
        "sluice_epoch",
        "Current epoch (1-based).",
        "gauge",
        vec![(String::new(), (q.epoch + 1).to_string())],
    );
    gauge(
        "sluice_epochs",
        "Epochs in the job.",
        "gauge",
        vec![(String::new(), q.epochs.to_string())],
    );
    gauge(
        "sluice_tasks",
        "Tasks of the current epoch by state.",
        "gauge",
        [
            ("todo", q.todo),
            ("leased", q.leased),
            ("done", q.done),
            ("failed", q.failed),
        ]
        .iter()
        .map(|(k, v)| (format!("{{state=\"{k}\"}}"), v.to_string()))
        .collect(),
    );
    gauge(
        "sluice_tasks_done_total",
        "Tasks done over all epochs.",
        "counter",
        vec![(String::new(), q.tasks_done.to_string())],
    );
    gauge(
        "sluice_rows_total",
        "Rows acknowledged by trainers.",
        "counter",
        vec![(String::new(), s.rows.to_string())],
    );
    gauge(
        "sluice_workers",
        "Workers registered.",
        "gauge",
        vec![(String::new(), s.workers.len().to_string())],
    );
    gauge(
        "sluice_requests_total",
        "Queue requests served.",
        "counter",
        vec![(String::new(), requests.to_string())],
    );
    gauge(
        "sluice_journal_records_total",
        "Commands journaled.",
        "counter",
        vec![(String::new(), journaled.to_string())],
    );
    gauge(
        "sluice_job_over",
        "1 once every epoch is finished.",
        "gauge",
        vec![(String::new(), u8::from(q.job_over).to_string())],
    );
    out
}
