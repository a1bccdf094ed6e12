//! `/metrics`: a job's figures in the OpenMetrics text format, encoded by
//! `prometheus-client` from a snapshot of the master's status at each scrape.

use std::fmt::Write;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::protocol::api::{StatusReply, WorkerStatus};
use crate::state::timing::Timings;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What one scrape shows: the status, the master's request and journal
/// counts, and where its requests' time goes.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The job's status, as the page and `sluice status` show it.
    pub status: StatusReply,
    /// Queue requests served.
    pub requests: u64,
    /// Commands journaled.
    pub journaled: u64,
    /// The group commit's timing histograms (none for a queue without one).
    pub timings: Option<Arc<Timings>>,
}

impl Figures {
    /// The exposition text.
    pub fn encode(self) -> Result<String, std::fmt::Error> {
        encode_collector(self)
    }
}

/// The exposition text of one collector.
pub fn encode_collector(collector: impl Collector) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// A label value with the escapes the text formats ask for (`\\`, `\"`,
/// `\n`): prometheus-client writes label values as they are, and a worker's
/// `--name` is the user's to choose.
struct Escaped<'a>(&'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

fn gauge<V>(e: &mut DescriptorEncoder, name: &str, help: &str, value: V) -> std::fmt::Result
where
    ConstGauge<V>: EncodeMetric,
{
    let metric = ConstGauge::new(value);
    metric.encode(e.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// A counter: the exposition names its sample `NAME_total`.
fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> std::fmt::Result {
    let metric = ConstCounter::new(value);
    metric.encode(e.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// A gauge per live worker, labelled with its id and name.
fn per_worker<V>(
    e: &mut DescriptorEncoder,
    workers: &[WorkerStatus],
    name: &str,
    help: &str,
    value: impl Fn(&WorkerStatus) -> V,
) -> std::fmt::Result
where
    ConstGauge<V>: EncodeMetric,
{
    let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for w in workers {
        let id = w.worker.to_string();
        let labels = [("worker", Escaped(&id)), ("name", Escaped(&w.name))];
        ConstGauge::new(value(w)).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn count(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl Collector for Figures {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        self.encode_queue(&mut e)?;
        encode_filter(&mut e)?;
        self.encode_rows(&mut e)?;
        self.encode_workers(&mut e)?;
        self.encode_service(&mut e)?;
        self.encode_follow(&mut e)?;
        match &self.timings {
            Some(timings) => timings.encode(&mut e),
            None => Ok(()),
        }
    }
}

impl Figures {
    /// The queue's figures: the epoch, tasks by state, tasks and rows done.
    fn encode_queue(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.status;
        let q = &s.queue;
        gauge(
            e,
            "sluice_epoch",
            "Current epoch (1-based).",
            count(q.epoch.number()),
        )?;
        gauge(e, "sluice_epochs", "Epochs in the job.", count(q.epochs))?;
        let mut tasks = e.encode_descriptor(
            "sluice_tasks",
            "Tasks of the current epoch by state.",
            None,
            MetricType::Gauge,
        )?;
        for (state, n) in [
            ("todo", q.todo),
            ("leased", q.leased),
            ("done", q.done),
            ("failed", q.failed),
        ] {
            ConstGauge::new(count(n)).encode(tasks.encode_family(&[("state", state)])?)?;
        }
        counter(
            e,
            "sluice_tasks_done",
            "Tasks done over all epochs.",
            q.tasks_done,
        )?;
        counter(
            e,
            "sluice_rows_committed",
            "Rows acknowledged by trainers and durably committed, over all epochs.",
            s.rows_committed,
        )?;
        counter(
            e,
            "sluice_rows_done",
            "Rows of tasks done, over all epochs.",
            s.rows_done,
        )?;
        Ok(())
    }

    /// Rows per source of a mixed job, and the rows the whole job serves.
    fn encode_rows(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.status;
        if !s.sources.is_empty() {
            let mut family = e.encode_descriptor(
                "sluice_source_rows",
                "Rows of each source of a mixed job committed, over all epochs (with --epoch-rows, rows an epoch passed over too).",
                None,
                MetricType::Gauge,
            )?;
            for source in &s.sources {
                let labels = [("source", Escaped(&source.name))];
                ConstGauge::new(count(source.rows)).encode(family.encode_family(&labels)?)?;
            }
        }
        if let Some(total) = s.rows_total {
            gauge(
                e,
                "sluice_job_rows",
                "Rows the whole job serves: the splits' rows times the epochs.",
                count(total),
            )?;
        }
        Ok(())
    }

    /// The workers: live and departed, their caches, and each live one's
    /// rows, pace and last heartbeat.
    fn encode_workers(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.status;
        gauge(
            e,
            "sluice_workers",
            "Live workers (heard from within the lease timeout).",
            count(s.workers.len()),
        )?;
        gauge(
            e,
            "sluice_workers_departed",
            "Workers registered that are no longer live.",
            count(s.workers_departed),
        )?;
        if let Some(cache) = &s.cache {
            for (name, help, value) in [
                (
                    "sluice_cache_hit_bytes",
                    "Bytes the workers' caches served (--cache), over the job.",
                    cache.hit_bytes,
                ),
                (
                    "sluice_cache_fetched_bytes",
                    "Bytes the workers fetched from the store through their caches, over the job.",
                    cache.fetched_bytes,
                ),
                (
                    "sluice_cache_bytes",
                    "Bytes the workers' cache directories hold.",
                    cache.bytes,
                ),
            ] {
                gauge(e, name, help, count(value))?;
            }
        }
        per_worker(
            e,
            &s.workers,
            "sluice_worker_rows",
            "Rows a live worker's trainers acknowledged, as its last heartbeat reported them.",
            |w| count(w.rows),
        )?;
        per_worker(
            e,
            &s.workers,
            "sluice_worker_rows_per_second",
            "A live worker's rows per second, from its heartbeats.",
            |w| w.rows_per_second,
        )?;
        per_worker(
            e,
            &s.workers,
            "sluice_worker_seconds_since_heartbeat",
            "Seconds since a live worker's last heartbeat.",
            |w| w.seconds_since_heartbeat,
        )?;
        Ok(())
    }

    /// The master's own work: requests, journal records, whether the job
    /// is over and its ETA.
    fn encode_service(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let s = &self.status;
        let q = &s.queue;
        counter(
            e,
            "sluice_requests",
            "Queue requests served.",
            self.requests,
        )?;
        counter(
            e,
            "sluice_journal_records",
            "Commands journaled.",
            self.journaled,
        )?;
        gauge(
            e,
            "sluice_job_over",
            "1 once every epoch is finished.",
            i64::from(q.job_over),
        )?;
        if let Some(eta) = s.eta_seconds {
            gauge(
                e,
                "sluice_eta_seconds",
                "Seconds the job has left at the pace since the master started (its log's ETA; 0 once the job is over, absent before a row was committed).",
                eta,
            )?;
        }
        Ok(())
    }

    /// A followed job's lag, steps and whether it is open.
    fn encode_follow(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        if let Some(f) = &self.status.follow {
            gauge(
                e,
                "sluice_follow_lag_seconds",
                "A followed job: seconds since the oldest step taken from the source and not yet wholly trained was seen (0 when all is trained).",
                f.lag_seconds,
            )?;
            gauge(
                e,
                "sluice_follow_lag_rows",
                "A followed job: rows taken from the source and not yet trained.",
                count(f.lag_rows),
            )?;
            counter(
                e,
                "sluice_follow_steps",
                "A followed job: steps taken from the source (sink batches, table versions, partition sets).",
                f.steps as u64,
            )?;
            gauge(
                e,
                "sluice_follow_open",
                "A followed job: 1 while it takes what its source commits.",
                i64::from(f.open),
            )?;
        }
        Ok(())
    }
}

/// What `--filter` skipped in this process: planning (the master's) and,
/// for `train`, reading; nothing while it skipped nothing.
fn encode_filter(e: &mut DescriptorEncoder) -> std::fmt::Result {
    let f = connectors::row_filter::filter_counts();
    if f != connectors::row_filter::FilterCounts::default() {
        counter(
            e,
            "sluice_filter_row_groups_pruned",
            "Parquet row groups --filter skipped on their statistics in this process.",
            f.row_groups_pruned,
        )?;
        counter(
            e,
            "sluice_filter_files_pruned",
            "Files none of whose row groups may hold a row --filter keeps: never read.",
            f.files_pruned,
        )?;
        counter(
            e,
            "sluice_filter_rows_dropped",
            "Rows read in this process and dropped by --filter row by row.",
            f.rows_filtered,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::page::tests::status;

    fn text(rows_total: Option<u64>, name: &str) -> String {
        Figures {
            status: status(rows_total, name),
            requests: 10,
            journaled: 5,
            timings: None,
        }
        .encode()
        .expect("encode")
    }

    #[test]
    fn metrics_carry_the_queues_rows_and_escaped_worker_names() {
        let text = text(Some(4000), "node \"7\"\\a\nb");
        for line in [
            "sluice_rows_committed_total 1500",
            r#"sluice_source_rows{source="clicks"} 700"#,
            "sluice_rows_done_total 1000",
            "sluice_job_rows 4000",
            "sluice_workers 1",
            "sluice_workers_departed 2",
            "sluice_eta_seconds 725.0",
            "sluice_tasks{state=\"todo\"} 4",
            "sluice_requests_total 10",
            "sluice_journal_records_total 5",
            "sluice_cache_hit_bytes 300",
            "sluice_cache_fetched_bytes 200",
            "sluice_cache_bytes 100",
            r#"sluice_worker_rows{worker="3",name="node \"7\"\\a\nb"} 1200"#,
            r#"sluice_worker_rows_per_second{worker="3",name="node \"7\"\\a\nb"} 250.0"#,
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
        let unknown = super::tests::text(None, "w");
        assert!(!unknown.contains("sluice_job_rows "), "{unknown}");
    }
}
