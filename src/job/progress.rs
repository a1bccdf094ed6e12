//! What the progress lines of `sluice train` say, counted from samples of
//! the job (its queue and the rows its trainers acknowledged) with no clock
//! or I/O of its own: an epoch's line counts that epoch's rows only (rows of
//! the next one, leased ahead with `--prefetch`, are the next line's), a
//! followed job's lines say what was taken and what was trained, and rows
//! per second are over the last interval.

use std::time::{Duration, Instant};

use crate::epoch::Epoch;
use crate::logging::{FollowLine, ProgressLine};

/// Where the job stands at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// The queue's current epoch (0-based).
    pub epoch: Epoch,
    /// Epochs in the job.
    pub epochs: u32,
    /// Every epoch is over.
    pub job_over: bool,
    /// Tasks done over all epochs (a resumed job's earlier runs included).
    pub tasks_done: u64,
    /// Tasks per epoch now (a followed job's grow with its source).
    pub splits: u64,
    /// Rows committed over all epochs (earlier runs included).
    pub rows_committed: u64,
    /// Rows this process's trainers acknowledged, by epoch.
    pub epoch_rows: Vec<u64>,
    /// A followed job's intake.
    pub follow: Option<Intake>,
}

impl Sample {
    /// Rows this process's trainers acknowledged, all epochs.
    pub fn rows(&self) -> u64 {
        self.epoch_rows.iter().sum()
    }
}

/// What a followed job took from its source and what waits to be trained.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Intake {
    /// Rows of the tasks taken, where known.
    pub rows_taken: u64,
    /// Rows taken and not trained yet.
    pub lag_rows: u64,
    /// Seconds since the oldest data not trained yet was seen.
    pub lag_seconds: f64,
}

/// A line of progress.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// An epoch's end, or where an epoch stands.
    Epoch(ProgressLine),
    /// Where a followed job stands.
    Following(FollowLine),
}

impl Line {
    /// Writes the line.
    pub fn log(&self) {
        match self {
            Line::Epoch(line) => line.log(),
            Line::Following(line) => line.log(),
        }
    }
}

/// The counters between two samples: where the last line left them.
#[derive(Debug)]
pub struct Tally {
    /// Tasks of the whole job (splits times epochs) when it does not follow.
    tasks: u64,
    /// Rows of the whole job when they are known and it does not follow.
    rows_total: Option<u64>,
    /// The first sample: what earlier runs did.
    first: Sample,
    started: Instant,
    /// The epoch the last line was about, and when it began.
    epoch: Epoch,
    epoch_began: Instant,
    /// Rows acknowledged at the last periodic line, and when.
    rows_then: u64,
    then: Instant,
}

impl Tally {
    /// Counters from `first`, sampled `now`; `rows_total` are the rows of
    /// every epoch where known (none for a followed job).
    pub fn new(first: Sample, rows_total: Option<u64>, now: Instant) -> Tally {
        Tally {
            tasks: first.splits.saturating_mul(u64::from(first.epochs)),
            rows_total,
            epoch: first.epoch,
            epoch_began: now,
            rows_then: first.rows(),
            then: now,
            started: now,
            first,
        }
    }

    /// The lines `sample`, taken `now`, calls for: one for each epoch that
    /// ended since the last sample (not the last epoch: the summary says how
    /// it ended), and one periodic line where `periodic` (`--log-every` is
    /// due). A followed job has no epochs: its periodic line is a
    /// [`FollowLine`].
    pub fn lines(&mut self, sample: &Sample, now: Instant, periodic: bool) -> Vec<Line> {
        let mut lines = Vec::new();
        if sample.follow.is_none() {
            let ended = if sample.job_over {
                sample.epoch
            } else {
                sample.epoch.max(self.epoch)
            };
            while self.epoch < ended {
                lines.push(Line::Epoch(self.epoch_line(sample, now)));
                self.epoch = self.epoch.next();
                self.epoch_began = now;
            }
        }
        if !periodic || sample.job_over {
            return lines;
        }
        let seconds = now.saturating_duration_since(self.then).as_secs_f64();
        let rows = sample.rows();
        let rate = per_second(rows.saturating_sub(self.rows_then), seconds);
        self.rows_then = rows;
        self.then = now;
        lines.push(match sample.follow {
            Some(intake) => Line::Following(follow_line(sample, intake, rate)),
            None => Line::Epoch(self.periodic_line(sample, now, rate)),
        });
        lines
    }

    /// The line of epoch `self.epoch`, just over: its rows only.
    fn epoch_line(&self, sample: &Sample, now: Instant) -> ProgressLine {
        let rows = sample
            .epoch_rows
            .get(self.epoch.index())
            .copied()
            .unwrap_or(0);
        let seconds = now
            .saturating_duration_since(self.epoch_began)
            .as_secs_f64();
        ProgressLine {
            epoch: self.epoch,
            epochs: sample.epochs,
            epoch_done: true,
            rows,
            rows_per_second: per_second(rows, seconds),
            tasks_done: sample.tasks_done.min(self.tasks),
            tasks: self.tasks,
            eta: self.eta(sample, now),
            workers: None,
            leases: None,
        }
    }

    /// The periodic line of a job that does not follow.
    fn periodic_line(&self, sample: &Sample, now: Instant, rate: f64) -> ProgressLine {
        ProgressLine {
            epoch: sample.epoch,
            epochs: sample.epochs,
            epoch_done: false,
            rows: sample.rows(),
            rows_per_second: rate,
            tasks_done: sample.tasks_done.min(self.tasks),
            tasks: self.tasks,
            eta: self.eta(sample, now),
            workers: None,
            leases: None,
        }
    }

    /// The time left at the pace of this run so far.
    fn eta(&self, sample: &Sample, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.started);
        match self.rows_total {
            Some(total) => crate::logging::eta(
                sample
                    .rows_committed
                    .saturating_sub(self.first.rows_committed),
                total.saturating_sub(self.first.rows_committed),
                elapsed,
            ),
            None => crate::logging::eta(
                sample.tasks_done.saturating_sub(self.first.tasks_done),
                self.tasks.saturating_sub(self.first.tasks_done),
                elapsed,
            ),
        }
    }
}

/// A followed job's line: taken never below trained.
fn follow_line(sample: &Sample, intake: Intake, rate: f64) -> FollowLine {
    FollowLine {
        rows_trained: sample.rows_committed,
        rows_taken: intake.rows_taken.max(sample.rows_committed),
        tasks_trained: sample.tasks_done,
        tasks_taken: sample.splits.max(sample.tasks_done),
        rows_per_second: rate,
        lag_rows: intake.lag_rows,
        lag_seconds: intake.lag_seconds,
    }
}

/// `rows` over `seconds`, 0 over no time.
fn per_second(rows: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        rows as f64 / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(epoch: Epoch, tasks_done: u64, epoch_rows: &[u64]) -> Sample {
        Sample {
            epoch,
            epochs: 2,
            job_over: false,
            tasks_done,
            splits: 4,
            rows_committed: epoch_rows.iter().sum(),
            epoch_rows: epoch_rows.to_vec(),
            follow: None,
        }
    }

    fn epoch_lines(lines: &[Line]) -> Vec<&ProgressLine> {
        lines
            .iter()
            .filter_map(|l| match l {
                Line::Epoch(p) if p.epoch_done => Some(p),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_epochs_line_counts_its_rows_not_those_leased_ahead() {
        let t0 = Instant::now();
        let mut tally = Tally::new(sample(Epoch(0), 0, &[]), Some(4_000_000), t0);
        let mid = sample(Epoch(0), 2, &[1_000_000]);
        assert!(tally
            .lines(&mid, t0 + Duration::from_secs(1), false)
            .is_empty());
        // Epoch 0 is over; by the time it is seen, the prefetched tasks of
        // epoch 1 have brought 608,256 rows.
        let later = sample(Epoch(1), 5, &[2_000_000, 608_256]);
        let lines = tally.lines(&later, t0 + Duration::from_secs(2), false);
        let done = epoch_lines(&lines);
        assert_eq!(done.len(), 1, "{lines:?}");
        assert_eq!(done[0].epoch, Epoch(0));
        assert_eq!(done[0].rows, 2_000_000);
        assert_eq!(done[0].rows_per_second, 1_000_000.0);
        assert!(done[0].text().starts_with("epoch 1/2 done: 2000000 rows"));
        // Said once.
        assert!(tally
            .lines(&later, t0 + Duration::from_secs(3), false)
            .is_empty());
    }

    #[test]
    fn epochs_that_ended_between_two_samples_each_get_their_line() {
        let t0 = Instant::now();
        let mut first = sample(Epoch(0), 0, &[]);
        first.epochs = 3;
        let mut tally = Tally::new(first, None, t0);
        let mut later = sample(Epoch(2), 9, &[100, 100, 20]);
        later.epochs = 3;
        let lines = tally.lines(&later, t0 + Duration::from_secs(1), false);
        let rows: Vec<u64> = epoch_lines(&lines).iter().map(|l| l.rows).collect();
        assert_eq!(rows, [100, 100]);
        // The last epoch's end is the summary's.
        let mut over = sample(Epoch(2), 12, &[100, 100, 100]);
        over.epochs = 3;
        over.job_over = true;
        assert!(tally
            .lines(&over, t0 + Duration::from_secs(2), true)
            .is_empty());
    }

    #[test]
    fn rows_per_second_are_over_the_last_interval() {
        let t0 = Instant::now();
        let mut tally = Tally::new(sample(Epoch(0), 0, &[]), None, t0);
        let rate = |lines: Vec<Line>| match &lines[..] {
            [Line::Epoch(p)] => p.rows_per_second,
            other => panic!("{other:?}"),
        };
        let fast = sample(Epoch(0), 1, &[10_000]);
        assert_eq!(
            rate(tally.lines(&fast, t0 + Duration::from_secs(10), true)),
            1000.0
        );
        // Ten seconds more and only 100 rows: 10 rows/s, not a decaying average.
        let slow = sample(Epoch(0), 1, &[10_100]);
        assert_eq!(
            rate(tally.lines(&slow, t0 + Duration::from_secs(20), true)),
            10.0
        );
    }

    #[test]
    fn a_followed_jobs_lines_never_show_more_trained_than_taken() {
        let t0 = Instant::now();
        let follow = |splits, tasks_done, rows_committed, rows_taken, lag_rows| Sample {
            epoch: Epoch(0),
            epochs: 1,
            job_over: false,
            tasks_done,
            splits,
            rows_committed,
            epoch_rows: vec![rows_committed],
            follow: Some(Intake {
                rows_taken,
                lag_rows,
                lag_seconds: 3.0,
            }),
        };
        // The job started with 4 tasks and grew to 9 while following.
        let mut tally = Tally::new(follow(4, 0, 0, 400, 400), None, t0);
        let grown = follow(9, 5, 500, 900, 400);
        let lines = tally.lines(&grown, t0 + Duration::from_secs(5), true);
        let [Line::Following(line)] = &lines[..] else {
            panic!("{lines:?}");
        };
        assert_eq!(line.tasks_trained, 5);
        assert_eq!(line.tasks_taken, 9);
        assert_eq!(line.rows_trained, 500);
        assert_eq!(line.rows_taken, 900);
        assert_eq!(line.lag_rows, 400);
        assert_eq!(line.rows_per_second, 100.0);
        assert_eq!(
            line.text(),
            "following: 500 rows trained of 900 taken (100 rows/s), 5 tasks trained of 9 taken, lag 400 rows / 3s"
        );
        // Rows of text files are known once read: taken is never below trained.
        let unknown = follow(9, 9, 950, 900, 0);
        let lines = tally.lines(&unknown, t0 + Duration::from_secs(10), true);
        let [Line::Following(line)] = &lines[..] else {
            panic!("{lines:?}");
        };
        assert!(line.rows_trained <= line.rows_taken, "{line:?}");
        assert!(line.tasks_trained <= line.tasks_taken, "{line:?}");
        assert!(!line.text().contains("ETA"));
    }
}
