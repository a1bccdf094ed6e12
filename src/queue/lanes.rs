//! Lanes: how `--global-batch-size G` keeps one order for any number of
//! ranks while each worker reads only the rows its ranks train.
//!
//! The job's rows, in the order its splits were planned, are cut into `L`
//! lanes of equal rows (within one row); `L` divides `G` and is fixed by `G`
//! alone ([`lane_count`]). A split that crosses a lane's end is cut there
//! (a split's `window` of rows), and a long split into pieces of at most
//! four of a lane's windows (at least [`MIN_PIECE_ROWS`]), so that every
//! task lies in one lane and a lane's windows stay near their rows.
//!
//! Each epoch, a lane's splits are taken in the epoch's seeded order (the
//! pieces of one split kept together, in row order, so that a split's pages
//! are fetched once), in windows of `--shuffle-window / L` rows (at least
//! one task), each permuted by its own seed. Step `k` of the epoch is rows
//! `[kG/L, (k+1)G/L)` of every lane, lane after lane; with `W` ranks and `W`
//! dividing `L`, rank `r` trains lanes `[rL/W, (r+1)L/W)` of every step, so
//! a worker holding ranks `[a, b)` reads those lanes and nothing else.
//!
//! The windows of all lanes are read in one sequence ([`Lanes::windows`]):
//! next is always a window of the lane with the fewest rows read so far (the
//! lowest lane on a tie), the lane a step runs short of first. The queue
//! leases in that sequence, and a window's seed is its place in it.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::epoch::Epoch;

/// The most lanes a global batch is cut into by default.
pub const MAX_LANES: u64 = 24;

/// The fewest rows of a piece of a split cut so that a lane's windows stay
/// near their rows: a piece of a Parquet row group fetches the pages of its
/// rows, so pieces much smaller than pages fetch the same pages again.
pub const MIN_PIECE_ROWS: u64 = 16_384;

/// A split is cut for memory only where it is longer than this many of a
/// lane's windows (fewer cuts, fewer pages fetched twice).
const WINDOWS_PER_PIECE: u64 = 4;

/// The lanes of a global batch of `global` rows: the divisor of `global` up
/// to [`MAX_LANES`] with the most divisors (the larger on a tie), so that as
/// many world sizes as can be divide it (24 for `G = 1536`: 1, 2, 3, 4, 6,
/// 8, 12 and 24 ranks).
pub fn lane_count(global: u64) -> u32 {
    let divisors = |n: u64| (1..=n).filter(|d| n % d == 0).count();
    let best = (1..=MAX_LANES.min(global.max(1)))
        .filter(|l| global.max(1) % l == 0)
        .max_by_key(|&l| (divisors(l), l))
        .unwrap_or(1);
    u32::try_from(best).unwrap_or(1)
}

/// The lanes of a job: its tasks' rows (each task in one lane), how many
/// lanes, and the rows of a lane's window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lanes {
    /// Lanes (`L`, a divisor of the global batch).
    pub count: u32,
    /// Rows of a lane's window (`--shuffle-window / L`, at least one task).
    pub window_rows: u64,
    /// Each task's rows, in the order the job was planned.
    pub rows: Vec<u64>,
    /// Each task's split as planned before it was cut: the pieces of one
    /// split are read one after the other.
    pub group: Vec<u32>,
    /// Each task's lane, where the lanes are not the job's rows cut in
    /// planning order: a job mixing several sources cuts each source's rows
    /// into the lanes, so that every lane holds its share of every source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lane: Vec<u32>,
    /// How a mixed job's sources take turns within each lane (indexed by
    /// task): by weight, as its one-lane epochs interleave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<super::Interleave>,
}

/// One window of a lane, in the epoch's sequence of windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneWindow {
    /// Its place in the epoch's sequence (its permutation's seed).
    pub number: u64,
    /// Its lane.
    pub lane: u32,
    /// Its tasks, in the order their rows are listed.
    pub tasks: Vec<u32>,
}

impl Lanes {
    /// Rows of every lane together.
    pub fn total(&self) -> u64 {
        self.rows.iter().sum()
    }

    /// Rows of each lane.
    pub fn lane_rows(&self) -> Vec<u64> {
        let mut rows = vec![0u64; self.count as usize];
        for (task, lane) in self.lane_of().into_iter().enumerate() {
            if let Some(sum) = rows.get_mut(lane as usize) {
                *sum += self.rows.get(task).copied().unwrap_or(0);
            }
        }
        rows
    }

    /// The lane of every task.
    pub fn lane_of(&self) -> Vec<u32> {
        if !self.lane.is_empty() {
            return self.lane.clone();
        }
        let total = self.total();
        let mut lane = 0u32;
        let mut start = 0u64;
        self.rows
            .iter()
            .map(|&rows| {
                while lane + 1 < self.count && bound(total, self.count, lane + 1) <= start {
                    lane += 1;
                }
                start += rows;
                lane
            })
            .collect()
    }

    /// Lanes `[rL/W, (r+1)L/W)` of ranks `ranks` of `world` (`world`
    /// divides `L`).
    pub fn of_ranks(&self, ranks: Range<u32>, world: u32) -> Range<u32> {
        let per = self.count / world.max(1);
        ranks.start * per..ranks.end * per
    }

    /// The lanes of each of `ranks` of `world`, rank after rank (`world`
    /// divides `L`): those of a worker whose ranks need not follow each
    /// other.
    pub fn of_rank_set(&self, ranks: &[u32], world: u32) -> Vec<u32> {
        ranks
            .iter()
            .flat_map(|&rank| self.of_ranks(rank..rank.saturating_add(1), world))
            .collect()
    }

    /// The windows of epoch `epoch` of a job seeded with `seed`, in the
    /// sequence they are read (see the module docs).
    pub fn windows(&self, seed: u64, epoch: Epoch) -> Vec<LaneWindow> {
        let lane_of = self.lane_of();
        let order = super::order::epoch_order(seed, epoch, self.rows.len());
        // A split's place is its first piece's in the seeded order.
        let mut place = vec![u32::MAX; self.group.iter().max().map_or(0, |g| *g as usize + 1)];
        let mut rank = vec![0u32; self.rows.len()];
        for (at, &task) in order.iter().enumerate() {
            rank[task as usize] = at as u32;
        }
        for (task, &group) in self.group.iter().enumerate() {
            place[group as usize] = place[group as usize].min(rank[task]);
        }
        let mut lanes: Vec<Vec<u32>> = vec![Vec::new(); self.count as usize];
        let mut tasks: Vec<u32> = (0..self.rows.len() as u32).collect();
        tasks.sort_by_key(|&t| (place[self.group[t as usize] as usize], t));
        for task in tasks {
            if let Some(lane) = lanes.get_mut(lane_of[task as usize] as usize) {
                lane.push(task);
            }
        }
        if let Some(mix) = &self.mix {
            for lane in &mut lanes {
                *lane = mix.arrange(std::mem::take(lane));
            }
        }
        let mut queues: Vec<std::collections::VecDeque<Vec<u32>>> = lanes
            .iter()
            .map(|tasks| self.cut_windows(tasks).into())
            .collect();
        let mut read = vec![0u64; self.count as usize];
        let mut out = Vec::new();
        while let Some(lane) = (0..queues.len())
            .filter(|&l| !queues[l].is_empty())
            .min_by_key(|&l| (read[l], l))
        {
            let Some(tasks) = queues[lane].pop_front() else {
                break;
            };
            read[lane] += tasks.iter().map(|&t| self.rows[t as usize]).sum::<u64>();
            out.push(LaneWindow {
                number: out.len() as u64,
                lane: lane as u32,
                tasks,
            });
        }
        out
    }

    /// The tasks of one lane cut into windows of up to a window's rows.
    fn cut_windows(&self, tasks: &[u32]) -> Vec<Vec<u32>> {
        windows_of(tasks, |t| self.rows[t as usize], self.window_rows)
    }

    /// The order epoch `epoch` leases its tasks in: its windows' tasks, in
    /// the windows' sequence.
    pub fn order(&self, seed: u64, epoch: Epoch) -> Vec<u32> {
        self.windows(seed, epoch)
            .into_iter()
            .flat_map(|w| w.tasks)
            .collect()
    }
}

/// `tasks`, in order, in windows of up to `window_rows` rows (`rows`: a
/// task's), at least one task each: the windows of `--shuffle global`.
pub fn windows_of(tasks: &[u32], rows: impl Fn(u32) -> u64, window_rows: u64) -> Vec<Vec<u32>> {
    let mut windows: Vec<Vec<u32>> = Vec::new();
    let mut held = 0u64;
    for &task in tasks {
        let n = rows(task);
        match windows.last_mut() {
            Some(window) if held.saturating_add(n) <= window_rows => {
                window.push(task);
                held += n;
            }
            _ => {
                windows.push(vec![task]);
                held = n;
            }
        }
    }
    windows
}

/// The first row of lane `lane` of `count` over `total` rows.
fn bound(total: u64, count: u32, lane: u32) -> u64 {
    (u128::from(total) * u128::from(lane) / u128::from(count.max(1))) as u64
}

/// How splits of `rows` rows (in the order planned) are cut into the tasks
/// of `count` lanes with windows of `window_rows` rows: for each task, its
/// split and its rows `[start, end)` in it. A task never crosses a lane's
/// end, and none is longer than four windows or [`MIN_PIECE_ROWS`],
/// whichever is more.
pub fn cut(rows: &[u64], count: u32, window_rows: u64) -> Vec<(u32, u64, u64)> {
    let total: u64 = rows.iter().sum();
    let piece = window_rows
        .saturating_mul(WINDOWS_PER_PIECE)
        .max(MIN_PIECE_ROWS);
    let mut out = Vec::new();
    let mut first = 0u64;
    let mut lane = 0u32;
    for (split, &n) in rows.iter().enumerate() {
        let mut start = 0u64;
        while start < n {
            while lane + 1 < count && bound(total, count, lane + 1) <= first + start {
                lane += 1;
            }
            let lane_end = bound(total, count, lane + 1) - first;
            let end = n.min(lane_end).min(start + piece);
            out.push((split as u32, start, end));
            start = end;
        }
        first += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(rows: &[u64], count: u32, window_rows: u64) -> Lanes {
        let cut = cut(rows, count, window_rows);
        Lanes {
            count,
            window_rows,
            rows: cut.iter().map(|&(_, s, e)| e - s).collect(),
            group: cut.iter().map(|&(g, _, _)| g).collect(),
            ..Lanes::default()
        }
    }

    #[test]
    fn lanes_are_a_divisor_of_the_global_batch_with_the_most_divisors() {
        assert_eq!(lane_count(1536), 24);
        assert_eq!(lane_count(1000), 20);
        assert_eq!(lane_count(64), 16);
        assert_eq!(lane_count(7), 7);
        assert_eq!(lane_count(1), 1);
    }

    #[test]
    fn every_lane_holds_its_share_of_rows_within_one() {
        let rows = [1000, 7, 3333, 1, 0, 5000, 659];
        let l = lanes(&rows, 24, 300);
        assert_eq!(l.total(), rows.iter().sum::<u64>());
        let lane_of = l.lane_of();
        let mut per = vec![0u64; 24];
        for (task, &lane) in lane_of.iter().enumerate() {
            per[lane as usize] += l.rows[task];
        }
        let (lo, hi) = (per.iter().min().copied(), per.iter().max().copied());
        assert!(hi.zip(lo).is_some_and(|(h, o)| h - o <= 1), "{per:?}");
        assert!(l.rows.iter().all(|&r| r <= MIN_PIECE_ROWS.max(1200)));
    }

    #[test]
    fn every_task_is_in_one_window_of_its_lane_and_the_sequence_is_seeded() {
        let l = lanes(&[430; 30], 6, 500);
        let lane_of = l.lane_of();
        let windows = l.windows(9, Epoch(1));
        let mut seen: Vec<u32> = windows.iter().flat_map(|w| w.tasks.clone()).collect();
        assert!(windows
            .iter()
            .all(|w| w.tasks.iter().all(|&t| lane_of[t as usize] == w.lane)));
        seen.sort_unstable();
        assert_eq!(seen, (0..l.rows.len() as u32).collect::<Vec<_>>());
        assert_eq!(windows, l.windows(9, Epoch(1)));
        assert_ne!(l.order(9, Epoch(1)), l.order(9, Epoch(2)));
        // The pieces of one split follow each other in their lane.
        let order = l.order(9, Epoch(1));
        for pair in order.windows(2) {
            let (a, b) = (pair[0] as usize, pair[1] as usize);
            if l.group[a] == l.group[b] && lane_of[a] == lane_of[b] {
                assert_eq!(a + 1, b);
            }
        }
    }

    #[test]
    fn ranks_take_equal_runs_of_lanes() {
        let l = lanes(&[100], 24, 10);
        assert_eq!(l.of_ranks(0..1, 1), 0..24);
        assert_eq!(l.of_ranks(1..3, 3), 8..24);
        assert_eq!(l.of_ranks(5..6, 6), 20..24);
        assert_eq!(
            l.of_rank_set(&[1, 4, 5], 6),
            [4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
        );
    }
}
